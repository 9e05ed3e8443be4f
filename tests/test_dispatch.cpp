// MoE dispatch kernels (sim/moe/dispatch.hpp): the routing's counts, the bytes
// each kernel moves, times on small cases derived by hand, and the refusals.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <algorithm>
#include <numeric>

#include "sim/core/error.hpp"
#include "sim/moe/dispatch.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/dispatch_validation.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

Topology dgx(int nodes = 1) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {fmt::format("nodes={}", nodes)});
}

DispatchSpec small(int ranks, int experts, int topk, int tokens = 100, int hidden = 128) {
  DispatchSpec s;
  s.ranks = ranks;
  s.experts = experts;
  s.topk = topk;
  s.tokens = tokens;
  s.hidden = hidden;
  return s;
}

}  // namespace

TEST_CASE("dispatch routing: counts that follow from top-k alone", "[dispatch]") {
  // top-k = E: every token selects every expert, so with 2 ranks of 2 experts
  // each rank sends each rank T tokens, 2 selections apiece.
  const DispatchTraffic t = route_tokens(small(2, 4, 4, 100), 2);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      CHECK(t.rank_tokens[a * 2 + b] == 100);
      CHECK(t.selections[a * 2 + b] == 200);
    }
  CHECK(t.nodes == 1);
  CHECK(t.node_tokens[0] == 100);
  // Any routing: a rank's selections add up to T x k, and no count exceeds T.
  const DispatchTraffic u = route_tokens(small(8, 64, 6, 300), 4);
  for (int a = 0; a < 8; ++a) {
    std::uint64_t sel = 0;
    for (int b = 0; b < 8; ++b) {
      sel += u.selections[a * 8 + b];
      CHECK(u.rank_tokens[a * 8 + b] <= 300);
      CHECK(u.rank_tokens[a * 8 + b] <= u.selections[a * 8 + b]);
    }
    CHECK(sel == 300 * 6);
  }
}

TEST_CASE("dispatch routing: group limit keeps each token within its best nodes", "[dispatch]") {
  // 4 nodes of 1 rank, 8 experts, top-2 from 1 node: every token lands on one
  // node only, so its node count adds up to T exactly, and its rank count too.
  DispatchSpec s = small(4, 8, 2, 500);
  s.topk_groups = 1;
  const DispatchTraffic t = route_tokens(s, 1);
  for (int a = 0; a < 4; ++a) {
    std::uint64_t nodes = 0, sel = 0;
    for (int n = 0; n < 4; ++n) nodes += t.node_tokens[a * 4 + n], sel += t.selections[a * 4 + n];
    CHECK(nodes == 500);
    CHECK(sel == 1000);
  }
  // Without the limit, top-2 of 8 spread over 4 ranks reach two nodes with
  // probability 1 - 4 x C(2,2)/C(8,2) = 1 - 4/28: more node hits than tokens.
  s.topk_groups = 0;
  const DispatchTraffic u = route_tokens(s, 1);
  std::uint64_t hits = 0;
  for (int n = 0; n < 4; ++n) hits += u.node_tokens[n];
  CHECK(hits > 800);  // expected 500 x (1 + 24/28) = 928.6
}

TEST_CASE("dispatch routing: uniform draws match the hypergeometric law", "[dispatch]") {
  // DeepEP's EP8 case: 256 experts, 32 per rank, top-8. A token misses a given
  // rank with probability C(224,8)/C(256,8) = prod_{i<8} (224-i)/(256-i).
  const DispatchTraffic t = route_tokens(small(8, 256, 8, 4096, 7168), 8);
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (224.0 - i) / (256.0 - i);
  const double expected = 8 * 4096 * (1 - miss);  // tokens rank 0 receives, all sources
  double got = 0;
  for (int a = 0; a < 8; ++a) got += static_cast<double>(t.rank_tokens[a * 8]);
  CHECK(std::abs(got / expected - 1) < 0.01);  // 21.6k draws: sd about 0.3%
}

TEST_CASE("dispatch routing: a seed gives the same draws, another seed others", "[dispatch]") {
  DispatchSpec s = small(8, 64, 4, 200);
  const DispatchTraffic a = route_tokens(s, 8), b = route_tokens(s, 8);
  CHECK(a.selections == b.selections);
  CHECK(a.rank_tokens == b.rank_tokens);
  s.seed = 7;
  CHECK(route_tokens(s, 8).rank_tokens != a.rank_tokens);
}

TEST_CASE("dispatch deepep-normal within a node: bytes and time by hand", "[dispatch]") {
  // 2 ranks, 2 experts, top-2: each of rank a's 100 tokens goes once to the
  // other rank. Per token (intranode.cu): hidden 128 x 2 B + int64 top-k 2 x 8
  // + float weights 2 x 4 + int source index 4 = 284 B, so 28,400 B each way.
  const Topology topo = dgx();
  Workspace ws;
  const DispatchResult r = simulate_dispatch(topo, small(2, 2, 2), find_dispatcher("deepep-normal"), ws);
  CHECK(r.nodes == 1);
  CHECK(r.transfers == 2);
  CHECK(r.wire_nvl_bytes == 2 * 28400);
  CHECK(r.wire_rdma_bytes == 0);
  // One NVLink each way at 450 GB/s x 0.824 = 370.8 GB/s, alone on it:
  // 28,400 / 370.8e9 s = 76.59 ns, after the route's 2 x 0.2 us, plus the
  // GPU's 3 us launch floor: 3.47659 us.
  CHECK(r.dispatch.to_us() == Approx(3.0 + 0.4 + 28400 / 370.8e3).epsilon(1e-6));
  // DeepEP's NVL bytes for rank 0: it receives 100 tokens from each rank
  // (itself included) x 256 B = 51,200 B.
  REQUIRE(r.dispatch_nvl_bytes);
  CHECK(*r.dispatch_nvl_bytes == 51200);
  CHECK(!r.dispatch_rdma_bytes);
  CHECK(*r.dispatch_nvl_GBps == Approx(51200 / 1e9 / r.dispatch.to_seconds()));
  // Combine returns 256 + 4 + 2 x 4 = 268 B per token.
  CHECK(r.combine.to_us() == Approx(3.0 + 0.4 + 26800 / 370.8e3).epsilon(1e-6));
}

TEST_CASE("dispatch deepep-normal across nodes: one RDMA copy per node, forwarded over NVLink", "[dispatch]") {
  // 2 nodes of 8, 16 experts (1 per rank), top-16: every token goes to every
  // rank. RDMA: each rank sends its 10 tokens once to the other node's GPU of
  // its local index: 16 transfers of 10 x align16(256 + 8 + 16 x 4 + 16 x 4 = 392) = 10 x 400 B.
  // NVLink: each forwarder passes to each of its 7 node peers the tokens of the
  // 2 sources of its local index (itself and its peer across): 16 x 7
  // transfers of 20 x (256 + 16 x 4 + 16 x 4 + 8 = 392) B.
  const Topology topo = dgx(2);
  Workspace ws;
  const DispatchResult r = simulate_dispatch(topo, small(16, 16, 16, 10), find_dispatcher("deepep-normal"), ws);
  CHECK(r.nodes == 2);
  CHECK(r.transfers == 16 + 16 * 7);
  CHECK(r.wire_rdma_bytes == 16ULL * 10 * 400);
  CHECK(r.wire_nvl_bytes == 16ULL * 7 * 20 * 392);
  // DeepEP's RDMA bytes for rank 0: its 10 tokens x 2 nodes (its own
  // included) x 256 B = 5,120 B; NVL: 16 sources x 10 tokens x 256 B.
  CHECK(*r.dispatch_rdma_bytes == 5120);
  CHECK(*r.dispatch_nvl_bytes == 40960);
}

TEST_CASE("dispatch deepep-ll: pure RDMA, through the NICs even within a node", "[dispatch]") {
  // 2 ranks of one node, 2 experts, top-2: each token is one message to the
  // other rank, 16 + 128 x 2 = 272 B, 100 of them: 27,200 B. The path leaves
  // through GPU 0's PCIe switch and NIC, crosses rail 0, a spine and rail 1,
  // and enters GPU 1 the same way. Its slowest link is the rail switch's
  // uplink: a rail's uplinks carry its down bandwidth (oversubscription 1),
  // one node x 50 GB/s, over 2 spines = 25 GB/s each (PCIe: 64 x 0.75 = 48,
  // NICs 50). Latency 0.5 + 0.5 + 1 + 1 + 1 + 1 + 0.5 + 0.5 = 6 us; with the
  // 3 us floor: 9 us + 27,200 B / 25 GB/s = 10.088 us.
  const Topology topo = dgx();
  Workspace ws;
  const DispatchResult r = simulate_dispatch(topo, small(2, 2, 2), find_dispatcher("deepep-ll"), ws);
  CHECK(r.wire_rdma_bytes == 2 * 27200);
  CHECK(r.wire_nvl_bytes == 0);
  CHECK(r.dispatch.to_us() == Approx(9.0 + 27200 / 25e3).epsilon(1e-6));
  // The test's byte count: rank 0's 200 selections (its own expert included)
  // x hidden x 2 in bf16 = 51,200 B, put in the RDMA column.
  CHECK(*r.dispatch_rdma_bytes == 51200);
  CHECK(!r.dispatch_nvl_bytes);
}

TEST_CASE("dispatch deepep-ll-nvlink: NVLink within a node, RDMA across", "[dispatch]") {
  // The same 2-rank case as above over NVLink: 27,200 B at 370.8 GB/s after
  // 0.4 us, plus the 3 us floor.
  const Topology topo = dgx(2);
  Workspace ws;
  const DispatchResult r = simulate_dispatch(topo, small(2, 2, 2), find_dispatcher("deepep-ll-nvlink"), ws);
  CHECK(r.wire_nvl_bytes == 2 * 27200);
  CHECK(r.wire_rdma_bytes == 0);
  CHECK(r.dispatch.to_us() == Approx(3.4 + 27200 / 370.8e3).epsilon(1e-6));
  // 16 ranks on 2 nodes, 16 experts, top-16: each rank sends one message per
  // token to each of the 15 others, 7 of them within its node.
  const DispatchResult x = simulate_dispatch(topo, small(16, 16, 16, 10), find_dispatcher("deepep-ll-nvlink"), ws);
  CHECK(x.wire_nvl_bytes == 16ULL * 7 * 10 * 272);
  CHECK(x.wire_rdma_bytes == 16ULL * 8 * 10 * 272);
}

TEST_CASE("dispatch: DeepEP's fp8 byte counts", "[dispatch]") {
  // One token of 7168 in fp8 as DeepEP's tests count it: 7168 x 2 x (1 +
  // 4/128) / 2 = 7392 B; a low-latency message: 7168 + 56 x 4 + 16 = 7408 B
  // (the README's check: 128 x 8 x 7408 B / 77 us = 98.5 GB/s).
  const Topology topo = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/h800-cluster.yaml", {"nodes=1"});
  Workspace ws;
  DispatchSpec s = small(8, 8, 8, 4, 7168);  // each token to all 8 ranks
  s.dispatch_dtype = WireDtype::fp8;
  const DispatchResult n = simulate_dispatch(topo, s, find_dispatcher("deepep-normal"), ws);
  CHECK(*n.dispatch_nvl_bytes == 8 * 4 * 7392.0);
  const DispatchResult l = simulate_dispatch(topo, s, find_dispatcher("deepep-ll"), ws);
  CHECK(*l.dispatch_rdma_bytes == 4 * 8 * 7408.0);
}

TEST_CASE("dispatch nccl-alltoall: one copy per selection", "[dispatch]") {
  // top-2 of 2 experts on 2 ranks: each token's copy for the other rank,
  // 100 x 256 B each way, and the engine's AlltoAllv is slower than nothing.
  const Topology topo = dgx();
  Workspace ws;
  const DispatchResult r = simulate_dispatch(topo, small(2, 2, 2), find_dispatcher("nccl-alltoall"), ws);
  CHECK(r.wire_nvl_bytes == 2 * 25600);
  CHECK(r.dispatch.to_us() > 25600 / 370.8e3);
}

TEST_CASE("dispatch deepep-normal within a node: few SMs bind, many leave the links", "[dispatch]") {
  // 2 ranks, 2 experts, top-2, 10,000 tokens of hidden 1024 in bf16: every
  // token goes to both ranks, its own included. Per token (intranode.cu):
  // 2048 + 2 x 8 + 2 x 4 + 4 = 2076 B. Each rank's sending SMs copy
  // 2 x 10,000 x 2076 = 41.52 MB (its own copy included); its receiving SMs
  // the same. One H100 SM copies 36.7 GB/s (NCCL's Hopper perChMaxRingLL128Bw).
  const Topology topo = dgx();
  Workspace ws;
  const Dispatcher& d = find_dispatcher("deepep-normal");
  DispatchSpec s = small(2, 2, 2, 10000, 1024);
  CHECK(s.sms == 24);  // DeepEP's tests' default
  CHECK(sm_copy_rate(topo.gpu()) == 36.7e9);
  const double copied = 2.0 * 10000 * 2076;
  // 2 SMs: one sends, one receives: 41.52e6 / 36.7e9 s = 1131.3 us, plus the
  // GPU's 3 us floor; the links alone take 20.76 MB / 370.8 GB/s = 56 us.
  s.sms = 2;
  DispatchResult r = simulate_dispatch(topo, s, d, ws);
  CHECK(r.dispatch.to_us() == Approx(3.0 + copied / 36.7e3).epsilon(1e-6));
  // Combine copies the same tokens in bf16, without the top-k indices:
  // counted with the same per-token bytes (2076 B): the same time.
  CHECK(r.combine.to_us() == Approx(3.0 + copied / 36.7e3).epsilon(1e-6));
  // 24 SMs: 12 send, 41.52e6 / (12 x 36.7e9) s = 94.3 us, still above the links.
  s.sms = 24;
  r = simulate_dispatch(topo, s, d, ws);
  CHECK(r.dispatch.to_us() == Approx(3.0 + copied / (12 * 36.7e3)).epsilon(1e-6));
  // 132 SMs (all of an H100): 66 send, 17.1 us: the link-bound time, one
  // NVLink each way at 370.8 GB/s after the route's 0.4 us: 3 + 0.4 + 56 us.
  s.sms = 132;
  r = simulate_dispatch(topo, s, d, ws);
  CHECK(r.dispatch.to_us() == Approx(3.0 + 0.4 + 10000 * 2076 / 370.8e3).epsilon(1e-6));
  // The SMs do not touch the other kernels.
  const Dispatcher& ll = find_dispatcher("deepep-ll-nvlink");
  s.sms = 2;
  const Time few = simulate_dispatch(topo, s, ll, ws).dispatch;
  s.sms = 132;
  CHECK(simulate_dispatch(topo, s, ll, ws).dispatch == few);
}

TEST_CASE("dispatch deepep-normal across nodes: the forwarders' SMs", "[dispatch]") {
  // 2 nodes of 8, 16 experts, top-16 (every token to every rank), 1000
  // tokens of hidden 1024 in bf16, 2 SMs. Forwarder f copies the tokens of
  // the 2 sources of its local index to all 8 ranks of its node:
  // 2 x 1000 x 8 = 16,000 tokens x (2048 + 16 x 4 + 16 x 4 + 8 = 2184 B) =
  // 34.944 MB. The other SM: RDMA sends, 1000 tokens x 2 nodes x
  // align16(2048 + 8 + 128) = 2192 B (4.384 MB), and NVLink receives, 16 x
  // 1000 x 2184 B (34.944 MB): 39.328 MB, the busier, at 36.7 GB/s.
  const Topology topo = dgx(2);
  Workspace ws;
  DispatchSpec s = small(16, 16, 16, 1000, 1024);
  s.sms = 2;
  const DispatchResult r = simulate_dispatch(topo, s, find_dispatcher("deepep-normal"), ws);
  CHECK(r.dispatch.to_us() == Approx(3.0 + (1000.0 * 2 * 2192 + 16000.0 * 2184) / 36.7e3).epsilon(1e-6));
}

TEST_CASE("dispatch: DeepEP's SMs are even and on the GPU", "[dispatch]") {
  const Topology topo = dgx();
  Workspace ws;
  const Dispatcher& d = find_dispatcher("deepep-normal");
  for (int bad : {0, 3, 134}) {
    DispatchSpec s = small(2, 2, 2);
    s.sms = bad;
    CHECK_THROWS_WITH(simulate_dispatch(topo, s, d, ws),
                      Catch::Contains(fmt::format("--sms: DeepEP's normal kernels run on an even number of SMs "
                                                  "(channels of two), from 2 to the 132 of GPU 'h100'; got {}",
                                                  bad)));
  }
}

TEST_CASE("dispatch: a GPU profile without SMs has no SMs' bound", "[dispatch]") {
  // The cpu profile (sm_count 0) takes any even SM count, and the count does
  // not change its times.
  const Topology cpu = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/cpu-host.yaml");
  Workspace ws;
  const Dispatcher& d = find_dispatcher("deepep-normal");
  DispatchSpec s = small(2, 2, 2, 64);
  s.sms = 2;
  const DispatchResult few = simulate_dispatch(cpu, s, d, ws);
  s.sms = 200;
  const DispatchResult many = simulate_dispatch(cpu, s, d, ws);
  CHECK(few.dispatch == many.dispatch);
  CHECK(few.combine == many.combine);
}

TEST_CASE("dispatch validation: a row's stated SMs run DeepEP's rows only", "[dispatch]") {
  const auto rows = load_dispatch_measurements(std::string(PARMSIM_SOURCE_DIR) + "/validation/moe-dispatch.csv");
  int deepep16 = 0, hybrid4 = 0;
  for (const DispatchMeasurement& m : rows) {
    if (m.kernel_name.starts_with("deepep-normal") && m.sms == 16) {
      ++deepep16;
      CHECK(m.spec.sms == 16);
    }
    if (m.kernel_name.starts_with("hybrid-ep") && m.sms == 4) {
      ++hybrid4;
      CHECK(m.spec.sms == kDeepepTestSms);  // Hybrid-EP's SMs are not DeepEP's
    }
    if (m.sms == 0) CHECK(m.spec.sms == kDeepepTestSms);
  }
  // NVIDIA's tables: DeepEP at 16 SMs on B200 (fp8, bf16) and GB200 at 8, 16,
  // 24 ranks (2 rows each); Hybrid-EP at 4 SMs on H100 at 16, 32 and 64 ranks
  // (torch API and kernel only, fp8 and bf16: 12 rows).
  CHECK(deepep16 == 2 + 3 * 2);
  CHECK(hybrid4 == 12);
}

TEST_CASE("dispatch refusals name the option", "[dispatch]") {
  const Topology topo = dgx();
  Workspace ws;
  const Dispatcher& d = find_dispatcher("deepep-normal");
  auto refused = [&](const DispatchSpec& s, const char* what) {
    try {
      simulate_dispatch(topo, s, d, ws);
      FAIL("accepted");
    } catch (const UserError& e) {
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
  };
  refused(small(2, 4, 5), "--topk: 5 experts per token but only --experts 4");
  refused(small(4, 6, 2), "--experts: 6 experts do not divide among --ranks 4");
  refused(small(16, 16, 2), "--ranks: 16 ranks on topology 'dgx-h100' of 8 GPUs");
  CHECK_THROWS_WITH(find_dispatcher("deepep"),
                    "--kernel: unknown dispatcher 'deepep': expected deepep-normal, deepep-ll, deepep-ll-nvlink or "
                    "nccl-alltoall");
  const Topology a100 = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-a100.yaml");
  DispatchSpec s = small(2, 2, 2);
  s.dispatch_dtype = WireDtype::fp8;
  CHECK_THROWS_WITH(simulate_dispatch(a100, s, d, ws),
                    Catch::Contains("--dispatch-dtype: fp8 needs FP8 tensor cores; GPU 'a100'"));
  CHECK_NOTHROW(simulate_dispatch(topo, s, d, ws));  // H100 has them
}

TEST_CASE("dispatch validation: every row loads, and the published kernels are registered", "[dispatch]") {
  const auto rows = load_dispatch_measurements(std::string(PARMSIM_SOURCE_DIR) + "/validation/moe-dispatch.csv");
  CHECK(rows.size() == 226);
  for (const DispatchMeasurement& m : rows) {
    REQUIRE(m.kernel);
    if (!m.kernel->dispatcher.empty()) CHECK_NOTHROW(find_dispatcher(m.kernel->dispatcher));
  }
}

TEST_CASE("dispatch load models: a histogram routes by its counts", "[dispatch]") {
  // Every count on expert 0 (rank 0 of 2, 4 experts), top-1: each of the 2 x
  // 100 tokens selects expert 0. Experts: max 200 over mean 200/4 = 4; ranks:
  // rank 0 receives 200, mean 100: 2.
  DispatchSpec s = small(2, 4, 1);
  s.load.kind = LoadModel::Kind::histogram;
  s.load.weights = {5, 0, 0, 0};
  const DispatchTraffic t = route_tokens(s, 2);
  CHECK(t.selections == std::vector<std::uint64_t>{100, 0, 100, 0});
  CHECK(t.expert_tokens == std::vector<std::uint64_t>{200, 0, 0, 0});
  CHECK(t.expert_imbalance() == 4.0);
  CHECK(t.rank_imbalance() == 2.0);
  // Uniform on the same: 2 x 100 draws over 4 experts; imbalance near 1.
  CHECK(route_tokens(small(2, 4, 1, 4000), 2).expert_imbalance() < 1.1);
}

TEST_CASE("dispatch load models: zipf shares follow 1/i^s", "[dispatch]") {
  // 8 experts, top-1, exponent 1: the hottest expert's share is
  // 1 / (1 + 1/2 + ... + 1/8) = 1 / 2.717857 = 0.36794.
  DispatchSpec s = small(8, 8, 1, 5000);
  s.load = parse_load_model("zipf:1", "--load");
  const DispatchTraffic t = route_tokens(s, 8);
  const double top = static_cast<double>(*std::max_element(t.expert_tokens.begin(), t.expert_tokens.end())) / 40000;
  CHECK(std::abs(top - 0.36794) < 0.01);  // 40,000 draws: sd 0.0024
  CHECK(t.expert_imbalance() == Approx(top * 8));
  // The same seed, the same draws; with top-2 every token still takes 2 distinct experts.
  s.topk = 2;
  const DispatchTraffic a = route_tokens(s, 8), b = route_tokens(s, 8);
  CHECK(a.selections == b.selections);
  for (int r = 0; r < 8; ++r) {
    std::uint64_t sel = 0;
    for (int d = 0; d < 8; ++d) sel += a.selections[r * 8 + d];
    CHECK(sel == 5000 * 2);
    CHECK(a.rank_tokens[r * 8 + r] <= 5000);
  }
}

TEST_CASE("dispatch load models: a skewed load is slower, by its hot rank", "[dispatch]") {
  // 8 ranks of one H100 node, 64 experts, top-4. Within a node deepep-normal is
  // bound by the NVLink into the busiest rank, so the time grows with what the
  // hottest rank receives: Zipf 1.2 makes it several times the mean.
  const Topology topo = dgx();
  Workspace ws;
  DispatchSpec s = small(8, 64, 4, 2048, 1024);
  const DispatchResult u = simulate_dispatch(topo, s, find_dispatcher("deepep-normal"), ws);
  s.load = parse_load_model("zipf:1.2", "--load");
  const DispatchResult z = simulate_dispatch(topo, s, find_dispatcher("deepep-normal"), ws);
  CHECK(u.rank_imbalance < 1.05);
  CHECK(z.rank_imbalance > 1.5);
  // The independent bound: the NVLink into the busiest rank carries every
  // token the other ranks send it, 1024 x 2 + 8 x 4 + 4 x 4 + 4 = 2100 B each
  // (intranode.cu), at 370.8 GB/s, after 0.4 us and the 3 us floor. Zipf's
  // hot rank is that bottleneck all along: the time is the bound (within 2%).
  for (const DispatchSpec& x : {small(8, 64, 4, 2048, 1024), s}) {
    const DispatchTraffic t = route_tokens(x, 8);
    std::uint64_t most = 0;
    for (int b = 0; b < 8; ++b) {
      std::uint64_t in = 0;
      for (int a = 0; a < 8; ++a)
        if (a != b) in += t.rank_tokens[a * 8 + b];
      most = std::max(most, in);
    }
    const double bound_us = 3.4 + static_cast<double>(most) * 2100 / 370.8e3;
    const DispatchResult& r = x.load.kind == LoadModel::Kind::uniform ? u : z;
    CHECK(r.dispatch.to_us() >= bound_us * (1 - 1e-9));
    if (&r == &z) CHECK(r.dispatch.to_us() < bound_us * 1.02);
  }
  CHECK(z.dispatch > u.dispatch * 1.5);
}

TEST_CASE("dispatch load models: bad loads are refused naming --load", "[dispatch]") {
  CHECK_THROWS_WITH(parse_load_model("zipf:0", "--load"),
                    "--load zipf:0: the Zipf exponent must be a number above 0, got '0'");
  CHECK_THROWS_WITH(parse_load_model("zipf:-1.5", "--load"), Catch::Contains("must be a number above 0"));
  CHECK_THROWS_WITH(parse_load_model("zipf", "--load"), "--load zipf: expected zipf:EXPONENT, e.g. zipf:1.2");
  CHECK_THROWS_WITH(parse_load_model("nosuchfile.txt", "--load"), Catch::Contains("no such file can be found"));
  const Topology topo = dgx();
  Workspace ws;
  DispatchSpec s = small(2, 4, 2);
  s.load.kind = LoadModel::Kind::histogram;
  s.load.text = "h.txt";
  s.load.weights = {1, 2, 3};
  CHECK_THROWS_WITH(simulate_dispatch(topo, s, find_dispatcher("deepep-normal"), ws),
                    "--load h.txt: 3 counts, expected one per expert (--experts 4)");
  s.load.weights = {1, 0, 0, 0};
  CHECK_THROWS_WITH(simulate_dispatch(topo, s, find_dispatcher("deepep-normal"), ws),
                    "--load h.txt: 1 experts have tokens, fewer than --topk 2");
}
