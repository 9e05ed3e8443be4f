// The device-independent parts of the GPU backend, checked on the CPU: the
// collective plans (against the host communicator), the row-major to cuBLAS
// GEMM mapping (against a plain column-major GEMM), and the device kernels
// run by the host emulation (against the dense reference, through verify).
#include <catch2/catch.hpp>

#include "backend/cpu/communicator.hpp"
#include "backend/device/coll_plan.hpp"
#include "backend/device/enqueue_order.hpp"
#include "backend/device/host_kernels.hpp"
#include "backend/device/moe_tasks.hpp"
#include "backend/device/timing.hpp"
#include "backend/verify.hpp"
#include "sim/core/error.hpp"
#include "sim/graph/graph_io.hpp"
#include "tests/graphs.hpp"

using namespace parmsim;
using namespace parmsim::exec;

namespace {

using test::one_collective;

// Fills every buffer of every rank with distinct, non-integer values.
void fill(const TaskGraph& g, Memory& m, std::uint64_t seed) {
  for (const Buffer& b : g.buffers()) {
    auto& v = m.at(b.rank, b.name);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(((seed * 7919 + b.rank * 104729 + i * 31 + b.name.size() * 13) % 1000) / 7.0);
  }
}

// Runs collective `c` of `g` both ways and returns whether every buffer of
// every rank is the same bit for bit.
bool plan_matches_host(const TaskGraph& g, const Collective& c, std::uint64_t seed) {
  Memory want(g), got(g);
  fill(g, want, seed);
  fill(g, got, seed);
  run_collective(c, want);
  dev::MemoryMover mv(got);
  dev::run_phases(c, dev::plan_collective(g, c), mv);
  for (const Buffer& b : g.buffers())
    if (want.at(b.rank, b.name) != got.at(b.rank, b.name)) return false;
  return true;
}

Collective coll(CollOp op, int inner = 0) {
  Collective c;
  c.op = op;
  c.inner = inner;
  return c;
}

}  // namespace

TEST_CASE("collective plans move the same data as the host communicator", "[device][comm]") {
  SECTION("every op, whole buffers") {
    const auto check = [](CollOp op, int p, std::uint64_t s, std::uint64_t r, int inner = 0) {
      const TaskGraph g = one_collective(coll(op, inner), p, s, r);
      return plan_matches_host(g, g.collective(0), 3);
    };
    CHECK(check(CollOp::allreduce, 4, 6, 6));
    CHECK(check(CollOp::allgather, 3, 4, 12));
    CHECK(check(CollOp::reducescatter, 4, 8, 2));
    CHECK(check(CollOp::alltoall, 4, 8, 8));
    CHECK(check(CollOp::sendrecv, 2, 3, 5));
    CHECK(check(CollOp::saa, 4, 4, 8, 2));   // W = 2 rounds, G = 2
    CHECK(check(CollOp::saa, 8, 8, 16, 2));  // W = 4
    CHECK(check(CollOp::saa, 8, 4, 16, 4));  // W = 2, G = 4
    CHECK(check(CollOp::saa, 4, 8, 8, 1));   // G = 1: a plain AlltoAll in rounds
  }
  SECTION("column windows, offsets and counts") {
    for (CollOp op : {CollOp::allreduce, CollOp::alltoall, CollOp::allgather, CollOp::saa}) {
      Collective c = coll(op, op == CollOp::saa ? 2 : 0);
      c.row = 4, c.col_begin = 1, c.col_count = 2;
      const std::uint64_t rows = 4;
      const std::uint64_t recv_rows = op == CollOp::allgather ? rows * 4 : op == CollOp::saa ? rows * 2 : rows;
      const TaskGraph g = one_collective(c, 4, rows * 4, recv_rows * 4);
      INFO(to_string(op));
      CHECK(plan_matches_host(g, g.collective(0), 5));
    }
    Collective c = coll(CollOp::allgather);
    c.member_send_offset = {0, 2, 4};
    c.send_count = 2;
    const TaskGraph g = one_collective(c, 3, 6, 6);
    CHECK(plan_matches_host(g, g.collective(0), 7));
  }
  SECTION("a wrong plan would be seen: the host result differs from an untouched buffer") {
    // Guards the comparison itself: running nothing leaves the receive buffers unequal.
    const TaskGraph g = one_collective(coll(CollOp::alltoall), 4, 8, 8);
    Memory want(g), got(g);
    fill(g, want, 3);
    fill(g, got, 3);
    run_collective(g.collective(0), want);
    CHECK(want.at(1, "r") != got.at(1, "r"));
  }
  SECTION("SAA's inner phases run on the second lane after their outer round") {
    const TaskGraph g = one_collective(coll(CollOp::saa, 2), 8, 8, 16);
    const auto plans = dev::plan_collective(g, g.collective(0));
    // 4 rounds: outer (lane 0) then inner (lane 1), each inner after its outer.
    REQUIRE(plans[5].phases.size() == 8);
    for (int i = 0; i < 4; ++i) {
      CHECK(plans[5].phases[2 * i].lane == 0);
      CHECK(plans[5].phases[2 * i + 1].lane == 1);
      CHECK(plans[5].phases[2 * i + 1].after == 2 * i);
      CHECK(plans[5].phases[2 * i + 1].comm == dev::CommKind::inner);
    }
    // Member 5 = block 2, inner index 1: its outer group is members 1, 3, 5, 7
    // (ranks as the group lists them), its inner group 4, 5.
    CHECK(dev::comm_ranks(g.collective(0), dev::CommKind::outer, 5) == std::vector<int>{1, 3, 5, 7});
    CHECK(dev::comm_ranks(g.collective(0), dev::CommKind::inner, 5) == std::vector<int>{4, 5});
    CHECK(dev::comm_rank(g.collective(0), dev::CommKind::outer, 5) == 2);
  }
  SECTION("bad buffers are refused naming the collective") {
    const TaskGraph g = one_collective(coll(CollOp::allgather), 2, 3, 4);
    CHECK_THROWS_WITH(dev::plan_collective(g, g.collective(0)),
                      Catch::Contains("collective 'c'") && Catch::Contains("receive = 2 x send"));
  }
}

// The training graph of schedule `name` for the small layer on 8 ranks, 4 per node.
TaskGraph small_training_graph(const char* name) {
  const moe::LayerSpec s = small_layer();
  const moe::ScheduleOptions o = moe::preset(name);
  const moe::Dims d = moe::make_dims(s, 8, 4);
  const auto f = moe::forward_ops(s, d, o);
  return moe::build_training_graph(f, moe::backward_ops(f, s, d, o), s, d, o);
}

TEST_CASE("every collective of the MoE training graphs plans like the host communicator", "[device][comm][moe]") {
  for (const char* name : {"baseline", "s1", "s2"}) {
    const TaskGraph g = small_training_graph(name);
    for (const Collective& c : g.collectives()) {
      if (c.send_buf.empty()) continue;
      INFO(name << ": " << c.name);
      CHECK(plan_matches_host(g, c, static_cast<std::uint64_t>(c.id)));
    }
  }
}

namespace {

// Plain column-major GEMM, as the BLAS reference defines it.
void colmajor_gemm(const dev::ColMajorGemm& g, dev::I batch) {
  for (dev::I b = 0; b < batch; ++b) {
    const float* A = static_cast<const float*>(g.A) + b * g.sa;
    const float* B = static_cast<const float*>(g.B) + b * g.sb;
    float* C = static_cast<float*>(g.C) + b * g.sc;
    for (dev::I i = 0; i < g.m; ++i)
      for (dev::I j = 0; j < g.n; ++j) {
        float s = 0;
        for (dev::I q = 0; q < g.k; ++q)
          s += (g.ta ? A[i * g.lda + q] : A[q * g.lda + i]) * (g.tb ? B[q * g.ldb + j] : B[j * g.ldb + q]);
        C[j * g.ldc + i] = s;
      }
  }
}

}  // namespace

TEST_CASE("row-major GEMMs map onto column-major calls", "[device][gemm]") {
  // r = 3, c = 4, k = 5, batch 2; operands stored with padded rows to catch ld mix-ups.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      dev::Gemm g;
      g.ta = ta, g.tb = tb, g.r = 3, g.c = 4, g.k = 5, g.batch = 2;
      g.lda = (ta ? g.r : g.k) + 1, g.ldb = (tb ? g.k : g.c) + 2, g.ldd = g.c + 1;
      g.sa = 40, g.sb = 60, g.sd = 30;
      std::vector<float> A(80), B(120), D1(60, 0.0f), D2(60, 0.0f);
      for (std::size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 7) - 3;
      for (std::size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(i % 5) - 2;
      g.A = A.data(), g.B = B.data(), g.D = D1.data();
      dev::HostOps().gemm(g);
      dev::ColMajorGemm cm = dev::to_col_major(g);
      cm.C = D2.data();
      colmajor_gemm(cm, g.batch);
      INFO("ta " << ta << " tb " << tb);
      CHECK(D1 == D2);
      // One entry by hand for ta = tb = false: D[0][0] = sum_q A[0][q] B[q][0].
      if (!ta && !tb) {
        float s = 0;
        for (int q = 0; q < 5; ++q) s += A[q] * B[q * g.ldb];
        CHECK(D1[0] == s);
      }
    }
}

TEST_CASE("the device kernels (host emulation) match the dense reference", "[device][verify]") {
  const KernelTable emu = dev::emulated_device_kernels();
  struct Case {
    int B, L, M, H, E, k, mp, gpus, node;
    double f;
  };
  for (const Case& k : {Case{2, 8, 16, 32, 8, 2, 2, 8, 4, 2.0}, Case{2, 8, 16, 32, 8, 2, 4, 8, 4, 1.0},
                        Case{1, 16, 8, 16, 4, 1, 2, 4, 2, 0.5}, Case{2, 8, 16, 32, 4, 2, 1, 2, 2, 2.0},
                        // rows of 6 floats (24 bytes): Order copies element by element, not in 16-byte units
                        Case{2, 8, 6, 12, 4, 2, 2, 4, 2, 2.0}}) {
    moe::LayerSpec s;
    s.B = k.B, s.L = k.L, s.M = k.M, s.H = k.H, s.E = k.E, s.k = k.k, s.f = k.f, s.mp = k.mp;
    for (const char* name : {"baseline", "s1", "s2"}) {
      const VerifyResult r = verify_schedule(s, {k.gpus, k.node}, moe::preset(name), 11, &emu);
      INFO(name << " " << moe::spec_string(s) << " worst " << r.worst());
      CHECK(r.worst() < 1e-5);
    }
  }
  // The comparison can fail: a device Order that misplaces one value is caught.
  KernelTable broken = emu;
  broken[KernelRole::moe_order] = [good = emu.at(KernelRole::moe_order)](const Task& t, Memory& m) {
    good(t, m);
    auto& disp = m.at(t.rank, t.outputs[0]);
    std::swap(disp[0], disp[1]);
  };
  CHECK(verify_schedule(small_layer(), {8, 4}, moe::preset("s1"), 11, &broken).worst() > 1e-3);
  // Every builder option too (split points, gathers, fusions).
  const moe::LayerSpec s = small_layer();
  for (auto o : moe::search_space()) {
    const VerifyResult r = verify_schedule(s, {8, 4}, o, 5, &emu);
    INFO(o.describe() << " worst " << r.worst());
    CHECK(r.worst() < 1e-5);
  }
}

TEST_CASE("device kernels name the task when a buffer is wrong", "[device]") {
  TaskGraphBuilder b(1);
  b.add_stream_all("compute");
  b.add_buffer({0, "x", 4, DType::fp32});
  b.add_buffer({0, "y", 2, DType::fp32});
  Task t;
  t.name = "slice#0";
  t.compute().args = MoeSlotSliceArgs{1, 2, 1, 2, 0};  // E=1, C=2, Tl=1, M=2, member 0: needs 4 in, 2 out
  t.inputs = {"x"};
  t.outputs = {"z"};
  Memory m(std::move(b).build());
  dev::HostOps ops;
  const auto lookup = [&](const std::string& n) {
    auto& v = m.at(0, n);
    return dev::BufRef{v.data(), dev::Elem::f32, v.size()};
  };
  CHECK_THROWS_WITH(dev::run_task(t, ops, lookup, nullptr, nullptr), Catch::Contains("no buffer 'z'"));
  t.outputs = {"y"};
  t.compute().args = MoeSlotSliceArgs{1, 4, 1, 2, 0};  // C = 4: the input needs 8 elements
  CHECK_THROWS_WITH(dev::run_task(t, ops, lookup, nullptr, nullptr),
                    Catch::Contains("task 'slice#0'") && Catch::Contains("'x' has 4 elements, the kernel needs 8"));
}

TEST_CASE("repeated runs are summarized by median and percentiles", "[device][timing]") {
  using dev::percentile;
  // Nearest rank over {1..10} us: p10 -> 1st value, p50 -> 5th, p90 -> 9th.
  std::vector<Time> v;
  for (int i = 10; i >= 1; --i) v.push_back(Time::us(i));
  CHECK(percentile(v, 0.1) == Time::us(1));
  CHECK(percentile(v, 0.5) == Time::us(5));
  CHECK(percentile(v, 0.9) == Time::us(9));
  CHECK(percentile({Time::us(3)}, 0.9) == Time::us(3));
  // Two tasks, three runs: task 0 runs [0,2], [1,4], [0,3] us -> starts {0,1,0},
  // durations {2,3,3}: median start 0, median duration 3, p10 2, p90 3.
  SimResult r;
  dev::summarize({{{Time::us(0), Time::us(2)}, {Time::us(2), Time::us(5)}},
                  {{Time::us(1), Time::us(4)}, {Time::us(4), Time::us(5)}},
                  {{Time::us(0), Time::us(3)}, {Time::us(3), Time::us(9)}}},
                 &r);
  CHECK(r.trace[0].start == Time::us(0));
  CHECK(r.trace[0].end == Time::us(3));
  CHECK(r.spread[0] == std::make_pair(Time::us(2), Time::us(3)));
  // task 1: starts {2,4,3} -> 3; durations {3,1,6} -> median 3, p10 1, p90 6.
  CHECK(r.trace[1].start == Time::us(3));
  CHECK(r.trace[1].end == Time::us(6));
  CHECK(r.spread[1] == std::make_pair(Time::us(1), Time::us(6)));
  CHECK(r.makespan == Time::us(6));
}

TEST_CASE("inputs are rounded to the layer's type, ties to even", "[device][dtype]") {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even);
  // 1 + 3 * 2^-9 is nearer 1 + 2^-7.
  CHECK(round_to(DType::bf16, 1.0f + 0x1p-8f) == 1.0f);
  CHECK(round_to(DType::bf16, 1.0f + 3 * 0x1p-9f) == 1.0f + 0x1p-7f);
  CHECK(round_to(DType::bf16, -1.0f - 3 * 0x1p-9f) == -1.0f - 0x1p-7f);
  // fp16 keeps 11 significant bits: 2049 is halfway between 2048 and 2050 -> 2048; 2051 -> 2052.
  CHECK(round_to(DType::fp16, 2049.0f) == 2048.0f);
  CHECK(round_to(DType::fp16, 2051.0f) == 2052.0f);
  CHECK(round_to(DType::fp32, 1.0f + 0x1p-20f) == 1.0f + 0x1p-20f);
}

TEST_CASE("the enqueue order puts every task after its dependencies and keeps stream order", "[device][order]") {
  for (const char* name : {"baseline", "s1", "s2"}) {
    const TaskGraph g = small_training_graph(name);
    const auto order = dev::enqueue_order(g);
    // Position of each task's unit in the order.
    std::vector<int> pos(g.tasks().size(), -1);
    std::vector<int> seen_coll(g.collectives().size(), 0);
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (order[i].task >= 0) {
        CHECK(pos[order[i].task] == -1);
        pos[order[i].task] = static_cast<int>(i);
      } else {
        ++seen_coll[order[i].collective];
        for (const Task& t : g.tasks())
          if (!t.is_compute() && t.collective() == order[i].collective) pos[t.id] = static_cast<int>(i);
      }
    }
    INFO(name);
    for (int c : seen_coll) CHECK(c == 1);
    std::map<std::pair<int, int>, int> last;
    for (const Task& t : g.tasks()) {
      REQUIRE(pos[t.id] >= 0);
      for (int dep : t.deps) CHECK(pos[dep] < pos[t.id]);
      auto key = std::make_pair(t.rank, t.stream);
      if (last.count(key)) CHECK(pos[last[key]] <= pos[t.id]);
      last[key] = t.id;
    }
    // The same graph gives the same order (every process must agree).
    const auto again = dev::enqueue_order(g);
    REQUIRE(again.size() == order.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      CHECK((again[i].task == order[i].task && again[i].collective == order[i].collective));
  }
}

TEST_CASE("collectives called in opposite orders on two ranks cannot be enqueued", "[device][order]") {
  const TaskGraph g = parse_task_graph_text(R"(ranks: 2
streams: [comm]
collectives:
  - {name: a, op: allreduce, group: [0, 1], bytes: 1MiB}
  - {name: b, op: allreduce, group: [0, 1], bytes: 1MiB}
tasks:
  - {name: a0, rank: 0, stream: comm, collective: a}
  - {name: b0, rank: 0, stream: comm, collective: b}
  - {name: b1, rank: 1, stream: comm, collective: b}
  - {name: a1, rank: 1, stream: comm, collective: a}
)",
                                            "opposite.yaml");
  CHECK_THROWS_WITH(dev::enqueue_order(g), Catch::Contains("cycle"));
}

TEST_CASE("capacity slots over many chunks follow the sequential rule", "[device][gate]") {
  // 300 tokens x 2 choices = 600 choices: 10 chunks of 64. E = 5 experts of
  // capacity 70 (about 120 choices each, so about half are dropped).
  const dev::I count = 300, k = 2, E = 5, C = 70, chunk = 64, chunks = 10;
  std::vector<int> top(count * k);
  std::uint64_t x = 12345;
  for (auto& t : top) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    t = static_cast<int>((x >> 33) % E);
  }
  std::vector<float> probs(count * E);
  for (std::size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(i) / 7.0f;
  std::vector<float> route(count * k * 3, -7.0f);
  std::vector<int> counts(E * chunks);
  dev::HostOps ops;
  const dev::SlotsArgs a{top.data(), probs.data(), route.data(), counts.data(), count, E, k, C, chunk, chunks};
  ops.launch(dev::Body::slot_count, E * chunks, a);
  ops.launch(dev::Body::slot_scan, E, a);
  ops.launch(dev::Body::slot_assign, E * chunks, a);
  // The rule, sequentially: choice-major, token order, a full expert drops.
  std::vector<int> fill(E, 0);
  int dropped = 0;
  for (dev::I j = 0; j < k; ++j)
    for (dev::I i = 0; i < count; ++i) {
      const int e = top[i * k + j];
      const float slot = fill[e] < C ? static_cast<float>(fill[e]++) : -1.0f;
      dropped += slot < 0;
      const float* r = &route[(i * k + j) * 3];
      INFO("token " << i << " choice " << j);
      REQUIRE(r[0] == static_cast<float>(e));
      REQUIRE(r[1] == slot);
      REQUIRE(r[2] == probs[i * E + e]);
    }
  CHECK(dropped > 0);  // the case exercises drops
}
