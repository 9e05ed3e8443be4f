// The critical path of a simulated graph and a layer's phases (sim/moe/phases.hpp):
// the path follows what held each task up, and the phases add up to the makespan
// to the picosecond.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>

#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/phases.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

Topology topo(const std::string& name, std::vector<std::string> set = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", set);
}

int gemm(TaskGraphBuilder& b, const std::string& name, int rank, std::uint64_t flops) {
  Task& t = b.new_task();
  t.name = name;
  t.rank = rank;
  t.stream = 0;
  t.compute().op = OpKind::gemm;
  t.compute().flops = flops;
  return t.id;
}

}  // namespace

TEST_CASE("the critical path goes through the member a collective waited for", "[phases]") {
  // Rank 0: a (short), then an AllReduce with rank 1, then c. Rank 1: b (long), then the
  // AllReduce. The AllReduce cannot start before b ends, so the path is c, the AllReduce
  // from b's end, then b from 0; a, which ended earlier, is off it.
  TaskGraphBuilder b(2);
  b.add_stream_all("compute");
  b.add_stream_all("comm");
  const int a = gemm(b, "a", 0, 1'000'000'000);
  const int bb = gemm(b, "b", 1, 50'000'000'000);
  Collective ar;
  ar.name = "ar";
  ar.op = CollOp::allreduce;
  ar.group = {0, 1};
  ar.bytes = 1 << 20;
  const std::vector<int> parts = b.add_collective_tasks(ar, "comm", "ar");
  b.add_dep(parts[0], a);
  b.add_dep(parts[1], bb);
  const int c = gemm(b, "c", 0, 1'000'000'000);
  b.add_dep(c, parts[0]);
  const TaskGraph g = std::move(b).build();
  const SimResult r = simulate(g, topo("dgx-h100"));
  REQUIRE(r.trace[a].end < r.trace[bb].end);  // the premise: b holds the AllReduce up

  const std::vector<moe::PathStep> path = moe::critical_path(g, r);
  REQUIRE(path.size() == 3);
  CHECK(path[0].task == c);
  CHECK(path[0].to == r.makespan);
  CHECK(path[0].from == r.trace[c].start);
  CHECK((path[1].task == parts[0] || path[1].task == parts[1]));
  CHECK(path[1].to == r.trace[c].start);
  CHECK(path[1].from == r.trace[bb].end);  // not a's end: the AllReduce waited for rank 1
  CHECK(path[2].task == bb);
  CHECK(path[2].from == Time::zero());
  // Consecutive: each step starts where the next one (earlier in time) ends.
  for (std::size_t i = 0; i + 1 < path.size(); ++i) CHECK(path[i].from == path[i + 1].to);
}

TEST_CASE("a layer's phases add up to its forward + backward time, to the picosecond", "[phases][moe]") {
  struct Case {
    const char* topology;
    std::vector<std::string> topo_set;
    const char* keys;
  };
  const std::vector<Case> cases = {
      {"parm-32gpu", {}, ""},
      {"pcie-8gpu", {}, ""},
      {"parm-32gpu", {}, "ds_moe=lean,dispatch=index"},
      {"parm-32gpu", {}, "ds_moe=0.14.5,saa=pipelined"},
      {"dgx-h100", {"nodes=2"}, "mp=8,dtype=bf16,host_op=7us"},
      {"dgx-h100", {}, "B=2,L=64,M=64,H=128,E=8,mp=2,split=after_order,gather=before_iorder,fuse_combine=1,chunks=2"},
  };
  for (const Case& cs : cases) {
    const Topology t = topo(cs.topology, cs.topo_set);
    moe::LayerSpec spec;
    moe::ScheduleKeys keys;
    const std::string k = cs.keys;
    for (std::size_t at = 0; at < k.size();) {
      const std::size_t comma = std::min(k.find(',', at), k.size());
      moe::apply_keys(&spec, &keys, {k.substr(at, comma - at)}, "test");
      at = comma + 1;
    }
    moe::LayerRun run{t, spec};
    run.phases = true;
    for (const std::string& name : moe::preset_names()) {
      CAPTURE(cs.topology, cs.keys, name);
      const moe::ScheduleResult r = moe::run_schedule(run, moe::schedule_options(name, keys));
      CHECK(r.phases.total() == r.total());  // Time: exact picoseconds
      // Every kernel of an MoE layer belongs to one of its ops.
      CHECK(r.phases[moe::Phase::other] == Time::zero());
      CHECK(r.phases[moe::Phase::gate] > Time::zero());
      // The host is on the path only when it is modelled; at 7 us per call on H100 the
      // layer is launch-bound (layer prints so) and the host, not the experts, holds it up.
      if (spec.host_op == Time::zero()) {
        CHECK(r.phases[moe::Phase::host] == Time::zero());
        CHECK(r.phases[moe::Phase::experts] > Time::zero());
      } else {
        CHECK(r.phases[moe::Phase::host] > Time::zero());
      }
      // The communication share is the collectives' phases, and at most the whole.
      Time comm;
      for (std::size_t p = 0; p < moe::kPhases; ++p)
        if (moe::is_communication(static_cast<moe::Phase>(p))) comm += r.phases.t[p];
      CHECK(comm == r.phases.communication());
      CHECK(comm <= r.total());
    }
  }
}

TEST_CASE("every option combination of --search cuts into phases that add up", "[phases][moe]") {
  const Topology t = topo("dgx-h100");
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  moe::apply_keys(&spec, &keys, {"B=2", "L=64", "M=64", "H=128", "E=8", "mp=2"}, "test");
  moe::LayerRun run{t, spec};
  run.phases = true;
  for (const moe::ScheduleOptions& o : moe::search_space()) {
    CAPTURE(o.describe());
    const moe::ScheduleResult r = moe::run_schedule(run, o);
    CHECK(r.phases.total() == r.total());
    CHECK(r.phases[moe::Phase::other] == Time::zero());
  }
}
