#include <catch2/catch.hpp>
#include <functional>
#include <sstream>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/io/output.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {
Topology topo(const std::string& name) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml");
}
}  // namespace

TEST_CASE("the roofline cost of a GEMM and of a memory-bound kernel", "[compute]") {
  const GpuProfile& h100 = gpu_profile("h100");
  // 1e12 FLOPs fp16: eff = 0.75 * 1e12 / (1e12 + 8e9) = 0.744048;
  // 1e12 / (989e12 * 0.744048) = 1.358948 ms; plus 4 us launch = 1362.948 us.
  const Time g = compute_time(h100, OpKind::gemm, 1'000'000'000'000ULL, 0, DType::fp16);
  CHECK(g.to_us() == Approx(1362.948).epsilon(1e-5));
  // 1 GB copy: eff = 0.85 * 1e9 / (1e9 + 8e6) = 0.843254; 1e9 / (3.35e12 * 0.843254)
  // = 353.995 us; plus 4 us = 357.995 us.
  const Time m = compute_time(h100, OpKind::copy, 0, 1'000'000'000ULL, DType::fp16);
  CHECK(m.to_us() == Approx(357.995).epsilon(1e-5));
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
  - {name: sr, op: sendrecv, group: [0, 1], bytes: 450MB}
tasks:
  - {name: late, rank: 1, op: copy, bytes: 64MiB}
  - {name: s, rank: 0, collective: sr}
  - {name: r, rank: 1, collective: sr}
)",
                                            "c.yaml");
  const SimResult res = simulate(g, t, {"analytical"});
  const Time k = compute_time(gpu_profile("h100"), OpKind::copy, 0, 64 << 20, DType::fp32);
  // 450 MB at 450 GB/s = 1 ms, plus 1.4 us latency, after rank 1's copy.
  CHECK(res.makespan == k + Time::us(1000) + Time::ns(1400));
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
    k.op = OpKind::gemm;
    k.flops = 1'000'000'000ULL * (1 + r % 3);
    k.bytes = 1 << 20;
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
