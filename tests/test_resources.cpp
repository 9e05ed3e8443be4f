// What a simulation will take, estimated from the layer's shape
// (sim/moe/resources.hpp), against the graphs and plans it would build.
#include <catch2/catch.hpp>

#include <tuple>

#include "sim/coll/collective_plan.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/resources.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

// The tasks and the AlltoAll/SAA transfers of one schedule's forward and
// backward graphs as built (every collective's plan made on the topology).
// The last element: what estimate_graph makes of the same graphs.
std::tuple<double, double, double> built(const moe::LayerSpec& s, const Topology& t, const std::string& schedule) {
  const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
  const moe::ScheduleOptions o = moe::preset(schedule);
  const auto f = moe::forward_ops(s, d, o);
  const auto b = moe::backward_ops(f, s, d, o);
  double tasks = 0, a2a = 0, graph_a2a = 0;
  for (const TaskGraph& g : {moe::build_graph(f, s, d, o), moe::build_backward_graph(f, b, s, d, o)}) {
    tasks += static_cast<double>(g.tasks().size());
    graph_a2a += moe::estimate_graph(g).a2a_transfers;
    for (const Collective& c : g.collectives())
      if (c.op == CollOp::alltoall || c.op == CollOp::saa) a2a += static_cast<double>(make_plan(c, t).xfers.size());
  }
  return {tasks, a2a, graph_a2a};
}

}  // namespace

TEST_CASE("the estimate counts the AlltoAll and SAA transfers the plans hold", "[resources]") {
  // 4 DGX H100 nodes (32 GPUs), E = 32, mp = 1 and 4: the baseline's AlltoAlls over EP groups, S1's SAA
  // over all 32 GPUs with inner groups of mp. Every pair exchanges, so the count is exact: e.g. mp = 1,
  // one EP group of 32: 32 x 31 = 992 transfers per AlltoAll.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=4"});
  for (int mp : {1, 4}) {
    moe::LayerSpec s;
    s.E = 32, s.mp = mp;
    const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
    for (const char* schedule : {"baseline", "s1", "s2"}) {
      INFO(schedule << " mp=" << mp);
      const auto [tasks, a2a, graph_a2a] = built(s, t, schedule);
      const moe::SimCost e = moe::estimate_schedule(s, d, moe::preset(schedule));
      CHECK(e.a2a_transfers == a2a);
      CHECK(graph_a2a == a2a);  // the same count from the built graphs' collectives
      // Tasks: the estimate counts one task per rank per kernel and collective; the builder adds
      // none and omits views, so the two agree within the host and view tasks it leaves out.
      CHECK(e.tasks == Approx(tasks).epsilon(0.25));
      CHECK(e.transfers >= a2a);
    }
  }
}

TEST_CASE("the estimate of one collective by hand", "[resources]") {
  // A direct AlltoAll over 8 ranks: 8 x 7 = 56 transfers, all at once; 8 tasks. Memory:
  // 12 MiB + 8 x 610 + 56 x 16 + 56 x 396 B = 12582912 + 4880 + 896 + 22176 = 12610864 B.
  Collective c;
  c.op = CollOp::alltoall;
  for (int r = 0; r < 8; ++r) c.group.push_back(r);
  const moe::SimCost e = moe::estimate_collective(c);
  CHECK(e.transfers == 56);
  CHECK(e.flows == 56);
  CHECK(e.bytes == Approx(12610864.0));
  // A pairwise one holds the same transfers but runs 8 at a time.
  c.algo = "pairwise";
  CHECK(moe::estimate_collective(c).flows == 8);
}

TEST_CASE("the symmetry order a layer's estimate takes: whole blocks, no load model", "[resources]") {
  moe::Dims d;
  d.P = 32, d.G = 2, d.n_ep = 8;  // blocks of 16 GPUs, two data-parallel replicas
  moe::LayerSpec s;
  // A topology shift of 8 GPUs (order 4) moves a block onto half of two blocks; the smallest
  // shift that moves whole blocks is lcm(8, 16) = 16 GPUs: order 32 / 16 = 2.
  CHECK(moe::layer_symmetry_order(s, d, 4) == 2);
  // One block over every GPU: the topology's shift is the layer's, order 4.
  d.n_ep = 16;
  CHECK(moe::layer_symmetry_order(s, d, 4) == 4);
  // 24 GPUs, a shift of 8 (order 3), blocks of 12: lcm(8, 12) = 24, the identity: order 1.
  d.P = 24, d.G = 1, d.n_ep = 12;
  CHECK(moe::layer_symmetry_order(s, d, 3) == 1);
  // No topology symmetry, no layer symmetry.
  CHECK(moe::layer_symmetry_order(s, d, 1) == 1);
  // A load model draws each rank's counts: every rank is simulated, whatever the topology.
  d.P = 32, d.G = 2, d.n_ep = 16;
  moe::ScheduleKeys keys;
  moe::apply_keys(&s, &keys, {"load=uniform"}, "test");
  CHECK(moe::layer_symmetry_order(s, d, 4) == 1);
}
