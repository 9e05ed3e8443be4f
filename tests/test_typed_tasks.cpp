// Typed tasks: a compute task's kernel (its calibration key) and its executor
// arguments (sim/graph/kernel_args.hpp), as the builder, the simulator, the
// graph loader and the CPU executor use them.
#include <catch2/catch.hpp>
#include <string>

#include "backend/cpu/cpu_executor.hpp"
#include "backend/cpu/moe_kernels.hpp"
#include "backend/verify.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/moe/layer.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

const char* const kOneGpu =
    "name: one\ngpu: rtx2080ti\nnodes: 1\nnode:\n  gpus: 1\n  devices:\n    - {name: cpu0, kind: host_bridge}\n"
    "  links:\n    - {a: gpu0, b: cpu0, bandwidth: 13GBps, latency: 500ns}\n";

// A memory-bound task of 1 MiB on rank 0, stream 0.
void add_copy(TaskGraphBuilder& b, const std::string& name, KernelId kernel) {
  Task& t = b.new_task();
  t.name = name;
  ComputeTask& c = t.compute();
  c.op = OpKind::copy;
  c.bytes = 1 << 20;
  c.kernel = kernel;
}

const Task& first_of(const TaskGraph& g, KernelRole role, int rank) {
  for (const Task& t : g.tasks())
    if (t.rank == rank && t.is_compute() && t.compute().role() == role) return t;
  FAIL("no task of role " << to_string(role) << " on rank " << rank);
  return g.task(0);
}

const Collective& collective_named(const TaskGraph& g, const std::string& prefix) {
  for (const Collective& c : g.collectives())
    if (c.name.rfind(prefix, 0) == 0) return c;
  FAIL("no collective named " << prefix << "...");
  return g.collective(0);
}

}  // namespace

TEST_CASE("a compute task's kernel, not its name, picks its calibration table", "[graph][calib]") {
  const Topology topo = parse_topology_text(kOneGpu, "one.yaml");
  TaskGraphBuilder b(1);
  b.add_stream_all("s");
  // Named like kernel "bar" but running kernel "foo", and the other way round.
  add_copy(b, "bar#0@0", b.kernel_id("foo"));
  add_copy(b, "foo#1@0", b.kernel_id("bar"));
  const TaskGraph g = std::move(b).build();
  CHECK(g.kernel_names() == std::vector<std::string>{"foo", "bar"});
  Calibration cal;
  KernelTable k;
  k.name = "foo";
  k.op = OpKind::copy;
  k.dtype = DType::fp32;
  k.alpha = 1e-3;  // no points: the line, 1 ms + 0 s per byte
  k.beta = 0;
  cal.kernels.push_back(k);
  const SimResult r = simulate(g, topo, SimOptions{"analytical", &cal});
  // Task 0 runs kernel foo: the table's 1 ms. Task 1 (named foo#...) runs bar,
  // which has no table: the model's copy of 1 MiB on an RTX 2080 Ti (616 GB/s
  // HBM: about 2 us, plus the launch floor), far below 1 ms.
  CHECK((r.trace[0].end - r.trace[0].start).to_us() == Approx(1000.0).epsilon(1e-12));
  CHECK(r.trace[1].end - r.trace[1].start < Time::us(100));
}

TEST_CASE("a graph file's compute task runs the kernel named as the task up to '#'", "[graph][calib]") {
  const TaskGraph g = parse_task_graph_text(R"(ranks: 1
collectives: [{name: c, op: allreduce, group: [0], bytes: 4B}]
tasks:
  - {name: g0#1, rank: 0, op: gemm, flops: 1e9}
  - {name: g0#2, rank: 0, op: gemm, flops: 2e9}
  - {name: h, rank: 0, op: copy, bytes: 1MiB}
  - {name: c0, rank: 0, collective: c}
)",
                                            "k.yaml");
  CHECK(g.kernel_names() == std::vector<std::string>{"g0", "h"});
  CHECK(g.kernel_name(g.task(0).compute().kernel) == "g0");
  CHECK(g.task(1).compute().kernel == g.task(0).compute().kernel);
  CHECK(g.kernel_name(g.task(2).compute().kernel) == "h");
  CHECK(!g.task(3).is_compute());
  CHECK(g.task(3).collective() == 0);
  // Loaded tasks are timed, not run: no executor kernel.
  CHECK(g.task(0).compute().role() == KernelRole::none);
}

TEST_CASE("a task whose buffers do not match its kernel's role is refused", "[graph][exec]") {
  auto graph = [](std::vector<std::string> inputs) {
    TaskGraphBuilder b(1);
    b.add_stream_all("s");
    for (const char* n : {"x", "Wg", "probs", "route"}) b.add_buffer({0, n, 64, DType::fp32});
    Task& t = b.new_task();
    t.name = "gate#0@0";
    t.inputs = std::move(inputs);
    t.outputs = {"probs", "route"};
    t.compute().args = MoeGateArgs{0, 2, 4, 3, 1, 2};
    return std::move(b).build();
  };
  CHECK(graph({"x", "Wg"}).task(0).compute().role() == KernelRole::moe_gate);
  CHECK_THROWS_WITH(graph({"x"}),
                    "task graph: task 'gate#0@0' runs kernel moe_gate, which takes 2 input and 2 "
                    "output buffers; it names 1 and 2");
}

TEST_CASE("the CPU executor names the task, the role and the buffer it cannot run", "[exec]") {
  // A gate over 2 tokens of M = 4 with E = 3 experts, k = 1, capacity 2: x needs
  // (0 + 2) x 4 = 8 elements, Wg 4 x 3 = 12, probs 2 x 3 = 6, route 2 x 1 x 3 = 6.
  auto graph = [](std::uint64_t wg) {
    TaskGraphBuilder b(1);
    b.add_stream_all("s");
    b.add_buffer({0, "x", 8, DType::fp32});
    b.add_buffer({0, "Wg", wg, DType::fp32});
    b.add_buffer({0, "probs", 6, DType::fp32});
    b.add_buffer({0, "route", 6, DType::fp32});
    Task& t = b.new_task();
    t.name = "gate#0@0";
    t.inputs = {"x", "Wg"};
    t.outputs = {"probs", "route"};
    t.compute().args = MoeGateArgs{0, 2, 4, 3, 1, 2};
    return std::move(b).build();
  };
  const TaskGraph good = graph(12), small = graph(11);
  exec::Memory m(good), ms(small);
  CHECK_THROWS_WITH(exec::CpuExecutor({}).run(good, m), "task 'gate#0@0': no CPU kernel for moe_gate");
  exec::CpuExecutor cpu(exec::moe_kernels());
  CHECK_NOTHROW(cpu.run(good, m));
  // Each kept choice has a slot below the capacity (2) and an expert below E (3).
  for (int i = 0; i < 2; ++i) {
    CHECK(m.at(0, "route")[i * 3] < 3);
    CHECK(m.at(0, "route")[i * 3 + 1] < 2);
  }
  CHECK_THROWS_WITH(cpu.run(small, ms), "task 'gate#0@0': buffer 'Wg' has 11 elements, the kernel needs 12");
}

TEST_CASE("the layer's tasks carry their kernels' arguments and move the data their ops name", "[moe][exec]") {
  // The small layer (B=2, L=8, M=16, H=32, E=8, k=2, f=2, mp=2) on 8 GPUs: S = 16
  // tokens, G = 2, 4 EP ranks, E_local = 8 / 4 = 2, h = 32 / 2 = 16; Parm's
  // capacity on S/G = 8 tokens: ceil(2 x 2 x 8 / 8) = 4.
  const moe::LayerSpec s = exec::small_layer();
  const moe::Dims d = moe::make_dims(s, 8, 8);
  REQUIRE(d.T_parm == 4);
  const moe::ScheduleOptions s1 = moe::preset("s1");
  const auto fwd = moe::forward_ops(s, d, s1);
  const TaskGraph g = moe::build_training_graph(fwd, moe::backward_ops(fwd, s, d, s1), s, d, s1);
  // Rank 3 is MP member 3 % 2 = 1: its gate takes tokens 8..15.
  const auto gate = std::get<MoeGateArgs>(first_of(g, KernelRole::moe_gate, 3).compute().args);
  CHECK(gate.begin == 8);
  CHECK(gate.count == 8);
  CHECK(gate.M == 16);
  CHECK(gate.E == 8);
  CHECK(gate.k == 2);
  CHECK(gate.C == 4);
  // The experts' input after the ESP AllGather: G x E x C x M = 2 x 8 x 4 x 16 = 1024
  // elements, X = 1024 / (E_local x C x M = 2 x 4 x 16) = 8 source blocks.
  const auto ex = std::get<MoeExpertsArgs>(first_of(g, KernelRole::moe_experts, 0).compute().args);
  CHECK(ex.X == 8);
  CHECK(ex.E_local == 2);
  CHECK(ex.C == 4);
  CHECK(ex.h == 16);
  // S1's I-Order combines its own 8 tokens from [E, C, M] slots; per = 8 / G = 4.
  const auto io = std::get<MoeIOrderArgs>(first_of(g, KernelRole::moe_iorder, 0).compute().args);
  CHECK(io.count == 8);
  CHECK(io.C == 4);
  CHECK(io.per == 4);
  CHECK(io.layout == SlotLayout::local);
  // By MoeOp::data: the MP-AllGather after I-Order gathers the token rows, the
  // gate weights' gradient is summed in place, MP-Split's adjoint gathers dx.
  const Collective& out = collective_named(g, "mp_allgather#");
  CHECK((out.send_buf == "outl" && out.recv_buf == "out"));
  const Collective& gg = collective_named(g, "gate_grad_allreduce#");
  CHECK((gg.send_buf == "dWg" && gg.recv_buf == "dWg"));
  const Collective& dx = collective_named(g, "bwd_mp_split_allgather#");
  CHECK((dx.send_buf == "dxl" && dx.recv_buf == "dx"));
  // S2 gathers every member's routing before I-Order runs on all S tokens.
  const moe::ScheduleOptions s2 = moe::preset("s2");
  const TaskGraph g2 = moe::build_graph(moe::forward_ops(s, d, s2), s, d, s2);
  const Collective& route = collective_named(g2, "route_allgather#");
  CHECK((route.send_buf == "route" && route.recv_buf == "route_all"));
  const auto io2 = std::get<MoeIOrderArgs>(first_of(g2, KernelRole::moe_iorder, 0).compute().args);
  CHECK(io2.count == 16);
  CHECK(io2.layout == SlotLayout::gathered);
}
