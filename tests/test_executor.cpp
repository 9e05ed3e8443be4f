#include <catch2/catch.hpp>

#include "backend/cpu/communicator.hpp"
#include "backend/cpu/cpu_executor.hpp"
#include "backend/cpu/moe_kernels.hpp"
#include "backend/calibrate.hpp"
#include "backend/verify.hpp"
#include "sim/core/error.hpp"
#include "sim/graph/graph_io.hpp"
#include "tests/graphs.hpp"

using namespace parmsim;
using namespace parmsim::exec;

namespace {

// A graph with one collective over `p` ranks and buffers "s" (send) and "r" (recv).
struct OneColl {
  TaskGraph g;
  explicit OneColl(Collective c, int p, std::uint64_t send_elems, std::uint64_t recv_elems)
      : g(test::one_collective(std::move(c), p, send_elems, recv_elems)) {}
};

// Rank r's send buffer holds 10*r + i.
Memory filled(const TaskGraph& g) {
  Memory m(g);
  for (int r = 0; r < g.num_ranks(); ++r) {
    auto& s = m.at(r, "s");
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(10 * r + static_cast<int>(i));
  }
  return m;
}

Collective coll(CollOp op) {
  Collective c;
  c.op = op;
  return c;
}

}  // namespace

TEST_CASE("host collectives against hand-computed results", "[exec][comm]") {
  SECTION("allreduce sums in member order") {
    OneColl k(coll(CollOp::allreduce), 3, 2, 2);
    Memory m = filled(k.g);
    run_collective(k.g.collective(0), m);
    // element 0: 0 + 10 + 20 = 30; element 1: 1 + 11 + 21 = 33
    for (int r = 0; r < 3; ++r) CHECK(m.at(r, "r") == std::vector<float>{30, 33});
  }
  SECTION("allgather concatenates in member order") {
    OneColl k(coll(CollOp::allgather), 3, 2, 6);
    Memory m = filled(k.g);
    run_collective(k.g.collective(0), m);
    for (int r = 0; r < 3; ++r) CHECK(m.at(r, "r") == std::vector<float>{0, 1, 10, 11, 20, 21});
  }
  SECTION("reducescatter: member d gets the sum of block d") {
    OneColl k(coll(CollOp::reducescatter), 2, 4, 2);
    Memory m = filled(k.g);
    run_collective(k.g.collective(0), m);
    // rank 0: {0,1} + {10,11} = {10,12}; rank 1: {2,3} + {12,13} = {14,16}
    CHECK(m.at(0, "r") == std::vector<float>{10, 12});
    CHECK(m.at(1, "r") == std::vector<float>{14, 16});
  }
  SECTION("alltoall: block j of member i goes to block i of member j") {
    OneColl k(coll(CollOp::alltoall), 2, 4, 4);
    Memory m = filled(k.g);
    run_collective(k.g.collective(0), m);
    CHECK(m.at(0, "r") == std::vector<float>{0, 1, 10, 11});
    CHECK(m.at(1, "r") == std::vector<float>{2, 3, 12, 13});
  }
  SECTION("saa equals an AlltoAll among outer peers followed by an AllGather inside blocks") {
    // 4 ranks, inner 2: blocks {0,1}, {2,3}; outer groups {0,2}, {1,3}. Send: 2 chunks of 1.
    Collective c = coll(CollOp::saa);
    c.inner = 2;
    OneColl k(c, 4, 2, 4);
    Memory m = filled(k.g);
    run_collective(k.g.collective(0), m);
    // AlltoAll in {0,2}: rank 0 gets {0 (own chunk 0), 20 (rank 2's chunk 0)}; rank 2 gets {1, 21}.
    // In {1,3}: rank 1 gets {10, 30}; rank 3 gets {11, 31}.
    // AllGather in block {0,1}: {0, 20, 10, 30}; in block {2,3}: {1, 21, 11, 31}.
    CHECK(m.at(0, "r") == std::vector<float>{0, 20, 10, 30});
    CHECK(m.at(1, "r") == std::vector<float>{0, 20, 10, 30});
    CHECK(m.at(2, "r") == std::vector<float>{1, 21, 11, 31});
    CHECK(m.at(3, "r") == std::vector<float>{1, 21, 11, 31});
  }
  SECTION("a column window moves only those columns of every row") {
    Collective c = coll(CollOp::allreduce);
    c.row = 2;
    c.col_begin = 1;
    c.col_count = 1;
    OneColl k(c, 2, 4, 4);
    Memory m = filled(k.g);
    run_collective(k.g.collective(0), m);
    // rows {0,1},{2,3} + {10,11},{12,13}: only column 1 is summed: 1+11 = 12, 3+13 = 16.
    CHECK(m.at(0, "r") == std::vector<float>{0, 12, 0, 16});
  }
  SECTION("buffers that do not fit are an error naming them") {
    OneColl k(coll(CollOp::allgather), 2, 3, 4);
    Memory m = filled(k.g);
    CHECK_THROWS_WITH(run_collective(k.g.collective(0), m),
                      Catch::Contains("'s' (3 elements in use) and 'r' (4) do not fit: receive = 2 x send"));
  }
}

TEST_CASE("the CPU executor honours streams and dependencies across ranks", "[exec]") {
  const TaskGraph g = parse_task_graph_text(R"(ranks: 2
streams: [a, b]
tasks:
  - {name: first, rank: 0, stream: a, op: copy}
  - {name: second, rank: 0, stream: a, op: copy}
  - {name: other, rank: 1, stream: b, op: copy, deps: [second]}
  - {name: side, rank: 0, stream: b, op: copy, deps: [other]}
)",
                                            "g.yaml");
  Memory m(g);
  // Tasks without a kernel run nothing; the trace times show the order.
  CpuExecutor cpu({});
  const SimResult r = cpu.run(g, m);
  CHECK(r.trace[0].end <= r.trace[1].start);  // stream order
  CHECK(r.trace[1].end <= r.trace[2].start);  // cross-rank dependency
  CHECK(r.trace[2].end <= r.trace[3].start);
}

TEST_CASE("a graph that cannot finish stops and names the blocked tasks", "[exec]") {
  const TaskGraph g = parse_task_graph_text(R"(ranks: 2
collectives:
  - {name: A, op: allreduce, group: [0, 1], bytes: 4B}
  - {name: B, op: allreduce, group: [0, 1], bytes: 4B}
tasks:
  - {name: a0, rank: 0, collective: A}
  - {name: b0, rank: 0, collective: B}
  - {name: b1, rank: 1, collective: B}
  - {name: a1, rank: 1, collective: A}
)",
                                            "dead.yaml");
  Memory m(g);
  CpuExecutor cpu({});
  CHECK_THROWS_WITH(cpu.run(g, m),
                    Catch::Contains("execution stuck") && Catch::Contains("'a0'") && Catch::Contains("'b1'"));
}

TEST_CASE("bad graphs for the executor are errors, not crashes", "[exec]") {
  // A buffer of the wrong size for its collective.
  TaskGraphBuilder b(2);
  b.add_stream_all("comm");
  for (int r = 0; r < 2; ++r) {
    b.add_buffer({r, "s", 4, DType::fp32});
    b.add_buffer({r, "r", r == 0 ? 8u : 6u, DType::fp32});
  }
  Collective c = coll(CollOp::allgather);
  c.name = "ag";
  c.group = {0, 1};
  c.send_buf = "s";
  c.recv_buf = "r";
  b.add_collective_tasks(c, "comm", "ag");
  const TaskGraph g = std::move(b).build();
  Memory m(g);
  CHECK_THROWS_WITH(CpuExecutor({}).run(g, m), Catch::Contains("buffer sizes differ between ranks 0 and 1"));
  // A group that names a missing rank never reaches the executor.
  CHECK_THROWS_WITH(parse_task_graph_text(R"(ranks: 2
collectives: [{name: x, op: allreduce, group: [0, 7], bytes: 4B}]
tasks: [{name: t, rank: 0, collective: x}]
)",
                                          "m.yaml"),
                    Catch::Contains("m.yaml:2:") && Catch::Contains("group[1]"));
}

TEST_CASE("every schedule computes the reference layer: outputs and gradients", "[exec][moe]") {
  struct Cfg {
    int P, node, G, k, E_mult;
    double f;
  };
  // P in {4, 8}, G in {2, 4}, k in {1, 2}, E = P and 2P, with and without dropping.
  const std::vector<Cfg> cfgs = {
      {4, 4, 2, 1, 1, 4.0}, {4, 4, 2, 2, 2, 0.5}, {4, 4, 4, 2, 1, 4.0}, {4, 4, 4, 1, 2, 0.4},
      {8, 4, 2, 2, 1, 0.6}, {8, 8, 4, 1, 2, 8.0}, {8, 4, 4, 2, 2, 0.5}, {8, 8, 2, 1, 1, 0.3},
  };
  int seed = 1;
  bool dropped_some = false, dropped_none = false;
  for (const Cfg& c : cfgs) {
    moe::LayerSpec s;
    s.B = 2, s.L = 8, s.M = 12, s.H = 16, s.k = c.k, s.f = c.f, s.mp = c.G, s.E = c.P * c.E_mult;
    std::vector<moe::ScheduleOptions> scheds = {moe::preset("baseline"), moe::preset("s1"), moe::preset("s2")};
    if (seed <= 2)
      for (auto o : moe::search_space()) scheds.push_back(o);
    for (const auto& o : scheds) {
      const VerifyResult r = verify_schedule(s, {c.P, c.node}, o, static_cast<std::uint64_t>(seed));
      INFO("P=" << c.P << " G=" << c.G << " k=" << c.k << " E=" << s.E << " f=" << c.f << " " << o.describe());
      for (const auto& e : r.errors) {
        INFO(e.tensor);
        CHECK(e.max_rel_error < 1e-5);
      }
      (r.dropped > 0 ? dropped_some : dropped_none) = true;
    }
    ++seed;
  }
  CHECK(dropped_some);  // the grid exercises both capacity rules with drops ...
  CHECK(dropped_none);  // ... and without
}

TEST_CASE("verification catches a wrong kernel and a wrong capacity rule", "[exec][moe]") {
  moe::LayerSpec s;
  s.B = 2, s.L = 8, s.M = 12, s.H = 16, s.k = 2, s.f = 0.4, s.mp = 2, s.E = 8;
  // An I-Order that forgets the gate weight: output and gradients must be flagged.
  KernelTable broken = moe_kernels();
  const Kernel good = broken.at(KernelRole::moe_iorder);
  broken[KernelRole::moe_iorder] = [good](const Task& t, Memory& m) {
    good(t, m);
    for (float& v : m.at(t.rank, t.outputs[0])) v *= 1.5f;
  };
  const VerifyResult bad = verify_schedule(s, {8, 8}, moe::preset("s2"), 3, &broken);
  CHECK(bad.errors[0].tensor == "output");
  CHECK(bad.errors[0].max_rel_error > 0.1);
  // The two capacity rules drop different choices here (per S tokens vs per S/G),
  // and each schedule matches the reference only under its own rule.
  const VerifyResult b = verify_schedule(s, {8, 8}, moe::preset("baseline"), 3);
  const VerifyResult p = verify_schedule(s, {8, 8}, moe::preset("s1"), 3);
  CHECK(b.dropped != p.dropped);
  CHECK(b.worst() < 1e-5);
  CHECK(p.worst() < 1e-5);
}

TEST_CASE("the calibration grid runs on any executor and shows each execution to the collector", "[exec][calib]") {
  // What calibrate --backend cuda runs, with the CPU executor in the GPU's place
  // (the CUDA executor is the only part not run here). Quick grid: M {16, 48} x
  // H {32, 96} x B {1, 4} = 8 layers x 3 schedules = 24 executions, mp = 2 on 4 ranks.
  CpuExecutor cpu(moe_kernels());
  int seen = 0;
  std::size_t tasks = 0;
  const Samples s = calibrate_grid(Cluster{4, 4}, true, &cpu, [&](Execution& ex) {
    ++seen;
    tasks += ex.graph.tasks().size();
    CHECK(ex.trace.trace.size() == ex.graph.tasks().size());
  });
  CHECK(seen == 24);
  CHECK(tasks > 24);
  // Kernels by kind, and collectives on the MP groups (2 ranks) and EP groups (4 / 2 = 2 ranks), in one node.
  CHECK(s.kernels.count("expert_fc1") == 1);
  CHECK(s.collectives.count({CollOp::alltoall, 2, false}) == 1);
  bool mp_collective = false;
  for (const auto& [key, pts] : s.collectives) mp_collective = mp_collective || std::get<1>(key) == 2;
  CHECK(mp_collective);
  // The same grid through calibrate_cpu samples the same kernels and collectives.
  const Samples c = calibrate_cpu(Cluster{4, 4}, true);
  CHECK(c.kernels.size() == s.kernels.size());
  CHECK(c.collectives.size() == s.collectives.size());
}
