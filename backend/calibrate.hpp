#pragma once
// Calibration from measured traces: every compute task contributes a point
// (FLOPs or bytes, time) to the table of its kernel (ComputeTask::kernel),
// every collective a point (bytes, time from its last member's arrival to
// its end) to the fit of its (op, ranks, link). `calibrate_cpu` measures a
// grid of small layers on the CPU executor.
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/verify.hpp"
#include "sim/calib/fit.hpp"

namespace parmsim::exec {

struct Samples {
  struct Kernel {
    OpKind op = OpKind::gemm;
    DType dtype = DType::fp32;
    std::vector<calib::Point> points;
  };
  std::map<std::string, Kernel> kernels;
  std::map<std::tuple<CollOp, int, bool>, std::vector<calib::Point>> collectives;  // (op, ranks, inter)
};

void add_trace(const TaskGraph& g, const SimResult& trace, int gpus_per_node, Samples* out);

// Executes baseline, S1 and S2 of a grid of small layers (their kernels, and
// their collectives over the MP and EP groups at every layer's sizes) on
// `executor` (null: the CPU executor). `collect` sees every execution before
// its trace is sampled: an executor spread over processes gathers its ranks'
// rows there (calibrate --backend cuda under mpirun). Without `quick`, the
// grid also runs mp = 4 when the ranks allow, for a second pair of group sizes.
Samples calibrate_grid(const Cluster& c, bool quick, Executor* executor = nullptr,
                       const std::function<void(Execution&)>& collect = {});
// calibrate_grid on the CPU executor.
Samples calibrate_cpu(const Cluster& c, bool quick);

// The calibration YAML (sim/calib/calibration.hpp) and a table of the fits.
std::string calibration_yaml(const Samples& s, const std::string& source, std::string* table);

}  // namespace parmsim::exec
