// FP8 layers (layer key dtype=fp8) and group-limited routing (expert_groups,
// topk_groups): an fp8 expert GEMM's time by hand, the dispatch's fp8 bytes
// against the bf16 combine, the closed form against the simulator, the group
// limit of every drawn token (docs/moe-costs.md, "FP8 layers", "Group-limited
// routing").
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <set>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/dispatch.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/memory.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}

const MoeOp& op_of(const std::vector<MoeOp>& ops, MoeStep k) {
  for (const MoeOp& o : ops)
    if (o.kind == k) return o;
  FAIL("no op of that kind");
  return ops.front();
}

// The bytes of the graph's collectives of operation `op`, in the order the graph holds them.
std::vector<std::uint64_t> bytes_of(const TaskGraph& g, CollOp op) {
  std::vector<std::uint64_t> v;
  for (const Collective& c : g.collectives())
    if (c.op == op) v.push_back(c.bytes);
  return v;
}

}  // namespace

TEST_CASE("fp8: an expert GEMM's time from the GPU profile's sustained fp8 rate", "[fp8][kernels]") {
  // One GPU, B=1, L=4096 -> S=4096, M=H=4096, E=2, k=2, f=1: capacity T = ceil(2*4096/2) = 4096
  // rows per expert, both experts local (E_local = 2).
  LayerSpec s;
  s.B = 1, s.L = 4096, s.M = 4096, s.H = 4096, s.E = 2, s.k = 2, s.f = 1.0, s.mp = 1;
  s.dtype = DType::fp8;
  const Dims d = make_dims(s, 1, 1);
  CHECK(d.fp8);
  CHECK(d.dtype_bytes == 2);  // the activations stay bf16
  const auto fwd = forward_ops(s, d, preset("baseline"));
  const auto ks = kernels(op_of(fwd, MoeStep::experts), s, d);
  // Forward: fc1, the activation, the fp8 cast, fc2.
  REQUIRE(ks.size() == 4);
  const Kernel& fc1 = ks[0];
  CHECK(std::string(fc1.name) == "expert_fc1");
  REQUIRE(fc1.dtype);
  CHECK(*fc1.dtype == DType::fp8);
  CHECK(fc1.shape == std::array<std::int64_t, 4>{4096, 4096, 4096, 1});
  CHECK(fc1.flops == 2ULL * 4096 * 4096 * 4096);  // 137'438'953'472
  // Both inputs one byte an element, the output bf16: (4096^2 + 4096^2) * 1 + 4096^2 * 2.
  CHECK(fc1.bytes == 4ULL * 4096 * 4096);
  // The activation's output cast to fp8 and transposed (reads 2, writes 1 + 1 a byte: 4 an
  // element of [4096, 4096]), and the dispatched fp8 input transposed (reads 1, writes 1).
  CHECK(std::string(ks[2].name) == "expert_fp8_cast");
  REQUIRE(ks[2].dtype);
  CHECK(*ks[2].dtype == DType::bf16);
  CHECK(ks[2].bytes == 4ULL * 4096 * 4096 + 2ULL * 4096 * 4096);
  // By hand on the H100 profile (sim/compute/gpu_profile.cpp: 132 SMs, sustained fp8 1426 TFLOP/s,
  // DeepGEMM's best dense GEMM on H800; 3.35 TB/s HBM at 1355/1555; a 3 us floor):
  //   every tile shape covers [4096, 4096] in waves of the same work: 256x128 tiles 16*32 = 512,
  //   4 waves over 132 SMs, each SM 4 * 2*256*128*4096 = 1'073'741'824 FLOPs at 1426e12/132 per s
  //   = 99.3926 us; the 67.1 MB it moves take 23.0 us (compute-bound); + 3 us = 102.3926 us.
  // The same GEMM in bf16 (797.51 TFLOP/s sustained): 177.7208 + 3 = 180.7208 us.
  const GpuProfile& h100 = gpu_profile("h100");
  const double t8 = kernel_time(fc1, s.dtype, h100, nullptr, "").to_seconds();
  CHECK(std::abs(t8 - (3e-6 + 1073741824.0 / (1426e12 / 132))) < 1e-11);
  LayerSpec b = s;
  b.dtype = DType::bf16;
  const Dims db = make_dims(b, 1, 1);
  const auto kb = kernels(op_of(forward_ops(b, db, preset("baseline")), MoeStep::experts), b, db);
  REQUIRE(kb.size() == 3);  // no cast
  const double t16 = kernel_time(kb[0], b.dtype, h100, nullptr, "").to_seconds();
  CHECK(std::abs(t16 - (3e-6 + 1073741824.0 / (797.51e12 / 132))) < 1e-11);
  // The cast: 100'663'296 bytes at 3.35e12 * 1355/1555 B/s = 34.4843 us, + 3 us.
  const double cast = kernel_time(ks[2], s.dtype, h100, nullptr, "").to_seconds();
  CHECK(std::abs(cast - (3e-6 + 100663296.0 / (3.35e12 * 1355.0 / 1555.0))) < 1e-11);
  // Backward: the output gradient cast, fc2's data and weight gradients, the activation, its
  // gradient's cast, fc1's two gradients; the weight gradients written in fp32:
  // [4096, 4096] in, [4096, 4096] in, [4096, 4096] fp32 out = (2 + 4) * 4096^2 bytes.
  MoeOp bw = op_of(fwd, MoeStep::experts);
  bw.backward = true;
  const auto kbw = kernels(bw, s, d);
  REQUIRE(kbw.size() == 7);
  CHECK(std::string(kbw[2].name) == "expert_fc2_wgrad");
  CHECK(kbw[2].bytes == 6ULL * 4096 * 4096);
  // An RTX 2080 Ti has no FP8 tensor cores: timing the GEMM refuses, naming the key.
  CHECK_THROWS_WITH(kernel_time(fc1, s.dtype, gpu_profile("rtx2080ti"), nullptr, ""),
                    Catch::Contains("key 'dtype': fp8 needs FP8 tensor cores; GPU 'rtx2080ti' has none"));
}

TEST_CASE("fp8: the dispatch moves fp8 rows with a scale per 128, the combine bf16", "[fp8][graph]") {
  // dgx-h100 (8 GPUs), mp=1, B=1, L=1024 -> S=1024, M=1024, E=8, k=2, f=1: T = ceil(2*1024/8) =
  // 256, the AlltoAll buffer D = E*T*M = 8*256*1024 = 2'097'152 elements per rank.
  //   fp8: D bytes and a 4-byte scale per 128 elements, D/32 = 65'536: 2'162'688 bytes
  //   bf16: 2*D = 4'194'304 bytes
  LayerSpec s;
  s.B = 1, s.L = 1024, s.M = 1024, s.H = 2048, s.E = 8, s.k = 2, s.f = 1.0, s.mp = 1;
  s.ds_moe = DsMoe::lean;
  s.dispatch = Dispatch::index;
  s.dtype = DType::fp8;
  const Dims d = make_dims(s, 8, 8);
  const ScheduleOptions o = preset("baseline");
  const auto fwd = forward_ops(s, d, o);
  const auto bwd = backward_ops(fwd, s, d, o);
  const auto f = bytes_of(build_graph(fwd, s, d, o, GraphData::timing_only), CollOp::alltoall);
  CHECK(f == std::vector<std::uint64_t>{2'162'688, 4'194'304});  // dispatch fp8, combine bf16
  // Backward: the combine's adjoint (the output gradient before fc2) in fp8, the dispatch's bf16.
  const auto b = bytes_of(build_backward_graph(fwd, bwd, s, d, o, GraphData::timing_only), CollOp::alltoall);
  CHECK(b == std::vector<std::uint64_t>{2'162'688, 4'194'304});
  // The bf16 layer moves 2*D both ways.
  s.dtype = DType::bf16;
  const Dims d16 = make_dims(s, 8, 8);
  CHECK(bytes_of(build_graph(forward_ops(s, d16, o), s, d16, o, GraphData::timing_only), CollOp::alltoall) ==
        std::vector<std::uint64_t>{4'194'304, 4'194'304});
  // wire_bytes rounds the scales up: 129 elements carry two scales.
  CHECK(wire_bytes(d, 129, true) == 129 + 5);
  CHECK(wire_bytes(d, 128, true) == 128 + 4);
  CHECK(wire_bytes(d, 128, false) == 256);
}

TEST_CASE("fp8: peak memory holds fp8 weight copies and fp32 gradients", "[fp8][memory]") {
  // One GPU, M=1024, H=2048, E=2 (both local), ungated, no shared experts. Expert elements
  // 2 * 2 * 1024 * 2048 = 8'388'608, gate 1024 * 2 = 2048.
  //   bf16: weights (8'388'608 + 2048) * 2 = 16'781'312; gradients the same
  //   fp8: weights 16'781'312 + 8'388'608 * 2 (fp8 copies, rowwise and transposed) = 33'558'528;
  //        gradients (8'388'608 + 2048) * 4 = 33'562'624
  LayerSpec s;
  s.B = 1, s.L = 1024, s.M = 1024, s.H = 2048, s.E = 2, s.k = 1, s.f = 1.0, s.mp = 1;
  s.dtype = DType::bf16;
  const Dims d16 = make_dims(s, 1, 1);
  const MemoryPeak p16 = peak_memory(forward_ops(s, d16, preset("baseline")), s, d16);
  CHECK(p16.weights == 16'781'312);
  CHECK(p16.grads == 16'781'312);
  s.dtype = DType::fp8;
  const Dims d8 = make_dims(s, 1, 1);
  const MemoryPeak p8 = peak_memory(forward_ops(s, d8, preset("baseline")), s, d8);
  CHECK(p8.weights == 33'558'528);
  CHECK(p8.grads == 33'562'624);
  CHECK(p8.input == p16.input);  // the layer's input stays bf16
}

TEST_CASE("fp8: the closed form equals the simulator", "[fp8][model]") {
  // As the gated experts' case (tests/test_glu.cpp): 4 DGX H100 nodes, mp = 8, a pairwise
  // AlltoAll on the analytical network; the baseline and S1 are chains, so the closed form,
  // which sends the same fp8 and bf16 bytes, equals the simulation. The AllGather dispatcher
  // moves its token AllGather in fp8 too.
  const Topology t = topo("dgx-h100", {"nodes=4"});
  LayerSpec s;
  s.mp = 8;
  s.dtype = DType::fp8;
  s.glu = true;
  for (std::int64_t shared : {0, 2048})
    for (TokenDispatcher td : {TokenDispatcher::alltoall, TokenDispatcher::allgather}) {
      s.shared_H = shared;
      s.token_dispatcher = td;
      const LayerRun run{t, s, "analytical"};
      for (const char* name : {"baseline", "s1"}) {
        INFO(name << " shared_H=" << shared << " dispatcher=" << to_string(td));
        ScheduleOptions o = preset(name);
        o.a2a_algo = "pairwise";
        const ScheduleResult r = run_schedule(run, o);
        CHECK(std::abs(r.forward.to_seconds() - r.model_forward_s) < 1e-9);
        CHECK(std::abs(r.backward.to_seconds() - r.model_backward_s) < 1e-9);
      }
    }
  // Where the expert GEMMs dominate (Mixtral 8x7B's sizes on one node, mp=1), the fp8 layer is
  // faster than the same layer in bf16 both ways. (On the small layer above the backward is not:
  // its expert GEMMs are short, and each fp8 cast is a kernel of its own with its 3 us floor.)
  const Topology one = topo("dgx-h100");
  LayerSpec m;
  m.B = 1, m.L = 4096, m.M = 4096, m.H = 14336, m.E = 8, m.k = 2, m.mp = 1, m.glu = true;
  m.ds_moe = DsMoe::lean;
  m.dispatch = Dispatch::index;
  m.dtype = DType::fp8;
  const ScheduleResult r8 = run_schedule(LayerRun{one, m, "flow"}, preset("s1"));
  m.dtype = DType::bf16;
  const ScheduleResult r16 = run_schedule(LayerRun{one, m, "flow"}, preset("s1"));
  CHECK(r8.forward < r16.forward);
  CHECK(r8.backward < r16.backward);
}

TEST_CASE("group-limited routing: every token's experts in at most topk_groups groups", "[groups][dropless]") {
  // One token per (source, part) row: 64 sources of 8 tokens in 8 parts, E=64 in 8 groups of 8,
  // k=8. Each row is then one token's 8 distinct experts.
  const LoadModel uni = parse_load_model("uniform", "load");
  auto groups_of_rows = [](const std::vector<std::uint64_t>& c, int rows, int E, int per) {
    std::vector<int> n;
    for (int r = 0; r < rows; ++r) {
      std::set<int> g;
      std::uint64_t sel = 0;
      for (int e = 0; e < E; ++e) {
        const std::uint64_t v = c[static_cast<std::size_t>(r) * E + e];
        CHECK(v <= 1);  // distinct experts
        sel += v;
        if (v) g.insert(e / per);
      }
      CHECK(sel == 8);
      n.push_back(static_cast<int>(g.size()));
    }
    return n;
  };
  const auto lim = draw_expert_counts(uni, 3, 64, 8, 8, 64, 8, 8, 2);
  const auto nl = groups_of_rows(lim, 64 * 8, 64, 8);
  CHECK(*std::max_element(nl.begin(), nl.end()) <= 2);
  // Without the limit, 8 uniform experts of 64 almost never fall in two groups of 8: the draw
  // above is what limits them.
  const auto free = draw_expert_counts(uni, 3, 64, 8, 8, 64, 8, 8, 0);
  const auto nf = groups_of_rows(free, 64 * 8, 64, 8);
  CHECK(*std::max_element(nf.begin(), nf.end()) > 2);
  // Same seed, same counts; another seed, other counts.
  CHECK(draw_expert_counts(uni, 3, 64, 8, 8, 64, 8, 8, 2) == lim);
  CHECK(draw_expert_counts(uni, 4, 64, 8, 8, 64, 8, 8, 2) != lim);
  // One group allowed: k=8 experts all from one group of 8, so every token takes a whole group.
  const auto one = draw_expert_counts(uni, 5, 4, 8, 8, 64, 8, 8, 1);
  const auto n1 = groups_of_rows(one, 4 * 8, 64, 8);
  CHECK(std::all_of(n1.begin(), n1.end(), [](int g) { return g == 1; }));
}

TEST_CASE("group-limited routing in the layer: the share of selections that cross nodes", "[groups][dropless]") {
  // 16 GPUs in two nodes of 8, mp=1, E=16: expert e on rank e. A hand-made routing: source 0
  // (node 0) sends 3 selections to expert 1 (node 0) and 1 to expert 9 (node 1); source 8
  // (node 1) sends 4 to expert 2 (node 0). Away: 1 + 4 of 8 = 0.625.
  LayerSpec s;
  s.E = 16, s.k = 2, s.mp = 1;
  const Dims d = make_dims(s, 16, 8);
  LayerLoad l;
  l.groups = 16, l.parts = 1, l.E = 16;
  l.counts.assign(16 * 16, 0);
  l.counts[0 * 16 + 1] = 3;
  l.counts[0 * 16 + 9] = 1;
  l.counts[8 * 16 + 2] = 4;
  CHECK(inter_node_share(l, d, 8) == 0.625);
  // DeepSeek-V3's routing drawn on its EP layout (8 nodes of 8, E=256 in 8 groups, k=8): the
  // limit to 4 groups leaves the share crossing nodes at about 7/8, as without it (a token's
  // own group is chosen with probability 4/8 and then holds 8/4 of its 8 selections on
  // average: 1 of 8 either way). Both within 0.01 of 0.875 over 64 x 512 tokens.
  LayerSpec v;
  v.B = 1, v.L = 512, v.M = 1024, v.H = 2048, v.E = 256, v.k = 8, v.mp = 1;
  ScheduleKeys keys;
  apply_keys(&v, &keys, {"load=uniform", "expert_groups=8"}, "test");
  const Dims dv = make_dims(v, 64, 8);
  const double free = inter_node_share(*draw_layer_load(v, dv), dv, 8);
  v.topk_groups = 4;
  const double lim = inter_node_share(*draw_layer_load(v, dv), dv, 8);
  CHECK(std::abs(free - 0.875) < 0.01);
  CHECK(std::abs(lim - 0.875) < 0.01);
}

TEST_CASE("fp8 and group keys: make_dims refuses what it cannot model", "[fp8][groups][errors]") {
  LayerSpec s;
  s.dtype = DType::fp8;
  s.M = 1000;
  CHECK_THROWS_WITH(make_dims(s, 8, 8), Catch::Contains("M=1000 is not a multiple of 128"));
  s.M = 1024;
  s.expert_groups = 5;  // E = 32
  CHECK_THROWS_WITH(make_dims(s, 8, 8), Catch::Contains("key 'expert_groups': E=32 experts do not divide into 5"));
  s.expert_groups = 4;
  s.topk_groups = 5;
  CHECK_THROWS_WITH(make_dims(s, 8, 8), Catch::Contains("key 'topk_groups': 5 groups per token, but expert_groups=4"));
  s.topk_groups = 2;
  CHECK_THROWS_WITH(make_dims(s, 8, 8), Catch::Contains("set load=uniform"));
  ScheduleKeys keys;
  apply_keys(&s, &keys, {"load=zipf:1.2"}, "test");
  CHECK_THROWS_WITH(make_dims(s, 8, 8), Catch::Contains("not with load=zipf:1.2"));
  apply_keys(&s, &keys, {"load=uniform", "expert_groups=16", "topk_groups=1", "k=3"}, "test");
  CHECK_THROWS_WITH(make_dims(s, 8, 8), Catch::Contains("top-k k=3 experts per token, but 1 group(s) of 2 experts"));
}
