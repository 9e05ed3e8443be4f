#pragma once
// GPU compute profiles and the roofline kernel cost model.
//
// time(op) = launch + max(flops / (peak(dtype) * eff_gemm(flops)),
//                         bytes / (hbm * eff_mem(bytes)))       for gemm
// time(op) = launch + bytes / (hbm * eff_mem(bytes))            otherwise
// with saturating efficiency curves eff(x) = eff_max * x / (x + x_half): small
// kernels run far below peak, large ones approach eff_max.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim {

struct GpuProfile {
  std::string name;
  std::string source;        // where the figures come from
  double peak_fp32 = 0;      // FLOP/s (no TF32)
  double peak_fp16 = 0;      // FLOP/s dense tensor core, fp32 accumulate
  double peak_bf16 = 0;      // 0 = not supported
  double hbm_bandwidth = 0;  // bytes/s
  Time launch;               // per-kernel overhead
  double gemm_eff_max = 0.8;
  double gemm_half_flops = 2e9;  // FLOPs at which a GEMM reaches half of eff_max
  double mem_eff_max = 0.85;
  double mem_half_bytes = 2e6;

  double peak(DType d) const;  // throws if the dtype is unsupported
};

const GpuProfile& gpu_profile(const std::string& name);  // throws ParmError listing the known ones
const std::vector<GpuProfile>& gpu_profiles();

// Duration of one compute task on a GPU of this profile. With a calibration
// that has a table for this kind of task (`kind`: the task name before '#')
// and dtype, the measured table decides instead.
struct Calibration;
Time compute_time(const GpuProfile& gpu, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                  const Calibration* cal = nullptr, std::string_view kind = {});
std::string_view task_kind(std::string_view task_name);  // "expert_fc1#12@3" -> "expert_fc1"

}  // namespace parmsim
