#pragma once
// GEMM cost as cuBLAS runs it: output tiles, waves over the SMs, a fixed floor, a memory roofline.
//
//   tiles   = ceil(m / Tm) * ceil(n / Tn) * batch          (tile quantization)
//   waves   = ceil(tiles / sm_count)                       (wave quantization)
//   compute = waves * (2 * Tm * Tn * k) / (sustained(dtype) / sm_count)
//   memory  = (m*k + k*n + m*n) * batch * bytes(dtype) / (hbm_bandwidth * mem_efficiency)
//   time    = launch + max(compute, memory)
// with (Tm, Tn) the cuBLAS tile shape, of those in kCublasTiles, that gives the least time.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/time.hpp"

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

// `bytes_override` > 0 replaces the A + B + C bytes in the memory roofline. Throws UserError for a
// dimension < 1 or an unsupported dtype. Needs gpu.sm_count > 0.
GemmPlan plan_gemm(const GpuProfile& gpu, DType dtype, const GemmShape& s, double bytes_override = 0);
Time gemm_time(const GpuProfile& gpu, DType dtype, const GemmShape& s, double bytes_override = 0);

// {m, n, k} or {m, n, k, batch} as given (every entry >= 1, else UserError); empty: the cube
// m = n = k = ceil(cbrt(flops / 2)) (at least 1), i.e. the squarest GEMM of those FLOPs.
GemmShape gemm_shape_or_cube(std::span<const std::int64_t> shape, std::uint64_t flops);

// A memory-bound kernel: launch + bytes / (hbm_bandwidth * mem_efficiency).
Time memory_kernel_time(const GpuProfile& gpu, std::uint64_t bytes);

namespace gemm_detail {
// ceil(a / b) for a >= 0, b >= 1.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
// The same for a >= 1 and b >= 1 (every caller checks the dimensions first):
// unsigned, so that a division by a power-of-two tile is a plain shift.
inline std::int64_t ceil_div_pos(std::int64_t a, std::uint64_t b) {
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(a) + b - 1) / b);
}
// One tile shape's count over the problem and its waves over the SMs. The
// waves' division by the SM count is done in doubles when the dividend is
// below 2^52: the correctly rounded quotient of two such integers truncates
// to the integer quotient (the gap to the next integer, >= 1/sm_count, is
// far above half an ulp), and a double division is several times cheaper
// than a 64-bit one. Inlined with constant tile sides, its divisions by them
// are by constants.
struct TileCount {
  std::int64_t tiles, waves;
  double flops;  // per SM: waves * the tile's FLOPs
};
inline __attribute__((always_inline)) TileCount tile_count(const GemmShape& s, std::int64_t tm, std::int64_t tn,
                                                           std::int64_t sm) {
  const std::int64_t tiles = ceil_div_pos(s.m, tm) * ceil_div_pos(s.n, tn) * s.batch;
  const std::int64_t waves = tiles < (1LL << 52) - sm
                                 ? static_cast<std::int64_t>(static_cast<double>(tiles + sm - 1) /
                                                             static_cast<double>(sm))
                                 : ceil_div(tiles, sm);
  return {tiles, waves, static_cast<double>(waves) * 2.0 * tm * tn * static_cast<double>(s.k)};
}
// duration_for_rate(amount, rate) for a rate it accepts (> 0 and finite),
// without testing the rate again. For 0 <= x < 9.2e18 the ceiling stays
// below 9.2e18 (above 2^53 every double is an integer), so
// duration_for_rate would keep it. Anything else (an amount <= 0, an
// overflow) goes to duration_for_rate, which returns or throws as it always did.
inline __attribute__((always_inline)) Time rate_duration(double amount, double rate) {
  if (amount > 0) {
    const double x = amount / rate * 1e12;  // duration_for_rate's expression
    if (x < 9.2e18) return Time::ps(ceil_below_2p63(x));
  }
  return duration_for_rate(amount, rate);
}
// The same for an amount known to be > 0 (the callers' FLOPs and bytes are
// whole numbers of at least 1), without testing it again.
inline __attribute__((always_inline)) Time positive_rate_duration(double amount, double rate) {
  const double x = amount / rate * 1e12;
  if (x < 9.2e18) return Time::ps(ceil_below_2p63(x));
  return duration_for_rate(amount, rate);
}
inline bool usable_rate(double r) { return r > 0 && r <= std::numeric_limits<double>::max(); }
}  // namespace gemm_detail

// model_compute_time's rates on one GPU, worked out once for many kernels
// (the closed form of a layer costs about 25): the HBM rate and each dtype's
// per-SM share of the sustained throughput, as model_compute_time forms them.
struct ComputeRates {
  explicit ComputeRates(const GpuProfile& g);
  const GpuProfile& gpu;
  double mem_rate = 0;  // hbm_bandwidth * mem_efficiency
  bool mem_ok = false;  // a rate duration_for_rate takes (> 0, finite)
  // sustained(d) / sm_count, indexed by DType; 0 where the one-tile GEMM
  // model does not apply as is (no SM count, an unsupported dtype, a rate
  // duration_for_rate refuses, this one or mem_rate).
  std::array<double, 4> per_sm{};
  double sm_for(DType d) const {
    const auto i = static_cast<std::size_t>(d);
    return i < per_sm.size() ? per_sm[i] : 0.0;
  }
};

namespace gemm_detail {
// a + b as Time's operator+ gives it; on an overflow, the operator itself
// (which throws). Inline where Time's operator is not always.
inline __attribute__((always_inline)) Time add(Time a, Time b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a.count_ps(), b.count_ps(), &r)) return a + b;
  return Time::ps(r);
}
// A GEMM outside the inline case of model_compute_time: no SM count
// (launch + max(flops / sustained, bytes / bandwidth)), else the search over
// kCublasTiles (plan_gemm) on the shape, or the squarest shape of these FLOPs
// when none is given; its errors for a bad shape.
Time gemm_time_general(const GpuProfile& gpu, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                       std::span<const std::int64_t> shape);
// The same with shape {m, n, k, batch}, or none for m = 0 (Kernel::dims()'s
// convention): out of line, so that callers do not keep a shape array.
Time gemm_time_general(const GpuProfile& gpu, std::uint64_t flops, std::uint64_t bytes, DType dtype, std::int64_t m,
                       std::int64_t n, std::int64_t k, std::int64_t batch);
}  // namespace gemm_detail

// model_compute_time(r, OpKind::gemm, flops, bytes, dtype, {m, n, k, batch})
// for m >= 1, with the rates of `r` (per_sm = r.sm_for(dtype)): a GEMM of one
// to 2^31 rows and columns, a batch of at most 512 and bytes > 0 on a GPU
// with an SM count inline (the 64 x 64 tile, which is always the search's
// least: gemm_model.cpp), everything else (errors included) by gemm_time_general.
inline __attribute__((always_inline)) Time fast_gemm_time(const ComputeRates& r, double per_sm, std::uint64_t flops,
                                                          std::uint64_t bytes, DType dtype, std::int64_t m,
                                                          std::int64_t n, std::int64_t k, std::int64_t batch) {
  using namespace gemm_detail;
  // Inside the one-tile case's bounds (gemm_model.cpp: every dimension >= 1,
  // ceil(m / 64) * ceil(n / 64) * batch < 2^62 and each factor < 2^40):
  // 1 <= m, n <= 2^31 (m - 1 and n - 1 below 2^31 together; a dimension < 1
  // wraps to a huge unsigned value), 1 <= batch <= 512 and k >= 1.
  using u64 = std::uint64_t;
  const u64 sides = (static_cast<u64>(m) - 1) | (static_cast<u64>(n) - 1);
  if (per_sm > 0 && bytes > 0 && sides < (u64{1} << 31) && static_cast<u64>(batch) - 1 < 512 && k >= 1) {
    // At least one wave of a 64 x 64 tile over k >= 1, and bytes >= 1: both amounts are > 0.
    const Time compute = positive_rate_duration(tile_count({m, n, k, batch}, 64, 64, r.gpu.sm_count).flops, per_sm);
    return add(r.gpu.launch, std::max(compute, positive_rate_duration(static_cast<double>(bytes), r.mem_rate)));
  }
  return gemm_time_general(r.gpu, flops, bytes, dtype, m, n, k, batch);
}

// memory_kernel_time(r.gpu, bytes), bit for bit, with the rate worked out once.
inline __attribute__((always_inline)) Time memory_kernel_time(const ComputeRates& r, std::uint64_t bytes) {
  if (bytes == 0) return r.gpu.launch;
  if (!r.mem_ok) return memory_kernel_time(r.gpu, bytes);
  return gemm_detail::add(r.gpu.launch, gemm_detail::positive_rate_duration(static_cast<double>(bytes), r.mem_rate));
}

// The time of a compute task without a calibration, the one path for the
// engine (through model_compute_time(gpu, ...)) and the closed form (with
// rates worked out once): nothing for the host; the GEMM tile model for a
// GEMM with FLOPs or a shape; else a memory-bound kernel.
inline __attribute__((always_inline)) Time model_compute_time(const ComputeRates& r, OpKind op, std::uint64_t flops,
                                                             std::uint64_t bytes, DType dtype,
                                                             std::span<const std::int64_t> shape) {
  if (op == OpKind::gemm) {
    if (shape.size() == 4 && shape[0] >= 1)
      return fast_gemm_time(r, r.sm_for(dtype), flops, bytes, dtype, shape[0], shape[1], shape[2], shape[3]);
    if (flops > 0 || !shape.empty()) return gemm_detail::gemm_time_general(r.gpu, flops, bytes, dtype, shape);
  } else if (op == OpKind::host) {
    return Time::zero();
  }
  return memory_kernel_time(r, bytes);
}

// compute_time (gpu_profile.hpp) with the GPU's rates worked out once: the
// engine's, which costs every kernel of a simulation on one GPU.
Time compute_time(const ComputeRates& r, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                  const Calibration* cal, std::string_view kind, std::span<const std::int64_t> shape);

}  // namespace parmsim
