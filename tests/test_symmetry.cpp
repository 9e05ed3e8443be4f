// The engine's symmetry (SimOptions::symmetry, docs/performance.md "Symmetry"):
// where shifting the servers maps topology, routes, graph and plans onto
// themselves, only the first shift's ranks run. Each case here is checked
// against the same simulation rank by rank (symmetry off), row by row.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstring>
#include <sstream>

#include "sim/coll/collective_cost.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/engine/trace_writer.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/net/network_model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {
Topology topo(const std::string& name, const std::vector<std::string>& set = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", set);
}

// Simulates g with and without symmetry; every row, byte and transfer count
// must agree to the picosecond. Returns the order symmetry ran with.
int same_both_ways(const TaskGraph& g, const Topology& t) {
  Workspace ws;
  SimOptions on, off;
  off.symmetry = false;
  const SimResult a = simulate(g, t, on, ws);
  const SimResult b = simulate(g, t, off, ws);
  CHECK(b.symmetry == 1);
  REQUIRE(a.trace.size() == b.trace.size());
  CHECK(a.makespan == b.makespan);
  int differ = 0;
  for (std::size_t i = 0; i < a.trace.size(); ++i)
    differ += a.trace[i].start != b.trace[i].start || a.trace[i].end != b.trace[i].end ||
              a.trace[i].bytes != b.trace[i].bytes || a.trace[i].task != b.trace[i].task;
  CHECK(differ == 0);
  CHECK(a.intra_node_bytes == b.intra_node_bytes);
  CHECK(a.inter_node_bytes == b.inter_node_bytes);
  CHECK(a.transfers == b.transfers);
  return a.symmetry;
}

// A direct AlltoAll of `bytes` per rank over ranks 0..p-1.
TaskGraph direct_alltoall(int p, std::uint64_t bytes) {
  Collective c;
  c.op = CollOp::alltoall;
  c.bytes = bytes;
  c.algo = "direct";
  c.name = "a2a";
  for (int r = 0; r < p; ++r) c.group.push_back(r);
  TaskGraphBuilder b(p);
  b.add_stream_all("comm");
  b.add_collective_tasks(c, "comm", "a2a");
  return std::move(b).build();
}

// One schedule's forward and backward graphs of a layer (as run_schedule builds them).
std::vector<TaskGraph> layer_graphs(const Topology& t, const std::string& set, const std::string& schedule) {
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  std::vector<std::string> kv;
  for (std::size_t a = 0; a < set.size();) {
    std::size_t b = set.find(',', a);
    if (b == std::string::npos) b = set.size();
    kv.push_back(set.substr(a, b - a));
    a = b + 1;
  }
  moe::apply_keys(&spec, &keys, kv, "test");
  const moe::Dims d = moe::make_dims(spec, t.num_gpus(), t.gpus_per_node());
  const moe::ScheduleOptions o = moe::schedule_options(schedule, keys);
  const auto f = moe::forward_ops(spec, d, o);
  const auto b = moe::backward_ops(f, spec, d, o);
  std::vector<TaskGraph> gs;
  gs.push_back(moe::build_graph(f, spec, d, o, moe::GraphData::timing_only));
  gs.push_back(moe::build_backward_graph(f, b, spec, d, o, moe::GraphData::timing_only));
  return gs;
}
}  // namespace

TEST_CASE("a server shift is a symmetry where the fabric allows it", "[symmetry]") {
  // 16 servers, 4 per leaf, 4 spines (fat-tree-1024 cut down). Shifting by one
  // server moves server 3 (leaf 0) to server 4 (leaf 1) but server 0 stays
  // on leaf 0: not an automorphism. Shifting by a leaf (4 servers) is: 16 / 4 =
  // order 4, each leaf to the next, the spines fixed.
  const Topology ft = topo("fat-tree-1024", {"nodes=16", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  CHECK_FALSE(ft.node_shift(1).has_value());
  CHECK_FALSE(ft.node_shift(3).has_value());   // 3 does not divide 16
  CHECK_FALSE(ft.node_shift(16).has_value());  // one group: no shift
  const std::optional<NodeShift> s = ft.node_shift(4);
  REQUIRE(s.has_value());
  CHECK(s->order == 4);
  CHECK(s->gpus == 32);
  // Every link moves (a leaf-spine link to the next leaf's): orbits of 4 = the
  // order, so each link stands for itself (weight 1).
  for (int l = 0; l < ft.num_links(); ++l) CHECK(s->weight[l] == 1);
  // GPU 0's first link maps to GPU 32's first link.
  CHECK(ft.link_from(s->link[ft.route(0, 1).links.front()]) == ft.link_from(ft.route(32, 33).links.front()));

  // A rail fabric with spines: the rails and spines serve every server, so a
  // shift by one server fixes them and their links: an orbit of one link in
  // a group of order 4 carries 4 flows of each orbit that crosses it.
  const Topology rail = topo("h200-cluster", {"nodes=4"});
  const std::optional<NodeShift> r = rail.node_shift(1);
  REQUIRE(r.has_value());
  CHECK(r->order == 4);
  int fixed = 0;
  for (int l = 0; l < rail.num_links(); ++l) {
    const bool moved = r->link[l] != l;
    CHECK(r->weight[l] == (moved ? 1 : 4));
    fixed += !moved;
  }
  // 8 rails x 2 spines x 2 directions.
  CHECK(fixed == 32);
}

TEST_CASE("a slower link on one server breaks the symmetry", "[symmetry]") {
  // Four 2-GPU servers on one switch; server 3's first GPU has a slower link.
  auto make = [](std::uint64_t slow) {
    Topology t("t", "h100", 2);
    const int sw = t.add_device({"sw", DeviceKind::network_switch});
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 2; ++i) {
        const int g = t.add_device({"n" + std::to_string(n) + ".gpu" + std::to_string(i), DeviceKind::gpu, n, 2 * n + i});
        const std::uint64_t bw = n == 3 && i == 0 ? slow : 50'000'000'000ULL;
        t.add_link(g, sw, bw, bw, Time::us(1));
      }
    t.finalize();
    return t;
  };
  const Topology even = make(50'000'000'000ULL), uneven = make(25'000'000'000ULL);
  CHECK(even.node_shift(1).has_value());
  CHECK_FALSE(uneven.node_shift(1).has_value());
  CHECK_FALSE(uneven.node_shift(2).has_value());
  const TaskGraph g = direct_alltoall(8, 8 << 20);
  CHECK(same_both_ways(g, even) == 4);
  CHECK(same_both_ways(g, uneven) == 1);
}

TEST_CASE("a graph that differs on one rank is simulated rank by rank", "[symmetry]") {
  // 32 ranks on parm-32gpu (8 servers of 4): a copy, then one AllReduce over
  // all of them. All alike: a shift by one server maps it onto itself (order 8).
  // Rank 31's copy twice as large: no shift does; and a graph on 8 of the 32
  // GPUs leaves servers 2-7 idle, which no shift maps onto servers 0-1.
  const Topology t = topo("parm-32gpu");
  auto graph = [](int ranks, std::uint64_t last_bytes) {
    std::string s = fmt::format("ranks: {}\ncollectives:\n  - {{name: ar, op: allreduce, bytes: 4MiB, group: [", ranks);
    for (int r = 0; r < ranks; ++r) s += fmt::format("{}{}", r ? ", " : "", r);
    s += "]}\ntasks:\n";
    for (int r = 0; r < ranks; ++r) {
      s += fmt::format("  - {{name: \"k#{}\", rank: {}, op: copy, bytes: {}B}}\n", r, r, r == ranks - 1 ? last_bytes : 1 << 20);
      s += fmt::format("  - {{name: c{}, rank: {}, collective: ar, deps: [\"k#{}\"]}}\n", r, r, r);
    }
    return parse_task_graph_text(s, "g.yaml");
  };
  CHECK(same_both_ways(graph(32, 1 << 20), t) == 8);
  CHECK(same_both_ways(graph(32, 2 << 20), t) == 1);
  CHECK(same_both_ways(graph(8, 1 << 20), t) == 1);
}

TEST_CASE("layers: symmetric simulation equals the rank-by-rank one", "[symmetry]") {
  struct Case {
    const char* topo;
    std::vector<std::string> topo_set;
    const char* set;
    int order;  // the symmetry found
  };
  // parm-32gpu: 8 servers on one switch, shift 1 server: order 8.
  // h200-cluster of 4 nodes: rails and spines fixed, order 4.
  // fat-tree of 16 servers, 4 per leaf: shift by a leaf, order 4 (128 GPUs).
  // pcie-8gpu is one server: no shift (order 1).
  const std::vector<Case> cases = {
      {"parm-32gpu", {}, "", 8},
      {"parm-32gpu", {}, "mp=1,E=32", 8},
      {"h200-cluster", {"nodes=4"}, "B=2,L=512,M=1024,H=2048,E=32,k=2,mp=4,dtype=bf16", 4},
      {"fat-tree-1024", {"nodes=16", "fabric.nodes_per_leaf=4", "fabric.spines=4"},
       "B=2,L=256,M=1024,H=2048,E=128,k=2,mp=8,dtype=bf16", 4},
      {"pcie-8gpu", {}, "mp=2,dtype=fp16", 1},
  };
  for (const Case& c : cases) {
    const Topology t = topo(c.topo, c.topo_set);
    for (const char* schedule : {"baseline", "s1", "s2"}) {
      INFO(c.topo << " " << c.set << " " << schedule);
      for (const TaskGraph& g : layer_graphs(t, c.set, schedule)) CHECK(same_both_ways(g, t) == c.order);
    }
  }
}

TEST_CASE("a flow listed twice on a link takes half of it", "[symmetry][flow]") {
  // One flow alone, its route [0, 0]: it stands for two copies on link 0, so
  // it gets 40 GB/s / 2 = 20 GB/s; 1 GB takes 1e9 / 2e10 = 50 ms (+ 1 us latency).
  Topology t("t", "h100", 1);
  const int a = t.add_device({"n0.gpu0", DeviceKind::gpu, 0, 0});
  const int b = t.add_device({"n1.gpu0", DeviceKind::gpu, 1, 1});
  const int sw = t.add_device({"sw", DeviceKind::network_switch});
  t.add_link(a, sw, 40'000'000'000ULL, 40'000'000'000ULL, Time::us(1));
  t.add_link(b, sw, 40'000'000'000ULL, 40'000'000'000ULL, Time::us(1));
  t.finalize();
  auto net = make_network("flow", t);
  const std::vector<int> twice = {0, 0};
  net->start(7, RouteView(twice, Time::us(1), 40'000'000'000ULL), 1'000'000'000ULL, Time{});
  std::vector<std::uint64_t> done;
  Time now;
  while (done.empty()) {
    now = *net->next_completion();
    net->complete(now, &done);
  }
  CHECK(done == std::vector<std::uint64_t>{7});
  CHECK(now == Time::us(1) + Time::ms(50));
}

TEST_CASE("routes that do not follow the shift are caught as flows start", "[symmetry]") {
  // 48 servers, 4 per leaf, 3 spines: 384 GPUs, above the route table, so
  // routes are checked as flows start. Shifting by a leaf (32 GPUs) is an
  // automorphism (leaves rotate, spines stay), but ECMP picks (src + dst)
  // mod 3 among the spines, and a shift adds 2 x 32 = 64 = 1 (mod 3): a flow
  // and its image go up different spines. The simulation starts again rank
  // by rank and agrees with one that never tried.
  const Topology ft = topo("fat-tree-1024", {"nodes=48", "fabric.nodes_per_leaf=4", "fabric.spines=3"});
  REQUIRE(ft.num_gpus() == 384);
  REQUIRE(ft.node_shift(4).has_value());
  const TaskGraph g = direct_alltoall(384, 384 << 10);
  CHECK(same_both_ways(g, ft) == 1);
  // With 4 spines the picks move by 64 = 0 (mod 4): the shift holds (order 12).
  const Topology ok = topo("fat-tree-1024", {"nodes=48", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  CHECK(same_both_ways(g, ok) == 12);
}

TEST_CASE("a trace of representatives writes the ranks the simulation ran, and says what each stands for",
          "[symmetry][trace]") {
  // A direct AlltoAll over parm-32gpu's 32 GPUs (8 servers of 4): a shift by one server maps it
  // onto itself, so symmetry runs ranks 0-3 (32 / 8) and each stands for 8.
  const Topology t = topo("parm-32gpu");
  const TaskGraph g = direct_alltoall(32, 1 << 20);
  const SimResult r = simulate(g, t);
  REQUIRE(r.symmetry == 8);
  CHECK(representative_ranks(g, r) == 4);
  auto csv = [&](int ranks) {
    std::ostringstream os;
    const TracePart part{"s1", "forward", &g, &r, Time::zero(), ranks};
    write_trace_csv(os, std::span<const TracePart>(&part, 1));
    return os.str();
  };
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    std::istringstream is(s);
    for (std::string l; std::getline(is, l);) v.push_back(l);
    return v;
  };
  int rep_tasks = 0;
  for (const Task& task : g.tasks()) rep_tasks += task.rank < 4;
  const std::vector<std::string> some = lines(csv(representative_ranks(g, r)));
  REQUIRE(some.size() == static_cast<std::size_t>(1 + rep_tasks));
  CHECK(some[0].substr(some[0].rfind(',') + 1) == "stands_for");
  for (std::size_t i = 1; i < some.size(); ++i) {
    // rank is the 5th column; stands_for, the last, is 8 on every row.
    std::vector<std::string> f;
    std::istringstream is(some[i]);
    for (std::string x; std::getline(is, x, ',');) f.push_back(x);
    CHECK(std::stoi(f.at(4)) < 4);
    CHECK(f.back() == "8");
  }
  // Every rank: a row per task and no stands_for column.
  const std::vector<std::string> all = lines(csv(0));
  CHECK(all.size() == 1 + g.tasks().size());
  CHECK(all[0].find("stands_for") == std::string::npos);
  // The Chrome trace names the ranks in its process name.
  std::ostringstream js;
  const TracePart part{"s1", "forward", &g, &r, Time::zero(), 4};
  write_chrome_trace(js, std::span<const TracePart>(&part, 1));
  CHECK(js.str().find("ranks 0-3 of 32, one per class of symmetric ranks: each stands for 8") != std::string::npos);
}

namespace {
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The form of c built on the representatives (whatever the plan's size) and
// by the general path; they must agree bit for bit. Returns the order used.
int same_form_both_ways(const Collective& c, const Topology& t) {
  Workspace ws;
  const CostForm on = make_cost_form(c, t, {}, ws, FormSymmetry{true, 0});
  const CostForm off = make_cost_form(c, t, {}, ws, FormSymmetry{false, 0});
  CHECK(off.symmetry == 1);
  CHECK(on.trivial == off.trivial);
  CHECK(on.rounds == off.rounds);
  CHECK(on.transfers == off.transfers);
  REQUIRE(on.envelope.size() == off.envelope.size());
  for (std::size_t i = 0; i < on.envelope.size(); ++i) {
    CHECK(same_bits(on.envelope[i].alpha, off.envelope[i].alpha));
    CHECK(same_bits(on.envelope[i].beta, off.envelope[i].beta));
  }
  // And the default (symmetry above 2^16 transfers) gives the same times.
  const CostForm dflt = make_cost_form(c, t, {}, ws);
  for (double n : {1.0, 4096.0, 1e6, 3.3e8})
    CHECK(same_bits(dflt.time_s(n), off.time_s(n)));
  return on.symmetry;
}

Collective coll(CollOp op, const std::string& algo, std::vector<int> group, int inner = 0) {
  Collective c;
  c.op = op;
  c.algo = algo;
  c.name = "c";
  c.bytes = 1 << 20;
  c.group = std::move(group);
  c.inner = inner;
  return c;
}
std::vector<int> ranks(int from, int to, int step = 1) {
  std::vector<int> g;
  for (int r = from; r < to; r += step) g.push_back(r);
  return g;
}
}  // namespace

TEST_CASE("cost forms on the representatives of a server shift equal the general path's", "[symmetry][form]") {
  // fat-tree of 16 servers, 4 per leaf: a shift by a leaf (32 GPUs), order 4,
  // each link its own orbit (weight 1).
  const Topology ft = topo("fat-tree-1024", {"nodes=16", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  CHECK(same_form_both_ways(coll(CollOp::saa, "released", ranks(0, 128), 8), ft) == 4);
  CHECK(same_form_both_ways(coll(CollOp::saa, "pipelined", ranks(0, 128), 8), ft) == 4);
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 128)), ft) == 4);
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "direct", ranks(0, 128)), ft) == 4);
  CHECK(same_form_both_ways(coll(CollOp::allreduce, "ring", ranks(0, 128)), ft) == 4);
  // An EP group (every 8th rank): closed under the shift by 32 ranks.
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 128, 8)), ft) == 4);
  // A rail fabric: rails and spines fixed by a one-server shift, their links
  // orbits of one link carrying 4 times the representatives' load (weight 4).
  const Topology rail = topo("h200-cluster", {"nodes=4"});
  CHECK(same_form_both_ways(coll(CollOp::saa, "released", ranks(0, 32), 8), rail) == 4);
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 32)), rail) == 4);
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 32, 8)), rail) == 4);
  // parm-32gpu: 8 servers on one switch, order 8.
  CHECK(same_form_both_ways(coll(CollOp::saa, "released", ranks(0, 32), 4), topo("parm-32gpu")) == 8);
}

TEST_CASE("cost forms fall back to every transfer where no shift is proved", "[symmetry][form]") {
  // A group on part of the servers: no shift maps it onto itself.
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 6)), topo("parm-32gpu")) == 1);
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 16)), topo("parm-32gpu")) == 1);
  // ECMP picks that do not follow the shift (384 GPUs, 3 spines; see above):
  // caught by the routes' check.
  const Topology ft3 = topo("fat-tree-1024", {"nodes=48", "fabric.nodes_per_leaf=4", "fabric.spines=3"});
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "p2p", ranks(0, 384, 4)), ft3) == 1);
  // A slower link on one server: no shift of the topology.
  Topology t("t", "h100", 2);
  const int sw = t.add_device({"sw", DeviceKind::network_switch});
  for (int n = 0; n < 4; ++n)
    for (int i = 0; i < 2; ++i) {
      const int g = t.add_device({"n" + std::to_string(n) + ".gpu" + std::to_string(i), DeviceKind::gpu, n, 2 * n + i});
      const std::uint64_t bw = n == 3 && i == 0 ? 25'000'000'000ULL : 50'000'000'000ULL;
      t.add_link(g, sw, bw, bw, Time::us(1));
    }
  t.finalize();
  CHECK(same_form_both_ways(coll(CollOp::alltoall, "direct", ranks(0, 8)), t) == 1);
}

TEST_CASE("a plan that throws under symmetry gives the error it gives rank by rank", "[symmetry]") {
  // 32 ranks on parm-32gpu: an AlltoAll over all (fine, mapped onto itself by
  // a one-server shift), then a direct AlltoAll given a protocol, which only
  // NCCL's algorithms take (the plan refuses it). With symmetry the plans are
  // taken as they are checked; the error must be the one every plan taken in
  // order gives.
  const Topology t = topo("parm-32gpu");
  std::string s = "ranks: 32\ncollectives:\n  - {name: a2a, op: alltoall, bytes: 4MiB, group: [";
  for (int r = 0; r < 32; ++r) s += fmt::format("{}{}", r ? ", " : "", r);
  s += "]}\n  - {name: bad, op: alltoall, algo: direct, proto: ll, bytes: 4MiB, group: [";
  for (int r = 0; r < 32; ++r) s += fmt::format("{}{}", r ? ", " : "", r);
  s += "]}\ntasks:\n";
  for (int r = 0; r < 32; ++r) {
    s += fmt::format("  - {{name: a{}, rank: {}, collective: a2a}}\n", r, r);
    s += fmt::format("  - {{name: b{}, rank: {}, collective: bad, deps: [a{}]}}\n", r, r, r);
  }
  const TaskGraph g = parse_task_graph_text(s, "g.yaml");
  auto message = [&](bool symmetry) {
    Workspace ws;
    SimOptions o;
    o.symmetry = symmetry;
    try {
      simulate(g, t, o, ws);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string off = message(false);
  CHECK(off.find("proto and channels apply to NCCL's algorithms") != std::string::npos);
  CHECK(message(true) == off);
}

namespace {
// The smallest server shift that maps c's group onto itself (as make_cost_form looks for it).
std::optional<NodeShift> first_shift(const Collective& c, const Topology& t, std::vector<int>& pi) {
  const int P = t.num_gpus();
  std::vector<int> member_of(P, -1);
  for (std::size_t m = 0; m < c.group.size(); ++m) member_of[c.group[m]] = static_cast<int>(m);
  for (int nodes = 1; nodes < t.num_nodes(); ++nodes) {
    if (t.num_nodes() % nodes != 0) continue;
    const int R = nodes * t.gpus_per_node();
    pi.assign(c.group.size(), -1);
    bool closed = true;
    for (std::size_t m = 0; m < c.group.size() && closed; ++m) closed = (pi[m] = member_of[(c.group[m] + R) % P]) >= 0;
    if (!closed) continue;
    if (auto s = t.node_shift(nodes)) return s;
  }
  return std::nullopt;
}

// make_rep_plan's plan against the full plan compacted (compact_plan), element
// for element, the full plan first checked against its image (plan_maps_onto).
// Returns whether make_rep_plan built one.
bool rep_plan_equals_compacted(const Collective& c, const Topology& t) {
  std::vector<int> pi;
  const std::optional<NodeShift> sh = first_shift(c, t, pi);
  REQUIRE(sh.has_value());
  Workspace ws;
  const std::optional<CollPlan> q = make_rep_plan(c, t, *sh, ws);
  if (!q) return false;
  const CollPlan full = make_plan(c, t, ws);
  REQUIRE(plan_maps_onto(full, full, pi, *sh, t.num_gpus()));
  const CollPlan e = compact_plan(full, c.group, sh->gpus, t.num_gpus());
  CHECK(full.xfers.size() == q->xfers.size() * static_cast<std::size_t>(sh->order));
  CHECK(e.xfers.size() < full.xfers.size());
  REQUIRE(q->steps.size() == e.steps.size());
  REQUIRE(q->xfers.size() == e.xfers.size());
  int differ = 0;
  for (std::size_t i = 0; i < e.steps.size(); ++i)
    differ += q->steps[i].member != e.steps[i].member || q->steps[i].deps != e.steps[i].deps;
  for (std::size_t i = 0; i < e.xfers.size(); ++i) {
    const CollXfer &a = q->xfers[i], &b = e.xfers[i];
    differ += a.src != b.src || a.dst != b.dst || a.bytes != b.bytes || a.send_step != b.send_step ||
              a.recv_step != b.recv_step || a.route != b.route || a.via != b.via || a.lat != b.lat;
  }
  CHECK(differ == 0);
  CHECK(q->routes == e.routes);
  CHECK(q->latencies == e.latencies);
  CHECK(q->barrier == e.barrier);
  CHECK(q->min_duration == e.min_duration);
  CHECK(q->choice == e.choice);
  return true;
}

Collective sized(Collective c, std::uint64_t bytes, int window = 0) {
  c.bytes = bytes;
  c.window = window;
  return c;
}
}  // namespace

TEST_CASE("plans built for the representatives equal the full plans compacted", "[symmetry][repplan]") {
  const Topology ft = topo("fat-tree-1024", {"nodes=16", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  const Topology rail = topo("h200-cluster", {"nodes=4"});
  const Topology p32 = topo("parm-32gpu");
  // SAA: released and pipelined, PXN and p2p latencies by batch (rail fabric
  // and fat-tree), blocks of a server and of half a server.
  CHECK(rep_plan_equals_compacted(coll(CollOp::saa, "released", ranks(0, 128), 8), ft));
  CHECK(rep_plan_equals_compacted(coll(CollOp::saa, "pipelined", ranks(0, 128), 8), ft));
  CHECK(rep_plan_equals_compacted(coll(CollOp::saa, "released", ranks(0, 32), 8), rail));
  CHECK(rep_plan_equals_compacted(coll(CollOp::saa, "pipelined", ranks(0, 32), 4), rail));
  CHECK(rep_plan_equals_compacted(coll(CollOp::saa, "released", ranks(0, 32), 4), p32));
  // An odd size: ceil(S / p) chunks.
  CHECK(rep_plan_equals_compacted(sized(coll(CollOp::saa, "released", ranks(0, 32), 4), 1000003), p32));
  // Rounds: p2p (grouped send/recv, PXN) over all and over an EP group (every
  // 8th rank), direct with a window, pairwise, AllGather, ReduceScatter, AllReduce.
  CHECK(rep_plan_equals_compacted(coll(CollOp::alltoall, "p2p", ranks(0, 128)), ft));
  CHECK(rep_plan_equals_compacted(coll(CollOp::alltoall, "p2p", ranks(0, 128, 8)), ft));
  CHECK(rep_plan_equals_compacted(coll(CollOp::alltoall, "p2p", ranks(0, 32)), rail));
  CHECK(rep_plan_equals_compacted(coll(CollOp::alltoall, "p2p", ranks(3, 32, 8)), rail));
  CHECK(rep_plan_equals_compacted(sized(coll(CollOp::alltoall, "direct", ranks(0, 128)), 1 << 20, 5), ft));
  CHECK(rep_plan_equals_compacted(coll(CollOp::alltoall, "pairwise", ranks(0, 32)), p32));
  CHECK(rep_plan_equals_compacted(coll(CollOp::allgather, "direct", ranks(0, 32)), p32));
  CHECK(rep_plan_equals_compacted(coll(CollOp::reducescatter, "pairwise", ranks(0, 32)), rail));
  CHECK(rep_plan_equals_compacted(coll(CollOp::allreduce, "direct", ranks(0, 32)), p32));
  // AlltoAllv whose sizes depend on (j - i) mod p only: equal under the shift.
  Collective v = coll(CollOp::alltoallv, "p2p", ranks(0, 32));
  v.matrix.assign(32, std::vector<std::uint64_t>(32));
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 32; ++j) v.matrix[i][j] = 1000 + 37 * ((j - i + 32) % 32);
  CHECK(rep_plan_equals_compacted(v, rail));
}

TEST_CASE("plans not proved equivariant on their inputs are not built for the representatives", "[symmetry][repplan]") {
  const Topology p32 = topo("parm-32gpu");
  const Topology rail = topo("h200-cluster", {"nodes=4"});
  // AlltoAllv sizes that differ on one pair: not equal under the shift.
  Collective v = coll(CollOp::alltoallv, "p2p", ranks(0, 32));
  v.matrix.assign(32, std::vector<std::uint64_t>(32, 1000));
  v.matrix[0][5] = 999;
  CHECK_FALSE(rep_plan_equals_compacted(v, rail));
  // SAA blocks of 8 on servers of 4 GPUs: the one-server shift (4 members)
  // does not map blocks onto blocks.
  CHECK_FALSE(rep_plan_equals_compacted(coll(CollOp::saa, "released", ranks(0, 32), 8), p32));
  // SAA blocks of 16 on 8-GPU servers: gathers leave the server; the leaf
  // shift (32 members) maps blocks onto blocks, but p2p's batches are not rounds.
  const Topology ft = topo("fat-tree-1024", {"nodes=16", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  CHECK_FALSE(rep_plan_equals_compacted(coll(CollOp::saa, "released", ranks(0, 128), 16), ft));
  // NCCL's algorithms and hierarchical: not built this way.
  CHECK_FALSE(rep_plan_equals_compacted(coll(CollOp::allreduce, "ring", ranks(0, 32)), p32));
  CHECK_FALSE(rep_plan_equals_compacted(coll(CollOp::alltoall, "hierarchical", ranks(0, 32)), p32));
  // Members listed by local index first: the shift is no rotation of them.
  std::vector<int> by_local;
  for (int l = 0; l < 4; ++l)
    for (int n = 0; n < 8; ++n) by_local.push_back(4 * n + l);
  CHECK_FALSE(rep_plan_equals_compacted(coll(CollOp::alltoall, "p2p", by_local), p32));
  // The forms of those agree with the general path all the same (full plans).
  same_form_both_ways(coll(CollOp::alltoall, "p2p", by_local), p32);
  same_form_both_ways(coll(CollOp::saa, "released", ranks(0, 128), 16), ft);
  same_form_both_ways(coll(CollOp::saa, "released", ranks(0, 32), 8), p32);
}

TEST_CASE("cost forms of concurrent copies on the representatives equal the general path's", "[symmetry][form]") {
  const Topology ft = topo("fat-tree-1024", {"nodes=16", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  const Topology rail = topo("h200-cluster", {"nodes=4"});
  auto both = [](const Collective& c, const Topology& t, Concurrent k) {
    Workspace ws;
    const CostForm on = make_cost_form(c, t, k, ws, FormSymmetry{true, 0});
    const CostForm off = make_cost_form(c, t, k, ws, FormSymmetry{false, 0});
    CHECK(on.rounds == off.rounds);
    CHECK(on.transfers == off.transfers);
    REQUIRE(on.envelope.size() == off.envelope.size());
    for (std::size_t i = 0; i < on.envelope.size(); ++i) {
      CHECK(same_bits(on.envelope[i].alpha, off.envelope[i].alpha));
      CHECK(same_bits(on.envelope[i].beta, off.envelope[i].beta));
    }
    return on.symmetry;
  };
  // The layer's EP groups (every 8th rank, 8 of them at once; every 4th, 4):
  // each copy's group is mapped onto itself by the leaf shift (order 4).
  CHECK(both(coll(CollOp::alltoall, "p2p", ranks(0, 128, 8)), ft, {8, 1}) == 4);
  CHECK(both(coll(CollOp::alltoall, "p2p", ranks(0, 128, 4)), ft, {4, 1}) == 4);
  // On the rail fabric (rails and spines fixed, weight 4), order 4.
  CHECK(both(coll(CollOp::alltoall, "p2p", ranks(0, 32, 8)), rail, {8, 1}) == 4);
  // MP groups (one server each, 16 at once): no group is closed, general path.
  CHECK(both(coll(CollOp::alltoall, "p2p", ranks(0, 8)), ft, {16, 8}) == 1);
}

TEST_CASE("a 256-GPU layer: symmetric simulation equals the rank-by-rank one", "[symmetry]") {
  // fat-tree of 32 servers, 8 per leaf: the leaf shift (64 GPUs), order 4; S2's
  // SAA over all 256 ranks and S1's EP AlltoAlls built for the representatives.
  const Topology t = topo("fat-tree-1024", {"nodes=32", "fabric.nodes_per_leaf=8", "fabric.spines=4"});
  for (const char* schedule : {"s1", "s2"}) {
    INFO(schedule);
    for (const TaskGraph& g : layer_graphs(t, "B=2,L=256,M=1024,H=2048,E=256,k=2,mp=8,dtype=bf16", schedule))
      CHECK(same_both_ways(g, t) == 4);
  }
}

TEST_CASE("hop distances read through the server shift equal a search from every destination", "[symmetry][dist]") {
  // Above kRouteTableGpus (256) a route reads the hop distances to its
  // destination; with a server shift only the first shift's GPUs are searched
  // and the rest read through the shift's vertex map. Every destination's
  // distances, from every vertex, against a direct search.
  auto every_destination = [](const Topology& t) {
    Workspace ws;
    int differ = 0;
    for (int d = 0; d < t.num_gpus(); ++d) differ += t.hop_distances(d, ws) != t.bfs_to(d);
    return differ;
  };
  // 48 servers of 8 GPUs (384), 4 per leaf, 4 spines: the smallest shift is a
  // leaf (4 servers, 32 GPUs; one server does not keep the leaves, as above).
  const Topology ft = topo("fat-tree-1024", {"nodes=48", "fabric.nodes_per_leaf=4", "fabric.spines=4"});
  REQUIRE(ft.num_gpus() == 384);
  CHECK(ft.distance_shift_gpus() == 32);
  CHECK(every_destination(ft) == 0);
  // A rail fabric of 40 servers (320 GPUs): one server (8 GPUs) moves.
  const Topology rail = topo("h200-cluster", {"nodes=40"});
  REQUIRE(rail.num_gpus() == 320);
  CHECK(rail.distance_shift_gpus() == 8);
  CHECK(every_destination(rail) == 0);
  // 130 two-GPU servers on a leaf switch each, the leaves on one core switch
  // (260 GPUs); with one slower link on the last server no shift holds and
  // every destination is searched.
  auto make = [](std::uint64_t slow) {
    Topology t("t", "h100", 2);
    const int core = t.add_device({"core", DeviceKind::network_switch});
    const std::uint64_t bw = 50'000'000'000ULL;
    for (int n = 0; n < 130; ++n) {
      const int leaf = t.add_device({"leaf" + std::to_string(n), DeviceKind::network_switch});
      t.add_link(leaf, core, bw, bw, Time::us(1));
      for (int i = 0; i < 2; ++i) {
        const int g = t.add_device({"n" + std::to_string(n) + ".gpu" + std::to_string(i), DeviceKind::gpu, n, 2 * n + i});
        const std::uint64_t b = n == 129 && i == 0 ? slow : bw;
        t.add_link(g, leaf, b, b, Time::us(1));
      }
    }
    t.finalize();
    return t;
  };
  const Topology even = make(50'000'000'000ULL), uneven = make(25'000'000'000ULL);
  CHECK(even.distance_shift_gpus() == 2);
  CHECK(every_destination(even) == 0);
  CHECK(uneven.distance_shift_gpus() == 0);
  CHECK(every_destination(uneven) == 0);
  // Hand-derived: GPU 0 (n0.gpu0) to GPU 259 (n129.gpu1) is gpu -> leaf0 ->
  // core -> leaf129 -> gpu, 4 hops; to its server's other GPU (GPU 1) 2 hops;
  // leaf0 to GPU 259 3 hops (leaf0 -> core -> leaf129 -> gpu).
  Workspace ws;
  const std::vector<int> d = even.hop_distances(259, ws);
  const std::vector<int> e = even.hop_distances(1, ws);
  int v0 = -1, leaf0 = -1;
  for (int v = 0; v < even.num_devices(); ++v) {
    if (even.graph()[v].name == "n0.gpu0") v0 = v;
    if (even.graph()[v].name == "leaf0") leaf0 = v;
  }
  CHECK(d[v0] == 4);
  CHECK(e[v0] == 2);
  CHECK(d[leaf0] == 3);
}
