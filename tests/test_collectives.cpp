#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <span>
#include <thread>
#include <tuple>

#include "sim/coll/collective_cost.hpp"
#include "sim/graph/algorithms.hpp"
#include "sim/coll/collective_plan.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/net/maxmin.hpp"
#include "sim/net/network_model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

// The topologies at line rate (every link class at efficiency 1), so the
// hand-derived figures below use the datasheet bandwidths.
Topology topo(const std::string& name) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml",
                       {"link_efficiency.nvlink=1", "link_efficiency.pcie=1", "link_efficiency.network=1"});
}

// One collective alone on its own stream; returns the simulated makespan.
SimResult run_one(const Topology& t, Collective c, const std::string& network) {
  int max_rank = 0;
  for (int r : c.group) max_rank = std::max(max_rank, r);
  TaskGraphBuilder b(max_rank + 1);
  b.add_stream_all("comm");
  c.name = "c";
  b.add_collective_tasks(c, "comm", "c");
  const TaskGraph g = std::move(b).build();
  return simulate(g, t, SimOptions{network});
}

Collective coll(CollOp op, std::vector<int> group, std::uint64_t bytes, std::string algo = "") {
  Collective c;
  c.op = op;
  c.group = std::move(group);
  c.bytes = bytes;
  c.algo = std::move(algo);
  return c;
}

std::vector<int> range(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

std::int64_t ceil_ps(std::uint64_t bytes, std::uint64_t bw) {
  // ceil(bytes * 1e12 / bw) without overflow for the sizes used here.
  const unsigned __int128 n = static_cast<unsigned __int128>(bytes) * 1'000'000'000'000ULL;
  return static_cast<std::int64_t>((n + bw - 1) / bw);
}

}  // namespace

TEST_CASE("flat ring allreduce on one NVSwitch matches 2(n-1)(alpha + S/(nB))", "[coll]") {
  // DGX H100: 8 GPUs on one NVSwitch, 450 GB/s each way, 0.2 us per link.
  // alpha = GPU -> NVSwitch -> GPU = 0.4 us. S = 64 MiB, n = 8: each of the
  // 2(n-1) = 14 steps moves S/8 = 8388608 B at 450 GB/s = 18641351.1 ps,
  // rounded up to 18641352 ps. Total = 14 * (400000 + 18641352) = 266578928 ps.
  const Topology t = topo("dgx-h100");
  const SimResult r = run_one(t, coll(CollOp::allreduce, range(8), 64ULL << 20, "flat_ring"), "analytical");
  CHECK(r.makespan.count_ps() == 14 * (400'000 + ceil_ps(8'388'608, 450'000'000'000ULL)));
  CHECK(r.makespan.count_ps() == 266'578'928);
  // The flow model agrees: in a ring every link carries one flow at a time.
  CHECK(run_one(t, coll(CollOp::allreduce, range(8), 64ULL << 20, "flat_ring"), "flow").makespan == r.makespan);
}

TEST_CASE("pairwise alltoall costs (p-1)(alpha + S/(pB))", "[coll]") {
  // Same NVSwitch, p = 8, S = 8 MiB per rank: 7 steps of 1 MiB at 450 GB/s.
  const Topology t = topo("dgx-h100");
  const SimResult r = run_one(t, coll(CollOp::alltoall, range(8), 8ULL << 20, "pairwise"), "analytical");
  CHECK(r.makespan.count_ps() == 7 * (400'000 + ceil_ps(1'048'576, 450'000'000'000ULL)));
}

TEST_CASE("two flows on one link each get half its bandwidth under flow", "[coll]") {
  // parm-32gpu, node 0: gpu0 -> gpu1 and gpu2 -> gpu1 share pcie0 -> gpu1 (13 GB/s).
  // 13 MB each at 6.5 GB/s = 2 ms, after the 1 us route latency.
  const Topology t = topo("parm-32gpu-p2p");
  TaskGraphBuilder b(3);
  b.add_stream_all("s0");
  b.add_stream_all("s1");
  Collective a = coll(CollOp::sendrecv, {0, 1}, 13'000'000, "direct");
  a.name = "a";
  Collective c = coll(CollOp::sendrecv, {2, 1}, 13'000'000, "direct");
  c.name = "b";
  b.add_collective_tasks(a, "s0", "a");
  b.add_collective_tasks(c, "s1", "b");
  const TaskGraph g = std::move(b).build();
  CHECK(simulate(g, t, {"flow"}).makespan == Time::us(2001));
  // The analytical model serializes them instead: the second transmits after
  // the first, 1 ms each at 13 GB/s, then 1 us latency: 2001 us as well.
  const SimResult an = simulate(g, t, {"analytical"});
  CHECK(an.makespan == Time::us(2001));
  CHECK(an.trace[0].end == Time::us(1001));
}

TEST_CASE("an inter-node alltoall is bound by the NICs", "[coll]") {
  // 32 GPUs, 8 nodes of 4, one 12.5 GB/s NIC per node (the P2P variant: without P2P and
  // GDR the switch uplink, shared with the intra-node traffic, binds first). S = 64 MiB per GPU:
  // each node sends 4 GPUs x S x 28/32 through its NIC = 234881024 B -> 18.79 ms.
  const Topology t = topo("parm-32gpu-p2p");
  const std::uint64_t S = 64ULL << 20;
  const double nic_bound_s = 4.0 * S * 28 / 32 / 12.5e9;
  const SimResult r = run_one(t, coll(CollOp::alltoall, range(32), S), "flow");
  CHECK(r.makespan.to_seconds() >= nic_bound_s);
  CHECK(r.makespan.to_seconds() <= nic_bound_s * 1.01 + 20e-6);
  CHECK(r.inter_node_bytes == 32 * 28 * (S / 32));
  CHECK(r.intra_node_bytes == 32 * 3 * (S / 32));
}

TEST_CASE("busbw never exceeds the bottleneck link of a GPU", "[coll]") {
  struct Case {
    const char* topo;
    double gpu_link;  // fastest link out of a GPU, bytes/s
  };
  for (const Case& k : {Case{"parm-32gpu", 13e9}, Case{"dgx-h100", 450e9}, Case{"pcie-8gpu", 13e9}}) {
    // NVLS AllReduce reduces in the switch: each GPU link carries (p+1)/p of S each
    // way instead of a ring's 2(p-1)/p, so bus bandwidth may reach link x 2(p-1)/(p+1).
    const Topology t = topo(k.topo);
    const int p = t.num_gpus();
    for (CollOp op : {CollOp::allreduce, CollOp::allgather, CollOp::reducescatter, CollOp::alltoall})
      for (const char* net : {"analytical", "flow"}) {
        INFO(k.topo << " " << to_string(op) << " " << net);
        const std::uint64_t S = 256ULL << 20;
        const SimResult r = run_one(t, coll(op, range(p), S), net);
        const double busbw = S / r.makespan.to_seconds() * busbw_factor(op, p);
        const double bound =
            op == CollOp::allreduce && t.hints().nvls ? k.gpu_link * 2.0 * (p - 1) / (p + 1) : k.gpu_link;
        CHECK(busbw <= bound);
        CHECK(busbw > 0.05 * k.gpu_link / p);  // and it is not absurdly slow
      }
  }
}

TEST_CASE("hierarchical and flat algorithms move the same bytes per rank", "[coll]") {
  const Topology t = topo("parm-32gpu");
  const std::uint64_t S = 32ULL << 20;
  for (CollOp op : {CollOp::allgather, CollOp::reducescatter}) {
    const SimResult flat = run_one(t, coll(op, range(32), S, "flat_ring"), "flow");
    const SimResult hier = run_one(t, coll(op, range(32), S, "hierarchical"), "flow");
    // Each rank sends (p-1)/p * S in both; the hierarchical one sends less across nodes:
    // flat ring crosses a node boundary at 8 of 32 hops; hierarchical only in its inter phase.
    CHECK(flat.intra_node_bytes + flat.inter_node_bytes == hier.intra_node_bytes + hier.inter_node_bytes);
    CHECK(hier.makespan > Time::zero());
  }
}

TEST_CASE("SAA is never faster than its inter-node or its intra-node part", "[coll]") {
  const Topology t = topo("parm-32gpu");
  const std::uint64_t S = 16ULL << 20;  // AlltoAll input per rank
  // Inter part: AlltoAll among the 8 ranks with the same local index, S per rank.
  std::vector<int> outer;
  for (int n = 0; n < 8; ++n) outer.push_back(n * 4);
  const SimResult x = run_one(t, coll(CollOp::alltoall, outer, S), "flow");
  // Intra part: AllGather of S per rank in a node of 4 (output 4S), as the SAA runs it: sends
  // to each peer ("direct"). NCCL's ring AllGather of the same bytes is slower on this server
  // without P2P (the SHM ring's extra step, docs/collectives.md section 5, which send/recv does
  // not pay: 20.7 ms against 15.5 ms at 64 MiB), so it is not the bound.
  const SimResult gth = run_one(t, coll(CollOp::allgather, {0, 1, 2, 3}, 4 * S, "direct"), "flow");
  for (const char* algo : {"", "released", "pipelined"}) {
    INFO("algo '" << algo << "'");
    Collective s = coll(CollOp::saa, range(32), S, algo);
    s.inner = 4;
    const SimResult saa = run_one(t, s, "flow");
    CHECK(saa.makespan >= x.makespan);
    CHECK(saa.makespan >= gth.makespan);
    // Across nodes both send 7/8 S per rank: the rail-wise one 7 chunks of
    // S/8 to the same-index ranks, the released one 28 chunks of S/32.
    CHECK(saa.inter_node_bytes == 32 * 7 * (S / 8));
    CHECK(saa.inter_node_bytes == 32 * 28 * (S / 32));
    if (std::string(algo) == "pipelined") {
      // The gather sends S to each of 3 peers.
      CHECK(saa.intra_node_bytes == 32 * 3 * S);
    } else {
      // The same gather, plus the AlltoAll's 3 chunks of S/32 to the rank's own node.
      CHECK(saa.intra_node_bytes == 32 * 3 * S + 32 * 3 * (S / 32));
    }
  }
}

TEST_CASE("algorithms that do not apply are rejected", "[coll]") {
  const Topology t = topo("dgx-h100");
  CHECK_THROWS_WITH(run_one(t, coll(CollOp::alltoall, range(8), 1 << 20, "flat_ring"), "flow"),
                    Catch::Contains("'flat_ring' does not implement alltoall"));
  CHECK_THROWS_WITH(run_one(t, coll(CollOp::allreduce, range(8), 1 << 20, "butterfly"), "flow"),
                    Catch::Contains("unknown algorithm 'butterfly'"));
}

// ---------------------------------------------------------------------------
// The released SAA plan and the closed form derived from plans.

namespace {

Collective saa(int p, int inner, std::uint64_t bytes, std::string algo = "") {
  Collective c = coll(CollOp::saa, range(p), bytes, std::move(algo));
  c.inner = inner;
  return c;
}

double cf(const Topology& t, const Collective& c) { return make_cost_form(c, t).time_s(static_cast<double>(c.bytes)); }

}  // namespace

TEST_CASE("saa defaults to the released kernel's plan; pipelined stays available", "[coll][saa]") {
  CHECK(default_algorithm(CollOp::saa) == "released");
  const auto names = algorithm_names();
  CHECK(std::find(names.begin(), names.end(), "released") != names.end());
  CHECK(std::find(names.begin(), names.end(), "pipelined") != names.end());
  const Topology t = topo("dgx-h100");
  CHECK_THROWS_WITH(make_plan(saa(8, 4, 1 << 20, "flat_ring"), t), Catch::Contains("'flat_ring' does not implement saa"));
  CHECK_THROWS_WITH(make_plan(saa(8, 3, 1 << 20), t), Catch::Contains("inner group size dividing"));
}

TEST_CASE("the released SAA plan: p-1 AlltoAll rounds and p gather rounds of n/p", "[coll][saa]") {
  // parm-32gpu: P = 32 ranks, G = 4 (one node each block), n = 32 MiB, chunk n/P = 1 MiB.
  const Topology t = topo("parm-32gpu");
  const int P = 32, G = 4;
  const std::uint64_t n = 32ULL << 20, chunk = n / P;
  const CollPlan plan = make_plan(saa(P, G, n), t);
  // Steps: x[i][m] = i*P + m (AlltoAll chain, W = P rounds), then g[i][m] = P*P + i*P + m.
  REQUIRE(plan.steps.size() == static_cast<std::size_t>(2 * P * P));
  std::vector<int> a2a_per_round(P, 0), gather_per_round(P, 0);
  std::uint64_t intra = 0, inter = 0;
  for (const CollXfer& x : plan.xfers) {
    CHECK(x.bytes == chunk);
    CHECK(x.src != x.dst);
    if (x.send_step < P * P) {
      const int i = x.send_step / P, m = x.send_step % P;
      CHECK(m == x.src);
      CHECK(x.dst == (m + i) % P);  // round i: to rank+i
      CHECK(x.recv_step == i * P + x.dst);
      ++a2a_per_round[i];
    } else {
      const int i = (x.send_step - P * P) / P, m = (x.send_step - P * P) % P;
      CHECK(m == x.src);
      CHECK(x.dst / G == m / G);  // to the caller's block
      CHECK(x.recv_step == P * P + i * P + x.dst);
      ++gather_per_round[i];
    }
    (t.same_node(x.src, x.dst) ? intra : inter) += x.bytes;
  }
  CHECK(a2a_per_round[0] == 0);  // round 0 is the self copy
  for (int i = 1; i < P; ++i) CHECK(a2a_per_round[i] == P);
  for (int i = 0; i < P; ++i) CHECK(gather_per_round[i] == P * (G - 1));
  // Dependencies: g[i] on x[i] and g[i-1]; the last gather on x[P-1] only.
  for (int m = 0; m < P; ++m) {
    const CollStep& g0 = plan.steps[P * P + m];
    CHECK(g0.num_deps() == 1);
    CHECK(g0.deps[0] == m);
    const CollStep& g5 = plan.steps[P * P + 5 * P + m];
    CHECK(g5.num_deps() == 2);
    CHECK(g5.deps[0] == 5 * P + m);
    CHECK(g5.deps[1] == P * P + 4 * P + m);
    const CollStep& last = plan.steps[P * P + (P - 1) * P + m];
    CHECK(last.num_deps() == 1);
    CHECK(last.deps[0] == (P - 1) * P + m);
  }
  // By hand: AlltoAll, per rank 3 chunks stay in the node and 28 leave it;
  // gather, per rank P chunks to 3 node peers. Intra = 32*3*1 MiB + 32*32*3*1 MiB
  // = 96 MiB + 3072 MiB; inter = 32*28*1 MiB = 896 MiB (= the rail-wise 32*7*(n/8)).
  CHECK(intra == 3168ULL << 20);
  CHECK(inter == 896ULL << 20);
  const SimResult r = run_one(t, saa(P, G, n), "analytical");
  CHECK(r.intra_node_bytes == intra);
  CHECK(r.inter_node_bytes == inter);
  CHECK(r.transfers == static_cast<std::uint64_t>(plan.xfers.size()));
}

TEST_CASE("closed form by hand: ring, pairwise and direct on one NVSwitch", "[coll][cost]") {
  // DGX H100: every GPU pair is GPU -> NVSwitch -> GPU, alpha = 2 x 0.2 us =
  // 0.4 us, 450 GB/s per direction; the NVSwitch itself has no shared link.
  const Topology t = topo("dgx-h100");
  const double a = 0.4e-6, B = 450e9;
  // Ring AllReduce, S = 64 MiB, p = 8: 2(p-1) = 14 rounds of S/8 = 8 MiB, one
  // transfer per link: 14 * (0.4 us + 8388608 / 450e9) = 14 * 19.0413511 us = 266.578916 us.
  CHECK(cf(t, coll(CollOp::allreduce, range(8), 64ULL << 20, "flat_ring")) ==
        Approx(14 * (a + 8388608.0 / B)).epsilon(1e-9));
  CHECK(cf(t, coll(CollOp::allreduce, range(8), 64ULL << 20, "flat_ring")) == Approx(266.578916e-6).epsilon(1e-8));
  // Ring AllGather, S = 8 MiB (output), p = 8: 7 rounds of 1 MiB = 7 * (0.4 us + 2.3302 us) = 19.1114 us.
  CHECK(cf(t, coll(CollOp::allgather, range(8), 8ULL << 20, "flat_ring")) == Approx(7 * (a + 1048576.0 / B)).epsilon(1e-9));
  // Pairwise AlltoAll, S = 8 MiB per rank: 7 rounds, each rank sends 1 MiB and
  // receives 1 MiB: 7 * (0.4 + 2.3302) us.
  CHECK(cf(t, coll(CollOp::alltoall, range(8), 8ULL << 20, "pairwise")) ==
        Approx(7 * (a + 1048576.0 / B)).epsilon(1e-9));
  // Direct AlltoAll: one round; each GPU's uplink and downlink carry 7 x 1 MiB:
  // 0.4 us + 7340032 / 450e9 = 0.4 + 16.3112 us = 16.7112 us.
  CHECK(cf(t, coll(CollOp::alltoall, range(8), 8ULL << 20, "direct")) == Approx(a + 7 * 1048576.0 / B).epsilon(1e-9));
  // Direct with window 2: rounds of offsets {1,2},{3,4},{5,6},{7}: 3 x (a + 2 MiB/B) + (a + 1 MiB/B).
  Collective w = coll(CollOp::alltoall, range(8), 8ULL << 20, "direct");
  w.window = 2;
  CHECK(cf(t, w) == Approx(3 * (a + 2 * 1048576.0 / B) + (a + 1048576.0 / B)).epsilon(1e-9));
  // SendRecv of 450 MB: 0.4 us + 1 ms.
  CHECK(cf(t, coll(CollOp::sendrecv, {0, 1}, 450'000'000, "direct")) == Approx(0.4e-6 + 1e-3).epsilon(1e-9));
}

TEST_CASE("closed form by hand: PCIe ring and hierarchical AllReduce across NICs", "[coll][cost]") {
  // parm-32gpu: in a node GPU -> pcie0 -> GPU (2 x 0.5 us, 13 GB/s); across
  // nodes GPU -> pcie0 -> cpu0 -> nic0 -> switch -> nic -> cpu -> pcie -> GPU:
  // 6 x 0.5 us + 2 x 1 us = 5 us, bottleneck the 12.5 GB/s NIC.
  const Topology t = topo("parm-32gpu-p2p");
  REQUIRE(t.route(0, 1).latency == Time::us(1));
  REQUIRE(t.route(0, 4).latency == Time::us(5));
  const double ai = 1e-6, Bi = 13e9, ax = 5e-6, Bx = 12.5e9;
  // Ring AllGather in node 0, S = 4 MiB: 3 rounds of 1 MiB, one transfer per
  // link: 3 * (1 us + 1048576 / 13e9) = 3 * 81.6597 us = 244.979 us.
  CHECK(cf(t, coll(CollOp::allgather, {0, 1, 2, 3}, 4ULL << 20, "flat_ring")) ==
        Approx(3 * (ai + 1048576.0 / Bi)).epsilon(1e-9));
  // Flat ring AllGather over 32 ranks, S = 32 MiB: 31 rounds of 1 MiB; in each
  // round one transfer per node crosses the NIC (slowest: 5 us + 1 MiB / 12.5 GB/s = 88.886 us).
  CHECK(cf(t, coll(CollOp::allgather, range(32), 32ULL << 20, "flat_ring")) ==
        Approx(31 * (ax + 1048576.0 / Bx)).epsilon(1e-9));
  // Hierarchical AllReduce, S = 32 MiB, 8 nodes x G = 4:
  //   intra reduce-scatter: 3 rounds of S/4 = 8 MiB: 3 * (1 us + 8388608 / 13e9) = 3 * 646.277 us
  //   rails: 4 rings of 8 ranks, 2 * 7 = 14 rounds of S/32 = 1 MiB; the 4 rails
  //          of a node share its NIC: 4 MiB / 12.5 GB/s per round: 14 * (5 us + 335.544 us)
  //   intra all-gather: as the first phase.
  // Total = 6 * 646.277 + 14 * 340.544 = 3877.66 + 4767.62 = 8645.28 us.
  const double hier = 6 * (ai + 8388608.0 / Bi) + 14 * (ax + 4 * 1048576.0 / Bx);
  CHECK(cf(t, coll(CollOp::allreduce, range(32), 32ULL << 20, "hierarchical")) == Approx(hier).epsilon(1e-9));
  CHECK(hier == Approx(8645.28e-6).epsilon(1e-5));
}

TEST_CASE("closed form by hand: both SAA algorithms on one NVSwitch", "[coll][cost][saa]") {
  // DGX H100, p = 8, G = 4 (blocks 0-3 and 4-7), S = 8 MiB per rank, B = 450 GB/s.
  // Every SAA transfer is an NCCL send/recv: a = NCCL's ring Simple base latency
  // 8.4 us + one NVLink Simple hop 3.4 us = 11.8 us.
  const Topology t = topo("dgx-h100");
  const double a = 11.8e-6, B = 450e9, S = 8.0 * 1048576;
  // released: chunk c = S/8 = 1 MiB. Round d = 1..7 carries AlltoAll round d
  // (1 chunk out, 1 in per rank) and the gather of chunk d-1 (3 out, 3 in):
  // 4 chunks per GPU link, T = a + 4c/B = 11.8 + 9.3207 = 21.1207 us. The
  // AlltoAll chain ends at 7T; gather i ends at (i+1)T (it waits for x[i] at
  // iT and for gather i-1 at iT); the last gather (3 chunks, T' = a + 3c/B =
  // 18.7905 us) waits for x[7] at 7T. Total = 7T + T' = 147.845 + 18.7905 = 166.6356 us.
  {
    const double c = S / 8, T = a + 4 * c / B, T1 = a + 3 * c / B;
    const CostForm f = make_cost_form(saa(8, 4, 8ULL << 20), t);
    CHECK(f.rounds == 8);
    CHECK(f.time_s(S) == Approx(7 * T + T1).epsilon(1e-9));
    CHECK(7 * T + T1 == Approx(166.6356e-6).epsilon(1e-5));
    CHECK(cf(t, saa(8, 4, 8ULL << 20, "released")) == f.time_s(S));
  }
  // pipelined (rail-wise): W = 8/4 = 2 rounds, chunk c = S/2 = 4 MiB. Round 1:
  // AlltoAll chunk to the same-index rank of the other block (1 chunk) and the
  // gather of chunk 0 (3 chunks): T = a + 4c/B = 11.8 + 37.2827 = 49.0827 us.
  // Round 2: the gather of chunk 1 (3 chunks): T' = a + 3c/B = 39.7620 us.
  // Total = T + T' = 88.8447 us.
  {
    const double c = S / 2, T = a + 4 * c / B, T1 = a + 3 * c / B;
    CHECK(cf(t, saa(8, 4, 8ULL << 20, "pipelined")) == Approx(T + T1).epsilon(1e-9));
    CHECK(T + T1 == Approx(88.8447e-6).epsilon(1e-5));
  }
}

TEST_CASE("closed form: trivial collectives cost nothing; the form is linear in n", "[coll][cost]") {
  const Topology t = topo("dgx-h100");
  CHECK(collective_time_s(coll(CollOp::allreduce, {3}, 1 << 20), t) == 0.0);
  CHECK(collective_time_s(coll(CollOp::allreduce, range(8), 0), t) == 0.0);
  CHECK(collective_time_s(saa(8, 4, 0), t) == 0.0);
  CHECK(collective_time_s(saa(4, 4, 0), t) == 0.0);
  // A collective whose plan has no transfers (SAA of one block of one rank each) costs 0.
  CHECK(collective_time_s(saa(1, 1, 1 << 20), t) == 0.0);
  // Ring: exactly alpha_total + beta_total * n.
  const Collective r = coll(CollOp::allreduce, range(8), 1 << 20, "flat_ring");
  const double t1 = collective_time_s(r, t, 1e6), t2 = collective_time_s(r, t, 2e6), t3 = collective_time_s(r, t, 3e6);
  CHECK(t3 - t2 == Approx(t2 - t1).epsilon(1e-9));
  CHECK(t1 - (t2 - t1) == Approx(14 * 0.4e-6).epsilon(1e-9));
  // AlltoAllv: the matrix as given (the bytes argument is ignored).
  Collective v = coll(CollOp::alltoallv, {0, 1}, 0, "pairwise");
  v.matrix = {{0, 450'000'000}, {0, 0}};
  CHECK(collective_time_s(v, t) == Approx(0.4e-6 + 1e-3).epsilon(1e-9));
}

namespace {

struct Agreement {
  const char* topo;
  Collective c;
  const char* label;
  bool contends;  // transfers of a round share a link
};

}  // namespace

TEST_CASE("closed form against the analytical simulation", "[coll][cost]") {
  const std::uint64_t M = 1ULL << 20;
  auto with = [](Collective c, int window, int inner) {
    c.window = window;
    c.inner = inner;
    return c;
  };
  const std::vector<Agreement> cases = {
      {"dgx-h100", coll(CollOp::allreduce, range(8), 64 * M, "flat_ring"), "ring allreduce p8", false},
      {"dgx-h100", coll(CollOp::allgather, range(8), 64 * M, "flat_ring"), "ring allgather p8", false},
      {"parm-32gpu", coll(CollOp::allgather, range(32), 32 * M, "flat_ring"), "ring allgather p32", false},
      {"parm-32gpu", coll(CollOp::allreduce, range(32), 32 * M, "flat_ring"), "ring allreduce p32", false},
      {"dgx-h100", coll(CollOp::alltoall, range(8), 64 * M, "pairwise"), "pairwise alltoall p8", false},
      {"parm-32gpu", coll(CollOp::alltoall, {0, 4, 8, 12, 16, 20, 24, 28}, 8 * M, "pairwise"),
       "pairwise alltoall rail p8", false},
      {"dgx-h100", coll(CollOp::sendrecv, {0, 5}, 64 * M, "direct"), "sendrecv", false},
      {"dgx-h100", coll(CollOp::alltoall, range(8), 64 * M, "direct"), "direct alltoall p8", true},
      {"dgx-h100", with(coll(CollOp::alltoall, range(8), 64 * M, "direct"), 2, 0), "direct w2 alltoall p8", true},
      {"parm-32gpu", coll(CollOp::alltoall, range(32), 32 * M, "direct"), "direct alltoall p32", true},
      {"parm-32gpu", coll(CollOp::alltoall, range(32), 32 * M, "pairwise"), "pairwise alltoall p32", true},
      {"parm-32gpu", coll(CollOp::allreduce, range(32), 32 * M, "hierarchical"), "hier allreduce p32", true},
      {"parm-32gpu", coll(CollOp::alltoall, range(32), 32 * M, "hierarchical"), "hier alltoall p32", true},
      {"pcie-8gpu", coll(CollOp::allreduce, range(8), 64 * M, "flat_ring"), "ring allreduce pcie8", true},
      {"dgx-h100", saa(8, 4, 8 * M, "released"), "saa released p8 G4", true},
      {"dgx-h100", saa(8, 4, 8 * M, "pipelined"), "saa pipelined p8 G4", true},
      {"parm-32gpu", saa(32, 4, 32 * M, "released"), "saa released p32 G4", true},
      {"parm-32gpu", saa(32, 4, 32 * M, "pipelined"), "saa pipelined p32 G4", true},
  };
  std::cout << "\n  closed form vs simulate(analytical), one collective alone:\n";
  for (const Agreement& k : cases) {
    const Topology t = topo(k.topo);
    const double form = collective_time_s(k.c, t);
    const double an = run_one(t, k.c, "analytical").makespan.to_seconds();
    const double fl = run_one(t, k.c, "flow").makespan.to_seconds();
    std::cout << fmt::format("  {:<26} {:<11} form {:>10.2f} us  analytical {:>10.2f} us ({:+6.2f}%)  flow {:>10.2f} us "
                             "({:+6.2f}%)\n",
                             k.label, k.topo, form * 1e6, an * 1e6, (form / an - 1) * 100, fl * 1e6,
                             (form / fl - 1) * 100);
    INFO(k.label << " on " << k.topo << ": form " << form << " s, analytical " << an << " s");
    if (!k.contends)
      CHECK(form == Approx(an).epsilon(0.01));
    else
      CHECK(form == Approx(an).epsilon(0.5));  // reported above; contention orders transfers differently
  }
}

TEST_CASE("the cost cache returns what a fresh evaluation does, across threads", "[coll][cost]") {
  const Topology t = topo("parm-32gpu");
  Workspace ws;
  const Collective a = saa(32, 4, 32ULL << 20);
  const Collective b = coll(CollOp::allreduce, range(32), 32ULL << 20, "hierarchical");
  const double fa = make_cost_form(a, t).time_s(32.0 * 1048576), fb = make_cost_form(b, t).time_s(32.0 * 1048576);
  CHECK(collective_time_s(a, t, ws) == fa);
  CHECK(collective_cost_cache_size(ws) == 1);
  CHECK(collective_time_s(a, t, ws) == fa);  // a hit
  CHECK(collective_cost_cache_size(ws) == 1);
  // The same key at another size: no new entry, and the fresh form's value.
  CHECK(collective_time_s(a, t, 5e6, ws) == make_cost_form(a, t).time_s(5e6));
  CHECK(collective_cost_cache_size(ws) == 1);
  // "" and the default algorithm's name are one key.
  Collective a2 = a;
  a2.algo = "released";
  CHECK(collective_time_s(a2, t, ws) == fa);
  CHECK(collective_cost_cache_size(ws) == 1);
  // Another algorithm, group or topology is another key.
  a2.algo = "pipelined";
  CHECK(collective_time_s(a2, t, ws) == make_cost_form(a2, t).time_s(32.0 * 1048576));
  CHECK(collective_cost_cache_size(ws) == 2);
  const Topology dgx = topo("dgx-h100");
  const Collective d = saa(8, 4, 32ULL << 20);
  CHECK(collective_time_s(d, dgx, ws) == make_cost_form(d, dgx).time_s(32.0 * 1048576));
  CHECK(collective_cost_cache_size(ws) == 3);
  CHECK(topology_fingerprint(t) == topology_fingerprint(topo("parm-32gpu")));
  CHECK(topology_fingerprint(t) != topology_fingerprint(dgx));
  // Another workspace keeps its own; a cleared one starts empty.
  Workspace other;
  CHECK(collective_cost_cache_size(other) == 0);
  ws.clear();
  CHECK(collective_cost_cache_size(ws) == 0);
  // Threads binding and timing through one CollectiveCosts at once agree
  // with the fresh values.
  const CollectiveCosts shared(t);
  std::vector<std::thread> th;
  std::vector<int> bad(8, 0);
  for (int i = 0; i < 8; ++i)
    th.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        if (shared.bound((i + k) % 2 ? a : b).time_s(32.0 * 1048576) != ((i + k) % 2 ? fa : fb)) ++bad[i];
      }
    });
  for (auto& x : th) x.join();
  for (int i = 0; i < 8; ++i) CHECK(bad[i] == 0);

  // Per call, bound and through the workspace (reported, loosely bounded).
  const BoundCollective& bound = shared.bound(a);
  const int N = 20000;
  double sink = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < N; ++k) sink += bound.time_s(1e6 + k);
  auto t1 = std::chrono::steady_clock::now();
  for (int k = 0; k < N; ++k) sink += collective_time_s(a, t, 1e6 + k, ws);
  auto t2 = std::chrono::steady_clock::now();
  const double per_bound = std::chrono::duration<double>(t1 - t0).count() / N;
  const double per_free = std::chrono::duration<double>(t2 - t1).count() / N;
  const auto s0 = std::chrono::steady_clock::now();
  const CostForm fresh = make_cost_form(a, t);
  const double build = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
  std::cout << fmt::format("\n  cost of saa p32 on parm-32gpu: bound {:.3f} us/call (BoundCollective), {:.3f} us/call "
                           "(collective_time_s, fingerprints the topology), fresh form {:.1f} us; {} envelope line(s)\n",
                           per_bound * 1e6, per_free * 1e6, build * 1e6, fresh.envelope.size());
  CHECK(sink > 0);
  CHECK(per_bound < 1e-4);
}

TEST_CASE("closed form: concurrent copies of a collective load the same links", "[coll][cost]") {
  // parm-32gpu: one 100 Gb/s (12.5 GB/s) NIC per node of 4 GPUs; a GPU-to-GPU
  // route across nodes has 6 links of 500 ns and 2 of 1 us: 5 us, bottleneck 12.5 GB/s.
  // Pairwise AlltoAll of n = 8 MiB over the EP group {0, 4, ..., 28} (one GPU
  // per node): 7 rounds, each member sends n/8 = 1 MiB to one peer per round.
  //   alone:     7 * (5 us + 1048576 / 12.5e9 s) = 7 * 88.88608 us = 622.20256 us
  //   4 copies (the EP groups {j, j+4, ...}, j = 0..3, all at once): each NIC
  //   carries 4 MiB per round: 7 * (5 us + 4194304 / 12.5e9 s) = 7 * 340.54432 = 2383.81024 us
  const Topology t = topo("parm-32gpu");
  std::vector<int> ep;
  for (int r = 0; r < 32; r += 4) ep.push_back(r);
  const Collective c = coll(CollOp::alltoall, ep, 8u << 20, "pairwise");
  Workspace ws;
  const double n = 8.0 * (1 << 20);
  CHECK(collective_time_s(c, t, n, ws) * 1e6 == Approx(622.20256).epsilon(1e-6));
  CHECK(collective_time_s(c, t, n, Concurrent{4, 1}, ws) * 1e6 == Approx(2383.81024).epsilon(1e-6));
  CHECK(collective_time_s(c, t, n, Concurrent{1, 0}, ws) == collective_time_s(c, t, n, ws));
  // The flow simulation of the four AlltoAlls side by side agrees.
  TaskGraphBuilder b(32);
  b.add_stream_all("comm");
  for (int j = 0; j < 4; ++j) {
    Collective x = c;
    for (int& r : x.group) r = r - ep[0] + j;
    x.name = fmt::format("a2a{}", j);
    b.add_collective_tasks(x, "comm", x.name);
  }
  const TaskGraph g = std::move(b).build();
  CHECK(simulate(g, t, SimOptions{"flow"}).makespan.to_us() == Approx(2383.81024).epsilon(0.01));
  // A copy outside the topology is refused.
  CHECK_THROWS_WITH(make_cost_form(c, t, Concurrent{8, 1}), Catch::Contains("outside the 32 GPUs"));
}

TEST_CASE("staggered flows: the second flow halves the first's rate from when it starts", "[coll][flow]") {
  // parm-32gpu, gpu0 -> gpu1 over pcie0 (13 GB/s, 1 us route latency). f1: 1.3 GB at t = 0;
  // f2: 1.3 GB on the same route, started at 50 ms. f1 alone from 1 us to 50.001 ms sends
  // 0.65 GB; both then share 6.5 GB/s: f1's remaining 0.65 GB takes 100 ms -> 150.001 ms;
  // f2 has sent 0.65 GB by then and finishes the rest alone at 13 GB/s: 200.001 ms.
  const Topology t = topo("parm-32gpu-p2p");
  auto net = make_network("flow", t);
  const Route r = t.route(0, 1);
  net->start(1, r, 1'300'000'000, Time::zero());
  net->start(2, r, 1'300'000'000, Time::ms(50));
  std::vector<std::uint64_t> done;
  std::vector<std::pair<std::uint64_t, Time>> finished;
  while (auto tn = net->next_completion()) {
    done.clear();
    net->complete(*tn, &done);
    for (auto id : done) finished.emplace_back(id, *tn);
  }
  REQUIRE(finished.size() == 2);
  CHECK(finished[0].first == 1);
  CHECK(finished[0].second.to_us() == Approx(150'001.0).epsilon(1e-9));
  CHECK(finished[1].first == 2);
  CHECK(finished[1].second.to_us() == Approx(200'001.0).epsilon(1e-9));
}

TEST_CASE("two collectives sharing a NIC each get half of it", "[coll][flow]") {
  // parm-32gpu: one 12.5 GB/s NIC per node. SendRecv 0 -> 4 and 1 -> 5 (direct) both cross
  // node 0's and node 1's NIC. 125 MB alone: 5 us + 125e6 / 12.5e9 = 10.005 ms; together each
  // gets 6.25 GB/s: 5 us + 20 ms = 20.005 ms for both.
  const Topology t = topo("parm-32gpu");
  const double alone = run_one(t, coll(CollOp::sendrecv, {0, 4}, 125'000'000, "direct"), "flow").makespan.to_us();
  CHECK(alone == Approx(10'005.0).epsilon(1e-6));
  TaskGraphBuilder b(6);
  b.add_stream_all("s0");
  b.add_stream_all("s1");
  Collective a = coll(CollOp::sendrecv, {0, 4}, 125'000'000, "direct");
  a.name = "a";
  Collective c = coll(CollOp::sendrecv, {1, 5}, 125'000'000, "direct");
  c.name = "b";
  b.add_collective_tasks(a, "s0", "a");
  b.add_collective_tasks(c, "s1", "b");
  const SimResult both = simulate(std::move(b).build(), t, {"flow"});
  CHECK(both.makespan.to_us() == Approx(20'005.0).epsilon(1e-6));
}

TEST_CASE("nccl-tests bus bandwidth factors per op", "[coll]") {
  // doc/PERFORMANCE.md: AllReduce 2(n-1)/n; AllGather, ReduceScatter, AlltoAll (n-1)/n; SendRecv 1.
  CHECK(busbw_factor(CollOp::allreduce, 8) == Approx(14.0 / 8));
  CHECK(busbw_factor(CollOp::allgather, 8) == Approx(7.0 / 8));
  CHECK(busbw_factor(CollOp::reducescatter, 16) == Approx(15.0 / 16));
  CHECK(busbw_factor(CollOp::alltoall, 4) == Approx(3.0 / 4));
  CHECK(busbw_factor(CollOp::sendrecv, 2) == Approx(1.0));
}

namespace {
// Runs transfers (src GPU, dst GPU, bytes, start) through one flow model and
// returns each one's completion time, by transfer index.
std::vector<Time> run_flows(const Topology& t, const std::vector<std::tuple<int, int, std::uint64_t, Time>>& xs) {
  auto net = make_network("flow", t);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto& [s, d, bytes, at] = xs[i];
    net->start(i, t.route(s, d), bytes, at);
  }
  std::vector<Time> end(xs.size(), Time::max());
  std::vector<std::uint64_t> done;
  while (auto tn = net->next_completion()) {
    done.clear();
    net->complete(*tn, &done);
    for (auto id : done) end[id] = *tn;
  }
  return end;
}
}  // namespace

TEST_CASE("flow model: many small components are each solved as if alone", "[coll][flow]") {
  // switch-1024: GPU 2k -> GPU 2k+1 crosses only GPU 2k's uplink and GPU 2k+1's
  // downlink, so each pair's flows are a component of their own. 512 pairs x 5
  // flows = 2560 in flight, above the 2048 the model solves globally, so it
  // searches components; pair k's flows run alone in a second model (5 flows:
  // a global solve). The two methods must agree to the picosecond.
  const Topology t = topo("switch-1024");
  std::mt19937 rng(5);
  std::vector<std::tuple<int, int, std::uint64_t, Time>> all;
  // A second wave starts at 2 ms, when the first is over (at most 5 flows of
  // 51 MB share a 450 GB/s link: under 0.6 ms), so the count of flows in flight
  // falls below 1024 and climbs past 2048 again: the model drops its per-link
  // member lists and rebuilds them.
  for (const Time wave : {Time::zero(), Time::ms(2)})
    for (int k = 0; k < 512; ++k)
      for (int j = 0; j < 5; ++j)
        all.emplace_back(2 * k, 2 * k + 1, 1'000'000 + rng() % 50'000'000, wave + Time::ns(rng() % 20'000));
  const std::vector<Time> together = run_flows(t, all);
  for (int k = 0; k < 1024; k += 37) {  // a sample of pairs of both waves: each alone
    const std::vector<std::tuple<int, int, std::uint64_t, Time>> one(all.begin() + 5 * k, all.begin() + 5 * k + 5);
    const std::vector<Time> alone = run_flows(t, one);
    for (int j = 0; j < 5; ++j) {
      CAPTURE(k, j);
      CHECK(together[5 * k + j] == alone[j]);
    }
  }
  // And by hand for a flow alone on its links: 450 GB/s links, 2 hops of 500 ns.
  // 45 MB: 1 us + 45e6 / 450e9 s = 1 us + 100 us = 101 us after its start.
  const std::vector<Time> single = run_flows(t, {{10, 11, 45'000'000, Time::zero()}});
  CHECK(single[0].count_ps() == 101'000'000);
}

TEST_CASE("flow model: flows join in (start + latency, start order), whatever the latencies and start times",
          "[coll][flow]") {
  // Empty flows complete the moment their latency has passed, so the order
  // they are reported in is the order the model takes them from its queue of
  // flows still waiting out their latency. The reference is an independent
  // stable sort by due time. Three cases: a few latencies, each in its own
  // lane, started in time order (as the engine does); 40 latencies (more than
  // the lanes: some wait in the overflow heap); and start times out of order
  // (a lane must not take a flow due before its last one).
  const Topology t = topo("parm-32gpu");
  std::mt19937 rng(11);
  for (const auto& [latencies, in_order] : {std::pair{3, true}, std::pair{40, true}, std::pair{5, false}}) {
    CAPTURE(latencies, in_order);
    auto net = make_network("flow", t);
    std::vector<std::pair<Time, std::uint64_t>> due;  // (start + latency, start order)
    Time now;
    for (std::uint64_t i = 0; i < 3000; ++i) {
      Route r = t.route(0, 1);
      r.latency = Time::ns(100 * static_cast<std::int64_t>(rng() % latencies));
      // Many starts share a time, so ties between lanes are common.
      const Time at = in_order ? (now += Time::ns(rng() % 3 == 0 ? 50 : 0)) : Time::ns(50 * (rng() % 200));
      net->start(i, r, 0, at);
      due.emplace_back(at + r.latency, i);
    }
    std::stable_sort(due.begin(), due.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::pair<Time, std::uint64_t>> got;
    std::vector<std::uint64_t> done;
    while (auto tn = net->next_completion()) {
      done.clear();
      net->complete(*tn, &done);
      for (auto id : done) got.emplace_back(*tn, id);
    }
    REQUIRE(got.size() == due.size());
    CHECK(got == due);
  }
}

TEST_CASE("max-min with many links and few flows per link (the heap) is fair and feasible", "[maxmin]") {
  // 1500 links and 900 flows of 1-3 random links: above 512 loaded links with
  // few flows per link, the solver keeps links in a heap. The result must have
  // the two defining properties of max-min fairness (checked independently):
  // no link over capacity, and every flow crosses a saturated link on which
  // no other flow has a larger rate.
  std::mt19937 rng(3);
  std::vector<double> cap(1500);
  for (double& c : cap) c = 1.0 + rng() % 100;
  std::vector<std::vector<int>> paths(900);
  for (auto& p : paths) {
    const int n = 1 + static_cast<int>(rng() % 3);
    while (static_cast<int>(p.size()) < n) {
      const int l = static_cast<int>(rng() % cap.size());
      if (std::find(p.begin(), p.end(), l) == p.end()) p.push_back(l);
    }
  }
  std::vector<std::span<const int>> spans;
  for (const auto& p : paths) spans.emplace_back(p);
  const std::vector<double> r = max_min_rates(cap, spans);
  std::vector<double> used(cap.size(), 0.0), top(cap.size(), 0.0);
  for (std::size_t f = 0; f < paths.size(); ++f)
    for (int l : paths[f]) used[l] += r[f], top[l] = std::max(top[l], r[f]);
  for (std::size_t l = 0; l < cap.size(); ++l) REQUIRE(used[l] <= cap[l] * (1 + 1e-12));
  for (std::size_t f = 0; f < paths.size(); ++f) {
    bool bottlenecked = false;
    for (int l : paths[f])
      bottlenecked = bottlenecked || (used[l] >= cap[l] * (1 - 1e-12) && r[f] >= top[l] * (1 - 1e-12));
    CAPTURE(f);
    CHECK(bottlenecked);
  }
}

namespace {
bool same_plan(const CollPlan& a, const CollPlan& b) {
  auto same_step = [](const CollStep& x, const CollStep& y) { return x.member == y.member && x.deps == y.deps; };
  auto same_xfer = [](const CollXfer& x, const CollXfer& y) {
    return x.src == y.src && x.dst == y.dst && x.bytes == y.bytes && x.send_step == y.send_step &&
           x.recv_step == y.recv_step && x.route == y.route && x.via == y.via && x.lat == y.lat;
  };
  return std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(), same_step) &&
         std::equal(a.xfers.begin(), a.xfers.end(), b.xfers.begin(), b.xfers.end(), same_xfer) &&
         a.routes == b.routes && a.latencies == b.latencies && a.barrier == b.barrier &&
         a.min_duration == b.min_duration && a.choice == b.choice;
}
}  // namespace

TEST_CASE("shared_plan: one plan per distinct input, the plan make_plan gives", "[coll][plan]") {
  const Topology t32 = topo("parm-32gpu"), t8 = topo("pcie-8gpu");
  const std::uint64_t k32 = topology_fingerprint(t32), k8 = topology_fingerprint(t8);
  REQUIRE(k32 != k8);
  Workspace ws;
  // Each differs from the first in one field a plan depends on.
  std::vector<Collective> cs;
  cs.push_back(coll(CollOp::allreduce, range(8), 1 << 20));
  cs.push_back(coll(CollOp::allreduce, range(8), 1 << 21));
  cs.push_back(coll(CollOp::allreduce, {0, 2, 4, 6, 1, 3, 5, 7}, 1 << 20));
  cs.push_back(coll(CollOp::allgather, range(8), 1 << 20));
  cs.push_back(coll(CollOp::allreduce, range(8), 1 << 20, "ring"));
  cs.push_back(cs.back()), cs.back().proto = "ll";
  cs.push_back(cs[4]), cs.back().channels = 2;
  cs.push_back(coll(CollOp::alltoall, range(8), 1 << 20));
  cs.push_back(cs.back()), cs.back().window = 2;
  cs.push_back(saa(8, 4, 1 << 20));
  cs.push_back(saa(8, 2, 1 << 20));
  cs.push_back(saa(8, 4, 1 << 20, "pipelined"));
  Collective v = coll(CollOp::alltoallv, range(4), 0);
  v.matrix.assign(4, std::vector<std::uint64_t>(4, 1000));
  cs.push_back(v);
  v.matrix[1][2] = 2000;
  cs.push_back(v);
  std::vector<std::shared_ptr<const CollPlan>> got;
  for (const Collective& c : cs) {
    got.push_back(shared_plan(c, t32, k32, ws));
    CHECK(same_plan(*got.back(), make_plan(c, t32)));
  }
  CHECK(plan_cache_size(ws) == cs.size());
  // The same inputs under another name (and other data bindings): the same plan.
  for (std::size_t i = 0; i < cs.size(); ++i) {
    Collective c = cs[i];
    c.name = "renamed";
    c.send_buf = "x";
    CHECK(shared_plan(c, t32, k32, ws) == got[i]);
  }
  CHECK(plan_cache_size(ws) == cs.size());
  // Another topology: its own plan.
  const auto p8 = shared_plan(cs[0], t8, k8, ws);
  CHECK(p8 != got[0]);
  CHECK(same_plan(*p8, make_plan(cs[0], t8)));
  CHECK(plan_cache_size(ws) == cs.size() + 1);
  // A plan that throws is not kept, and throws again.
  CHECK_THROWS_WITH(shared_plan(saa(8, 3, 1 << 20), t32, k32, ws), Catch::Contains("inner group size dividing"));
  CHECK_THROWS_WITH(shared_plan(saa(8, 3, 1 << 20), t32, k32, ws), Catch::Contains("inner group size dividing"));
  CHECK(plan_cache_size(ws) == cs.size() + 1);
  ws.clear();
  CHECK(plan_cache_size(ws) == 0);
}
