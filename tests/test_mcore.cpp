// ds_moe=mcore, Megatron-Core 0.16's MoELayer (docs/moe-costs.md, "Megatron-Core's MoELayer"):
// its router, host sync, probabilities' multiply and chunk sorts derived by hand for one small
// layer; bf16 rows on the wire in an fp8 layer with TE's casts; lean's collectives kept.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "backend/verify.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/moe/memory.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

const MoeOp& op_of(const std::vector<MoeOp>& ops, MoeStep k) {
  for (const MoeOp& o : ops)
    if (o.kind == k) return o;
  FAIL("no op of that kind");
  return ops.front();
}

std::vector<std::string> names(const std::vector<Kernel>& ks) {
  std::vector<std::string> v;
  for (const Kernel& k : ks) v.emplace_back(k.name);
  return v;
}

// The small layer: 8 GPUs of one node, mp=1 (EP 8), B=1, L=1024 -> S=1024 tokens, M=1024,
// H=2048, E=16 (E_local = 2: the chunk sorts run), k=2, f=1: T = ceil(2*1024/16) = 128 rows
// per expert, the experts op's buffer E*T*M = 16*128*1024 elements, as lean's batched GEMM
// batch 2 of 16*128/2 = 1024 rows.
LayerSpec small(DType dt) {
  LayerSpec s;
  s.B = 1, s.L = 1024, s.M = 1024, s.H = 2048, s.E = 16, s.k = 2, s.f = 1.0, s.mp = 1;
  s.ds_moe = DsMoe::mcore;
  s.dispatch = Dispatch::index;
  s.dtype = dt;
  return s;
}

// A memory-bound kernel's time on the H100 profile (sim/compute/gpu_profile.cpp): 3.35 TB/s HBM
// derated by 1355/1555, the 3 us floor, and 3 us more per launch past the first.
double mem_seconds(double bytes, int launches) {
  return 3e-6 * launches + bytes / (3.35e12 * 1355.0 / 1555.0);
}

}  // namespace

TEST_CASE("mcore: the router, its host sync and the probabilities' multiply by hand", "[mcore][kernels]") {
  const LayerSpec s = small(DType::bf16);
  const Dims d = make_dims(s, 8, 8);
  REQUIRE(d.E_local == 2);
  const ScheduleOptions o = preset("baseline");
  const auto fwd = forward_ops(s, d, o);
  const auto bwd = backward_ops(fwd, s, d, o);

  // Gate forward: the bf16 GEMM [1024, 1024] x [1024, 16] with fp32 logits, 12 router kernels on
  // [1024, 16], the host's wait for the tokens per expert.
  const auto g = kernels(op_of(fwd, MoeStep::gate), s, d);
  REQUIRE(names(g) == std::vector<std::string>{"gate_gemm", "router", "tokens_sync"});
  CHECK(g[0].flops == 2ULL * 1024 * 16 * 1024);                               // 33'554'432
  CHECK(g[0].bytes == (1024ULL * 1024 + 1024 * 16) * 2 + 1024ULL * 16 * 4);  // 2'195'456
  CHECK(g[1].launches == 12);
  CHECK(g[1].bytes == 40ULL * 1024 * 16);  // 655'360
  CHECK(g[2].host_wait == Time::ns(10'000));
  // 12 launches of 655'360 bytes: launch-bound, 12 * 3 us + 0.2245 us.
  const GpuProfile& h100 = gpu_profile("h100");
  const double router = kernel_time(g[1], s.dtype, h100, nullptr, "").to_seconds();
  CHECK(std::abs(router - mem_seconds(655360.0, 12)) < 1e-11);

  // Gate backward: 6 router kernels (24 bytes per [1024, 16] element), the TF32 data and weight
  // gradients as two bf16 GEMMs of their shape with fp32 bytes, four casts in 4 launches (the
  // input [1024, 1024] and the weight [16, 1024] to fp32, their gradients back to bf16: 6 bytes an
  // element each), the sum of the input's two gradients (read 2 + 2, write 2 bytes an element).
  const auto gb = kernels(op_of(bwd, MoeStep::gate), s, d);
  REQUIRE(names(gb) ==
          std::vector<std::string>{"router_bwd", "gate_dgrad", "gate_cast_bwd", "gate_wgrad", "input_grad_sum"});
  CHECK(gb[0].launches == 6);
  CHECK(gb[0].bytes == 24ULL * 1024 * 16);
  CHECK(gb[1].flops == 2 * (2ULL * 1024 * 1024 * 16));                   // two GEMMs [1024,16]x[16,1024]
  CHECK(gb[1].bytes == (1024ULL * 16 + 16 * 1024 + 1024 * 1024) * 4);    // fp32: 4'325'376
  CHECK(gb[1].shape == std::array<std::int64_t, 4>{1024, 1024, 16, 2});
  REQUIRE(gb[1].dtype);
  CHECK(*gb[1].dtype == DType::bf16);
  CHECK(gb[2].bytes == 2ULL * (1024 * 1024 + 16 * 1024) * 6);  // 12'779'520
  CHECK(gb[2].launches == 4);
  CHECK(gb[3].shape == std::array<std::int64_t, 4>{1024, 16, 1024, 2});
  CHECK(gb[4].bytes == 3ULL * 1024 * 1024 * 2);  // 6'291'456

  // An fp32 layer: the router's casts are no-ops (no kernel), and the forward gate GEMM runs on
  // TF32 as the backward's: two bf16 GEMMs of its shape with fp32 bytes,
  // (1024 * 1024 + 1024 * 16) * 4 + 1024 * 16 * 4 = 4'325'376 bytes.
  const LayerSpec sf = small(DType::fp32);
  const Dims df = make_dims(sf, 8, 8);
  const auto ff = forward_ops(sf, df, o);
  const auto gf = kernels(op_of(ff, MoeStep::gate), sf, df);
  REQUIRE(names(gf) == std::vector<std::string>{"gate_gemm", "router", "tokens_sync"});
  CHECK(gf[0].shape == std::array<std::int64_t, 4>{1024, 16, 1024, 2});
  CHECK(gf[0].bytes == (1024ULL * 1024 + 1024 * 16) * 4 + 1024ULL * 16 * 4);
  REQUIRE(gf[0].dtype);
  CHECK(*gf[0].dtype == DType::bf16);
  CHECK(names(kernels(op_of(backward_ops(ff, sf, df, o), MoeStep::gate), sf, df)) ==
        std::vector<std::string>{"router_bwd", "gate_dgrad", "gate_wgrad", "input_grad_sum"});

  // Experts forward, per rank: 1024 rows of each of the 2 local experts, h = 2048.
  //   chunk sort: the 2048 rows (2048 bytes each) and their fp32 probabilities, read and written:
  //     2 * 2048 * (2048 + 4) = 8'404'992 bytes; the unsort: 2 * 2048 * 2048 = 8'388'608
  //   probabilities' multiply: [2048, 2048] bf16 * fp32 -> fp32 (2 + 4), cast back (4 + 2):
  //     12 * 4'194'304 = 50'331'648 bytes in 2 launches
  const auto ef = kernels(op_of(fwd, MoeStep::experts), s, d);
  REQUIRE(names(ef) == std::vector<std::string>{"expert_sort_chunks", "expert_fc1", "expert_act", "expert_probs",
                                                "expert_fc2", "expert_unsort_chunks"});
  CHECK(ef[0].bytes == 8'404'992);
  CHECK(ef[5].bytes == 8'388'608);
  CHECK(ef[3].bytes == 50'331'648);
  CHECK(ef[3].launches == 2);
  CHECK(ef[1].shape == std::array<std::int64_t, 4>{1024, 2048, 1024, 2});  // lean's batched GEMM
  // 50'331'648 bytes at 2.919 TB/s = 17.2434 us, + 2 * 3 us.
  const double probs = kernel_time(ef[3], s.dtype, h100, nullptr, "").to_seconds();
  CHECK(std::abs(probs - mem_seconds(50331648.0, 2)) < 1e-11);

  // Experts backward: the unsort's adjoint first, the multiply's autograd between fc2's and the
  // activation's backward: the cast's (2 + 4), grad * probs (4 + 4) and its cast (4 + 2),
  // grad * act (4 + 2 + 4), the sum over h (4): 34 bytes an element, 5 launches.
  const auto eb = kernels(op_of(bwd, MoeStep::experts), s, d);
  REQUIRE(names(eb) == std::vector<std::string>{"expert_unsort_chunks", "expert_fc2", "expert_probs", "expert_act",
                                                "expert_fc1", "expert_sort_chunks"});
  CHECK(eb[2].bytes == 34ULL * 2048 * 2048);  // 142'606'336
  CHECK(eb[2].launches == 5);

  // An fp32 layer: the multiply writes fp32 and needs no cast: 8 bytes an element, one launch;
  // backward grad * probs (8), grad * act (12), the sum (4): 24 in 3.
  const LayerSpec s32 = small(DType::fp32);
  const Dims d32 = make_dims(s32, 8, 8);
  const auto f32 = kernels(op_of(forward_ops(s32, d32, o), MoeStep::experts), s32, d32);
  CHECK(f32[3].bytes == 8ULL * 2048 * 2048);
  CHECK(f32[3].launches == 1);

  // Behind the AllGather dispatcher (its permute sorts by local expert): no chunk sort.
  LayerSpec ag = s;
  ag.token_dispatcher = TokenDispatcher::allgather;
  const Dims dag = make_dims(ag, 8, 8);
  CHECK(names(kernels(op_of(forward_ops(ag, dag, o), MoeStep::experts), ag, dag)) ==
        std::vector<std::string>{"expert_fc1", "expert_act", "expert_probs", "expert_fc2"});

  // One local expert (E=8 on 8 GPUs): no chunk sort.
  LayerSpec one = s;
  one.E = 8;
  const Dims d1 = make_dims(one, 8, 8);
  CHECK(names(kernels(op_of(forward_ops(one, d1, o), MoeStep::experts), one, d1)) ==
        std::vector<std::string>{"expert_fc1", "expert_act", "expert_probs", "expert_fc2"});
}

TEST_CASE("mcore: an fp8 layer sends bf16 rows and TE casts them and the weights", "[mcore][fp8]") {
  // The small layer in fp8: Megatron-Core's AlltoAll dispatcher sends the bf16 hidden states, so
  // both AlltoAlls move 2 bytes an element of E*T*M = 2'097'152: 4'194'304 bytes (lean's fp8
  // layer sends the dispatch in fp8, 2'162'688: tests/test_fp8.cpp).
  const LayerSpec s = small(DType::fp8);
  const Dims d = make_dims(s, 8, 8);
  CHECK(d.fp8);
  CHECK(!d.fp8_rows);
  const ScheduleOptions o = preset("baseline");
  const auto fwd = forward_ops(s, d, o);
  std::vector<std::uint64_t> a2a;
  const auto graph = build_graph(fwd, s, d, o, GraphData::timing_only);
  for (const Collective& c : graph.collectives())
    if (c.op == CollOp::alltoall) a2a.push_back(c.bytes);
  CHECK(a2a == std::vector<std::uint64_t>{4'194'304, 4'194'304});
  LayerSpec lean = s;
  lean.ds_moe = DsMoe::lean;
  CHECK(make_dims(lean, 8, 8).fp8_rows);

  // Forward: the bf16 rows [2048, 1024] cast rowwise and columnwise (read 2, write 1 + 1: 4 bytes an
  // element, 8'388'608), the weights likewise (2 experts * (1024*2048 + 2048*1024) = 8'388'608
  // elements, 33'554'432 bytes), fc1 in fp8, the activation, the multiply, fc2's input cast
  // ([2048, 2048]: 16'777'216 bytes), fc2 in fp8.
  const auto ef = kernels(op_of(fwd, MoeStep::experts), s, d);
  REQUIRE(names(ef) == std::vector<std::string>{"expert_sort_chunks", "expert_fp8_cast_in", "expert_fp8_cast_w",
                                                "expert_fc1", "expert_act", "expert_probs", "expert_fp8_cast",
                                                "expert_fc2", "expert_unsort_chunks"});
  CHECK(ef[1].bytes == 8'388'608);
  CHECK(ef[2].bytes == 33'554'432);
  CHECK(ef[6].bytes == 16'777'216);
  REQUIRE(ef[3].dtype);
  CHECK(*ef[3].dtype == DType::fp8);
  // The multiply stays bf16 * fp32 in an fp8 layer: 12 bytes an element of [2048, 2048].
  CHECK(ef[5].bytes == 12ULL * 2048 * 2048);
}

TEST_CASE("mcore: lean's collectives, the key's spelling, the executors refuse it", "[mcore]") {
  LayerSpec s;
  ScheduleKeys keys;
  apply_keys(&s, &keys, {"ds_moe=mcore"}, "test");
  CHECK(s.ds_moe == DsMoe::mcore);
  CHECK(std::string(to_string(s.ds_moe)) == "mcore");
  CHECK(spec_string(s).find("ds_moe=mcore") != std::string::npos);
  CHECK(lean_like(DsMoe::mcore));
  CHECK(!lean_like(DsMoe::v0_14_4));
  CHECK_THROWS_WITH(apply_keys(&s, &keys, {"ds_moe=megatron"}, "test"),
                    Catch::Contains("key 'ds_moe': expected 0.14.4, 0.14.5, lean or mcore"));
  // The collectives are lean's (mp=1: the AlltoAlls, no AllReduce per expert).
  LayerSpec m = small(DType::bf16);
  const Dims d = make_dims(m, 8, 8);
  const auto fwd = forward_ops(m, d, preset("baseline"));
  CHECK(!op_of(fwd, MoeStep::experts).allreduce_each);
  LayerSpec l = m;
  l.ds_moe = DsMoe::lean;
  std::vector<MoeStep> a, b;
  for (const MoeOp& op : fwd) a.push_back(op.kind);
  for (const MoeOp& op : forward_ops(l, make_dims(l, 8, 8), preset("baseline"))) b.push_back(op.kind);
  CHECK(a == b);
  // With tensor parallelism Megatron-Core runs sequence parallelism, which mcore does not build:
  // refused in one line naming the key.
  LayerSpec tp = small(DType::bf16);
  tp.mp = 2;
  CHECK_THROWS_WITH(make_dims(tp, 8, 8), Catch::Contains("key 'ds_moe': mcore models Megatron-Core's MoELayer at mp=1"));
  // mcore keeps fewer bytes in its router than lean's [t, E, C] buffers, and more in its experts
  // (the activation the probabilities' multiply saves, the fp32 product): its peak is higher here.
  const Dims dl = make_dims(l, 8, 8);
  CHECK(peak_memory(fwd, m, d).peak() > peak_memory(forward_ops(l, dl, preset("baseline")), l, dl).peak());
  CHECK_THROWS_WITH(exec::check_executable(small(DType::bf16)), Catch::Contains("ds_moe=mcore"));
}
