// The closed form's inline kernel costs against the general paths they
// stand for, bit for bit and error for error (docs/performance.md,
// "Closed form"): rate_duration against duration_for_rate, model_compute_time's
// inline GEMM case against the tile search, kernels_seconds against kernel_time summed
// over kernels().
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "sim/calib/calibration.hpp"
#include "sim/coll/collective_cost.hpp"
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
  } catch (const UserError& e) {
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
      const std::string want = outcome([&] { return duration_for_rate(a, r); });
      REQUIRE(outcome([&] { return gemm_detail::rate_duration(a, r); }) == want);
      if (a > 0) REQUIRE(outcome([&] { return gemm_detail::positive_rate_duration(a, r); }) == want);
      ++n;
    }
  CHECK(n > 400000);
  CHECK(!gemm_detail::usable_rate(0.0));
  CHECK(!gemm_detail::usable_rate(std::numeric_limits<double>::infinity()));
  CHECK(!gemm_detail::usable_rate(std::nan("")));
}

TEST_CASE("model_compute_time: the inline GEMM case equals the tile search, bit for bit", "[closed_form][fast]") {
  std::mt19937_64 rng(11);
  // Dimensions across the inline case's bounds (2^31 rows and columns, 512 batches) and past them.
  const std::vector<std::int64_t> sides = {
      -3, 0, 1, 2, 63, 64, 65, 127, 1000, 4096, 12345, 1LL << 31, (1LL << 31) + 1, (1LL << 32) - 1, 1LL << 32,
      (1LL << 40) + 5, std::numeric_limits<std::int64_t>::min()};
  const std::vector<std::int64_t> batches = {-1, 0, 1, 2, 7, 511, 512, 513, 1LL << 30};
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
        // The general path: the search over every tile (gemm_time_general), or a memory kernel.
        const std::string want = outcome([&] {
          if (op == OpKind::host) return Time::zero();
          if (op == OpKind::gemm && (flops > 0 || len > 0)) return gemm_detail::gemm_time_general(g, flops, bytes, dt, shape);
          return memory_kernel_time(g, bytes);
        });
        REQUIRE(outcome([&] { return model_compute_time(r, op, flops, bytes, dt, shape); }) == want);
        REQUIRE(outcome([&] { return model_compute_time(g, op, flops, bytes, dt, shape); }) == want);
        ++n;
      }
      if (m >= 1) {
        REQUIRE(outcome([&] { return fast_gemm_time(r, r.sm_for(dt), flops, bytes, dt, m, nn, k, b); }) ==
                outcome([&] { return gemm_detail::gemm_time_general(g, flops, bytes, dt, m, nn, k, b); }));
      }
      REQUIRE(outcome([&] { return memory_kernel_time(r, bytes); }) ==
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
    } catch (const UserError&) {
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
    } catch (const UserError&) {
      continue;
    }
    moe::MoeOp given{moe::MoeStep::kernel};  // a kernel given directly, with and without a shape
    given.kernel_op = rng() % 2 ? OpKind::gemm : OpKind::softmax;
    given.flops = rng() % 1000000;
    given.bytes = rng() % 1000000;
    if (rng() % 2) given.shape = {pick({0, 5, 300}), pick({1, 64}), pick({1, 77}), pick({1, 3})};
    ops.push_back(given);
    for (const moe::MoeOp& op : ops)
      for (const bool backward : {false, true}) {
        moe::MoeOp as = op;
        as.backward = backward;
        // The general path: kernel_time of each of the copy's kernels (kernels(), one by one), summed in order.
        REQUIRE(outcome([&] { return moe::kernels_seconds(op, backward, s, d, r); }) == outcome([&] {
                  double sum = 0;
                  for (const moe::Kernel& k : moe::kernels(as, s, d))
                    sum += moe::kernel_time(k, s.dtype, g, nullptr, {}).to_seconds();
                  return sum;
                }));
        ++n;
      }
  }
  CHECK(n > 60000);
}

namespace {

// The closed form as sim/moe/closed_form.cpp wrote it before its fast paths
// (op lists as MoeOps, every kernel through kernel_time or compute_time,
// every collective through collective_time_s, the general path, on the groups it binds),
// from public functions only.
struct ReferenceModel {
  const moe::LayerSpec& s;
  const moe::Dims& d;
  const moe::ScheduleOptions& o;
  const moe::AlphaBeta& ab;
  const GpuProfile& gpu;
  bool ep_inter = ab.alpha_inter != ab.alpha_intra || ab.beta_inter != ab.beta_intra;
  mutable Workspace ws{};  // the general path's forms

  double a(bool inter) const { return inter ? ab.alpha_inter : ab.alpha_intra; }
  double b(bool inter) const { return inter ? ab.beta_inter : ab.beta_intra; }
  double ring(double n, int p, bool inter) const {
    if (p < 2) return 0;
    return (p - 1) * a(inter) + n * (p - 1) / p * b(inter);
  }
  enum Kind { kEp, kMp, kWorld };
  // The collective of this op on group 0 of its kind, as the closed form binds it.
  double planned(CollOp op, Kind kind, double n, const std::function<double()>& fallback) const {
    if (!ab.costs) return fallback();
    const int size = kind == kEp ? (d.P + d.G - 1) / d.G : d.G;
    if (kind != kWorld && size < 2) return 0;
    Collective c;
    c.op = op;
    if (kind == kEp)
      for (int r = 0; r < d.P; r += d.G) c.group.push_back(r);
    else if (kind == kMp)
      for (int r = 0; r < d.G; ++r) c.group.push_back(r);
    else
      for (int r = 0; r < d.P; ++r) c.group.push_back(r);
    c.algo = op == CollOp::alltoall ? o.a2a_algo : op == CollOp::saa ? s.saa_algo : "";
    c.inner = op == CollOp::saa ? d.G : 0;
    const Concurrent k = kind == kEp ? Concurrent{d.G, 1} : kind == kMp ? Concurrent{d.n_ep, d.G} : Concurrent{};
    return collective_time_s(c, *ab.topo, n, k, ws);
  }
  double measured(CollOp op, int p, bool inter, double n, double form) const {
    if (ab.calibration && p >= 2)
      if (const CalibratedCollective* e = ab.calibration->find(op, p, inter))
        return e->time(static_cast<std::uint64_t>(n)).to_seconds();
    return form;
  }
  double a2a(double n) const {
    if (d.n_ep < 2) return 0;
    return measured(CollOp::alltoall, d.n_ep, ep_inter, n,
                    planned(CollOp::alltoall, kEp, n, [&] { return ring(n, d.n_ep, ep_inter); }));
  }
  double ag(double n) const {
    return measured(CollOp::allgather, d.G, false, n,
                    planned(CollOp::allgather, kMp, n, [&] { return ring(n, d.G, false); }));
  }
  double rs(double n) const {
    return measured(CollOp::reducescatter, d.G, false, n,
                    planned(CollOp::reducescatter, kMp, n, [&] { return ring(n, d.G, false); }));
  }
  double ar(double n) const {
    return measured(CollOp::allreduce, d.G, false, n,
                    planned(CollOp::allreduce, kMp, n, [&] { return 2 * ring(n, d.G, false); }));
  }
  double ar_ep(double n) const {
    return measured(CollOp::allreduce, d.n_ep, ep_inter, n,
                    planned(CollOp::allreduce, kEp, n, [&] { return 2 * ring(n, d.n_ep, ep_inter); }));
  }
  double saa(double n) const {
    return planned(CollOp::saa, kWorld, n, [&] {
      const int W = d.n_ep;
      const double chunk = n / W;
      const double tx = a(ep_inter) + chunk * b(ep_inter);
      const double tg = d.G > 1 ? ab.alpha_intra + (d.G - 1) * chunk * ab.beta_intra : 0.0;
      double g_end = 0;
      for (int i = 0; i < W; ++i) g_end = std::max(i * tx, g_end) + tg;
      return std::max(g_end, (W - 1) * tx);
    });
  }
  double kernels(const moe::MoeOp& op) const {
    double t = 0;
    for (const moe::Kernel& k : moe::kernels(op, s, d)) {
      const std::string kind = ab.calibration ? (op.backward ? "bwd_" : "") + std::string(k.name) : std::string();
      t += moe::kernel_time(k, s.dtype, gpu, ab.calibration, kind).to_seconds();
    }
    return t;
  }
  double time(const std::vector<moe::MoeOp>& ops) const {
    const double bytes = d.dtype_bytes;
    double t = 0;
    for (const moe::MoeOp& op : ops) {
      const double n = static_cast<double>(op.elems) * bytes;
      switch (op.kind) {
        case moe::MoeStep::gate:
        case moe::MoeStep::order:
        case moe::MoeStep::iorder:
        case moe::MoeStep::experts:
        case moe::MoeStep::kernel:
        case moe::MoeStep::slot_slice: {
          double one = kernels(op);
          if (op.kind == moe::MoeStep::experts) {
            const double reps = static_cast<double>(moe::expert_repeats(s, d));
            one *= reps;
            if (op.allreduce_each) one += reps * ar(static_cast<double>(moe::expert_elems(op, s, d)) * bytes);
          }
          t += one;
          break;
        }
        case moe::MoeStep::a2a:
          t += a2a(n);
          break;
        case moe::MoeStep::ag:
          t += ag(n);
          break;
        case moe::MoeStep::rs:
          t += rs(n);
          break;
        case moe::MoeStep::ar:
          t += op.group == moe::GroupKind::ep ? ar_ep(n) : ar(n);
          break;
        case moe::MoeStep::saa:
          t += saa(n);
          break;
        case moe::MoeStep::rs_then: {
          const int ch = op.chunks;
          const double t1 = rs(n / ch);
          const double t2 = op.then == moe::MoeStep::saa ? saa(n / ch / d.G) : a2a(n / ch / d.G);
          t += t1 + (ch - 1) * std::max(t1, t2) + t2;
          break;
        }
        default:
          break;
      }
    }
    return t;
  }
};

// Collective and kernel tables that match some of the closed form's lookups.
Calibration test_calibration() {
  Calibration cal;
  for (const auto& [op, ranks, inter] : {std::tuple{CollOp::alltoall, 8, true}, std::tuple{CollOp::allgather, 4, false},
                                         std::tuple{CollOp::allreduce, 2, false}}) {
    CalibratedCollective e;
    e.op = op;
    e.ranks = ranks;
    e.inter = inter;
    e.alpha = Time::us(7);
    e.bandwidth = 20'000'000'000;
    e.points = {{1e4, 2e-5}, {1e7, 6e-4}};
    cal.collectives.push_back(e);
  }
  for (const char* name : {"expert_fc1", "bwd_expert_fc2_dgrad", "gate_gemm", "bwd_gating_bwd", "order"}) {
    KernelTable k;
    k.name = name;
    k.op = std::string(name).find("gat") != std::string::npos ? OpKind::topk : OpKind::gemm;
    k.dtype = DType::fp32;
    k.points = {{1e6, 1e-5}, {1e12, 1e-2}};
    k.alpha = 3e-6;
    k.beta = 1e-14;
    cal.kernels.push_back(k);
  }
  return cal;
}

}  // namespace

TEST_CASE("model_layer and model_time: the closed form as it was, bit for bit", "[closed_form][fast]") {
  std::vector<Topology> topos;
  for (const char* name : {"parm-32gpu", "h200-cluster", "dgx-a100", "pcie-8gpu"})
    topos.push_back(load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml"));
  std::vector<moe::ScheduleOptions> opts = moe::search_space();
  for (const std::string& p : moe::preset_names()) opts.push_back(moe::preset(p));
  {
    moe::ScheduleOptions x = moe::preset("s1");
    x.a2a_algo = "direct";
    opts.push_back(x);
    x.chunks = 0;  // an error from the op builder
    opts.push_back(x);
  }
  const std::vector<GpuProfile> gpus = profiles();
  const Calibration cal = test_calibration();
  std::mt19937_64 rng(3);
  auto pick = [&](std::initializer_list<std::int64_t> v) { return *(v.begin() + rng() % v.size()); };
  int n = 0, errors = 0;
  for (const Topology& t : topos) {
    const moe::AlphaBeta with_topo = moe::alpha_beta_from_topology(t);
    moe::AlphaBeta rings = with_topo;  // no topology: the ring forms
    rings.costs = nullptr;
    rings.topo = nullptr;
    moe::AlphaBeta calibrated = with_topo;
    calibrated.calibration = &cal;
    for (int i = 0; i < 700; ++i) {
      moe::LayerSpec s;
      s.B = pick({1, 2, 4, 8});
      s.L = pick({1, 128, 512, 1024});
      s.M = pick({64, 100, 1024, 4096});
      s.H = s.M * pick({1, 4}) + pick({0, 8});
      s.E = pick({8, 32, 64, 256});
      s.k = pick({1, 2});
      s.mp = static_cast<int>(pick({1, 2, 4, 8}));
      s.dtype = static_cast<DType>(rng() % 3);
      s.ds_moe = static_cast<moe::DsMoe>(rng() % 3);
      s.dispatch = rng() % 2 ? moe::Dispatch::einsum : moe::Dispatch::index;
      s.saa_algo = rng() % 3 ? "released" : "pipelined";
      moe::Dims d;
      try {
        d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
      } catch (const UserError&) {
        continue;
      }
      const moe::ScheduleOptions& o = opts[rng() % opts.size()];
      const GpuProfile& g = gpus[rng() % 3 == 0 ? rng() % gpus.size() : 0];
      const int which = static_cast<int>(rng() % 6);
      const moe::AlphaBeta& ab = which == 0 ? rings : which == 1 ? calibrated : with_topo;
      const ReferenceModel ref{s, d, o, ab, g};
      const std::string want_f = outcome([&] { return ref.time(moe::forward_ops(s, d, o)); });
      const std::string want_b = outcome([&] {
        const auto f = moe::forward_ops(s, d, o);
        return ref.time(moe::backward_ops(f, s, d, o));
      });
      std::string got_f, got_b;
      try {
        const moe::ModelTime m = moe::model_layer(s, d, o, ab, g);
        got_f = outcome([&] { return m.forward_s; });
        got_b = outcome([&] { return m.backward_s; });
      } catch (const UserError& e) {
        got_f = got_b = std::string("error: ") + e.what();
      }
      // model_layer throws the first error: the forward list's, else the backward's.
      const std::string first = want_f.rfind("error: ", 0) == 0 ? want_f : want_b;
      if (got_f.rfind("error: ", 0) == 0) {
        REQUIRE(got_f == first);
        ++errors;
      } else {
        REQUIRE(got_f == want_f);
        REQUIRE(got_b == want_b);
      }
      REQUIRE(outcome([&] { return moe::model_time(moe::forward_ops(s, d, o), s, d, o, ab, g); }) == want_f);
      REQUIRE(outcome([&] {
                const auto f = moe::forward_ops(s, d, o);
                return moe::model_time(moe::backward_ops(f, s, d, o), s, d, o, ab, g);
              }) == want_b);
      ++n;
    }
  }
  CHECK(n > 1500);
  CHECK(errors > 20);
}
