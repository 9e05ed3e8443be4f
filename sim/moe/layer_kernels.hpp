#pragma once
// The compute kernels of one MoE op on one rank: FLOPs, bytes, GEMM shape,
// launches and host waits. Shared by the task-graph builder and the closed
// form, so the simulator and the model time the same kernels. What each cost
// models, with the DeepSpeed-MoE source lines: docs/moe-costs.md.
#include <array>
#include <cstdint>
#include <memory>
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
// backward, is the op) or a collective by kind, group, size, label and data
// (rs_then: with the step it feeds and its chunks; the MoeOp's defaults,
// a2a and 1, otherwise). For an op taken over, kind, group and elems are
// the forward op's. The closed form times these without writing the
// MoeOps. Trivial, so that a list of them costs nothing to declare:
// backward_plan sets every field.
struct BackwardOp {
  const MoeOp* src;  // the forward op, or null: the fields below
  MoeStep kind;
  GroupKind group;
  MoeStep then;
  int chunks;
  std::int64_t elems;
  const char* label;
  bool fused;  // from a fused forward op (while the list is derived)
  CollData data;
};
// The BackwardOps of one backward list: inline up to 32 (forward lists of
// up to 16 ops), on the heap above that. Neither copied nor moved (its
// span points into itself).
class BackwardPlan {
 public:
  BackwardPlan() = default;
  BackwardPlan(const BackwardPlan&) = delete;
  BackwardPlan& operator=(const BackwardPlan&) = delete;
  std::span<const BackwardOp> ops() const { return {data_, size_}; }
  // Room for n ops, the list emptied; the ops are set by the caller, then size(n).
  BackwardOp* reset(std::size_t n) {
    size_ = 0;
    if (n > kInline && n > heap_size_) {
      heap_ = std::make_unique<BackwardOp[]>(n);
      heap_size_ = n;
    }
    data_ = n > kInline ? heap_.get() : local_;
    return data_;
  }
  void resize(std::size_t n) { size_ = n; }

 private:
  static constexpr std::size_t kInline = 2 * OpList::static_capacity;
  BackwardOp local_[kInline];
  std::unique_ptr<BackwardOp[]> heap_;
  std::size_t heap_size_ = 0;
  BackwardOp* data_ = local_;
  std::size_t size_ = 0;
};
// backward_ops(fwd, s, d, o) as BackwardOps into *out (emptied first); they
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


// The host (LayerSpec::host_op > 0): eager PyTorch issues a kernel's L
// launches one at a time, host_op each. The GPU starts the kernel's first
// L - 1 launches (`main`) once the first is issued and runs them as they come;
// its last launch (`last`, launches 0 when L = 1) waits for the host to have
// issued all L. Bytes and FLOPs are shared in proportion. A sync (host_wait
// > 0) loses its fixed wait: the host now waits for the GPU to reach it
// (`sync`), and the GPU idles until the host issues what follows.
struct HostSplit {
  Kernel main, last;
  bool sync = false;
};
HostSplit host_split(const Kernel& k);

// What the simulator charges for one task made of this kernel (the engine's
// rule, with_launches in sim/compute/gpu_profile.hpp).
// `kernel` names a calibration table (the name tasks of this kernel carry,
// ComputeTask::kernel: "bwd_expert_fc1"); empty: none.
Time kernel_time(const Kernel& k, DType layer_dtype, const GpuProfile& gpu, const Calibration* cal,
                 std::string_view kernel);

// The kernels of a compute op (gate, order, iorder, slot_slice, kernel) in
// order; for `experts`, the kernels of ONE local expert (see expert_repeats).
std::vector<Kernel> kernels(const MoeOp& o, const LayerSpec& s, const Dims& d);
// The same without heap allocation (an op has at most 9 kernels: ds_moe=mcore's experts in an fp8 layer
// with more than one local expert, their chunk sorts and TE's casts around the two GEMMs).
using KernelList = boost::container::static_vector<Kernel, 9>;
KernelList kernel_list(const MoeOp& o, const LayerSpec& s, const Dims& d);
// Seconds of the op's kernels one after another, as the closed form sums
// them, `backward` standing for o.backward (the closed form times a backward
// op taken over from the forward list without copying it): the sum over
// the kernels in order of kernel_time(k, s.dtype, r.gpu, cal, kind), kind =
// the kernel's name ("bwd_" + name backward) when `cal` is given; without
// one, model_compute_time with the GPU's rates worked out once (r), as
// kernel_time gives it.
double kernels_seconds(const MoeOp& o, bool backward, const LayerSpec& s, const Dims& d, const ComputeRates& r,
                       const Calibration* cal = nullptr);
// How many times the expert kernels run, one after another: DeepSpeed-MoE's
// Experts.forward loops over its local experts (deepspeed/moe/experts.py
// L28-38, v0.14.4); `lean` runs them as one batched GEMM (1).
std::int64_t expert_repeats(const LayerSpec& s, const Dims& d);
// Elements of one local expert's rows (its share of the experts op's buffer).
std::int64_t expert_elems(const MoeOp& o, const LayerSpec& s, const Dims& d);

}  // namespace parmsim::moe
