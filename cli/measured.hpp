#pragma once
// Comparing the simulator with what users measured (docs/measured.md):
//
//   parmsim compare --measured FILE.csv      one row per measured layer or
//                                            collective (the format:
//                                            sim/validation/measured_csv.hpp)
//   parmsim compare --nccl-tests TABLE... -t TOPOLOGY
//                                            measured nccl-tests tables
//                                            against the topology, per size
//
// Both print each row's measured and simulated time and its error, the MAPE
// and the worst row, and with -o write the scatter plot's data (name,
// measured_us, predicted_us, ...; plots/make_figures.py reads compare*.csv).
#include <string>
#include <utility>
#include <vector>

#include "sim/fit/machine_fit.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim::cli {

// Whether `first_line` is the header of a trace written by `parmsim execute`.
bool is_execute_trace_header(const std::string& first_line);

struct CompareArgs {
  std::string measured, topo, topo_set, overlay, calibration, network = "analytical", out, max_memory;
  std::vector<std::string> nccl_tests;
  int ranks = 0, nodes = 0;  // --ranks / --nodes: the group of tables without rank lines
};
// compare --measured FILE.csv: with --calibration and/or --overlay, the
// uncalibrated simulator beside the calibrated one(s), as for traces.
void compare_measured_csv(const CompareArgs& a);
// compare --nccl-tests TABLE...: the topology's model per size (--overlay applies fitted parameters).
void compare_nccl_tests(const CompareArgs& a);

// The per-size table of measured collectives against one or more models
// (`models`: a name and the topology, e.g. before and after a fit): one block
// per table, its rows with each model's time and error, each model's MAPE
// and worst row (size and file:line); with several tables, the same over all
// tables of each role. What `compare --nccl-tests` and `calibrate
// --fit-machine` print.
struct NamedTable {
  std::string name, role;  // role: "fitted", "held out", or "" (shown beside the name)
  std::vector<calib::MeasuredCollective> rows;
};
std::string nccl_size_table(const std::vector<NamedTable>& tables,
                            const std::vector<std::pair<std::string, const Topology*>>& models);

}  // namespace parmsim::cli
