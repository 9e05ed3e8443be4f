#pragma once
// Runs a schedule's forward and backward task graphs on the CPU executor with
// random inputs and weights, and compares output, input gradient and every
// weight gradient with the dense reference layer.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/executor.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/moe/layer.hpp"

namespace parmsim::exec {

struct TensorError {
  std::string tensor;
  double max_rel_error = 0;  // max |got - want| / max |want|, over all ranks
};

struct VerifyResult {
  std::string schedule;
  std::vector<TensorError> errors;
  std::int64_t dropped = 0;  // token choices dropped by the schedule's capacity rule
  double worst() const;
};

// The small layer `verify`, `execute` and `compare` start from before --set:
// B=2, L=8, M=16, H=32, E=8, k=2, f=2, mp=2.
moe::LayerSpec small_layer();
// A UserError when the layer has what the executors do not run (glu, shared_H).
void check_executable(const moe::LayerSpec& s);

struct Cluster {
  int gpus = 8, gpus_per_node = 8;
};

// `kernels` replaces the CPU kernels (tests use it to prove a wrong kernel is
// caught); `executor` replaces the CPU executor, and only the ranks it owns()
// are compared. For fp16 and bf16 layers the random inputs and weights are
// rounded to that type first, so the executor and the reference see the same
// numbers.
VerifyResult verify_schedule(const moe::LayerSpec& s, const Cluster& c, const moe::ScheduleOptions& o,
                             std::uint64_t seed, const KernelTable* kernels = nullptr, Executor* executor = nullptr);

// Executes the training graph (forward then backward) with random data and
// returns the measured trace and the graph it belongs to.
struct Execution {
  TaskGraph graph;
  SimResult trace;
};
Execution execute_schedule(const moe::LayerSpec& s, const Cluster& c, const moe::ScheduleOptions& o, std::uint64_t seed,
                           Executor* executor = nullptr);

// What running a layer holds in host memory at once, estimated before
// anything is allocated: every rank's buffers (the CPU executor keeps them all
// as fp32, and the CUDA executor stages them on the host too), the global
// inputs and weights the ranks' buffers are filled from, and the host
// communicator's copies of the largest collective (every member's input and
// output). `verify` adds the dense reference layer: its gradients and
// activations. Sums are in double: a layer past 2^64 bytes is still refused.
struct MemoryEstimate {
  double buffers = 0, data = 0, scratch = 0, reference = 0;  // bytes
  double total() const { return buffers + data + scratch + reference; }
};
MemoryEstimate estimate_memory(const moe::LayerSpec& s, const Cluster& c, const moe::ScheduleOptions& o,
                               bool verify = false);

// The value nearest to v in `d` (fp32: v itself; ties to even).
float round_to(DType d, float v);

}  // namespace parmsim::exec
