#pragma once
// Where a simulated layer's time goes. The critical path of a simulated task
// graph runs from time 0 to the makespan through the tasks that held each
// other up; cut by the kind of work on it (the gate, Order, the experts,
// I-Order, the host, each collective by kind) it gives phases that add up to
// the makespan exactly, in picoseconds. The collectives' share is the
// communication no compute hid.
#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/moe/layer.hpp"

namespace parmsim::moe {

// One stretch of a critical path: `task` ran over [from, to). For a
// collective's part, `from` is the start of the member that entered last
// before `to` (the members wait for it): the stretch is the collective's.
struct PathStep {
  int task = 0;
  Time from, to;
};

// The critical path of `r` (a simulation of `g`), latest step first: step i
// starts where step i + 1 ends, the first ends at the makespan and the last
// starts at 0. At each step the predecessor that finished last is followed
// (the engine starts a task exactly then); ties go to the lowest task id.
// Empty for a graph without tasks. InternalError when the trace breaks
// these rules.
std::vector<PathStep> critical_path(const TaskGraph& g, const SimResult& r);

// The phases, in the order reports list them. Compute: the gate (its GEMM,
// gating kernels, casts and the host sync), Order (tokens into expert slots:
// DeepSpeed's dispatch einsum, or index kernels), the experts, I-Order (the
// combine), other kernels, and the host issuing work (LayerSpec::host_op).
// Communication: each collective by kind.
enum class Phase {
  gate,
  order,
  experts,
  iorder,
  other,
  host,
  alltoall,
  alltoallv,
  allgather,
  reducescatter,
  allreduce,
  sendrecv,
  saa,
  count
};
inline constexpr std::size_t kPhases = static_cast<std::size_t>(Phase::count);
std::string_view to_string(Phase p);
bool is_communication(Phase p);

struct PhaseTimes {
  std::array<Time, kPhases> t{};
  Time& operator[](Phase p) { return t[static_cast<std::size_t>(p)]; }
  Time operator[](Phase p) const { return t[static_cast<std::size_t>(p)]; }
  PhaseTimes& operator+=(const PhaseTimes& o);
  Time total() const;
  Time communication() const;  // the collectives' phases: communication on the critical path
};

// The phases of one pass of a layer: `g` built from `ops` (forward_ops, or
// backward_ops with their backward tasks named bwd_*), `r` its simulation.
// Each compute task is put in the phase of the op whose kernels it runs
// (sim/moe/layer_kernels.hpp); total() is r.makespan.
PhaseTimes layer_phases(const TaskGraph& g, const SimResult& r, std::span<const MoeOp> ops, const LayerSpec& s,
                        const Dims& d);

}  // namespace parmsim::moe
