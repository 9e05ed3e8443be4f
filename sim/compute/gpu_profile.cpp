#include "sim/compute/gpu_profile.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/calib/calibration.hpp"
#include "sim/core/error.hpp"

namespace parmsim {

const std::vector<GpuProfile>& gpu_profiles() {
  // Peaks are dense (no sparsity) datasheet figures.
  static const std::vector<GpuProfile> p = {
      {"h100", "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32, 989 TFLOP/s FP16/BF16 dense, 3.35 TB/s HBM3", 67e12,
       989e12, 989e12, 3.35e12, Time::ns(4000), 0.75, 8e9, 0.85, 8e6},
      {"h200", "NVIDIA H200 SXM datasheet: H100 compute, 4.8 TB/s HBM3e", 67e12, 989e12, 989e12, 4.8e12, Time::ns(4000),
       0.75, 8e9, 0.85, 8e6},
      {"a100", "NVIDIA A100 SXM4 80GB datasheet: 19.5 TFLOP/s FP32, 312 TFLOP/s FP16/BF16, 2.039 TB/s", 19.5e12, 312e12,
       312e12, 2.039e12, Time::ns(4000), 0.8, 4e9, 0.85, 4e6},
      {"rtx2080ti",
       "GeForce RTX 2080 Ti (Turing TU102): 13.45 TFLOP/s FP32, 53.8 TFLOP/s FP16 tensor with FP32 "
       "accumulate, 616 GB/s GDDR6; no BF16",
       13.45e12, 53.8e12, 0, 616e9, Time::ns(5000), 0.8, 1e9, 0.85, 1e6},
      {"rtx_a6000", "NVIDIA RTX A6000 datasheet: 38.7 TFLOP/s FP32, 154.8 TFLOP/s FP16/BF16 tensor dense, 768 GB/s",
       38.7e12, 154.8e12, 154.8e12, 768e9, Time::ns(5000), 0.8, 2e9, 0.85, 2e6},
      {"b200", "NVIDIA B200 (HGX/NVL72) datasheet: 80 TFLOP/s FP32, 2250 TFLOP/s FP16/BF16 dense, 8 TB/s HBM3e", 80e12,
       2250e12, 2250e12, 8e12, Time::ns(4000), 0.75, 16e9, 0.85, 16e6},
      {"cpu",
       "A CPU core running parmsim's reference kernels (rough: 2 GFLOP/s, 5 GB/s); calibrate it "
       "(parmsim calibrate --backend cpu) before trusting it",
       2e9, 2e9, 2e9, 5e9, Time::ns(1000), 1.0, 1e3, 1.0, 1e3},
  };
  return p;
}

double GpuProfile::peak(DType d) const {
  const double v = d == DType::fp32 ? peak_fp32 : d == DType::fp16 ? peak_fp16 : peak_bf16;
  if (v <= 0) throw ParmError(fmt::format("GPU profile '{}' does not support {}", name, to_string(d)));
  return v;
}

const GpuProfile& gpu_profile(const std::string& name) {
  for (const GpuProfile& g : gpu_profiles())
    if (g.name == name) return g;
  std::string known;
  for (const GpuProfile& g : gpu_profiles()) known += (known.empty() ? "" : ", ") + g.name;
  throw ParmError(fmt::format("unknown GPU profile '{}'; known profiles: {}", name, known));
}

std::string_view task_kind(std::string_view task_name) {
  return task_name.substr(0, task_name.find('#'));
}

Time compute_time(const GpuProfile& gpu, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                  const Calibration* cal, std::string_view kind) {
  if (cal && !kind.empty())
    if (const KernelTable* k = cal->kernel(kind, dtype))
      return k->time(static_cast<double>(k->op == OpKind::gemm ? flops : bytes));
  Time t = gpu.launch;
  Time mem = Time::zero();
  if (bytes > 0) {
    const double b = static_cast<double>(bytes);
    const double eff = gpu.mem_eff_max * b / (b + gpu.mem_half_bytes);
    mem = duration_for_rate(b, gpu.hbm_bandwidth * eff);
  }
  if (op == OpKind::gemm && flops > 0) {
    const double f = static_cast<double>(flops);
    const double eff = gpu.gemm_eff_max * f / (f + gpu.gemm_half_flops);
    const Time math = duration_for_rate(f, gpu.peak(dtype) * eff);
    return t + std::max(math, mem);
  }
  return t + mem;
}

}  // namespace parmsim
