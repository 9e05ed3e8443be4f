// The closed form's fast paths give what the paths they replace give, bit for
// bit: NcclTuner against nccl_choose, BoundCollective against
// collective_time_s, model_layer's op lists and kernels against the
// std::vector ones (docs/performance.md, "Closed form").
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "sim/coll/collective_cost.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

Topology topo_named(const std::string& name, const std::vector<std::string>& set = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", set);
}

// The bundled topologies, and what-ifs whose hop latencies exceed NCCL's
// per-hop constants (so the machine's latencies enter the model's).
struct Named {
  std::string name;
  std::vector<std::string> set;
};
const std::vector<Named> kTunerTopologies = {
    {"parm-32gpu", {}},
    {"dgx-h100", {}},
    {"h200-cluster", {}},
    {"pcie-8gpu", {}},
    {"dgx-h100", {"nodes=2", "fabric.latency=1ms"}},
    {"dgx-h100", {"node.links.0.latency=1ms"}},
    {"parm-32gpu", {"fabric.latency=20us", "node.links.0.latency=3us"}},
};

std::vector<int> ranks(int first, int stride, int count) {
  std::vector<int> g;
  for (int i = 0; i < count; ++i) g.push_back(first + i * stride);
  return g;
}

// Sizes that cross every tree-correction bucket and the ring's plateau
// threshold: powers of two from 1 B to 16 GiB, their neighbours, odd values.
std::vector<double> sizes() {
  std::vector<double> v = {0.5, 1, 3, 63, 64, 65, 1000, 12345, 1e6 + 7, 3.3e9};
  for (int e = 0; e <= 34; ++e) {
    const double p = std::ldexp(1.0, e);
    v.push_back(p);
    v.push_back(p * 1.5);
    v.push_back(p - 1);
  }
  return v;
}

}  // namespace

TEST_CASE("NcclTuner chooses as nccl_choose does, bit for bit", "[coll][nccl][bound]") {
  int compared = 0;
  for (const Named& nm : kTunerTopologies) {
    const Topology t = topo_named(nm.name, nm.set);
    const int P = t.num_gpus() < 64 ? t.num_gpus() : 64;
    for (const std::vector<int>& g : {ranks(0, 1, 2), ranks(0, 1, t.gpus_per_node()), ranks(0, 1, P),
                                      ranks(0, t.gpus_per_node(), P / t.gpus_per_node())}) {
      if (g.size() < 2) continue;
      const NcclSystem s = nccl_system(g, t);
      for (CollOp op : {CollOp::allreduce, CollOp::allgather, CollOp::reducescatter}) {
        const NcclTuner tuner(op, s);
        for (double n : sizes()) {
          int i = -1;
          const NcclEstimate a = tuner.choose(n, &i);
          const NcclEstimate b = nccl_choose(op, s, n);
          CHECK(a.algo == b.algo);
          CHECK(a.proto == b.proto);
          CHECK(a.channels == b.channels);
          CHECK(a.lat_us == b.lat_us);  // exact: the same operations in the same order
          CHECK(a.bw_GBps == b.bw_GBps);
          CHECK(i >= 0);
          CHECK(i < tuner.size());
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 1000);
}

TEST_CASE("NcclTuner refuses what nccl_choose refuses, with its message", "[coll][nccl][bound]") {
  const Topology t = topo_named("parm-32gpu");  // no NVLink SHARP
  const NcclSystem s = nccl_system(ranks(0, 1, 4), t);
  std::string a, b;
  try {
    NcclTuner(CollOp::allreduce, s, NcclAlgo::nvls);
  } catch (const UserError& e) {
    a = e.what();
  }
  try {
    nccl_choose(CollOp::allreduce, s, 1e6, NcclAlgo::nvls);
  } catch (const UserError& e) {
    b = e.what();
  }
  CHECK_FALSE(a.empty());
  CHECK(a == b);
}

TEST_CASE("BoundCollective::time_s (compiled) equals collective_time_s (the general path)", "[coll][cost][bound]") {
  // 8 nodes of 4 GPUs; and with hop latencies above NCCL's constants (GPU -> switch -> CPU -> switch
  // -> GPU 3 + 0.5 + 0.5 + 3 = 7 us, GPU to GPU of another node 3 + 3 x 0.5 + 2 x 20 + 3 x 0.5 + 3
  // = 48 us), which the tuned collectives and send/recv then take.
  std::vector<double> tree_1k;  // a tree LL AllReduce of 1 KiB on each: the what-if is slower
  for (const std::vector<std::string>& set :
       {std::vector<std::string>{}, std::vector<std::string>{"fabric.latency=20us", "node.links.0.latency=3us"}}) {
    const Topology t = topo_named("parm-32gpu", set);
    const CollectiveCosts costs(t);
    Workspace ws;
    struct Case {
      CollOp op;
      std::vector<int> group;
      std::string algo, proto;
      int inner;
      Concurrent k;
    };
    const std::vector<Case> cases = {
        {CollOp::alltoall, ranks(0, 4, 8), "p2p", "", 0, {4, 1}},
        {CollOp::alltoall, ranks(0, 4, 8), "pairwise", "", 0, {}},
        {CollOp::allgather, ranks(0, 1, 4), "", "", 0, {8, 4}},
        {CollOp::reducescatter, ranks(0, 1, 4), "", "", 0, {8, 4}},
        {CollOp::allreduce, ranks(0, 1, 4), "", "", 0, {8, 4}},
        {CollOp::allreduce, ranks(0, 4, 8), "", "", 0, {4, 1}},
        {CollOp::allreduce, ranks(0, 1, 32), "tree", "", 0, {}},
        {CollOp::allreduce, ranks(0, 1, 32), "ring", "simple", 0, {}},
        {CollOp::allgather, ranks(0, 1, 32), "flat_ring", "", 0, {}},
        {CollOp::saa, ranks(0, 1, 32), "released", "", 4, {}},
        {CollOp::saa, ranks(0, 1, 32), "pipelined", "", 4, {}},
        {CollOp::allreduce, ranks(0, 1, 1), "", "", 0, {}},  // one member: always 0
    };
    for (const Case& x : cases) {
      Collective c;
      c.name = "c";
      c.op = x.op;
      c.group = x.group;
      c.algo = x.algo;
      c.proto = x.proto;
      c.inner = x.inner;
      const BoundCollective& b = costs.bound(c, x.k);
      CHECK(&costs.bound(c, x.k) == &b);  // one object per collective
      for (double n : sizes()) CHECK(b.time_s(n) == collective_time_s(c, t, n, x.k, ws));
      CHECK(b.time_s(0) == 0);
      CHECK(b.time_s(-5) == 0);
    }
    Collective tree;
    tree.name = "tree";
    tree.group = ranks(0, 1, 32);
    tree.algo = "tree";
    tree.proto = "ll";
    tree_1k.push_back(costs.bound(tree).time_s(1024));
    CHECK(tree_1k.back() == collective_time_s(tree, t, 1024, ws));
    // Another Concurrent is another binding.
    Collective c;
    c.op = CollOp::allgather;
    c.group = ranks(0, 1, 4);
    CHECK(&costs.bound(c, {8, 4}) != &costs.bound(c, {}));
    c.op = CollOp::alltoallv;
    CHECK_THROWS_AS(costs.bound(c), UserError);
  }
  // Tree LL, 32 ranks on 8 nodes: 2 (3 intra hops x max(1.0, 2 -> 7 us) + 3 network hops x max(5.0, 5 ->
  // 48 us)) = 42 -> 2 (21 + 144) = 330 us of hops: 288 us more.
  REQUIRE(tree_1k.size() == 2);
  CHECK((tree_1k[1] - tree_1k[0]) * 1e6 == Approx(288.0).epsilon(1e-6));
}

TEST_CASE("BoundCollective throws what time_s throws, and only when timed", "[coll][cost][bound]") {
  const Topology t = topo_named("parm-32gpu");
  const CollectiveCosts costs(t);
  Collective c;
  c.name = "bad";
  c.op = CollOp::allreduce;
  c.group = ranks(0, 1, 4);
  c.algo = "nvls";  // parm-32gpu has no NVLink SHARP
  const BoundCollective& b = costs.bound(c);  // binding resolves nothing
  CHECK(b.time_s(0) == 0);                    // nor does a zero size
  std::string a, want;
  try {
    collective_time_s(c, t, 1e6);
  } catch (const UserError& e) {
    want = e.what();
  }
  for (int i = 0; i < 2; ++i) {  // a failed resolution is retried, and fails again
    a.clear();
    try {
      b.time_s(1e6);
    } catch (const UserError& e) {
      a = e.what();
    }
    CHECK_FALSE(a.empty());
    CHECK(a == want);
  }
  c.algo = "";
  c.proto = "ll256";
  const BoundCollective& p = costs.bound(c);
  CHECK_THROWS_WITH(p.time_s(1e6), "collective 'bad': unknown protocol 'll256'; known: ll, ll128, simple");
}

TEST_CASE("BoundCollective: threads resolving and timing at once agree", "[coll][cost][bound]") {
  const Topology t = topo_named("parm-32gpu");
  const CollectiveCosts costs(t);
  Collective c;
  c.op = CollOp::allreduce;
  c.group = ranks(0, 1, 4);
  const std::vector<double> ns = sizes();
  std::vector<double> want;
  Workspace ws;
  for (double n : ns) want.push_back(collective_time_s(c, t, n, {8, 4}, ws));
  const CollectiveCosts fresh(t);  // nothing bound yet
  std::vector<int> bad(8, 0);
  std::vector<std::thread> th;
  for (int i = 0; i < 8; ++i)
    th.emplace_back([&, i] {
      const BoundCollective& b = fresh.bound(c, {8, 4});
      for (int r = 0; r < 20; ++r)
        for (std::size_t j = 0; j < ns.size(); ++j) {
          const std::size_t k = (j + static_cast<std::size_t>(i) * 7) % ns.size();
          if (b.time_s(ns[k]) != want[k]) ++bad[i];
        }
    });
  for (auto& x : th) x.join();
  for (int i = 0; i < 8; ++i) CHECK(bad[i] == 0);
}

TEST_CASE("closed form: OpList and kernel_list match the vector builders", "[moe][bound]") {
  const Topology t = topo_named("parm-32gpu");
  const GpuProfile& gpu = t.gpu();
  moe::LayerSpec s;
  for (int mp : {1, 2, 4})
    for (const std::string& name : moe::preset_names()) {
      s.mp = mp;
      const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
      const moe::ScheduleOptions o = moe::preset(name);
      const std::vector<moe::MoeOp> fwd = moe::forward_ops(s, d, o);
      const std::vector<moe::MoeOp> bwd = moe::backward_ops(fwd, s, d, o);
      moe::OpList f2, b2;
      moe::forward_ops(s, d, o, &f2);
      moe::backward_ops(std::span<const moe::MoeOp>(f2.data(), f2.size()), s, d, o, &b2);
      REQUIRE(f2.size() == fwd.size());
      REQUIRE(b2.size() == bwd.size());
      for (const auto& [v, w] : {std::pair{&fwd, &f2}, std::pair{&bwd, &b2}})
        for (std::size_t i = 0; i < v->size(); ++i) {
          const moe::MoeOp& a = (*v)[i];
          const moe::MoeOp& b = (*w)[i];
          CHECK(a.kind == b.kind);
          CHECK(a.backward == b.backward);
          CHECK(a.elems == b.elems);
          CHECK(a.tokens == b.tokens);
          CHECK(a.group == b.group);
          CHECK(a.chunks == b.chunks);
          CHECK(std::string(a.label) == b.label);
          const std::vector<moe::Kernel> ks = moe::kernels(a, s, d);
          const moe::KernelList kl = moe::kernel_list(a, s, d);
          REQUIRE(ks.size() == kl.size());
          double sum = 0;
          for (std::size_t j = 0; j < ks.size(); ++j) {
            CHECK(std::string(ks[j].name) == kl[j].name);
            CHECK(ks[j].flops == kl[j].flops);
            CHECK(ks[j].bytes == kl[j].bytes);
            sum += moe::kernel_time(ks[j], s.dtype, gpu, nullptr, {}).to_seconds();
          }
          CHECK(moe::kernels_seconds(a, a.backward, s, d, ComputeRates(gpu)) == sum);
        }
    }
}

TEST_CASE("plan_gemm: waves and tiles as integer arithmetic gives them", "[gemm][bound]") {
  // plan_gemm divides the tiles by the SM count in doubles; the quotient must
  // be the integer ceil(tiles / sm_count) for every tile shape it considers.
  GpuProfile g = gpu_profile("h200");
  int checked = 0;
  for (int sms : {1, 7, 108, 132, 148, 1000003})
    for (std::int64_t m : {1LL, 63LL, 64LL, 65LL, 4097LL, 123457LL, 1LL << 31})
      for (std::int64_t n : {1LL, 128LL, 129LL, 9999LL, 1LL << 20})
        for (std::int64_t batch : {1LL, 3LL, 1000LL}) {
          g.sm_count = sms;
          const GemmPlan p = plan_gemm(g, DType::fp16, {m, n, 64, batch});
          const std::int64_t tiles = (m + p.tile.m - 1) / p.tile.m * ((n + p.tile.n - 1) / p.tile.n) * batch;
          CHECK(p.tiles == tiles);
          CHECK(p.waves == (tiles + sms - 1) / sms);
          // No tile shape needs fewer per-SM FLOPs (waves * Tm * Tn; k is common).
          for (const TileShape& t : kCublasTiles) {
            const std::int64_t tt = (m + t.m - 1) / t.m * ((n + t.n - 1) / t.n) * batch;
            CHECK(static_cast<double>((tt + sms - 1) / sms) * t.m * t.n >=
                  static_cast<double>(p.waves) * p.tile.m * p.tile.n);
          }
          ++checked;
        }
  CHECK(checked == 6 * 7 * 5 * 3);
}
