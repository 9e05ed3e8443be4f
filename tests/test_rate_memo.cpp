// The flow model's memo of max-min rates (sim/net/rate_memo.hpp): what it
// finds, what it refuses, and that simulations give the same times with it
// and without it, to the picosecond.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <tuple>

#include "sim/net/network_model.hpp"
#include "sim/net/rate_memo.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {
Topology topo(const std::string& name) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml");
}
std::vector<double> capacities(const Topology& t) {
  std::vector<double> c;
  for (int l = 0; l < t.num_links(); ++l) c.push_back(static_cast<double>(t.link(l).bandwidth));
  return c;
}
struct Xfer {
  Route route;
  std::uint64_t bytes;
  Time at;
  double cap;
};
// Each transfer's completion time through one flow model, by index; with
// ws's rate memo when given, else none.
std::vector<Time> run(const Topology& t, const std::vector<Xfer>& xs, Workspace* ws = nullptr) {
  auto net = make_network("flow", t, ws);
  std::vector<Time> end(xs.size(), Time::max());
  std::vector<std::uint64_t> done;
  std::size_t next = 0;
  // Starts in time order, as the engine makes them, between completions.
  while (next < xs.size() || net->in_flight() > 0) {
    const std::optional<Time> tn = net->next_completion();
    if (next < xs.size() && (!tn || xs[next].at <= *tn)) {
      net->start(next, xs[next].route, xs[next].bytes, xs[next].at, xs[next].cap);
      ++next;
      continue;
    }
    done.clear();
    net->complete(*tn, &done);
    for (auto id : done) end[id] = *tn;
  }
  return end;
}
}  // namespace

TEST_CASE("rate memo: a multiset of paths solved once is found in any order, and no other", "[flow][memo]") {
  RateMemo m;
  const std::vector<int> a{0, 1}, b{1, 2}, ba{1, 0};
  const std::uint32_t p0 = m.path_id(a, 0), p1 = m.path_id(b, 0);
  CHECK(m.path_id(a, 0) == p0);
  CHECK(m.path_id(b, 0) == p1);
  CHECK(m.path_id(a, 5.0) != p0);  // another cap
  CHECK(m.path_id(ba, 0) != p0);   // another order of links is another route
  const std::uint32_t p2 = m.path_id(std::vector<int>{3}, 0);
  m.insert(std::vector<std::uint32_t>{p0, p1, p1}, std::vector<double>{10, 20, 20});
  std::vector<double> r;
  REQUIRE(m.find(std::vector<std::uint32_t>{p1, p0, p1}, r));
  CHECK(r == std::vector<double>{20, 10, 20});
  r = {-7};
  CHECK_FALSE(m.find(std::vector<std::uint32_t>{p0, p1}, r));          // one p1 fewer
  CHECK_FALSE(m.find(std::vector<std::uint32_t>{p0, p1, p1, p1}, r));  // one more
  CHECK_FALSE(m.find(std::vector<std::uint32_t>{p0, p1, p2}, r));      // as many flows, other paths
  CHECK_FALSE(m.find(std::vector<std::uint32_t>{p0, p0, p1}, r));      // the same paths, other counts
  CHECK(r == std::vector<double>{-7});                                 // a miss leaves the rates alone
  // Two flows of one path with different rates cannot come from the solver:
  // such a set is not kept.
  m.insert(std::vector<std::uint32_t>{p2, p2}, std::vector<double>{1, 2});
  CHECK(m.counts().refused == 1);
  CHECK_FALSE(m.find(std::vector<std::uint32_t>{p2, p2}, r));
  CHECK(m.counts().hits == 1);
  CHECK(m.counts().inserted == 1);
}

TEST_CASE("rate memo: when its paths are full it starts afresh under a new epoch", "[flow][memo]") {
  RateMemo m;
  for (int i = 0; i < static_cast<int>(RateMemo::kMaxPaths); ++i) m.path_id(std::vector<int>{i, i + 1}, 0);
  CHECK(m.paths() == RateMemo::kMaxPaths);
  CHECK(m.epoch() == 0);
  CHECK(m.path_id(std::vector<int>{0, 1}, 0) == 0);  // known: no growth
  m.insert(std::vector<std::uint32_t>{0}, std::vector<double>{3});
  CHECK(m.current(0));
  CHECK_FALSE(m.current(RateMemo::kNone));
  // A new path: the memo starts afresh. Ids carry their epoch, so the new
  // epoch's first path (index 0) has another id than the old one's.
  const std::uint32_t fresh = m.path_id(std::vector<int>{-5}, 0);
  CHECK(m.epoch() == 1);
  CHECK(m.paths() == 1);
  CHECK(fresh == (1u << RateMemo::kIndexBits));
  CHECK(m.current(fresh));
  CHECK_FALSE(m.current(0));
  std::vector<double> r;
  // What was kept went with the old ids; an old id is refused, not taken
  // for the path that now has its index.
  CHECK_FALSE(m.find(std::vector<std::uint32_t>{0}, r));
  m.insert(std::vector<std::uint32_t>{0}, std::vector<double>{4});
  CHECK(m.counts().refused == 1);
  m.insert(std::vector<std::uint32_t>{fresh}, std::vector<double>{4});
  REQUIRE(m.find(std::vector<std::uint32_t>{fresh}, r));
  CHECK(r == std::vector<double>{4});
}

TEST_CASE("flow model: the same completion times with the rate memo as without it", "[flow][memo]") {
  // Random transfers between the 32 GPUs of the paper's cluster (PCIe, NICs,
  // a switch; some capped), about ten in flight: every solve is
  // global, so every one goes through the memo. Run without the memo, then
  // twice with it (cold, then warm: the second run finds most sets).
  const Topology t = topo("parm-32gpu");
  std::mt19937 rng(3);
  std::vector<Xfer> xs;
  Time at;
  for (int i = 0; i < 3000; ++i) {
    at += Time::ns(static_cast<std::int64_t>(rng() % 10'000));
    const int s = static_cast<int>(rng() % 32), d = (s + 1 + static_cast<int>(rng() % 31)) % 32;
    const double cap = rng() % 5 == 0 ? 1e9 * (1 + rng() % 8) : 0;
    xs.push_back({t.route(s, d), 1'000 + rng() % 200'000, at, cap});
  }
  Workspace ws, off;
  set_rate_memo(off, false);
  const std::vector<Time> without = run(t, xs, &off);
  CHECK(rate_memo_for(capacities(t), off) == nullptr);
  const std::vector<Time> cold = run(t, xs, &ws);
  const std::vector<Time> warm = run(t, xs, &ws);
  const RateMemo& m = *rate_memo_for(capacities(t), ws);
  CAPTURE(m.counts().lookups, m.counts().hits, m.counts().inserted, m.counts().refused, m.counts().clears, m.paths(),
          m.sets());
  CHECK(m.counts().hits > m.counts().lookups / 2);  // the warm run found its sets
  CHECK(m.counts().inserted > 100);
  REQUIRE(without.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(i);
    REQUIRE(without[i] != Time::max());
    CHECK(cold[i] == without[i]);
    CHECK(warm[i] == without[i]);
  }
}

TEST_CASE("flow model: a memo that starts afresh mid-run gives the same times", "[flow][memo]") {
  // 40,000 transfers on made-up 3-link routes over the cluster's links: more
  // distinct routes than the memo keeps (RateMemo::kMaxPaths), so it starts
  // afresh while flows hold ids of the old epoch, which must be given again.
  const Topology t = topo("parm-32gpu");
  std::mt19937 rng(9);
  std::vector<Xfer> xs;
  Time at;
  const int L = t.num_links();
  for (int i = 0; i < 40'000; ++i) {
    at += Time::ns(static_cast<std::int64_t>(rng() % 2000));
    Route r;
    r.latency = Time::ns(500);
    while (r.links.size() < 3) {  // three different links
      const int l = static_cast<int>(rng() % L);
      if (std::find(r.links.begin(), r.links.end(), l) == r.links.end()) r.links.push_back(l);
    }
    xs.push_back({r, 1'000 + rng() % 50'000, at, 0});
  }
  const std::vector<Time> without = run(t, xs);  // no workspace: no memo
  Workspace ws;
  const std::vector<Time> with = run(t, xs, &ws);
  const RateMemo& m = *rate_memo_for(capacities(t), ws);
  CHECK(m.epoch() > 0);
  CHECK(with == without);
}
