#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <functional>
#include <sstream>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/engine/trace_writer.hpp"
#include "sim/io/output.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {
// At line rate (every link class at efficiency 1): the hand-derived figures use datasheet bandwidths.
Topology topo(const std::string& name) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml",
                       {"link_efficiency.nvlink=1", "link_efficiency.pcie=1", "link_efficiency.network=1"});
}
}  // namespace

TEST_CASE("the cost of a memory-bound kernel; unsupported dtypes and unknown GPUs", "[compute]") {
  // GEMMs: tests/test_gemm.cpp. A 1 GB copy on an H100: 3 us floor + 1e9 B / (3.35e12 B/s *
  // 1355/1555 sustained) = 3 + 342.5676 = 345.5676 us.
  const Time m = compute_time(gpu_profile("h100"), OpKind::copy, 0, 1'000'000'000ULL, DType::fp16);
  CHECK(m.to_us() == Approx(345.5676).epsilon(1e-6));
  CHECK(compute_time(gpu_profile("h100"), OpKind::copy, 0, 0, DType::fp16) == Time::us(3));
  CHECK_THROWS_WITH(compute_time(gpu_profile("rtx2080ti"), OpKind::gemm, 1000, 0, DType::bf16),
                    Catch::Contains("does not support bf16"));
  CHECK_THROWS_WITH(gpu_profile("tpu"), Catch::Contains("unknown GPU profile 'tpu'"));
}

TEST_CASE("a stream runs in order; different streams overlap", "[engine]") {
  const Topology t = topo("dgx-h100");
  const Time k = compute_time(gpu_profile("h100"), OpKind::copy, 0, 64 << 20, DType::fp32);
  const TaskGraph same = parse_task_graph_text(R"(ranks: 1
tasks:
  - {name: a, rank: 0, op: copy, bytes: 64MiB}
  - {name: b, rank: 0, op: copy, bytes: 64MiB}
)",
                                               "s.yaml");
  CHECK(simulate(same, t).makespan == k * 2);
  const TaskGraph two = parse_task_graph_text(R"(ranks: 1
streams: [x, y]
tasks:
  - {name: a, rank: 0, stream: x, op: copy, bytes: 64MiB}
  - {name: b, rank: 0, stream: y, op: copy, bytes: 64MiB}
  - {name: c, rank: 0, stream: x, op: copy, bytes: 64MiB, deps: [b]}
)",
                                              "t.yaml");
  const SimResult r = simulate(two, t);
  CHECK(r.trace[1].start == Time::zero());
  CHECK(r.makespan == k * 2);
}

TEST_CASE("a collective starts when its last member arrives", "[engine]") {
  const Topology t = topo("dgx-h100");
  const TaskGraph g = parse_task_graph_text(R"(ranks: 2
collectives:
  - {name: sr, op: sendrecv, group: [0, 1], bytes: 450MB, algo: direct}
tasks:
  - {name: late, rank: 1, op: copy, bytes: 64MiB}
  - {name: s, rank: 0, collective: sr}
  - {name: r, rank: 1, collective: sr}
)",
                                            "c.yaml");
  const SimResult res = simulate(g, t, {"analytical"});
  const Time k = compute_time(gpu_profile("h100"), OpKind::copy, 0, 64 << 20, DType::fp32);
  // 450 MB at 450 GB/s = 1 ms, plus 0.4 us latency (2 x 0.2 us), after rank 1's copy.
  CHECK(res.makespan == k + Time::us(1000) + Time::ns(400));
}

TEST_CASE("a graph that cannot finish names the blocked tasks", "[engine]") {
  // Ranks call the two collectives in opposite orders on one stream: deadlock.
  const TaskGraph g = parse_task_graph_text(R"(ranks: 2
collectives:
  - {name: A, op: allreduce, group: [0, 1], bytes: 1MiB}
  - {name: B, op: allreduce, group: [0, 1], bytes: 1MiB}
tasks:
  - {name: a0, rank: 0, collective: A}
  - {name: b0, rank: 0, collective: B}
  - {name: b1, rank: 1, collective: B}
  - {name: a1, rank: 1, collective: A}
)",
                                            "dead.yaml");
  CHECK_THROWS_WITH(simulate(g, topo("dgx-h100")), Catch::Contains("stuck") && Catch::Contains("'a0'") &&
                                                       Catch::Contains("waiting for ranks 1 to join"));
}

TEST_CASE("the same run twice gives byte-identical traces", "[engine][determinism]") {
  const Topology t = topo("parm-32gpu");
  TaskGraphBuilder b(32);
  b.add_stream_all("compute");
  b.add_stream_all("comm");
  b.add_stream_all("comm2");
  std::vector<int> all(32);
  for (int i = 0; i < 32; ++i) all[i] = i;
  for (int r = 0; r < 32; ++r) {
    Task k;
    k.name = "gemm@" + std::to_string(r);
    k.rank = r;
    k.stream = 0;
    k.compute().op = OpKind::gemm;
    k.compute().flops = 1'000'000'000ULL * (1 + r % 3);
    k.compute().bytes = 1 << 20;
    b.add_task(k);
  }
  Collective a2a;
  a2a.name = "a2a";
  a2a.op = CollOp::alltoall;
  a2a.group = all;
  a2a.bytes = 24 << 20;
  auto ids = b.add_collective_tasks(a2a, "comm", "a2a");
  for (int r = 0; r < 32; ++r) b.add_dep(ids[r], r);
  Collective ar = a2a;
  ar.name = "ar";
  ar.op = CollOp::allreduce;
  b.add_collective_tasks(ar, "comm2", "ar");
  const TaskGraph g = std::move(b).build();
  auto digest = [&] {
    const SimResult r = simulate(g, t, {"flow"});
    std::ostringstream os;
    write_trace_csv(os, g, r);
    write_chrome_trace(os, g, r);
    return os.str();
  };
  const std::string first = digest();
  CHECK(first.size() > 1000);
  CHECK(std::hash<std::string>{}(first) == std::hash<std::string>{}(digest()));
  CHECK(first == digest());
}

TEST_CASE("more ranks than GPUs is an error", "[engine]") {
  const TaskGraph g = parse_task_graph_text("ranks: 9\ntasks:\n  - {name: a, rank: 8, op: copy}\n", "x.yaml");
  CHECK_THROWS_WITH(simulate(g, topo("dgx-h100")), Catch::Contains("9 ranks but topology 'dgx-h100' has only 8"));
}

// ---- a collective step completes exactly once (engine fix), and no member
// leaves a collective before the bytes addressed to it arrived (checked by the
// engine on every simulated graph: it throws "internal: ... in flight").

TEST_CASE("an AlltoAllv with zero rows and columns waits for the bytes that are sent", "[engine][collective]") {
  const Topology t = topo("dgx-h100");
  // Only member 0 sends, 64 MiB to member 3; pairwise: member m's step j sends
  // to m+j, so member 3's steps 1 and 2 carry nothing and complete at once
  // (before the fix they completed twice and member 3 left at 0 us).
  const TaskGraph g = parse_task_graph_text(R"(ranks: 4
collectives:
  - {name: v, op: alltoallv, algo: pairwise, group: [0, 1, 2, 3],
     matrix: [[0B, 0B, 0B, 64MiB], [0B, 0B, 0B, 0B], [0B, 0B, 0B, 0B], [0B, 0B, 0B, 0B]]}
tasks:
  - {name: v0, rank: 0, collective: v}
  - {name: v1, rank: 1, collective: v}
  - {name: v2, rank: 2, collective: v}
  - {name: v3, rank: 3, collective: v}
)",
                                            "v.yaml");
  for (const char* net : {"analytical", "flow"}) {
    const SimResult r = simulate(g, t, {net});
    // 64 MiB = 67108864 B over a 450 GB/s NVLink route: 149.1308 us, plus 0.4 us latency.
    CHECK(r.trace[3].end.to_us() == Approx(149.5308).epsilon(1e-4));
    CHECK(r.trace[0].end.to_us() == Approx(149.1308).epsilon(1e-2));  // the sender is done when its bytes left
    CHECK(r.trace[1].end == Time::zero());  // members 1 and 2 receive nothing
    CHECK(r.trace[2].end == Time::zero());
  }
  // Zero rows and columns all round: nothing moves, everyone leaves at 0.
  const TaskGraph z = parse_task_graph_text(R"(ranks: 3
collectives:
  - {name: v, op: alltoallv, algo: pairwise, group: [0, 1, 2], matrix: [[0B, 0B, 0B], [0B, 0B, 0B], [0B, 0B, 0B]]}
tasks:
  - {name: v0, rank: 0, collective: v}
  - {name: v1, rank: 1, collective: v}
  - {name: v2, rank: 2, collective: v}
)",
                                            "z.yaml");
  CHECK(simulate(z, t).makespan == Time::zero());
}

TEST_CASE("an SAA with one inner member is a pairwise AlltoAll", "[engine][collective]") {
  // With inner = 1 there is no AllGather: every round sends one chunk to one
  // peer, exactly the pairwise AlltoAll's transfers (round 0 is the member's own chunk).
  // The SAA's rounds are NCCL send/recv: each of its 3 rounds pays NCCL's
  // p2p latency across nodes (8.4 us base + 14 us network hop = 22.4 us)
  // where the textbook pairwise pays the route's 5 us (6 PCIe-side hops of
  // 0.5 us + 2 network hops of 1 us): 3 x 17.4 us = 52.2 us more.
  const Topology t = topo("parm-32gpu");
  auto one = [&](const char* op, const char* extra) {
    return parse_task_graph_text(fmt::format(R"(ranks: 13
collectives:
  - {{name: c, op: {}, group: [0, 4, 8, 12], bytes: 8MiB{}}}
tasks:
  - {{name: c0, rank: 0, collective: c}}
  - {{name: c1, rank: 4, collective: c}}
  - {{name: c2, rank: 8, collective: c}}
  - {{name: c3, rank: 12, collective: c}}
)",
                                             op, extra),
                                 "saa.yaml");
  };
  const TaskGraph saa = one("saa", ", inner: 1");
  const TaskGraph a2a = one("alltoall", ", algo: pairwise");
  for (const char* net : {"analytical", "flow"}) {
    const SimResult rs = simulate(saa, t, {net}), ra = simulate(a2a, t, {net});
    CHECK(rs.makespan > Time::zero());
    CHECK(rs.makespan - ra.makespan == Time::ns(52'200));
    CHECK(rs.inter_node_bytes == ra.inter_node_bytes);
    // 3 peers x 2 MiB from each of 4 members, all across nodes.
    CHECK(rs.inter_node_bytes == 4u * 3u * (2u << 20));
  }
}

TEST_CASE("every collective over one member finishes at once", "[engine][collective]") {
  const Topology t = topo("dgx-h100");
  for (const char* op : {"alltoall", "allgather", "reducescatter", "allreduce", "saa"}) {
    const TaskGraph g = parse_task_graph_text(
        fmt::format("ranks: 1\ncollectives:\n  - {{name: c, op: {}, group: [0], bytes: 1MiB{}}}\n"
                    "tasks:\n  - {{name: c0, rank: 0, collective: c}}\n  - {{name: after, rank: 0, op: copy, bytes: "
                    "1MiB, deps: [c0]}}\n",
                    op, std::string(op) == "saa" ? ", inner: 1" : ""),
        "one.yaml");
    INFO(op);
    const SimResult r = simulate(g, t, {"flow"});
    CHECK(r.trace[0].end == Time::zero());
    CHECK(r.trace[1].start == Time::zero());
    CHECK(r.transfers == 0);
  }
  const TaskGraph v = parse_task_graph_text(
      "ranks: 1\ncollectives:\n  - {name: c, op: alltoallv, group: [0], matrix: [[1MiB]]}\n"
      "tasks:\n  - {name: c0, rank: 0, collective: c}\n",
      "onev.yaml");
  CHECK(simulate(v, t).makespan == Time::zero());
}

TEST_CASE("a transfer that would end past 2^63 ps is refused with when and what to check", "[engine][hardening]") {
  // 2^62 B from member 0 to member 1 over a 450 GB/s NVLink route: 4.6e18 / 4.5e11 s
  // = 1.0e7 s = 1.0e19 ps, past 2^63 ps (9.2e18): the simulation must stop with the
  // time it reached and what to look at, not a bare "time overflow".
  const Topology t = topo("dgx-h100");
  const TaskGraph g = parse_task_graph_text(R"(ranks: 2
collectives:
  - {name: v, op: alltoallv, algo: pairwise, group: [0, 1], matrix: [[0B, 4611686018427387904B], [0B, 0B]]}
tasks:
  - {name: v0, rank: 0, collective: v}
  - {name: v1, rank: 1, collective: v}
)",
                                            "big.yaml");
  for (const char* net : {"analytical", "flow"}) {
    CAPTURE(net);
    CHECK_THROWS_WITH(simulate(g, t, {net}), Catch::StartsWith("simulate: at t = ") &&
                                                 Catch::Contains("time overflow") &&
                                                 Catch::Contains("alltoallv matrix against the topology's bandwidths"));
  }
}
