// Megatron-Core layouts of the MoE layer: `ep` below P/mp (docs/parm.md, "Layouts").
#include <catch2/catch.hpp>

#include "sim/core/error.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {
Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}
}  // namespace

TEST_CASE("layouts: groups in Megatron-Core's rank order tp-ep-dp", "[moe][layouts]") {
  SECTION("P=16, tp=G=2, ep=4: dp=2") {
    // rank = t + 2*(e + 4*b), t < 2, e < 4, b < 2.
    const Groups g = make_groups(16, 2, 4);
    CHECK(g.dp == 2);
    CHECK(g.mp.size() == 8);
    CHECK(g.mp[5] == std::vector<int>{10, 11});
    // EP groups: G*dp = 4; group b*G + t = 3 is (b=1, t=1): 1 + 2*(e + 4) = 9, 11, 13, 15.
    REQUIRE(g.ep.size() == 4);
    CHECK(g.ep[0] == std::vector<int>{0, 2, 4, 6});
    CHECK(g.ep[3] == std::vector<int>{9, 11, 13, 15});
    // Blocks (the fused collective's group): 8 consecutive ranks.
    REQUIRE(g.block.size() == 2);
    CHECK(g.block[1] == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
    // Expert data-parallel group t + G*e = 5 is (t=1, e=2): 1 + 4 + 8*b = 5, 13.
    REQUIRE(g.expert_dp.size() == 8);
    CHECK(g.expert_dp[5] == std::vector<int>{5, 13});
    // Dense data-parallel group t = 1: every odd rank.
    CHECK(g.dense_dp[1] == std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15});
    for (int r = 0; r < 16; ++r) {
      const auto& ep = g.ep[g.ep_of[r]];
      CHECK(std::find(ep.begin(), ep.end(), r) != ep.end());
    }
  }
  SECTION("P=128, tp=1, ep=8: dp=16") {
    // rank = e + 8*b: EP groups are 8 consecutive ranks, expert DP groups stride 8.
    const Groups g = make_groups(128, 1, 8);
    CHECK(g.dp == 16);
    REQUIRE(g.ep.size() == 16);
    CHECK(g.ep[3] == std::vector<int>{24, 25, 26, 27, 28, 29, 30, 31});
    REQUIRE(g.expert_dp.size() == 8);
    std::vector<int> edp5;
    for (int b = 0; b < 16; ++b) edp5.push_back(5 + 8 * b);
    CHECK(g.expert_dp[5] == edp5);
    REQUIRE(g.dense_dp.size() == 1);
    CHECK(g.dense_dp[0].size() == 128);
  }
  SECTION("the default ep (P/mp) is the earlier layout") {
    const Groups a = make_groups(32, 4), b = make_groups(32, 4, 8);
    CHECK(a.ep == b.ep);
    CHECK(a.mp == b.mp);
    CHECK(a.dp == 1);
    CHECK(a.dense_dp == a.ep);  // one block: the dense DP group is the EP group
  }
}

TEST_CASE("layouts: impossible layouts are refused with their sizes", "[moe][layouts]") {
  LayerSpec s;
  s.mp = 8;
  s.ep = 16;
  s.E = 32;
  CHECK_THROWS_WITH(make_dims(s, 96, 8), "ep=16 * mp=8 = 128 does not divide P=96 GPUs");
  CHECK_THROWS_WITH(make_dims(s, 64, 8), "ep=16 * mp=8 = 128 does not divide P=64 GPUs");
  s.mp = 1;
  s.E = 8;
  CHECK_THROWS_WITH(make_dims(s, 128, 8), "E=8 experts must be divisible by the expert-parallel size ep=16");
  s.ep = 8;
  const Dims d = make_dims(s, 128, 8);  // E=8 on 128 GPUs: EP=8, DP=16
  CHECK(d.n_ep == 8);
  CHECK(d.dp == 16);
  CHECK(d.E_local == 1);
  // Without ep, E must divide by P/mp = 128 as before.
  s.ep = 0;
  CHECK_THROWS_WITH(make_dims(s, 128, 8), Catch::Contains("N_EP = P/mp = 128"));
  ScheduleKeys keys;
  CHECK_THROWS_WITH(apply_keys(&s, &keys, {"ep=0"}, "--set"), Catch::Contains("key 'ep'"));
  apply_keys(&s, &keys, {"ep=4"}, "--set");
  CHECK(s.ep == 4);
  CHECK(spec_string(s).find(",ep=4") != std::string::npos);
  apply_keys(&s, &keys, {"ep=P/mp"}, "--set");
  CHECK(s.ep == 0);
  CHECK(spec_string(s).find("ep=") == std::string::npos);  // the default is not named
}

TEST_CASE("layouts: EP=8 x DP=16 on 128 GPUs times as one 8-GPU node", "[moe][layouts]") {
  // With mp=1 and ep=8 on h200-cluster (8 GPUs per node), block b is node b:
  // every EP group (8 consecutive ranks) and every fused collective stays in
  // its node's NVSwitch, no byte leaves a node, and each GPU holds the same
  // S = 2048 tokens, E/ep = 1 expert and capacity as on one node alone. The
  // blocks share no link, so every rank's timeline is the one-node layer's:
  // the times agree to the picosecond, and no byte crosses a node.
  LayerSpec s;
  s.E = 8;
  s.mp = 1;
  s.dtype = DType::bf16;
  const Topology big = topo("h200-cluster", {"nodes=16"}), one = topo("h200-cluster", {"nodes=1"});
  LayerSpec s_big = s;
  s_big.ep = 8;
  for (const char* name : {"baseline", "s1", "s2"}) {
    INFO(name);
    const ScheduleResult a = run_schedule(LayerRun{big, s_big}, preset(name));
    const ScheduleResult b = run_schedule(LayerRun{one, s}, preset(name));
    CHECK(a.forward == b.forward);
    CHECK(a.backward == b.backward);
    CHECK(a.inter_node_bytes == 0);
    CHECK(a.intra_node_bytes == 16 * b.intra_node_bytes);  // 16 blocks, all ranks counted
    CHECK(a.model_total_s() == Approx(b.model_total_s()).epsilon(1e-12));
    CHECK(a.peak_memory_bytes == b.peak_memory_bytes);
  }
}

TEST_CASE("layouts: TP=8 x EP=64 on 512 GPUs, and EP=16 x DP=4", "[moe][layouts]") {
  const Topology t = topo("h200-cluster", {"nodes=64"});
  LayerSpec s;
  s.E = 64;
  s.mp = 8;
  s.dtype = DType::bf16;
  s.ep = 64;
  const Dims d = make_dims(s, 512, 8);
  CHECK(d.dp == 1);
  const ScheduleResult whole = run_schedule(LayerRun{t, s}, preset("s1"));
  CHECK(whole.total() > Time::zero());
  // ep=16: 4 blocks of 16 nodes; each AlltoAll spans 16 nodes instead of 64,
  // 4 experts per EP rank instead of 1: fewer, larger messages per peer. The
  // bytes each GPU sends across nodes in the AlltoAlls fall with the share of
  // its EP peers off its node: 15/16 of them against 63/64.
  s.ep = 16;
  const ScheduleResult quarter = run_schedule(LayerRun{t, s}, preset("s1"));
  CHECK(quarter.inter_node_bytes < whole.inter_node_bytes);
}

TEST_CASE("layouts: expert gradients reduce in buckets of their own", "[moe][layouts][model]") {
  // AllReduce of n elements takes n us (dense) and 2n us (expert). Steps:
  // 10 us making 60 expert elements, then 10 us making 40 dense ones; buckets of 50.
  const auto ar = [](std::int64_t n) { return Time::us(n); };
  const auto ear = [](std::int64_t n) { return Time::us(2 * n); };
  std::vector<BackwardStep> steps = {{Time::us(10), 0, 60}, {Time::us(10), 40, 0}};
  // Expert bucket full at 10 us: 120 us, ends 130; the dense bucket (40) goes
  // last, ready at 20, starts at 130, ends 170. Exposed 170 - 20 = 150.
  const GradSync g = grad_sync_timeline(steps, 50, ar, ear);
  CHECK(g.compute == Time::us(20));
  CHECK(g.end == Time::us(170));
  CHECK(g.allreduce == Time::us(160));
  CHECK(g.bucket_elems == std::vector<std::int64_t>{60, 40});
  // One AllReduce each after the backward pass: 20 + 40 + 120 = 180.
  const GradSync once = grad_sync_timeline(steps, 0, ar, ear);
  CHECK(once.end == Time::us(180));
  CHECK(once.bucket_elems == std::vector<std::int64_t>{40, 60});
  // The expert AllReduce runs over the expert data-parallel groups.
  LayerSpec s;
  s.mp = 2;
  s.ep = 4;
  s.E = 8;
  const Dims d = make_dims(s, 16, 8);
  MoeOp op{MoeStep::ar};
  op.group = GroupKind::expert_dp;
  op.elems = 1024;
  op.label = "expert_dp_grad_allreduce";
  const TaskGraph tg = build_graph({op}, s, d, preset("s1"), GraphData::timing_only);
  REQUIRE(tg.collectives().size() == 8);
  CHECK(tg.collectives()[5].group == std::vector<int>{5, 13});
}
