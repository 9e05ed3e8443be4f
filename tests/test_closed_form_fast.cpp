// The closed form's inline kernel costs against the general paths they
// stand for, bit for bit and error for error (docs/performance.md, "Fifth
// round"): rate_duration against duration_for_rate, fast_compute_time
// against model_compute_time, kernels_seconds with ComputeRates against
// kernels_seconds without a calibration.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/time.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

// What f() gives, as text: the picoseconds or seconds (every bit), or the error.
template <class F>
std::string outcome(F f) {
  try {
    const auto v = f();
    char buf[64];
    if constexpr (std::is_same_v<decltype(v), const Time>)
      std::snprintf(buf, sizeof buf, "%lld ps", static_cast<long long>(v.count_ps()));
    else
      std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
    return buf;
  } catch (const ParmError& e) {
    return std::string("error: ") + e.what();
  }
}

// Profiles that reach every branch: the built-in ones, and edited copies
// without an SM count, without fp32, with no or a tiny HBM rate, a tiny
// throughput, a huge launch floor, one SM.
std::vector<GpuProfile> profiles() {
  std::vector<GpuProfile> v(gpu_profiles().begin(), gpu_profiles().end());
  const GpuProfile h = gpu_profile("h100");
  auto edit = [&](auto f) {
    GpuProfile g = h;
    f(g);
    v.push_back(g);
  };
  edit([](GpuProfile& g) { g.sm_count = 0; });
  edit([](GpuProfile& g) { g.sm_count = 1; });
  edit([](GpuProfile& g) { g.peak_fp32 = 0; });
  edit([](GpuProfile& g) { g.hbm_bandwidth = 0; });
  edit([](GpuProfile& g) { g.hbm_bandwidth = 1e-3; });
  edit([](GpuProfile& g) { g.mem_efficiency = std::numeric_limits<double>::infinity(); });
  edit([](GpuProfile& g) { g.sustained_fp16 = 1e-6; });
  edit([](GpuProfile& g) {
    g.peak_bf16 = std::numeric_limits<double>::max();
    g.sustained_bf16 = 0;
  });
  edit([](GpuProfile& g) { g.launch = Time::ms(3'000'000'000); });
  return v;
}

}  // namespace

TEST_CASE("rate_duration: duration_for_rate for every accepted rate", "[closed_form][fast]") {
  std::mt19937_64 rng(7);
  std::vector<double> amounts = {0.0,
                                 -1.0,
                                 1e-300,
                                 1.0,
                                 2.0,
                                 3.0,
                                 1e6,
                                 1e12,
                                 9.2e6,
                                 1e300,
                                 std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::denorm_min()};
  std::vector<double> rates = {1.0,
                               1e12,
                               1e-12,
                               3.0,
                               7e11,
                               1e15,
                               1e-300,
                               std::numeric_limits<double>::max(),
                               std::numeric_limits<double>::denorm_min()};
  // Quotients just below, at and above integers, and around 2^52, 2^53 and 9.2e18 ps.
  for (double ps : {1.0, 2.0, 4503599627370496.0, 9007199254740992.0, 9.2e18, 9.2e6})
    for (double x : {ps, std::nextafter(ps, 0.0), std::nextafter(ps, 1e300)}) amounts.push_back(x / 1e12);
  std::uniform_real_distribution<double> e(-40, 40);
  for (int i = 0; i < 2000; ++i) amounts.push_back(std::floor(std::pow(10.0, e(rng) / 4)) * (1 + (i % 3) * 0.5));
  for (int i = 0; i < 200; ++i) rates.push_back(std::pow(10.0, e(rng)));
  int n = 0;
  for (double a : amounts)
    for (double r : rates) {
      if (!gemm_detail::usable_rate(r)) continue;
      REQUIRE(outcome([&] { return gemm_detail::rate_duration(a, r); }) ==
              outcome([&] { return duration_for_rate(a, r); }));
      ++n;
    }
  CHECK(n > 400000);
  CHECK(!gemm_detail::usable_rate(0.0));
  CHECK(!gemm_detail::usable_rate(std::numeric_limits<double>::infinity()));
  CHECK(!gemm_detail::usable_rate(std::nan("")));
}

TEST_CASE("fast_compute_time: model_compute_time bit for bit", "[closed_form][fast]") {
  std::mt19937_64 rng(11);
  // Dimensions across the inline case's bounds (2^32 - 1 rows and columns, 511 batches) and past them.
  const std::vector<std::int64_t> sides = {
      -3, 0, 1, 2, 63, 64, 65, 127, 1000, 4096, 12345, (1LL << 32) - 1, 1LL << 32, (1LL << 40) + 5};
  const std::vector<std::int64_t> batches = {-1, 0, 1, 2, 7, 511, 512, 1LL << 30};
  auto side = [&] { return rng() % 3 ? static_cast<std::int64_t>(1 + rng() % 50000) : sides[rng() % sides.size()]; };
  int n = 0;
  for (const GpuProfile& g : profiles()) {
    const ComputeRates r(g);
    for (int i = 0; i < 3000; ++i) {
      const std::int64_t m = side(), nn = side(), k = side();
      const std::int64_t b = rng() % 3 ? static_cast<std::int64_t>(1 + rng() % 64) : batches[rng() % batches.size()];
      const auto dt = static_cast<DType>(rng() % 3);
      const std::uint64_t flops = rng() % 8 == 0 ? 0 : 2 * static_cast<std::uint64_t>(m) * nn * k * b;
      const std::uint64_t bytes = rng() % 8 == 0 ? 0 : (rng() % 2 ? rng() % 1000 : rng() >> (rng() % 64));
      const auto op = rng() % 4 == 0 ? static_cast<OpKind>(rng() % 9) : OpKind::gemm;
      const std::int64_t sh[4] = {m, nn, k, b};
      for (std::size_t len : {std::size_t{0}, std::size_t{3}, std::size_t{4}}) {
        const std::span<const std::int64_t> shape(sh, len);
        const std::string want = outcome([&] { return model_compute_time(g, op, flops, bytes, dt, shape); });
        REQUIRE(outcome([&] { return fast_compute_time(r, op, flops, bytes, dt, shape); }) == want);
        ++n;
      }
      if (m >= 1) {
        REQUIRE(outcome([&] { return fast_gemm_time(r, flops, bytes, dt, m, nn, k, b); }) ==
                outcome([&] { return model_compute_time(g, OpKind::gemm, flops, bytes, dt, sh); }));
      }
      REQUIRE(outcome([&] { return fast_memory_time(r, bytes); }) ==
              outcome([&] { return memory_kernel_time(g, bytes); }));
    }
  }
  CHECK(n > 100000);
}

TEST_CASE("kernels_seconds with ComputeRates: the general sum bit for bit", "[closed_form][fast]") {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  std::vector<moe::ScheduleOptions> opts = moe::search_space();
  for (const std::string& p : moe::preset_names()) opts.push_back(moe::preset(p));
  const std::vector<GpuProfile> gpus = profiles();
  std::mt19937_64 rng(5);
  auto pick = [&](std::initializer_list<std::int64_t> v) { return *(v.begin() + rng() % v.size()); };
  int n = 0;
  for (int i = 0; i < 3000; ++i) {
    moe::LayerSpec s;
    s.B = pick({1, 2, 3, 8});
    s.L = pick({1, 7, 256, 1024});
    s.M = pick({1, 64, 100, 1024, 4096});
    s.H = s.M * pick({1, 4}) + pick({0, 8});
    s.E = pick({32, 64, 256});
    s.k = pick({1, 2, 4});
    s.mp = static_cast<int>(pick({1, 2, 4}));
    s.dtype = static_cast<DType>(rng() % 3);
    s.ds_moe = static_cast<moe::DsMoe>(rng() % 3);
    s.dispatch = rng() % 2 ? moe::Dispatch::einsum : moe::Dispatch::index;
    moe::Dims d;
    try {
      d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
    } catch (const ParmError&) {
      continue;
    }
    // Sizes make_dims would not give: GEMMs of zero rows, tiny buffers.
    if (rng() % 20 == 0) d.T_parm = pick({0, 1});
    if (rng() % 20 == 0) d.T_base = pick({0, 1});
    if (rng() % 20 == 0) d.dtype_bytes = static_cast<int>(pick({0, 1}));
    const moe::ScheduleOptions& o = opts[rng() % opts.size()];
    const GpuProfile& g = gpus[rng() % gpus.size()];
    const ComputeRates r(g);
    std::vector<moe::MoeOp> ops;
    try {
      ops = moe::forward_ops(s, d, o);
      const std::vector<moe::MoeOp> b = moe::backward_ops(ops, s, d, o);
      ops.insert(ops.end(), b.begin(), b.end());
    } catch (const ParmError&) {
      continue;
    }
    moe::MoeOp given{moe::MoeStep::kernel};  // a kernel given directly, with and without a shape
    given.kernel_op = rng() % 2 ? OpKind::gemm : OpKind::softmax;
    given.flops = rng() % 1000000;
    given.bytes = rng() % 1000000;
    if (rng() % 2) given.shape = {pick({0, 5, 300}), pick({1, 64}), pick({1, 77}), pick({1, 3})};
    ops.push_back(given);
    for (const moe::MoeOp& op : ops) {
      REQUIRE(outcome([&] { return moe::kernels_seconds(op, s, d, r); }) ==
              outcome([&] { return moe::kernels_seconds(op, s, d, g, nullptr); }));
      ++n;
    }
  }
  CHECK(n > 30000);
}
