// The closed form's fast paths against plain restatements of the rules they
// replace: duration_for_rate's inline common case against its full body, and
// the GEMM cost (tile search inlined into model_compute_time) against the
// formula in sim/compute/gemm_model.hpp evaluated tile by tile; the closed
// form's per-evaluation GEMM memo against costing every GEMM afresh.
#include <catch2/catch.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/time.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_kernels.hpp"

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
  } catch (const ParmError&) {
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
  CHECK_THROWS_AS(model_compute_time(h, OpKind::gemm, 8, 0, DType::fp16, bad), ParmError);
  const std::vector<std::int64_t> ok = {64, 64, 64};
  CHECK_THROWS_AS(model_compute_time(gpu_profile("rtx2080ti"), OpKind::gemm, 8, 0, DType::bf16, ok), ParmError);
}

// The closed form's per-evaluation GEMM memo (moe::GemmMemo): every answer is
// model_compute_time's for the same arguments, whichever calls came before.
// The calls are built so that for each field of the key there are GEMMs that
// differ in that field alone and cost differently: a memo that left the field
// out of its key would hand one of them the other's time.
TEST_CASE("GEMM memo: each answer is model_compute_time's, keyed on every argument", "[gemm][fast][moe]") {
  struct Call {
    std::uint64_t flops, bytes;
    DType dt;
    std::vector<std::int64_t> shape;
  };
  std::vector<Call> base = {
      {0, 0, DType::fp16, {4096, 1024, 1024, 1}},   {0, 0, DType::fp16, {2048, 1024, 1024, 1}},
      {0, 0, DType::fp16, {4096, 1024, 4096, 1}},   {0, 0, DType::fp16, {4096, 1024, 1024, 8}},
      {0, 0, DType::fp32, {4096, 1024, 1024, 1}},   {0, 1'000'000'000, DType::fp16, {4096, 1024, 1024, 1}},
      {2'000'000'000, 0, DType::fp16, {}},          {4'000'000'000, 0, DType::fp16, {}},
      {8, 0, DType::fp16, {}},                      {0, 0, DType::fp16, {}},
      {64, 0, DType::fp16, {64, 1, 1, 1}},          {64, 0, DType::fp16, {1, 64, 1, 1}},
      {64, 0, DType::fp16, {1, 1, 64, 1}},          {64, 0, DType::fp16, {1, 1, 1, 64}},
      {0, 0, DType::fp16, {4096, 2048, 1024, 1}},
  };
  // One field changed at a time, each pair costed apart: the memo must keep them apart.
  // m, k, batch, dtype, bytes, flops (no shape: the cube), n.
  const std::vector<std::pair<int, int>> differ_in_one = {{0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {6, 7}, {0, 14}};
  const GpuProfile& h = gpu_profile("h100");
  for (const auto& [a, b] : differ_in_one)
    REQUIRE(model_compute_time(h, OpKind::gemm, base[a].flops, base[a].bytes, base[a].dt, base[a].shape) !=
            model_compute_time(h, OpKind::gemm, base[b].flops, base[b].bytes, base[b].dt, base[b].shape));
  // More than the memo keeps (32), and repeats of everything, in a shuffled order, on two profiles.
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<std::int64_t> dim(1, 5000);
  for (int i = 0; i < 40; ++i)
    base.push_back({0, i % 3 == 0 ? 5'000'000'000ULL : 0, i % 2 ? DType::fp16 : DType::fp32,
                    {dim(rng), dim(rng), dim(rng), i % 5 == 0 ? 4 : 1}});
  std::vector<Call> calls;
  for (int r = 0; r < 3; ++r) calls.insert(calls.end(), base.begin(), base.end());
  std::shuffle(calls.begin(), calls.end(), rng);
  int checked = 0;
  for (const char* other : {"h100", "a100"}) {
    moe::GemmMemo memo;
    const GpuProfile& g = gpu_profile(other);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      // Switching the profile mid-way empties the memo.
      const GpuProfile& p = i % 7 == 3 ? h : g;
      const Call& c = calls[i];
      REQUIRE(memo.time(p, c.flops, c.bytes, c.dt, c.shape) ==
              model_compute_time(p, OpKind::gemm, c.flops, c.bytes, c.dt, c.shape));
      ++checked;
    }
  }
  CHECK(checked == 2 * 3 * 55);
  // A refused shape throws as model_compute_time does, and is not kept.
  moe::GemmMemo memo;
  const std::vector<std::int64_t> zero = {0, 0, 0, 0}, three = {64, 64, 64};
  CHECK(memo.time(h, 0, 0, DType::fp16, {}) == model_compute_time(h, OpKind::gemm, 0, 0, DType::fp16, {}));
  CHECK_THROWS_AS(memo.time(h, 0, 0, DType::fp16, zero), ParmError);
  CHECK_THROWS_AS(memo.time(h, 0, 0, DType::fp16, zero), ParmError);
  CHECK(memo.time(h, 8, 0, DType::fp16, three) == model_compute_time(h, OpKind::gemm, 8, 0, DType::fp16, three));
  CHECK_THROWS_AS(memo.time(gpu_profile("rtx2080ti"), 8, 0, DType::bf16, three), ParmError);
}

// The closed form with the memo shared by a layer's forward and backward
// lists, against the same sums with every kernel costed afresh: with zero
// alpha and beta and no topology every collective costs 0, so the layer's
// time is the compute ops' kernels_seconds (times the expert repeats) summed
// in list order, as model_time_of sums them.
TEST_CASE("closed form: the per-evaluation GEMM memo changes no layer time", "[moe][fast]") {
  moe::AlphaBeta ab;  // no topology, no calibration: ring forms of zero alpha and beta
  int layers = 0, repeats = 0;
  for (const char* gname : {"h100", "a100"})
    for (int mp : {1, 2, 4})
      for (std::int64_t hm : {1, 4})
        for (const moe::DsMoe ds : {moe::DsMoe::v0_14_4, moe::DsMoe::lean})
          for (const moe::Dispatch disp : {moe::Dispatch::einsum, moe::Dispatch::index})
            for (const std::string sched : {"baseline", "s1", "s2"}) {
              moe::LayerSpec s;
              s.mp = mp;
              s.H = hm * s.M;
              s.ds_moe = ds;
              s.dispatch = disp;
              s.dtype = DType::fp16;
              const moe::Dims d = moe::make_dims(s, 16, 8);
              const moe::ScheduleOptions o = moe::preset(sched);
              const GpuProfile& gpu = gpu_profile(gname);
              const std::vector<moe::MoeOp> fwd = moe::forward_ops(s, d, o);
              const std::vector<moe::MoeOp> bwd = moe::backward_ops(fwd, s, d, o);
              auto fresh = [&](const std::vector<moe::MoeOp>& ops) {
                double t = 0;
                for (const moe::MoeOp& op : ops) {
                  double one = 0;
                  switch (op.kind) {
                    case moe::MoeStep::gate:
                    case moe::MoeStep::order:
                    case moe::MoeStep::iorder:
                    case moe::MoeStep::experts:
                    case moe::MoeStep::kernel:
                    case moe::MoeStep::slot_slice:
                      one = moe::kernels_seconds(op, s, d, gpu, nullptr);
                      if (op.kind == moe::MoeStep::experts) one *= static_cast<double>(moe::expert_repeats(s, d));
                      break;
                    default:
                      break;
                  }
                  t += one;
                }
                return t;
              };
              // Shapes do repeat within a layer (the backward's data gradients), so the memo is exercised.
              std::vector<std::array<std::int64_t, 4>> seen;
              for (const auto* ops : {&fwd, &bwd})
                for (const moe::MoeOp& op : *ops)
                  for (const moe::Kernel& k : moe::kernels(op, s, d))
                    if (k.op == OpKind::gemm) {
                      if (std::find(seen.begin(), seen.end(), k.shape) != seen.end()) ++repeats;
                      seen.push_back(k.shape);
                    }
              const moe::ModelTime m = moe::model_layer(s, d, o, ab, gpu);
              REQUIRE(m.forward_s == fresh(fwd));
              REQUIRE(m.backward_s == fresh(bwd));
              REQUIRE(moe::model_time(bwd, s, d, o, ab, gpu) == fresh(bwd));
              ++layers;
            }
  CHECK(layers == 2 * 3 * 2 * 2 * 2 * 3);
  CHECK(repeats > layers);
}
