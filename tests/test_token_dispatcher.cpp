// The baseline under Megatron-Core's AllGather token dispatcher (layer key
// token_dispatcher=allgather; sim/moe/schedule_ops.cpp, docs/moe-costs.md
// "The AllGather dispatcher"): its op lists by hand, the closed form against
// the simulator, S1/S2 untouched, and the refusals.
#include <catch2/catch.hpp>

#include <cmath>

#include "backend/verify.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}

// P = 8, mp = G = 2, N_EP = 4 (one block of 8), fp32: S = B*L = 16 tokens per MP
// group, each member's share S/G = 8; E = 8, k = 2, f = 1: T_base = ceil(2*16/8) = 4,
// D = E*T_base*M = 8*4*4 = 128 elements; the block's tokens N_EP*S = 64.
LayerSpec small() {
  LayerSpec s;
  s.B = 1, s.L = 16, s.M = 4, s.H = 8, s.E = 8, s.k = 2, s.f = 1.0, s.mp = 2;
  s.ds_moe = DsMoe::lean;
  s.dispatch = Dispatch::index;
  s.token_dispatcher = TokenDispatcher::allgather;
  return s;
}

struct Expect {
  MoeStep kind;
  GroupKind group;
  std::int64_t elems;
};

}  // namespace

TEST_CASE("the AllGather dispatcher's op lists, forward and backward, by hand", "[token_dispatcher]") {
  const LayerSpec s = small();
  const Dims d = make_dims(s, 8, 8);
  REQUIRE(d.G == 2);
  REQUIRE(d.n_ep == 4);
  REQUIRE(d.T_base == 4);
  const auto fwd = forward_ops(s, d, preset("baseline"));
  // The routing: [64 tokens, 8 experts] x (1 B map + 4 B probs) = 2560 B = 640 fp32 elements.
  const std::vector<Expect> f = {
      {MoeStep::split, GroupKind::mp, 16 * 4},      // the member's share: a view of S*M
      {MoeStep::gate, GroupKind::ep, 0},            // on S/G = 8 tokens
      {MoeStep::ag, GroupKind::world, 640},         // routing map and probabilities
      {MoeStep::ag, GroupKind::world, 64 * 4},      // the block's token rows, N_EP*S*M
      {MoeStep::kernel, GroupKind::ep, 128},        // permute: D
      {MoeStep::experts, GroupKind::ep, 128},       // the D/M = 32 rows of the local experts
      {MoeStep::kernel, GroupKind::ep, 64 * 4},     // unpermute into N_EP*S rows
      {MoeStep::rs, GroupKind::world, 64 * 4},      // each member's S/G rows back: the layer ends there
  };
  REQUIRE(fwd.size() == f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    INFO(i << " " << fwd[i].label);
    CHECK(fwd[i].kind == f[i].kind);
    if (fwd[i].kind != MoeStep::gate && fwd[i].kind != MoeStep::kernel && fwd[i].kind != MoeStep::experts)
      CHECK(fwd[i].group == f[i].group);
    CHECK(fwd[i].elems == f[i].elems);
  }
  CHECK(fwd[1].tokens == 8);
  CHECK_FALSE(fwd[5].allreduce_each);  // the ReduceScatter sums the shards' partial outputs
  // permute reads and writes the 32 rows: 2*128*4 = 1024 B; unpermute writes the [64, 4]
  // output and reads and writes the rows: (256 + 2*128)*4 = 2048 B.
  CHECK(kernels(fwd[4], s, d)[0].bytes == 1024);
  CHECK(kernels(fwd[6], s, d)[0].bytes == 2048);
  // The experts: E_local = 2 experts batched (lean), 32/2 = 16 rows each, h = H/G = 4:
  // fc1 [16, 4] x [4, 4] twice: 2*16*4*4*2 = 1024 FLOPs.
  CHECK(kernels(fwd[5], s, d)[0].flops == 1024);

  const auto bwd = backward_ops(fwd, s, d, preset("baseline"));
  const std::vector<Expect> b = {
      {MoeStep::ag, GroupKind::world, 256},          // the ReduceScatter's adjoint
      {MoeStep::kernel, GroupKind::ep, 256},         // unpermute's backward
      {MoeStep::experts, GroupKind::ep, 128},
      {MoeStep::kernel, GroupKind::ep, 128},         // permute's backward
      {MoeStep::rs, GroupKind::world, 256},          // the token AllGather's adjoint
      {MoeStep::rs, GroupKind::world, 512},          // the probabilities' gradient, 4 of 5 bytes: 640*4/5
      {MoeStep::gate, GroupKind::ep, 0},
      {MoeStep::ar, GroupKind::mp, 4 * 8},           // the gate weights' gradient, M*E, over MP
      {MoeStep::ag, GroupKind::mp, 64},              // the share's adjoint: every member's dx rows
  };
  REQUIRE(bwd.size() == b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    INFO(i << " " << bwd[i].label);
    CHECK(bwd[i].kind == b[i].kind);
    CHECK(bwd[i].backward);
    if (bwd[i].kind != MoeStep::gate && bwd[i].kind != MoeStep::kernel && bwd[i].kind != MoeStep::experts)
      CHECK(bwd[i].group == b[i].group);
    CHECK(bwd[i].elems == b[i].elems);
  }
}

TEST_CASE("the AllGather dispatcher: S1 and S2 are untouched, the baseline differs", "[token_dispatcher]") {
  LayerSpec a = small(), g = small();
  a.token_dispatcher = TokenDispatcher::alltoall;
  const Dims d = make_dims(a, 8, 8);
  for (const char* name : {"s1", "s2"}) {
    INFO(name);
    const auto fa = forward_ops(a, d, preset(name)), fg = forward_ops(g, d, preset(name));
    REQUIRE(fa.size() == fg.size());
    for (std::size_t i = 0; i < fa.size(); ++i) {
      CHECK(fa[i].kind == fg[i].kind);
      CHECK(fa[i].elems == fg[i].elems);
    }
  }
  bool has_a2a = false;
  for (const MoeOp& o : forward_ops(g, d, preset("baseline"))) has_a2a = has_a2a || o.kind == MoeStep::a2a;
  CHECK_FALSE(has_a2a);
}

TEST_CASE("the closed form times what the simulator runs under the AllGather dispatcher", "[token_dispatcher][model]") {
  // The baseline is a chain of ops on every rank, alike on every block: the closed form's sum
  // equals the simulated makespan (as tests/test_glu.cpp's case for the other baselines), with
  // the block's AllGather and ReduceScatter crossing two DGX H100 nodes (mp 4 x ep 4 = 16).
  const Topology t = topo("dgx-h100", {"nodes=2"});
  LayerSpec s;
  s.B = 1, s.L = 2048, s.M = 2048, s.H = 4096, s.E = 16, s.k = 2, s.f = 1.0, s.mp = 4;
  s.dtype = DType::bf16;
  s.ds_moe = DsMoe::lean;
  s.dispatch = Dispatch::index;
  s.token_dispatcher = TokenDispatcher::allgather;
  for (const char* net : {"analytical", "flow"}) {
    INFO(net);
    const ScheduleResult r = run_schedule(LayerRun{t, s, net}, preset("baseline"));
    CHECK(r.forward > Time::zero());
    CHECK(std::abs(r.forward.to_seconds() - r.model_forward_s) < 1e-9);
    CHECK(std::abs(r.backward.to_seconds() - r.model_backward_s) < 1e-9);
  }
  // The same tokens by AlltoAll: a different time (the token AllGather moves N_EP*S*M, the
  // AlltoAll E*T*M per member), so the key reaches the simulation.
  LayerSpec a = s;
  a.token_dispatcher = TokenDispatcher::alltoall;
  CHECK(run_schedule(LayerRun{t, a, "flow"}, preset("baseline")).total() !=
        run_schedule(LayerRun{t, s, "flow"}, preset("baseline")).total());
  // Dropless (load=uniform): each local expert's drawn rows over the block; the same seed, the same time.
  LayerSpec u = s;
  apply_assignments(&u, nullptr, {"load=uniform", "seed=3"}, "--set");
  const Time t1 = run_schedule(LayerRun{t, u, "flow"}, preset("baseline")).total();
  CHECK(t1 == run_schedule(LayerRun{t, u, "flow"}, preset("baseline")).total());
  CHECK(t1 > Time::zero());
}

TEST_CASE("token_dispatcher: the key, its spec string and the executors' refusal", "[token_dispatcher][errors]") {
  LayerSpec s;
  apply_assignments(&s, nullptr, {"token_dispatcher=allgather"}, "--set");
  CHECK(s.token_dispatcher == TokenDispatcher::allgather);
  CHECK(spec_string(s).find("token_dispatcher=allgather") != std::string::npos);
  // The default is not named: existing spec strings and sweep columns keep their form.
  CHECK(spec_string(LayerSpec{}).find("token_dispatcher") == std::string::npos);
  CHECK(layer_key_columns(",").find("token_dispatcher") == std::string::npos);
  CHECK_THROWS_WITH(apply_assignments(&s, nullptr, {"token_dispatcher=flex"}, "--set"),
                    Catch::Contains("key 'token_dispatcher'") && Catch::Contains("allgather"));
  LayerSpec g = exec::small_layer();
  g.token_dispatcher = TokenDispatcher::allgather;
  CHECK_THROWS_WITH(exec::check_executable(g), Catch::Contains("token_dispatcher"));
  const Dims d = make_dims(g, 4, 4);
  const auto f = forward_ops(g, d, preset("baseline"));
  CHECK_THROWS_WITH(build_training_graph(f, backward_ops(f, g, d, preset("baseline")), g, d, preset("baseline")),
                    Catch::Contains("token_dispatcher"));
}
