#include <catch2/catch.hpp>

#include "sim/core/error.hpp"
#include "sim/graph/graph_io.hpp"

using namespace parmsim;

TEST_CASE("a graph file builds the IR with stream order and deps", "[graph]") {
  const TaskGraph g = parse_task_graph_text(R"(
ranks: 2
streams: [compute, comm]
buffers:
  - {rank: 0, name: x, elems: 1024}
collectives:
  - {name: ar, op: allreduce, group: [0, 1], bytes: 1MiB}
tasks:
  - {name: a, rank: 0, stream: compute, op: gemm, flops: 1e9, bytes: 4MiB, dtype: fp16, outputs: [x]}
  - {name: b, rank: 0, stream: compute, op: activation, bytes: 4MiB}
  - {name: ar0, rank: 0, stream: comm, collective: ar, deps: [a]}
  - {name: ar1, rank: 1, stream: comm, collective: ar}
)",
                                            "g.yaml");
  CHECK(g.num_ranks() == 2);
  CHECK(g.tasks().size() == 4);
  CHECK(g.task(0).compute().flops == 1'000'000'000ULL);
  CHECK(g.task(0).compute().dtype == DType::fp16);
  // b follows a on its stream; ar0 depends on a explicitly.
  CHECK(g.num_predecessors(1) == 1);
  CHECK(g.num_predecessors(2) == 1);
  CHECK(g.parts(0) == std::vector<int>{2, 3});
}

TEST_CASE("a cycle is reported with the tasks on it", "[graph]") {
  CHECK_THROWS_WITH(
      parse_task_graph_text(R"(
ranks: 1
tasks:
  - {name: a, rank: 0, op: copy, deps: [c]}
  - {name: b, rank: 0, op: copy}
  - {name: c, rank: 0, op: copy}
)",
                            "cyc.yaml"),
      Catch::Contains("cyc.yaml: task graph: dependency cycle") && Catch::Contains("'a' -> 'b' -> 'c' -> 'a'"));
}

TEST_CASE("dangling ids and bad groups are errors that name them", "[graph]") {
  CHECK_THROWS_WITH(parse_task_graph_text("ranks: 1\ntasks:\n  - {name: a, rank: 0, op: copy, deps: [zz]}\n", "d.yaml"),
                    Catch::Contains("d.yaml:3:") && Catch::Contains("dangling"));
  CHECK_THROWS_WITH(parse_task_graph_text(R"(ranks: 2
collectives:
  - {name: ag, op: allgather, group: [0, 1], bytes: 1MiB}
tasks:
  - {name: p0, rank: 0, collective: ag}
)",
                                          "m.yaml"),
                    Catch::Contains("collective 'ag' has no task on rank 1"));
  CHECK_THROWS_WITH(parse_task_graph_text(R"(ranks: 2
collectives:
  - {name: ag, op: allgather, group: [0, 5], bytes: 1MiB}
tasks:
  - {name: p0, rank: 0, collective: ag}
)",
                                          "r.yaml"),
                    Catch::Contains("r.yaml:3:") && Catch::Contains("group[1]"));
  CHECK_THROWS_WITH(
      parse_task_graph_text("ranks: 1\ntasks:\n  - {name: a, rank: 0, op: copy, inputs: [nope]}\n", "b.yaml"),
      Catch::Contains("buffer 'nope'"));
  CHECK_THROWS_WITH(parse_task_graph_text("ranks: 1\ntasks:\n  - {name: a, rank: 0, op: copy, colour: 1}\n", "k.yaml"),
                    Catch::Contains("k.yaml:3:") && Catch::Contains("unknown key 'tasks[0].colour'"));
}

TEST_CASE("the builder checks collectives on construction", "[graph]") {
  TaskGraphBuilder b(2);
  b.add_stream_all("s");
  Collective c;
  c.name = "x";
  c.op = CollOp::alltoallv;
  c.group = {0, 1};
  c.matrix = {{0, 1}};  // one row for two members
  b.add_collective_tasks(c, "s", "x");
  CHECK_THROWS_WITH(std::move(b).build(), Catch::Contains("2x2 byte matrix"));
}

TEST_CASE("a JSON graph file loads like YAML", "[graph]") {
  const TaskGraph g = load_task_graph(std::string(PARMSIM_SOURCE_DIR) + "/tests/data/graph.json");
  CHECK(g.num_ranks() == 2);
  CHECK(g.collective(0).op == CollOp::sendrecv);
  CHECK(g.collective(0).bytes == 450'000'000ULL);
  CHECK(g.parts(0) == std::vector<int>{0, 1});
}

TEST_CASE("a task name used twice is refused, the smallest of several named", "[graph]") {
  // 5000 unique names alike but for their numbers pass (no false repeat in
  // the name set); then three names repeated among them: the error names
  // the smallest ("t#1017@1" < "t#2500@0" < "t#40@0" as strings).
  auto graph = [](const std::vector<int>& repeats) {
    TaskGraphBuilder b(4);
    b.add_stream_all("s");
    auto add = [&b](const std::string& name, int rank) {
      Task& t = b.new_task();
      t.name = name;
      t.rank = rank;
      t.compute().op = OpKind::copy;
    };
    for (int i = 0; i < 5000; ++i) add("t#" + std::to_string(i) + "@" + std::to_string(i % 4), i % 4);
    for (int i : repeats) add("t#" + std::to_string(i) + "@" + std::to_string(i % 4), i % 4);
    return std::move(b).build();
  };
  CHECK(graph({}).tasks().size() == 5000);
  CHECK_THROWS_WITH(graph({2500, 40, 1017, 40}), "task graph: task name 't#1017@1' used twice");
}
