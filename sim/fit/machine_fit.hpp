#pragma once
// Fits a topology's own physical parameters to measured collectives
// (`parmsim calibrate --import-nccl-tests FILES -t TOPOLOGY --fit-machine`):
// the sustained fraction of line rate of each link class
// (`link_efficiency.{nvlink,pcie,network}`) and the latencies NCCL's model
// takes from the machine (`nccl.launch`, `nccl.net_latency`;
// docs/collectives.md, "Latencies the machine adds"). The model fitted is the
// uncalibrated simulator: one collective alone, as `simulate` times it
// (`collective_time_s`, which equals it for one collective).
//
// The result is a topology overlay (topology_io.hpp, `--overlay FILE`), so one
// fit applies to every collective, group size and MoE layer on that machine,
// where a calibration entry (calibration.hpp) applies to one (op, ranks, link).
//
// Method (deterministic):
//   1. each link class the measurements exercise (changing its efficiency
//      changes a modelled time) gets a grid search over [0.30, 1.00] in steps
//      of 0.01, then 0.001 around the best, minimising the mean squared
//      log(model / measured) over the large sizes (>= `large_from`, where
//      bandwidth dominates); the model is a step function of the efficiency
//      (NCCL's channel search uses speed ladders), so no derivative is used;
//   2. the latencies by weighted least squares (weights 1 / measured^2, i.e.
//      on relative error) on the small sizes (<= `small_to`): `nccl.launch`
//      adds 1 us per us to every collective; `nccl.net_latency` adds k_i us
//      per us, k_i measured on the model (its network hops, twice for
//      Simple); not negative (a negative solution is clamped to 0 and the
//      other refitted); when every k_i is the same (each small size crosses
//      the network as often, as a 2-node tree does) the two are one
//      direction, and the better of launch alone and net latency alone is kept;
//   3. steps 1 and 2 once more, each with the other's result.
//
// A parameter that ends at an end of its search range (an efficiency at 0.30
// or 1.00, a latency clamped to 0) did not fit: the measurements asked for a
// value beyond it, so they come from another machine or another parameter is
// wrong. `FittedParam::at_bound` says so; `calibrate --fit-machine` then
// writes nothing without --force.
#include <functional>
#include <string>
#include <vector>

#include "sim/calib/nccl_tests.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim::calib {

struct MeasuredCollective {
  CollOp op = CollOp::allreduce;
  int ranks = 0, hosts = 1;
  double bytes = 0;    // nccl-tests' size
  double seconds = 0;  // measured
  std::string source;  // file
  std::string where;   // the row: "file:LINE" or "file: results[i]"
};
// The rows of an imported table with a size above zero. Throws UserError for
// an op parmsim has no collective for, or unknown ranks.
std::vector<MeasuredCollective> measured_from(const NcclTable& t);

// The measured group on a topology: `hosts` nodes (the first ones), ranks /
// hosts GPUs on each (the first ones). Throws UserError when the topology is
// too small or ranks do not divide evenly.
std::vector<int> measured_group(const MeasuredCollective& m, const Topology& topo);

// The uncalibrated simulator's time of one such collective alone, NCCL's choice.
double model_seconds(const MeasuredCollective& m, const Topology& topo, Workspace& ws);
double model_seconds(const MeasuredCollective& m, const Topology& topo);  // with a fresh workspace

struct ModelError {
  double mape = 0, worst = 0;  // relative, |model - measured| / measured
  int n = 0;
};
ModelError model_error(const std::vector<MeasuredCollective>& ms, const Topology& topo);

struct FitOptions {
  double large_from = 256.0 * 1024 * 1024;  // bytes: efficiencies are fitted on sizes >= this
  double small_to = 64.0 * 1024;            // bytes: latencies on sizes <= this
};

// One fitted parameter: a topology key and its value (a fraction, or microseconds).
struct FittedParam {
  std::string key;  // link_efficiency.nvlink, nccl.launch, ...
  double value = 0;
  bool time = false;  // value in microseconds
  int points = 0;     // measurements it was fitted on
  double lower = 0, upper = 0;  // its search range (upper: infinity for a latency)
  std::string assignment() const;  // "link_efficiency.nvlink=0.781", "nccl.launch=14.2us"
  // "lower" or "upper" when the value ended at that end of its search range, "" inside it.
  std::string at_bound() const;
  std::string range() const;  // "[0.30, 1.00]", "[0 us, no upper bound)"
};

struct MachineFit {
  std::vector<FittedParam> params;
  std::vector<std::string> notes;  // what could not be fitted, and why
  std::vector<std::string> assignments() const;
};

// `load(overlay)`: the topology measured, with these overlay assignments.
// Throws UserError when no measurement can be modelled on it.
MachineFit fit_machine(const std::function<Topology(const std::vector<std::string>&)>& load,
                       const std::vector<MeasuredCollective>& ms, const FitOptions& opt = {});

// The overlay file: a comment header, then one `key: value` line per parameter.
std::string overlay_yaml(const MachineFit& fit, const std::string& header);

}  // namespace parmsim::calib
