// The closed form's fast paths against plain restatements of the rules they
// replace: duration_for_rate's inline common case against its full body, and
// the GEMM cost (tile search inlined into model_compute_time) against the
// formula in sim/compute/gemm_model.hpp evaluated tile by tile.
#include <catch2/catch.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/time.hpp"

using namespace parmsim;

namespace {

// duration_for_rate as it was written before the inline fast path (one body):
// nullopt where it throws.
std::optional<std::int64_t> reference_duration(double amount, double per_second) {
  if (!(per_second > 0) || !std::isfinite(per_second)) return std::nullopt;
  if (amount <= 0) return 0;
  const double ps = std::ceil(amount / per_second * 1e12);
  if (ps >= 9.2e18) return std::nullopt;
  return static_cast<std::int64_t>(ps);
}

std::optional<std::int64_t> fast_duration(double amount, double per_second) {
  try {
    return duration_for_rate(amount, per_second).count_ps();
  } catch (const UserError&) {
    return std::nullopt;
  }
}

// gemm_model.hpp's formula, tile by tile in integers and the same doubles.
Time reference_gemm(const GpuProfile& gpu, DType dt, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                    double bytes_override) {
  double best = 0;
  bool first = true;
  for (const TileShape& t : kCublasTiles) {
    const std::int64_t tiles = (m + t.m - 1) / t.m * ((n + t.n - 1) / t.n) * batch;
    const std::int64_t waves = (tiles + gpu.sm_count - 1) / gpu.sm_count;
    const double f = static_cast<double>(waves) * 2.0 * t.m * t.n * static_cast<double>(k);
    if (first || f < best) best = f;
    first = false;
  }
  const Time compute = duration_for_rate(best, gpu.sustained(dt) / gpu.sm_count);
  const double elems =
      (static_cast<double>(m) * static_cast<double>(k) + static_cast<double>(k) * static_cast<double>(n) +
       static_cast<double>(m) * static_cast<double>(n)) *
      static_cast<double>(batch);
  const double bytes = bytes_override > 0 ? bytes_override : elems * dtype_bytes(dt);
  const Time memory = duration_for_rate(bytes, gpu.hbm_bandwidth * gpu.mem_efficiency);
  return gpu.launch + std::max(compute, memory);
}

}  // namespace

TEST_CASE("duration_for_rate: the inline common case equals the full rule, errors included", "[time][fast]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> amounts = {0.0, -1.0, -inf, 1e-300, 0.5, 1.0, 3.0, 1e6, 1e12, 9.2e18, 1e30, inf};
  const std::vector<double> rates = {
      0.0, -5.0, nan, inf, 1e-300, 1.0, 3.0, 1e9, 4.18e12, 1e300, std::numeric_limits<double>::max()};
  int throws = 0;
  for (const double a : amounts)
    for (const double r : rates) {
      const auto want = reference_duration(a, r);
      CHECK(fast_duration(a, r) == want);
      if (!want) ++throws;
    }
  // Invalid rates (0, -5, NaN, inf: 4 of 11) throw for every amount, and a
  // finite result of 1e30 / 1 s or more overflows: the set is not all errors.
  CHECK(throws > 4 * static_cast<int>(amounts.size()));
  CHECK(throws < static_cast<int>(amounts.size() * rates.size()));
  // Exact: 3 units at 3 per second is 1 s = 1e12 ps; 1 unit at 3/s rounds up.
  CHECK(duration_for_rate(3.0, 3.0).count_ps() == 1'000'000'000'000);
  CHECK(duration_for_rate(1.0, 3.0).count_ps() == 333'333'333'334);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> e(-12, 22), f(0, 14);
  for (int i = 0; i < 20000; ++i) {
    const double a = std::pow(10.0, e(rng)), r = std::pow(10.0, f(rng));
    REQUIRE(fast_duration(a, r) == reference_duration(a, r));
  }
  // Whole numbers of picoseconds and their neighbours (the ceiling by
  // truncation must add nothing to a whole number and one to anything just
  // above it), up to and past 2^53 where every double is whole.
  for (int i = 0; i < 20000; ++i) {
    const double ps = std::floor(std::pow(2.0, f(rng) * 4.5));
    for (const double a : {ps, std::nextafter(ps, inf), std::nextafter(ps, 0.0)})
      REQUIRE(fast_duration(a, 1e12) == reference_duration(a, 1e12));
  }
}

TEST_CASE("GEMM cost: compute_time and model_compute_time equal the tile formula", "[gemm][fast]") {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::int64_t> dim(1, 20000), small(1, 300), bat(1, 64);
  int n_checked = 0;
  for (const char* name : {"h100", "h200", "a100", "b200", "rtx2080ti"})
    for (const DType dt : {DType::fp32, DType::fp16})
      for (int i = 0; i < 300; ++i) {
        const GpuProfile& g = gpu_profile(name);
        const std::int64_t m = i % 3 == 0 ? small(rng) : dim(rng), n = i % 5 == 0 ? small(rng) : dim(rng);
        const std::int64_t k = dim(rng), batch = i % 2 ? 1 : bat(rng);
        const std::uint64_t bytes = i % 4 == 0 ? static_cast<std::uint64_t>(dim(rng)) * 1000 : 0;
        const std::vector<std::int64_t> shape = {m, n, k, batch};
        const std::uint64_t flops = static_cast<std::uint64_t>(2 * m * n) * static_cast<std::uint64_t>(k * batch);
        const Time want = reference_gemm(g, dt, m, n, k, batch, static_cast<double>(bytes));
        REQUIRE(compute_time(g, OpKind::gemm, flops, bytes, dt, nullptr, {}, shape) == want);
        REQUIRE(model_compute_time(g, OpKind::gemm, flops, bytes, dt, shape) == want);
        REQUIRE(plan_gemm(g, dt, {m, n, k, batch}, static_cast<double>(bytes)).total == want);
        ++n_checked;
      }
  CHECK(n_checked == 5 * 2 * 300);
  // A memory-bound kernel and the CPU profile (no tile model) take the other paths.
  const GpuProfile& h = gpu_profile("h100");
  CHECK(model_compute_time(h, OpKind::copy, 0, 4096, DType::fp16, {}) == memory_kernel_time(h, 4096));
  const GpuProfile& cpu = gpu_profile("cpu");
  // 2e9 FLOPs at 2 GFLOP/s = 1 s; 1e9 bytes at 5 GB/s = 0.2 s; plus the 1 us floor.
  CHECK(model_compute_time(cpu, OpKind::gemm, 2'000'000'000, 1'000'000'000, DType::fp32, {}) ==
        Time::ms(1000) + Time::us(1));
  // Errors as before: a zero dimension, an unsupported dtype.
  const std::vector<std::int64_t> bad = {0, 4, 4};
  CHECK_THROWS_AS(model_compute_time(h, OpKind::gemm, 8, 0, DType::fp16, bad), UserError);
  const std::vector<std::int64_t> ok = {64, 64, 64};
  CHECK_THROWS_AS(model_compute_time(gpu_profile("rtx2080ti"), OpKind::gemm, 8, 0, DType::bf16, ok), UserError);
}

// model_compute_time costs only the 64 x 64 tile (the least of all tiles,
// gemm_model.cpp says why) and leaves tile counts that could overflow to
// plan(): both sides of that bound, shapes with one tile, thin, batched and
// huge shapes, on every profile with an SM count, against the tile formula
// and plan_gemm.
TEST_CASE("GEMM cost: the 64 x 64 tile alone, up to and past its bound, equals the tile formula", "[gemm][fast]") {
  const std::int64_t t40 = 1LL << 40, t31 = 1LL << 31;
  struct S {
    std::int64_t m, n, k, batch;
  };
  const std::vector<S> shapes = {
      {64 * t40, 1, 1, 1},                  // 2^40 tiles along m: plan()
      {64 * t40 - 64, 1, 1, 1},             // one fewer: the 64 x 64 tile alone
      {1, 64 * t40, 3, 1},                  {1, 64 * t40 - 1, 3, 1},
      {1, 1, 1, t40},                       {1, 1, 1, t40 - 1},
      {64 * t31, 64 * t31, 1, 1},           // 2^62 tiles: plan() (and a time past 2^63 ps)
      {64 * t31 - 64, 64 * t31, 1, 1},
      {(1LL << 46) + 12345, 1000, 7, 1},    // over 2^52 tiles' worth of FLOPs per SM
      {999, (1LL << 45) + 3, 3, 3},
      {1, 1, 1, 1},                         {1, 1, 1LL << 40, 1},
      {65, 257, 129, 3},                    {4096, 1, 1024, 1},
      {1, 4096, 1024, 1},                   {255, 129, 4096, 131},
  };
  // The time, or nullopt where it throws (a result past 2^63 ps).
  auto outcome = [](auto&& f) -> std::optional<std::int64_t> {
    try {
      return f().count_ps();
    } catch (const UserError&) {
      return std::nullopt;
    }
  };
  int checked = 0, thrown = 0;
  for (const GpuProfile& g : gpu_profiles()) {
    if (g.sm_count < 1) continue;
    for (const DType dt : {DType::fp32, DType::fp16})
      for (const S& x : shapes)
        for (const std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{1} << 50}) {
          const std::vector<std::int64_t> shape = {x.m, x.n, x.k, x.batch};
          const auto fast = outcome([&] { return model_compute_time(g, OpKind::gemm, 1, bytes, dt, shape); });
          REQUIRE(fast ==
                  outcome([&] { return reference_gemm(g, dt, x.m, x.n, x.k, x.batch, static_cast<double>(bytes)); }));
          REQUIRE(fast == outcome([&] {
                    return plan_gemm(g, dt, {x.m, x.n, x.k, x.batch}, static_cast<double>(bytes)).total;
                  }));
          thrown += !fast;
          ++checked;
        }
  }
  CHECK(thrown < checked / 4);
  CHECK(checked >= 4 * 2 * 16 * 2);
  // What the single-tile search rests on, checked in the integers: the 64 x 64
  // tile's waves * Tm * Tn is never above another tile's; and model_compute_time
  // against the full formula on random shapes, thin, square and batched.
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::int64_t> dim(1, 3000), bat(1, 6);
  int strictly_less = 0;
  for (const GpuProfile& g : gpu_profiles()) {
    if (g.sm_count < 1) continue;
    for (int i = 0; i < 3000; ++i) {
      const std::int64_t m = dim(rng), n = dim(rng), k = dim(rng), batch = bat(rng);
      std::array<std::int64_t, 8> f{};
      for (std::size_t t = 0; t < 8; ++t) {
        const std::int64_t tiles = (m + kCublasTiles[t].m - 1) / kCublasTiles[t].m *
                                   ((n + kCublasTiles[t].n - 1) / kCublasTiles[t].n) * batch;
        f[t] = (tiles + g.sm_count - 1) / g.sm_count * kCublasTiles[t].m * kCublasTiles[t].n;
      }
      REQUIRE(kCublasTiles[7].m == 64);
      REQUIRE(kCublasTiles[7].n == 64);
      REQUIRE(*std::min_element(f.begin(), f.end()) == f[7]);
      if (std::count(f.begin(), f.end(), f[7]) == 1) ++strictly_less;
      const std::vector<std::int64_t> shape = {m, n, k, batch};
      REQUIRE(model_compute_time(g, OpKind::gemm, 1, 0, DType::fp16, shape) ==
              reference_gemm(g, DType::fp16, m, n, k, batch, 0));
    }
  }
  CHECK(strictly_less > 1000);  // shapes where the other tiles would all have cost more
}
