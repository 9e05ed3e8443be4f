#include "sim/compute/gemm_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "sim/core/error.hpp"

namespace parmsim {

double GemmShape::flops() const {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
         static_cast<double>(batch);
}

using gemm_detail::ceil_div_pos;
using gemm_detail::tile_count;
using gemm_detail::TileCount;

// Why tiles and waves (NVIDIA "Matrix Multiplication Background User's Guide", sections on tile
// and wave quantization; restated in stas00/ml-engineering@744d01e1
// training/performance/README.md L598-640): the output is cut into thread-block tiles, a partly
// filled tile costs as much as a full one, and only sm_count blocks run at once, so time grows in
// steps of whole waves. One block per SM at a time is the guide's own model of a wave.
//
// Per-wave time: a tile's 2*Tm*Tn*k FLOPs at 1/sm_count of the throughput cuBLAS sustains on
// large GEMMs (GpuProfile::sustained, published maxima). Every tile shape is given that same
// per-SM rate: no cited figure says how much slower a small tile runs, so none is invented; the
// selector then takes the least time over kCublasTiles, the larger tile on ties, as cuBLAS's
// heuristics pick the tile that fills the GPU best.
//
// Memory roofline: A, B and C each cross HBM once (the L2 and the tiles' reuse absorb the rest),
// at the bandwidth a streaming kernel sustains (GpuProfile::mem_efficiency). It decides only thin
// shapes (a small m or n), where the tile FLOPs are few and the operands many.
//
// The fixed floor (GpuProfile::launch) is added once per kernel: a null kernel costs about 3 us
// (NVIDIA developer forum, https://forums.developer.nvidia.com/t/too-much-time-for-kernel-launch-latency/233645/3),
// and an 8 x 128^3 fp16 bmm takes 3.2 us of device time on an H200
// (https://github.com/tile-ai/TileOPs/pull/2148), almost all of it fixed.
namespace {
// Whether a shape (every dimension >= 1) has fewer than 2^62 tiles of 64 x
// 64, the most of any tile of kCublasTiles (every other is made of such
// blocks): then no tile count, product or wave count overflows 64 bits.
// (The product of the two sides' counts is below 2^114, and below 2^62 times
// a batch below 2^63 it stays below 2^125.)
inline bool tiles64_below_2p62(const GemmShape& s) {
  using u128 = unsigned __int128;
  const u128 mn = static_cast<u128>(ceil_div_pos(s.m, 64)) * static_cast<std::uint64_t>(ceil_div_pos(s.n, 64));
  return mn < (u128{1} << 62) && mn * static_cast<std::uint64_t>(s.batch) < (u128{1} << 62);
}
// The memory roofline: A, B and C once through HBM, or `bytes_override` when > 0.
inline __attribute__((always_inline)) Time memory_time(const GpuProfile& gpu, DType dtype, const GemmShape& s,
                                                       double bytes_override) {
  const double elems = (static_cast<double>(s.m) * static_cast<double>(s.k) +
                        static_cast<double>(s.k) * static_cast<double>(s.n) +
                        static_cast<double>(s.m) * static_cast<double>(s.n)) *
                       static_cast<double>(s.batch);
  const double bytes = bytes_override > 0 ? bytes_override : elems * dtype_bytes(dtype);
  return duration_for_rate(bytes, gpu.hbm_bandwidth * gpu.mem_efficiency);
}

// plan_gemm's body: the search over kCublasTiles.
inline __attribute__((always_inline)) GemmPlan plan(const GpuProfile& gpu, DType dtype, const GemmShape& s,
                                                    double bytes_override) {
  if (s.m < 1 || s.n < 1 || s.k < 1 || s.batch < 1)
    throw UserError(fmt::format("GEMM shape m={} n={} k={} batch={}: every dimension must be >= 1", s.m, s.n, s.k,
                                s.batch));
  if (gpu.sm_count < 1)
    throw UserError(fmt::format("GPU profile '{}' has no SM count; the tile model needs one", gpu.name));
  if (!tiles64_below_2p62(s))
    throw UserError(
        fmt::format("GEMM shape m={} n={} k={} batch={}: 2^62 or more tiles of 64 x 64, more than the "
                    "tile model counts",
                    s.m, s.n, s.k, s.batch));
  const double per_sm = gpu.sustained(dtype) / gpu.sm_count;
  GemmPlan best;
  double best_flops = 0;  // per-SM FLOPs of the best plan: waves * tile FLOPs
  // The tiles unrolled, so that each tile's divisions are by constants.
  // The best so far in locals (registers once inlined); the first tile is
  // always taken (tiles >= 1), then a later one only when strictly better.
  std::size_t best_i = 0;
  std::int64_t best_tiles = 0, best_waves = 0;
  const std::int64_t sm = gpu.sm_count;
  auto one = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) __attribute__((always_inline)) {
    constexpr TileShape t = kCublasTiles[I];
    const TileCount c = tile_count(s, t.m, t.n, sm);
    if (I == 0 || c.flops < best_flops) {
      best_flops = c.flops;
      best_i = I;
      best_tiles = c.tiles;
      best_waves = c.waves;
    }
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) __attribute__((always_inline)) {
    (one(std::integral_constant<std::size_t, I>{}), ...);
  }(std::make_index_sequence<kCublasTiles.size()>{});
  best.tile = kCublasTiles[best_i];
  best.tiles = best_tiles;
  best.waves = best_waves;
  best.compute = duration_for_rate(best_flops, per_sm);
  best.memory = memory_time(gpu, dtype, s, bytes_override);
  best.total = gpu.launch + std::max(best.compute, best.memory);
  return best;
}

}  // namespace

GemmPlan plan_gemm(const GpuProfile& gpu, DType dtype, const GemmShape& s, double bytes_override) {
  return plan(gpu, dtype, s, bytes_override);
}

Time gemm_time(const GpuProfile& gpu, DType dtype, const GemmShape& s, double bytes_override) {
  return plan_gemm(gpu, dtype, s, bytes_override).total;
}

namespace {
inline __attribute__((always_inline)) GemmShape shape_or_cube(std::span<const std::int64_t> shape,
                                                              std::uint64_t flops) {
  if (shape.empty()) {
    // The squarest GEMM of these FLOPs: a guess that neither favours thin nor flat shapes.
    const auto e = static_cast<std::int64_t>(std::ceil(std::cbrt(static_cast<double>(flops) / 2.0) - 1e-9));
    const std::int64_t d = std::max<std::int64_t>(1, e);
    return {d, d, d, 1};
  }
  if (shape.size() != 3 && shape.size() != 4)
    throw UserError(fmt::format("a GEMM shape has 3 entries [m, n, k] or 4 [m, n, k, batch], not {}", shape.size()));
  for (const std::int64_t v : shape)
    if (v < 1) throw UserError(fmt::format("a GEMM shape entry is {}; every entry must be >= 1", v));
  return {shape[0], shape[1], shape[2], shape.size() == 4 ? shape[3] : 1};
}
}  // namespace

GemmShape gemm_shape_or_cube(std::span<const std::int64_t> shape, std::uint64_t flops) {
  return shape_or_cube(shape, flops);
}

Time memory_kernel_time(const GpuProfile& gpu, std::uint64_t bytes) {
  if (bytes == 0) return gpu.launch;
  return gpu.launch + duration_for_rate(static_cast<double>(bytes), gpu.hbm_bandwidth * gpu.mem_efficiency);
}

// Why one tile suffices (model_compute_time's inline case, gemm_model.hpp):
// the least FLOPs per SM over kCublasTiles are always the 64 x 64 tile's.
// Every tile's sides are multiples of 64, so for a tile Tm x Tn of
// c = Tm * Tn / 4096 blocks of 64 x 64, ceil(m/64) <= (Tm/64) ceil(m/Tm) and
// likewise for n, hence tiles64 <= c * tiles; and ceil(c * x / sms) <=
// c * ceil(x / sms) (the right side is an integer at least c * x / sms),
// hence waves64 * 4096 <= waves * Tm * Tn. plan() forms waves * 2 * Tm * Tn * k
// in doubles from left to right: the integer-to-double conversion and the
// final product by k round monotonically, and the factors 2, Tm, Tn are
// powers of two (exact scalings), so the order of the integers carries over
// to the doubles and the minimum plan() finds equals the 64 x 64 tile's
// value, bit for bit (ties pick an earlier tile, which only plan_gemm
// reports). tests/test_cost_fastpaths.cpp checks the two against each other.
static_assert(kCublasTiles.back().m == 64 && kCublasTiles.back().n == 64 && [] {
  for (const TileShape& t : kCublasTiles)
    if (t.m % 64 != 0 || t.n % 64 != 0 || t.m < 64 || t.n < 64) return false;
  return true;
}(), "the inline GEMM case needs the 64 x 64 tile and every other tile made of 64 x 64 blocks");

Time gemm_detail::gemm_time_general(const GpuProfile& gpu, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                                    std::span<const std::int64_t> shape) {
  if (gpu.sm_count < 1) {
    const Time math = duration_for_rate(static_cast<double>(flops), gpu.sustained(dtype));
    const Time mem = bytes > 0 ? duration_for_rate(static_cast<double>(bytes), gpu.hbm_bandwidth * gpu.mem_efficiency)
                               : Time::zero();
    return gpu.launch + std::max(math, mem);
  }
  return plan(gpu, dtype, shape_or_cube(shape, flops), static_cast<double>(bytes)).total;
}

Time gemm_detail::gemm_time_general(const GpuProfile& gpu, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                                    std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
  const std::int64_t shape[4] = {m, n, k, batch};
  return gemm_time_general(gpu, flops, bytes, dtype,
                           m != 0 ? std::span<const std::int64_t>(shape) : std::span<const std::int64_t>());
}

ComputeRates::ComputeRates(const GpuProfile& g) : gpu(g), mem_rate(g.hbm_bandwidth * g.mem_efficiency) {
  mem_ok = gemm_detail::usable_rate(mem_rate);
  if (g.sm_count < 1 || !mem_ok) return;
  for (const DType d : {DType::fp32, DType::fp16, DType::bf16, DType::fp8}) {
    // GpuProfile::peak's field: sustained() throws where it is not > 0.
    const double peak = d == DType::fp32   ? g.peak_fp32
                        : d == DType::fp16 ? g.peak_fp16
                        : d == DType::bf16 ? g.peak_bf16
                                           : g.peak_fp8;
    if (!(peak > 0)) continue;
    const double v = g.sustained(d) / g.sm_count;  // plan()'s per_sm
    if (gemm_detail::usable_rate(v)) per_sm[static_cast<std::size_t>(d)] = v;
  }
}

Time model_compute_time(const GpuProfile& gpu, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                        std::span<const std::int64_t> shape) {
  return model_compute_time(ComputeRates(gpu), op, flops, bytes, dtype, shape);
}

}  // namespace parmsim
