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

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/time.hpp"
#include "sim/moe/layer.hpp"

namespace parmsim::moe {

// An op list that holds a schedule's list (about a dozen ops) without a heap
// allocation; longer lists spill to the heap. For the closed form, which
// builds two per evaluation.
using OpList = boost::container::small_vector<MoeOp, 16>;
// forward_ops / backward_ops (sim/moe/layer.hpp) into *out (cleared first).
void forward_ops(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, OpList* out);
void backward_ops(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                  OpList* out);

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
// The GEMM costs already worked out during ONE closed-form evaluation (one
// model_layer or model_time call, on one GPU profile), so that a GEMM of the
// same shape, FLOPs, bytes and dtype is costed once: a layer's backward
// repeats forward shapes (expert_fc2_dgrad has expert_fc1's, the dispatch and
// combine einsums' adjoints have each other's), and with H/G = M fc1 and fc2
// are alike. time() returns exactly model_compute_time(gpu, OpKind::gemm,
// flops, bytes, dtype, shape); the key is every one of those arguments but
// the profile, which is fixed for the memo's life (a different profile
// empties it). Made empty on the stack per evaluation and dropped after it:
// nothing is kept from one evaluation to the next.
class GemmMemo {
 public:
  Time time(const GpuProfile& gpu, std::uint64_t flops, std::uint64_t bytes, DType dtype,
            std::span<const std::int64_t> shape) {
    if (&gpu != gpu_) {
      gpu_ = &gpu;
      n_ = 0;
    }
    const bool given = !shape.empty();
    // Any span other than 4 entries is left to model_compute_time (which
    // refuses a malformed shape), not kept.
    if (given && shape.size() != 4) return model_compute_time(gpu, OpKind::gemm, flops, bytes, dtype, shape);
    const std::int64_t m = given ? shape[0] : 0, n = given ? shape[1] : 0, k = given ? shape[2] : 0,
                       batch = given ? shape[3] : 0;
    // A mix of the dimensions, compared first so that most entries are
    // passed over in one comparison; a match is confirmed on every field.
    const std::uint64_t mix = static_cast<std::uint64_t>(m) ^ (static_cast<std::uint64_t>(n) << 21) ^
                              (static_cast<std::uint64_t>(k) << 42) ^ (static_cast<std::uint64_t>(batch) << 13);
    for (int i = 0; i < n_; ++i) {
      const Entry& e = e_[i];
      if (e.mix == mix && e.m == m && e.n == n && e.k == k && e.batch == batch && e.flops == flops &&
          e.bytes == bytes && e.dtype == dtype && e.given == given)
        return e.t;
    }
    const Time t = model_compute_time(gpu, OpKind::gemm, flops, bytes, dtype, shape);  // may throw: nothing kept
    if (n_ < kEntries) e_[n_++] = Entry{mix, m, n, k, batch, flops, bytes, dtype, given, t};
    return t;
  }

 private:
  static constexpr int kEntries = 32;  // a layer has about 14-28 GEMMs; past this many, new ones are not kept
  struct Entry {
    std::uint64_t mix;
    std::int64_t m, n, k, batch;  // the shape as given; all 0 when none was given
    std::uint64_t flops, bytes;
    DType dtype;
    bool given;  // a shape was given (an all-zero one is refused, not the cube)
    Time t;
  };
  const GpuProfile* gpu_ = nullptr;
  int n_ = 0;
  Entry e_[kEntries];  // the first n_ are filled
};

// Seconds of the op's kernels one after another, as the closed form sums
// them: the sum over kernels(o) in order of kernel_time(k, s.dtype, gpu,
// cal, kind).to_seconds(), kind = the kernel's name ("bwd_" + name for a
// backward op) when `cal` is given. `memo` (optional, used only without a
// calibration) saves costing a GEMM seen before in the same evaluation.
double kernels_seconds(const MoeOp& o, const LayerSpec& s, const Dims& d, const GpuProfile& gpu,
                       const Calibration* cal, GemmMemo* memo = nullptr);
// How many times the expert kernels run, one after another: DeepSpeed-MoE's
// Experts.forward loops over its local experts (deepspeed/moe/experts.py
// L28-38, v0.14.4); `lean` runs them as one batched GEMM (1).
std::int64_t expert_repeats(const LayerSpec& s, const Dims& d);
// Elements of one local expert's rows (its share of the experts op's buffer).
std::int64_t expert_elems(const MoeOp& o, const LayerSpec& s, const Dims& d);

}  // namespace parmsim::moe
