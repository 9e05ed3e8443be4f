// A Workspace keeps caches only: what is simulated with a warm one, shared
// across runs, schedules and topologies, equals what fresh ones give, bit
// for bit (sim/core/workspace.hpp).
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "sim/coll/collective_cost.hpp"
#include "sim/coll/collective_plan.hpp"
#include "sim/core/workspace.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/compute/gpu_profile.hpp"

using namespace parmsim;
using parmsim::test::all;
using parmsim::test::topo;

TEST_CASE("workspace: routes from its cache equal routes computed afresh", "[workspace][topology]") {
  // 1024 GPUs: above Topology::kRouteTableGpus, so routes come from the
  // workspace's 2^13 direct-mapped slots. 30,000 random pairs collide in
  // them (each slot is asked for about 3.7 times): evicted and refilled
  // slots must still give the pair's own route.
  const Topology t = topo("fat-tree-1024");
  REQUIRE(t.num_gpus() > Topology::kRouteTableGpus);
  Workspace ws;
  CHECK_FALSE(ws.has(Workspace::kRoutes));
  std::mt19937 rng(11);
  for (int i = 0; i < 30'000; ++i) {
    const int s = static_cast<int>(rng() % 1024), d = static_cast<int>(rng() % 1024);
    const Route& cached = t.route(s, d, ws);
    const Route fresh = t.route(s, d);  // a search of its own
    REQUIRE(cached.links == fresh.links);
    REQUIRE(cached.latency == fresh.latency);
    REQUIRE(cached.bottleneck == fresh.bottleneck);
  }
  CHECK(ws.has(Workspace::kRoutes));
  // Another topology through the same workspace, right after the first one
  // filled the pair's slot: its own route, not the first one's.
  const Topology u = topo("switch-1024");
  REQUIRE(t.route(0, 5, ws).links == t.route(0, 5).links);
  CHECK(u.route(0, 5, ws).links == u.route(0, 5).links);
  CHECK(u.route(0, 5, ws).links != t.route(0, 5).links);
}

TEST_CASE("workspace: a warm workspace simulates what fresh ones do", "[workspace][engine]") {
  // Two topologies alternating through one workspace, three schedules, each
  // run twice: every makespan and trace row equals a run with a fresh workspace.
  const Topology a = topo("parm-32gpu");
  const Topology b = topo("dgx-h100");
  Workspace warm;
  for (int round = 0; round < 2; ++round)
    for (const Topology* t : {&a, &b})
      for (const char* name : {"baseline", "s1", "s2"}) {
        CAPTURE(round, t->name(), name);
        moe::LayerSpec spec;
        spec.mp = 4;
        const moe::LayerRun with{*t, spec, "flow", nullptr, nullptr, &warm};
        const moe::LayerRun without{*t, spec, "flow"};
        SimResult wf, wb, ff, fb;
        TaskGraph g1, g2, g3, g4;
        const moe::ScheduleResult w = moe::run_schedule(with, moe::preset(name), &wf, &g1, &wb, &g2);
        const moe::ScheduleResult f = moe::run_schedule(without, moe::preset(name), &ff, &g3, &fb, &g4);
        REQUIRE(w.forward == f.forward);
        REQUIRE(w.backward == f.backward);
        REQUIRE(w.model_total_s() == f.model_total_s());
        REQUIRE(wf.trace.size() == ff.trace.size());
        for (std::size_t i = 0; i < wf.trace.size(); ++i) {
          REQUIRE(wf.trace[i].start == ff.trace[i].start);
          REQUIRE(wf.trace[i].end == ff.trace[i].end);
        }
      }
  // The simulations kept their plans, pools and the flow model's memo there.
  CHECK(warm.has(Workspace::kPlans));
  CHECK(warm.has(Workspace::kEngine));
  CHECK(warm.has(Workspace::kRates));
  CHECK(plan_cache_size(warm) > 0);
  warm.clear();
  CHECK_FALSE(warm.has(Workspace::kPlans));
}

TEST_CASE("workspace: plans and forms through a warm workspace equal fresh ones", "[workspace][coll]") {
  // A 64-rank AlltoAll on the 1024-GPU fat-tree (routes from the workspace)
  // and an AllReduce with NCCL's choice: plan and cost form as a fresh
  // workspace gives them, after the workspace has served other collectives.
  const Topology t = topo("fat-tree-1024");
  Workspace ws;
  const Collective a2a = all(CollOp::alltoall, 64, 1 << 20);
  const Collective ar = all(CollOp::allreduce, 64, 64 << 20);
  for (int round = 0; round < 2; ++round)
    for (const Collective* c : {&a2a, &ar}) {
      CAPTURE(round, to_string(c->op));
      const CollPlan warm = make_plan(*c, t, ws);
      const CollPlan fresh = make_plan(*c, t);
      REQUIRE(warm.choice == fresh.choice);
      REQUIRE(warm.xfers.size() == fresh.xfers.size());
      Route s1, s2;
      Workspace other;
      for (std::size_t i = 0; i < warm.xfers.size(); i += 97) {
        const Route r1 = xfer_route(warm, warm.xfers[i], c->group, t, s1, ws);
        const Route& r2 = xfer_route(fresh, fresh.xfers[i], c->group, t, s2, other);
        REQUIRE(r1.links == r2.links);
      }
      CHECK(collective_time_s(*c, t, static_cast<double>(c->bytes), ws) == collective_time_s(*c, t));
    }
}

TEST_CASE("closed form: an AlphaBeta's bound handles, past the fixed entries, give what a fresh one does",
          "[workspace][closed_form]") {
  // 4 AlltoAll algorithms x 3 MP sizes x 2 SAA algorithms = 24 keys, past
  // BoundHandles::kFixed (16): the later ones are kept in its map. Each
  // evaluation, twice over, equals one with a fresh AlphaBeta.
  const Topology t = topo("parm-32gpu");
  const GpuProfile& gpu = t.gpu();
  const moe::AlphaBeta shared = moe::alpha_beta_from_topology(t);
  int keys = 0;
  for (int round = 0; round < 2; ++round)
    for (const char* a2a : {"p2p", "pairwise", "direct", "hierarchical"})
      for (const int mp : {1, 2, 4})
        for (const char* saa : {"released", "pipelined"}) {
          CAPTURE(round, a2a, mp, saa);
          moe::LayerSpec s;
          s.mp = mp;
          s.saa_algo = saa;
          const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
          moe::ScheduleOptions o = moe::preset("s2");
          o.a2a_algo = a2a;
          const moe::AlphaBeta fresh = moe::alpha_beta_from_topology(t);
          const moe::ModelTime a = moe::model_layer(s, d, o, shared, gpu);
          const moe::ModelTime b = moe::model_layer(s, d, o, fresh, gpu);
          REQUIRE(a.forward_s == b.forward_s);
          REQUIRE(a.backward_s == b.backward_s);
          keys += round == 0;
        }
  CHECK(keys > moe::BoundHandles::kFixed);
  CHECK(shared.handles->count.load() == moe::BoundHandles::kFixed);
  CHECK(shared.handles->more.size() == static_cast<std::size_t>(keys - moe::BoundHandles::kFixed));
}
