#pragma once
// GEMM cost as cuBLAS runs it: output tiles, waves over the SMs, a fixed floor, a memory roofline.
//
//   tiles   = ceil(m / Tm) * ceil(n / Tn) * batch          (tile quantization)
//   waves   = ceil(tiles / sm_count)                       (wave quantization)
//   compute = waves * (2 * Tm * Tn * k) / (sustained(dtype) / sm_count)
//   memory  = (m*k + k*n + m*n) * batch * bytes(dtype) / (hbm_bandwidth * mem_efficiency)
//   time    = launch + max(compute, memory)
// with (Tm, Tn) the cuBLAS tile shape, of those in kCublasTiles, that gives the least time.
#include <array>
#include <cstdint>
#include <span>

#include "sim/compute/gpu_profile.hpp"

namespace parmsim {

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops() const;  // 2 * m * n * k * batch
};

struct TileShape {
  int m, n;
};
// The thread-block tiles NVIDIA's Matrix Multiplication guide lists as typical for cuBLAS, from
// most to least efficient; ties in time go to the earlier (larger) one.
inline constexpr std::array<TileShape, 8> kCublasTiles{
    {{256, 128}, {128, 256}, {128, 128}, {256, 64}, {64, 256}, {128, 64}, {64, 128}, {64, 64}}};

struct GemmPlan {
  TileShape tile{0, 0};
  std::int64_t tiles = 0;  // thread blocks, all batches together
  std::int64_t waves = 0;
  Time compute;            // waves * per-wave time
  Time memory;             // the HBM roofline
  Time total;              // launch + max(compute, memory)
};

// `bytes_override` > 0 replaces the A + B + C bytes in the memory roofline. Throws ParmError for a
// dimension < 1 or an unsupported dtype. Needs gpu.sm_count > 0.
GemmPlan plan_gemm(const GpuProfile& gpu, DType dtype, const GemmShape& s, double bytes_override = 0);
Time gemm_time(const GpuProfile& gpu, DType dtype, const GemmShape& s, double bytes_override = 0);

// {m, n, k} or {m, n, k, batch} as given (every entry >= 1, else ParmError); empty: the cube
// m = n = k = ceil(cbrt(flops / 2)) (at least 1), i.e. the squarest GEMM of those FLOPs.
GemmShape gemm_shape_or_cube(std::span<const std::int64_t> shape, std::uint64_t flops);

// A memory-bound kernel: launch + bytes / (hbm_bandwidth * mem_efficiency).
Time memory_kernel_time(const GpuProfile& gpu, std::uint64_t bytes);

}  // namespace parmsim
