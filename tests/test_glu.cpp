// Gated experts (layer key glu) and shared experts (shared_H): the kernels'
// FLOPs and bytes, the memory they add, the closed form against the
// simulator, and the executors' refusal (docs/moe-costs.md, "Gated experts",
// "Shared experts").
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <cmath>
#include <numeric>

#include "backend/verify.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/memory.hpp"
#include "sim/moe/model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}

// One GPU, fp32: B=1, L=8 -> S=8, M=4, H=8, E=2, k=1, f=1 -> C = ceil(8/2) = 4,
// the dispatch buffer D = E*C*M = 32 elements, E_local = 2 experts of 4 rows each.
LayerSpec tiny() {
  LayerSpec s;
  s.B = 1, s.L = 8, s.M = 4, s.H = 8, s.E = 2, s.k = 1, s.f = 1.0, s.mp = 1;
  return s;
}

const MoeOp& op_of(const std::vector<MoeOp>& ops, MoeStep k) {
  for (const MoeOp& o : ops)
    if (o.kind == k) return o;
  FAIL("no op of that kind");
  return ops.front();
}

std::uint64_t sum_flops(const std::vector<Kernel>& ks) {
  std::uint64_t f = 0;
  for (const Kernel& k : ks) f += k.flops;
  return f;
}

}  // namespace

TEST_CASE("gated experts: fc1 twice as wide, the SwiGLU's bytes, 1.5x the GEMM FLOPs", "[glu][kernels]") {
  LayerSpec s = tiny();
  const Dims d = make_dims(s, 1, 1);
  const auto fwd = forward_ops(s, d, preset("baseline"));
  const MoeOp& ex = op_of(fwd, MoeStep::experts);
  REQUIRE(ex.elems == 32);
  // Ungated, one expert's 4 rows, h = 8, b = 4:
  //   fc1 [4, 4] x [4, 8]: 2*4*8*4 = 256 FLOPs, (16 + 32 + 32)*4 = 320 bytes
  //   activation: reads and writes [4, 8]: 2*4*8*4 = 256 bytes
  //   fc2 [4, 8] x [8, 4]: 256 FLOPs, (32 + 32 + 16)*4 = 320 bytes
  const auto plain = kernels(ex, s, d);
  REQUIRE(plain.size() == 3);
  CHECK(plain[0].flops == 256);
  CHECK(plain[0].bytes == 320);
  CHECK(plain[1].bytes == 256);
  CHECK(plain[2].flops == 256);
  // Gated: fc1 [4, 4] x [4, 16]: 2*4*16*4 = 512 FLOPs, (16 + 64 + 64)*4 = 576 bytes;
  // silu(a) * b reads [4, 16] and writes [4, 8]: 24*4*4 = 384 bytes; fc2 unchanged.
  s.glu = true;
  const auto gated = kernels(ex, s, d);
  REQUIRE(gated.size() == 3);
  CHECK(gated[0].flops == 512);
  CHECK(gated[0].bytes == 576);
  CHECK(gated[0].shape == std::array<std::int64_t, 4>{4, 16, 4, 1});
  CHECK(gated[1].bytes == 384);
  CHECK(gated[2].flops == 256);
  CHECK(gated[2].bytes == 320);
  CHECK(sum_flops(gated) * 2 == sum_flops(plain) * 3);  // 768 = 1.5 x 512
  // Backward: fc2's data and weight gradients (256 each), the SwiGLU's backward reading the
  // gradient [4, 8] and both halves [4, 16], writing both halves' gradients [4, 16]:
  // (8 + 16 + 16)*4*4 = 640 bytes (ungated 3*4*8*4 = 384), fc1's two gradients 512 each.
  MoeOp bex = ex;
  bex.backward = true;
  const auto gb = kernels(bex, s, d);
  REQUIRE(gb.size() == 5);
  CHECK(gb[0].flops == 256);
  CHECK(gb[1].flops == 256);
  CHECK(gb[2].bytes == 640);
  CHECK(gb[3].flops == 512);
  CHECK(gb[3].shape == std::array<std::int64_t, 4>{4, 4, 16, 1});
  CHECK(gb[4].flops == 512);
  CHECK(gb[4].shape == std::array<std::int64_t, 4>{4, 16, 4, 1});
  s.glu = false;
  CHECK(kernels(bex, s, d)[2].bytes == 384);
  CHECK(sum_flops(kernels(bex, s, d)) == 1024);
  CHECK(sum_flops(gb) == 1536);
  // The lean baseline's batched GEMMs: both local experts (batch 2) of 4 rows each.
  s.glu = true;
  s.ds_moe = DsMoe::lean;
  const auto lean = kernels(op_of(forward_ops(s, d, preset("baseline")), MoeStep::experts), s, d);
  CHECK(lean[0].shape == std::array<std::int64_t, 4>{4, 16, 4, 2});
  CHECK(lean[0].flops == 1024);
  CHECK(lean[1].bytes == 768);  // 2 experts x 384
}

TEST_CASE("gated experts' memory: a third more weights and saved activations", "[glu][memory]") {
  // tests/test_memory.cpp derives the ungated peaks of this layer: weights 544 (two experts of
  // fc1 [4, 8] + fc2 [8, 4] fp32 = 512, and the gate's 32), forward 2144 at the experts, backward
  // 3136 at the experts' backward. Gated:
  //   weights: 2 experts x 3 x [4, 8] x 4 B = 768, + 32 = 800 (+256)
  //   forward at the experts: fc1's [8 rows, 16] output saved by the SwiGLU and the activation's
  //     [8, 8] saved by fc2: 3*8*8*4 = 768 instead of 512: 2144 + 256 (weights) + 256 = 2656
  //   backward at the experts: 2W 1600, X 128, saved 1408 (768 + gate's 256 + order's 256 + the
  //     experts' input 128), the combine weights' pending gradient 256, the output and input
  //     gradients 128 + 128, one expert's gradients of fc1's and the activation's outputs
  //     3*4*8*4 = 384: 4032 (3136 + 512 + 256 + 128)
  LayerSpec s = tiny();
  s.glu = true;
  const Dims d = make_dims(s, 1, 1);
  const MemoryPeak p = peak_memory(forward_ops(s, d, preset("baseline")), s, d);
  CHECK(p.weights == 800);
  CHECK(p.grads == 800);
  CHECK(p.forward == 2656);
  CHECK(p.backward == 4032);
  // Shared experts of shared_H = 8 (ungated): weights fc1 [4, 8] + fc2 [8, 4] = 256 bytes; their
  // saved fc1 and activation outputs on all 8 tokens 2*8*8*4 = 512 and their output [8, 4] = 128,
  // alive until the layer adds it: the forward peak 2144 + 256 + 512 + 128 = 3040; backward:
  // 3136 + 2 x 256 (weights and gradients) + 512 (saved) = 4160 at the routed experts.
  LayerSpec sh = tiny();
  sh.shared_H = 8;
  const Dims ds = make_dims(sh, 1, 1);
  const MemoryPeak q = peak_memory(forward_ops(sh, ds, preset("baseline")), sh, ds);
  CHECK(q.weights == 800);
  CHECK(q.forward == 3040);
  CHECK(q.backward == 4160);
}

TEST_CASE("the shared experts' time is their kernels' on a layer where nothing else changes", "[glu][shared]") {
  // dgx-h100 (8 H100s, one node), mp = 1, bf16: S = B*L = 4096 tokens, M = 4096,
  // shared_H = 2048 gated. FLOPs by hand:
  //   fc1 [4096, 4096] x [4096, 4096] (2*2048 wide): 2*4096^3 = 137'438'953'472
  //   fc2 [4096, 2048] x [2048, 4096]: 2*4096*4096*2048 = 68'719'476'736
  // The shared experts run first on the compute stream; with mp = 1 there is no AllReduce, so
  // the forward grows by their three kernels' times exactly, the backward by their five.
  const Topology t = topo("dgx-h100");
  LayerSpec s;
  s.B = 1, s.L = 4096, s.M = 4096, s.H = 4096, s.E = 8, s.k = 2, s.f = 1.0, s.mp = 1;
  s.dtype = DType::bf16;
  s.glu = true;
  LayerSpec sh = s;
  sh.shared_H = 2048;
  const Dims d = make_dims(sh, 8, 8);
  const auto fwd = forward_ops(sh, d, preset("s1"));
  REQUIRE(fwd.front().kind == MoeStep::shared);
  const auto kf = kernels(fwd.front(), sh, d);
  REQUIRE(kf.size() == 3);
  CHECK(kf[0].flops == 137'438'953'472ULL);
  CHECK(kf[2].flops == 68'719'476'736ULL);
  CHECK(kf[1].bytes == 3ULL * 4096 * 2048 * 2);  // SwiGLU: reads [S, 2*2048], writes [S, 2048], bf16
  MoeOp b = fwd.front();
  b.backward = true;
  const auto kb = kernels(b, sh, d);
  REQUIRE(kb.size() == 5);
  CHECK(sum_flops(kb) == 2 * (137'438'953'472ULL + 68'719'476'736ULL));
  const GpuProfile& gpu = gpu_profile("h100");
  auto seconds = [&](const std::vector<Kernel>& ks) {
    Time sum;
    for (const Kernel& k : ks) sum += kernel_time(k, sh.dtype, gpu, nullptr, "");
    return sum;
  };
  // By hand, from the H100 profile (sim/compute/gpu_profile.cpp: 132 SMs, 797.51 TFLOP/s BF16
  // sustained, 3.35 TB/s HBM at 1355/1555 of it, a 3 us floor) and sim/compute/gemm_model.hpp:
  //   fc1 [4096, 4096, k 4096]: 256x128 tiles 16*32 = 512, 4 waves over 132 SMs, each SM
  //     4 * 2*256*128*4096 = 1'073'741'824 FLOPs at 797.51e12/132 per s: 177.7208 us (the
  //     100.7 MB it moves take 34.5 us: compute-bound), + 3 us = 180.7208 us
  //   fc2 [4096, 4096, k 2048], and each of its gradients ([4096, 2048, k 4096], [2048, 4096,
  //     k 4096]): half the waves' FLOPs, 88.8604 us + 3 = 91.8604 us
  //   SwiGLU: 3*4096*2048*2 = 50'331'648 B at 2.91913 TB/s = 17.2420 us + 3 = 20.2420 us;
  //     backward 5*4096*2048*2 B: 28.7367 us + 3 = 31.7367 us
  //   fc1's two gradients: 180.7208 us each
  // forward 180.7208 + 20.2420 + 91.8604 = 292.8228 us; backward 2*91.8604 + 31.7367 + 2*180.7208
  // = 576.8983 us.
  const double hbm = 3.35e12 * 1355.0 / 1555.0, per_sm = 797.51e12 / 132;
  const double fc1 = 3e-6 + 1073741824.0 / per_sm, fc2 = 3e-6 + 536870912.0 / per_sm;
  const double act = 3e-6 + 3.0 * 4096 * 2048 * 2 / hbm, act_b = 3e-6 + 5.0 * 4096 * 2048 * 2 / hbm;
  for (const char* sched : {"baseline", "s1", "s2"}) {
    INFO(sched);
    const ScheduleResult without = run_schedule(LayerRun{t, s, "flow"}, preset(sched));
    const ScheduleResult with = run_schedule(LayerRun{t, sh, "flow"}, preset(sched));
    CHECK(with.forward - without.forward == seconds(kf));
    CHECK(with.backward - without.backward == seconds(kb));
    // Each task rounds to the picosecond: within 1 ns of the arithmetic.
    CHECK(std::abs((with.forward - without.forward).to_seconds() - (fc1 + act + fc2)) < 1e-9);
    CHECK(std::abs((with.backward - without.backward).to_seconds() - (2 * fc2 + act_b + 2 * fc1)) < 1e-9);
    CHECK(with.peak_memory_bytes > without.peak_memory_bytes);
  }
  // Sharded over mp = 2: each rank computes shared_H/2 = 1024 wide and an AllReduce over its MP
  // pair sums fc2's partial outputs, [S, M] elements, forward and backward.
  LayerSpec s2 = sh;
  s2.mp = 2;
  const Dims d2 = make_dims(s2, 8, 8);
  const auto f2 = forward_ops(s2, d2, preset("s1"));
  REQUIRE(f2.size() > 2);
  CHECK(kernels(f2[0], s2, d2)[0].flops == 137'438'953'472ULL / 2);
  CHECK(f2[1].kind == MoeStep::ar);
  CHECK(f2[1].group == GroupKind::mp);
  CHECK(f2[1].elems == 4096 * 4096);
  const auto b2 = backward_ops(f2, s2, d2, preset("s1"));
  // The backward ends with the shared experts' backward, then the AllReduce of their input gradient.
  CHECK(b2[b2.size() - 2].kind == MoeStep::shared);
  CHECK(b2.back().kind == MoeStep::ar);
}

TEST_CASE("the closed form still times what the simulator runs with gated and shared experts", "[glu][model]") {
  // As tests/test_moe.cpp's analytical-network case: 4 DGX H100 nodes, mp = 8, pairwise
  // AlltoAll; the baseline and S1 are chains, so the closed form equals the simulation.
  const Topology t = topo("dgx-h100", {"nodes=4"});
  LayerSpec s;
  s.mp = 8;
  s.dtype = DType::bf16;
  s.glu = true;
  for (std::int64_t shared : {0, 2048}) {
    s.shared_H = shared;
    const LayerRun run{t, s, "analytical"};
    for (const char* name : {"baseline", "s1"}) {
      INFO(name << " shared_H=" << shared);
      ScheduleOptions o = preset(name);
      o.a2a_algo = "pairwise";
      const ScheduleResult r = run_schedule(run, o);
      CHECK(std::abs(r.forward.to_seconds() - r.model_forward_s) < 1e-9);
      CHECK(std::abs(r.backward.to_seconds() - r.model_backward_s) < 1e-9);
    }
  }
}

TEST_CASE("glu and shared_H: keys, checks and the executors' refusal", "[glu][errors]") {
  LayerSpec s;
  apply_assignments(&s, nullptr, {"glu=true", "shared_H=2048"}, "--set");
  CHECK(s.glu);
  CHECK(s.shared_H == 2048);
  CHECK(spec_string(s).find(",glu=true,shared_H=2048") != std::string::npos);
  // Defaults are not named: existing spec strings and sweep columns keep their form.
  CHECK(spec_string(LayerSpec{}).find("glu") == std::string::npos);
  CHECK(layer_key_columns(",").find("glu") == std::string::npos);
  CHECK_THROWS_WITH(apply_assignments(&s, nullptr, {"glu=yes"}, "--set"), Catch::Contains("key 'glu'"));
  CHECK_THROWS_WITH(apply_assignments(&s, nullptr, {"shared_H=-1"}, "--set"), Catch::Contains("key 'shared_H'"));
  s.mp = 4;
  s.shared_H = 2050;  // not a multiple of mp
  CHECK_THROWS_WITH(make_dims(s, 32, 8), Catch::Contains("shared_H"));
  LayerSpec g = exec::small_layer();
  g.glu = true;
  CHECK_THROWS_AS(exec::check_executable(g), UserError);
  CHECK_THROWS_WITH(exec::check_executable(g), Catch::Contains("glu"));
  LayerSpec h = exec::small_layer();
  h.shared_H = 32;
  CHECK_THROWS_WITH(exec::check_executable(h), Catch::Contains("shared_H"));
  CHECK_NOTHROW(exec::check_executable(exec::small_layer()));
}

TEST_CASE("a model spec's glu gates the dense FFNs and the experts", "[glu][model]") {
  // experiments/bert-moe.yaml with `glu: true`: the dense blocks' fc1 is [S, M] x [M, 2*ffn/G],
  // so their FFN costs more forward and backward, and so does the MoE layer (its experts gated).
  const std::string file = std::string(PARMSIM_SOURCE_DIR) + "/experiments/bert-moe.yaml";
  std::string text;
  {
    std::ifstream in(file);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const ModelSpec plain = parse_model_spec_text(text, file);
  const ModelSpec gated = parse_model_spec_text(text + "glu: true\n", file);
  CHECK_FALSE(plain.layer.glu);
  CHECK(gated.layer.glu);
  const Topology t = load_topology(plain.topology_file);
  const auto rp = run_model(plain, t, nullptr), rg = run_model(gated, t, nullptr);
  REQUIRE(rp.size() == rg.size());
  auto part = [](const IterationResult& r, const std::string& name) -> const Component& {
    for (const Component& c : r.parts)
      if (c.name == name) return c;
    FAIL("no component " << name);
    return r.parts.front();
  };
  for (std::size_t i = 0; i < rp.size(); ++i) {
    INFO(rp[i].schedule);
    CHECK(part(rg[i], "dense_ffn").forward > part(rp[i], "dense_ffn").forward);
    CHECK(part(rg[i], "dense_ffn").backward > part(rp[i], "dense_ffn").backward);
    CHECK(part(rg[i], "moe_layer").forward > part(rp[i], "moe_layer").forward);
    CHECK(part(rg[i], "attention").forward == part(rp[i], "attention").forward);
  }
  CHECK_THROWS_WITH(parse_model_spec_text(text + "glu: perhaps\n", file), Catch::Contains("glu"));
}

TEST_CASE("gated experts' gradients over the expert data-parallel group count three matrices", "[glu][model]") {
  // experiments/bert-moe.yaml on parm-32gpu (P = 32), mp = 4, with ep = 4: DP = 32/(4*4) = 2
  // replicas, E = experts_per_gpu * mp * ep = 16, E_local = 16/4 = 4. One AllReduce after the
  // backward pass (grad_bucket none): its last bucket is the expert gradients of the 12/2 = 6 MoE
  // layers, 6 * 4 experts * M*H/G = 6 * 4 * 768*3072/4 = 14'155'776 elements per weight matrix:
  // two matrices ungated (28'311'552), three gated (42'467'328).
  const std::string file = std::string(PARMSIM_SOURCE_DIR) + "/experiments/bert-moe.yaml";
  std::string text;
  {
    std::ifstream in(file);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = text.find("grad_bucket: 500000000");
  REQUIRE(at != std::string::npos);
  text.replace(at, std::string("grad_bucket: 500000000").size(), "grad_bucket: none\nep: 4");
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  const auto plain = run_model(parse_model_spec_text(text, file), t, nullptr);
  const auto gated = run_model(parse_model_spec_text(text + "glu: true\n", file), t, nullptr);
  REQUIRE_FALSE(plain.empty());
  REQUIRE(plain[0].grad_sync.bucket_elems.size() == 2);
  REQUIRE(gated[0].grad_sync.bucket_elems.size() == 2);
  CHECK(plain[0].grad_sync.bucket_elems[1] == 28'311'552);
  CHECK(gated[0].grad_sync.bucket_elems[1] == 42'467'328);
  // The dense gradients: the 6 dense FFNs' fc1 twice as wide, one more M*H/G matrix each:
  // 6 * 768*3072/4 = 3'538'944 more elements.
  CHECK(gated[0].grad_sync.bucket_elems[0] - plain[0].grad_sync.bucket_elems[0] == 3'538'944);
}
