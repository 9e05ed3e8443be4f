#pragma once
// Simulating and modelling one MoE layer under a schedule; the automatic
// choice between S1 and S2; the search over the builder's options.
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/simulator.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/phases.hpp"

namespace parmsim::moe {

struct ScheduleResult {
  ScheduleOptions options;
  Time forward, backward;
  double model_forward_s = 0, model_backward_s = 0;
  std::uint64_t intra_node_bytes = 0, inter_node_bytes = 0;  // all ranks, forward + backward
  Time compute_rank0;                                        // busy time of rank 0's compute stream, forward + backward
  // Time rank 0's host spends issuing kernels and collective calls (0 unless
  // LayerSpec::host_op > 0); above compute_rank0, the layer is launch-bound.
  Time host_rank0;
  // Peak device memory per GPU over forward + backward (sim/moe/memory.hpp), and whether it
  // is within the topology's gpu_memory (or its GPU profile's capacity).
  std::uint64_t peak_memory_bytes = 0;
  bool fits = true;
  // The critical paths of forward and backward cut into phases (sim/moe/phases.hpp); they add up
  // to total(). Set only when LayerRun::phases asks for them.
  PhaseTimes phases;
  Time total() const { return forward + backward; }
  // Time rank 0 spends with its compute stream idle: communication not hidden.
  Time exposed_comm() const { return total() - compute_rank0; }
  double model_total_s() const { return model_forward_s + model_backward_s; }
};

struct LayerRun {
  const Topology& topo;
  LayerSpec spec;
  std::string network = "flow";
  const Calibration* calibration = nullptr;  // measured collectives, for the simulator and the model
  // The closed form's costs on `topo` (alpha_beta_from_topology, with
  // `calibration` set), made once by a caller that runs many layers on one
  // topology; null: made per call. Its collective forms are resolved once
  // and shared by every layer (and thread) that uses it.
  const AlphaBeta* model = nullptr;
  // Where the simulations keep plans, routes, rate memos and pools for the
  // next run with it (one per thread); null: a fresh one per call.
  Workspace* workspace = nullptr;
  // Whether run_schedule cuts the critical paths into ScheduleResult::phases.
  bool phases = false;
  // Whether the simulator may run one class of symmetric ranks for all (SimOptions::symmetry).
  bool symmetry = true;
};

// Simulates forward and backward graphs of one schedule. When `trace` is
// given, the forward and backward results are returned for writing traces.
ScheduleResult run_schedule(const LayerRun& run, const ScheduleOptions& o, SimResult* fwd_trace = nullptr,
                            TaskGraph* fwd_graph = nullptr, SimResult* bwd_trace = nullptr,
                            TaskGraph* bwd_graph = nullptr);

// The paper's choice: S2 when the closed form says it is faster than S1.
std::string auto_choice(const LayerSpec& s, const Dims& d, const AlphaBeta& ab, const GpuProfile& gpu);

}  // namespace parmsim::moe
