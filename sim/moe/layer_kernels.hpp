#pragma once
// The compute kernels of one MoE op on one rank: FLOPs, bytes, GEMM shape,
// launches and host waits. Shared by the task-graph builder and the closed
// form, so the simulator and the model time the same kernels. What each cost
// models, with the DeepSpeed-MoE source lines: docs/moe-costs.md.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <boost/container/static_vector.hpp>

#include "sim/core/time.hpp"
#include "sim/moe/layer.hpp"

namespace parmsim {
struct ComputeRates;
}  // namespace parmsim

namespace parmsim::moe {

// An op list that holds a schedule's list (about a dozen ops) without a heap
// allocation; longer lists spill to the heap. For the closed form, which
// builds two per evaluation.
using OpList = boost::container::small_vector<MoeOp, 16>;
// forward_ops / backward_ops (sim/moe/layer.hpp) into *out (cleared first).
void forward_ops(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, OpList* out);
void backward_ops(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                  OpList* out);

// One op of a backward list as backward_ops derives it, before it is
// written out as a MoeOp: a forward op taken over (its copy, marked
// backward, is the op) or a collective by kind, group, size and label
// (rs_then: with the step it feeds and its chunks; the MoeOp's defaults
// otherwise). The closed form times these without writing the MoeOps.
struct BackwardOp {
  const MoeOp* src = nullptr;  // the forward op, or null: the fields below
  MoeStep kind = MoeStep::ag;
  GroupKind group = GroupKind::ep;
  MoeStep then = MoeStep::a2a;
  int chunks = 1;
  std::int64_t elems = 0;
  const char* label = "";
};
using BackwardPlan = boost::container::small_vector<BackwardOp, 2 * OpList::static_capacity>;
// backward_ops(fwd, s, d, o) as BackwardOps into *out (cleared first); they
// point into `fwd`, which must outlive them.
void backward_plan(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                   BackwardPlan* out);

struct Kernel {
  const char* name = "";
  OpKind op = OpKind::elementwise;
  std::uint64_t flops = 0, bytes = 0;
  std::array<std::int64_t, 4> shape{};  // gemm: m, n, k, batch (0 = unknown)
  std::optional<DType> dtype;           // unset: the layer's dtype
  int launches = 1;                     // small kernels this one stands for
  Time host_wait;                       // the GPU idles for the host this long first
  std::span<const std::int64_t> dims() const {
    return shape[0] > 0 ? std::span<const std::int64_t>(shape.data(), 4) : std::span<const std::int64_t>();
  }
};

// A device-to-host copy that the host waits on (`exp_counts.to('cpu')`)
// drains the GPU's queue: the GPU idles while the host returns from the sync
// and launches the next kernel. "CUDA API call overhead adds on the order of
// 10 us per kernel launch" (Modal GPU glossary, perf/overhead), which is
// the order we charge once per sync.
inline constexpr std::int64_t kHostSyncNs = 10'000;


// What the simulator charges for one task made of this kernel (the engine's
// rule, with_launches in sim/compute/gpu_profile.hpp).
// `task_kind` names a calibration table ("bwd_expert_fc1"); empty: none.
Time kernel_time(const Kernel& k, DType layer_dtype, const GpuProfile& gpu, const Calibration* cal,
                 std::string_view task_kind);

// The kernels of a compute op (gate, order, iorder, slot_slice, kernel) in
// order; for `experts`, the kernels of ONE local expert (see expert_repeats).
std::vector<Kernel> kernels(const MoeOp& o, const LayerSpec& s, const Dims& d);
// The same without heap allocation (an op has at most 5 kernels).
using KernelList = boost::container::static_vector<Kernel, 5>;
KernelList kernel_list(const MoeOp& o, const LayerSpec& s, const Dims& d);
// Seconds of the op's kernels one after another, as the closed form sums
// them: the sum over kernels(o) in order of kernel_time(k, s.dtype, gpu,
// cal, kind).to_seconds(), kind = the kernel's name ("bwd_" + name for a
// backward op) when `cal` is given.
double kernels_seconds(const MoeOp& o, const LayerSpec& s, const Dims& d, const GpuProfile& gpu,
                       const Calibration* cal);
// The same without a calibration, with the GPU's rates worked out once
// (gemm_model.hpp: fast_compute_time), for o's copy with o.backward =
// `backward`: kernels_seconds(o', s, d, r.gpu, nullptr), bit for bit. For
// the closed form, which sums about 25 kernels and times a backward op
// taken over from the forward list without copying it.
double kernels_seconds(const MoeOp& o, bool backward, const LayerSpec& s, const Dims& d, const ComputeRates& r);
// How many times the expert kernels run, one after another: DeepSpeed-MoE's
// Experts.forward loops over its local experts (deepspeed/moe/experts.py
// L28-38, v0.14.4); `lean` runs them as one batched GEMM (1).
std::int64_t expert_repeats(const LayerSpec& s, const Dims& d);
// Elements of one local expert's rows (its share of the experts op's buffer).
std::int64_t expert_elems(const MoeOp& o, const LayerSpec& s, const Dims& d);

}  // namespace parmsim::moe
