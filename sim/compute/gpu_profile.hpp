#pragma once
// GPU compute profiles and the kernel cost model.
//
// A GEMM is costed as cuBLAS runs it (sim/compute/gemm_model.hpp): a fixed per-kernel floor plus
// waves of output tiles over the SMs at the per-SM share of the throughput cuBLAS sustains, or the
// time to move A, B and C through HBM, whichever is longer. A memory-bound kernel costs the floor
// plus its bytes at the sustained HBM bandwidth. Every figure in a profile names its source.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim {

struct GpuProfile {
  std::string name;
  std::string source;  // where the figures come from
  // Streaming multiprocessors. 0 = no tile model (the "cpu" profile): a GEMM then costs
  // launch + max(flops / peak, bytes / bandwidth).
  int sm_count = 0;
  double peak_fp32 = 0;  // FLOP/s dense FP32 on the SIMT cores (no TF32)
  double peak_tf32 = 0;  // FLOP/s dense TF32 tensor cores; 0 = none. Informative: fp32 GEMMs are
                         // costed on FP32 SIMT (PyTorch's default, TF32 off for matmul)
  double peak_fp16 = 0;  // FLOP/s dense FP16 tensor cores, FP32 accumulate
  double peak_bf16 = 0;  // FLOP/s dense BF16 tensor cores; 0 = not supported
  // FLOP/s dense FP8 (e4m3/e5m2) tensor cores; 0 = no FP8 tensor cores (before
  // Hopper). What fp8 needs: a dispatch in fp8 (parmsim moe-dispatch) is refused without it.
  double peak_fp8 = 0;
  // The throughput cuBLAS sustains on large GEMMs (published maxima), FLOP/s; 0 = use the peak.
  double sustained_fp32 = 0;
  double sustained_fp16 = 0;
  double sustained_bf16 = 0;
  double sustained_fp8 = 0;  // FP8 GEMMs (e4m3 inputs, bf16 output, fp32 accumulation)
  double hbm_bandwidth = 0;    // bytes/s, datasheet
  double mem_efficiency = 1;   // fraction of hbm_bandwidth a streaming kernel sustains
  Time launch;                 // fixed per-kernel floor
  // CUDA compute capability x 10 (90 = sm_90); 0 = not a GPU. NCCL's tuner tables
  // are chosen by it (sim/coll/nccl_model.cpp: nccl_arch).
  int compute_capability = 0;
  // The fraction of an NVLink's line rate NCCL counts per link (NVIDIA/nccl
  // src/graph/topo.h); the default of a topology's link_efficiency.nvlink.
  double nvlink_efficiency = 1.0;
  // Device memory capacity, bytes: the datasheet figure, read as GiB (DRAM capacities are
  // binary; see gpu_profile.cpp). The whole card, before the CUDA context and the caching
  // allocator take their share. A topology's gpu_memory key overrides it.
  std::uint64_t memory_bytes = 0;

  // throws if the dtype is unsupported
  double peak(DType d) const {
    const double v = d == DType::fp32   ? peak_fp32
                     : d == DType::fp16 ? peak_fp16
                     : d == DType::bf16 ? peak_bf16
                                        : peak_fp8;
    if (v <= 0) unsupported(d);
    return v;
  }
  // sustained_* or, where 0, the peak; throws like peak()
  double sustained(DType d) const {
    const double p = peak(d);
    const double s = d == DType::fp32   ? sustained_fp32
                     : d == DType::fp16 ? sustained_fp16
                     : d == DType::bf16 ? sustained_bf16
                                        : sustained_fp8;
    return s > 0 ? s : p;
  }

 private:
  [[noreturn]] void unsupported(DType d) const;  // the UserError peak() throws
};

// The registry of GPU profiles: every per-GPU fact the simulator uses (compute,
// memory, NCCL's architecture class, NVLink efficiency) lives in a profile, and
// every list of GPUs (help, errors) comes from here. Adding a GPU is one entry.
const GpuProfile& gpu_profile(const std::string& name);  // throws a UserError listing the known ones
// The largest factor on a profile's sustained GEMM throughput that keeps every dtype at or
// below its peak, or at its sustained figure where that is above the peak (the bound of a
// topology's compute.gemm_efficiency; at least 1).
double max_gemm_efficiency(const GpuProfile& g);
const std::vector<GpuProfile>& gpu_profiles();
// "h100, h200, ..." (the profiles' names, in registry order).
std::string gpu_profile_names();

// Duration of one compute task on a GPU of this profile. With a calibration
// that has a table for this kernel (`kind`: its name, ComputeTask::kernel in
// sim/graph/task_graph.hpp) and dtype, the measured table decides instead.
struct Calibration;
// `shape`, for a GEMM: {m, n, k} or {m, n, k, batch} (C[m,n] = A[m,k] B[k,n], `batch` independent
// problems in one strided-batched call); empty when unknown, and then the GEMM is taken as a cube
// of the same FLOPs (gemm_shape_or_cube in gemm_model.hpp). For a GEMM, `bytes` (when > 0) replaces
// the A + B + C bytes the shape implies in the memory roofline.
Time compute_time(const GpuProfile& gpu, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                  const Calibration* cal = nullptr, std::string_view kind = {},
                  std::span<const std::int64_t> shape = {});
// A task that stands for `launches` small kernels of total cost `cost`, after
// the GPU idled `host_wait` for the host (a device-to-host sync): each kernel
// past the first pays the launch floor again. The engine and the MoE layer's
// closed form both time compute tasks by this rule.
inline __attribute__((always_inline)) Time with_launches(const GpuProfile& gpu, Time cost, int launches,
                                                        Time host_wait) {
  std::int64_t a = 0, b = 0, c = 0;
  if (!__builtin_add_overflow(host_wait.count_ps(), cost.count_ps(), &a) &&
      !__builtin_mul_overflow(gpu.launch.count_ps(), static_cast<std::int64_t>(launches - 1), &b) &&
      !__builtin_add_overflow(a, b, &c))
    return Time::ps(c);
  return host_wait + cost + gpu.launch * (launches - 1);  // the overflow, as Time's operators report it
}
// compute_time without a calibration: the GEMM tile model (gemm_model.hpp)
// for a GEMM with FLOPs or a shape, else a memory-bound kernel. Defined in
// gemm_model.cpp, where the tile search inlines into it.
Time model_compute_time(const GpuProfile& gpu, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                        std::span<const std::int64_t> shape);

}  // namespace parmsim
