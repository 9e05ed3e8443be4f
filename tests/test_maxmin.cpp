#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <random>

#include "sim/net/maxmin.hpp"

using parmsim::max_min_rates;

namespace {
std::vector<double> solve(const std::vector<double>& cap, const std::vector<std::vector<int>>& paths) {
  std::vector<std::span<const int>> p;
  for (const auto& x : paths) p.emplace_back(x);
  return max_min_rates(cap, p);
}
// Capacities from a small set (many links tie, as an AlltoAll's NICs do).
std::vector<double> tie_capacities(std::mt19937& rng, int L) {
  std::vector<double> cap(L);
  for (double& c : cap) c = std::array<double, 3>{25e9, 50e9, 12.5e9}[rng() % 3];
  return cap;
}
// A path of 1-4 distinct links among L.
std::vector<int> random_path(std::mt19937& rng, int L) {
  std::vector<int> p;
  const int len = 1 + static_cast<int>(rng() % 4);
  while (static_cast<int>(p.size()) < std::min(len, L)) {
    const int l = static_cast<int>(rng() % L);
    if (std::find(p.begin(), p.end(), l) == p.end()) p.push_back(l);
  }
  return p;
}
}  // namespace

TEST_CASE("two flows on one link each get half", "[maxmin]") {
  const auto r = solve({10.0}, {{0}, {0}});
  CHECK(r[0] == Approx(5.0));
  CHECK(r[1] == Approx(5.0));
}

TEST_CASE("a bottleneck elsewhere frees bandwidth for the others", "[maxmin]") {
  // Links A (cap 10), B (cap 4). f0 on A; f1 on A and B; f2 on B.
  // B is the tightest: 4 / 2 = 2 each for f1, f2. A then has 10 - 2 = 8 for f0.
  const auto r = solve({10.0, 4.0}, {{0}, {0, 1}, {1}});
  CHECK(r[0] == Approx(8.0));
  CHECK(r[1] == Approx(2.0));
  CHECK(r[2] == Approx(2.0));
}

TEST_CASE("parking-lot: the long flow gets the share of its tightest link", "[maxmin]") {
  // Three links of capacity 6, 9, 12. f0 crosses all three; f1, f2, f3 each use one.
  // Link 0: 6/2 = 3 is the smallest share -> f0 = f1 = 3.
  // Link 1: 9 - 3 = 6 for f2. Link 2: 12 - 3 = 9 for f3.
  const auto r = solve({6.0, 9.0, 12.0}, {{0, 1, 2}, {0}, {1}, {2}});
  CHECK(r[0] == Approx(3.0));
  CHECK(r[1] == Approx(3.0));
  CHECK(r[2] == Approx(6.0));
  CHECK(r[3] == Approx(9.0));
}

TEST_CASE("no link is oversubscribed and every flow is bottlenecked", "[maxmin]") {
  // Random instance: check the two defining properties of max-min fairness.
  std::vector<double> cap = {5, 7, 3, 11, 2, 13};
  std::vector<std::vector<int>> paths = {{0, 1}, {1, 2}, {2, 3, 4}, {0}, {5, 3}, {4, 5}, {1}, {3}};
  const auto r = solve(cap, paths);
  std::vector<double> used(cap.size(), 0.0);
  for (std::size_t f = 0; f < paths.size(); ++f)
    for (int l : paths[f]) used[l] += r[f];
  for (std::size_t l = 0; l < cap.size(); ++l) CHECK(used[l] <= cap[l] + 1e-9);
  // Each flow crosses a saturated link on which it has the largest rate.
  for (std::size_t f = 0; f < paths.size(); ++f) {
    bool bottlenecked = false;
    for (int l : paths[f]) {
      if (used[l] < cap[l] - 1e-9) continue;
      bool largest = true;
      for (std::size_t g = 0; g < paths.size(); ++g)
        for (int m : paths[g])
          if (m == l && r[g] > r[f] + 1e-9) largest = false;
      bottlenecked = bottlenecked || largest;
    }
    CHECK(bottlenecked);
  }
}

TEST_CASE("a rate cap frees bandwidth down the bottleneck chain", "[maxmin]") {
  // Links A (cap 10), B (cap 4); f0 on A capped at 1, f1 on A and B, f2 on B, f3 on A.
  // Fair share on B is 2 (f1, f2), on A 10/3 = 3.33: f0's cap of 1 binds first -> f0 = 1.
  // Then B: 4/2 = 2 -> f1 = f2 = 2. A: 10 - 1 - 2 = 7 left for f3.
  std::vector<double> cap = {10.0, 4.0};
  std::vector<std::vector<int>> paths = {{0}, {0, 1}, {1}, {0}};
  std::vector<std::span<const int>> p;
  for (const auto& x : paths) p.emplace_back(x);
  std::vector<double> caps = {1.0, 0.0, 0.0, 0.0}, rate;
  parmsim::MaxMinScratch w;
  max_min_rates(cap, p, caps, w, rate);
  CHECK(rate[0] == Approx(1.0));
  CHECK(rate[1] == Approx(2.0));
  CHECK(rate[2] == Approx(2.0));
  CHECK(rate[3] == Approx(7.0));
}

namespace {
// Progressive filling written out plainly: every round scans every link for
// the smallest cap / count, takes every link at exactly that share (found
// before any flow of the round is fixed) and fixes their unfixed flows, link
// by link in id order, in flow order. The solver keeps other structures; it
// must take the same links in the same rounds, so the rates must be equal bit
// for bit, not only approximately.
std::vector<double> reference(std::vector<double> cap, const std::vector<std::vector<int>>& paths) {
  const std::size_t L = cap.size(), F = paths.size();
  std::vector<std::uint32_t> count(L, 0);
  for (const auto& p : paths)
    for (int l : p) ++count[l];
  std::vector<double> rate(F, 0.0);
  std::vector<char> fixed(F, 0);
  while (true) {
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < L; ++l)
      if (count[l] > 0 && cap[l] / count[l] < share) share = cap[l] / count[l];
    if (share == std::numeric_limits<double>::infinity()) break;
    std::vector<std::size_t> tied;
    for (std::size_t l = 0; l < L; ++l)
      if (count[l] > 0 && cap[l] / count[l] == share) tied.push_back(l);
    if (share < 0) share = 0;
    for (std::size_t best : tied)
      for (std::size_t f = 0; f < F; ++f) {
        if (fixed[f] || std::find(paths[f].begin(), paths[f].end(), static_cast<int>(best)) == paths[f].end()) continue;
        fixed[f] = 1;
        rate[f] = share;
        for (int l : paths[f]) cap[l] -= share, --count[l];
      }
  }
  return rate;
}
}  // namespace

TEST_CASE("ties: the solver fixes the same links as a plain full scan, bit for bit", "[maxmin]") {
  // Capacities from a small set, so that many links tie (an AlltoAll's NICs),
  // and paths of 1-4 distinct links. A quarter of the trials take each of the
  // solver's ways: up to kMaxMinScanAllLinks links and kMaxMinMaskFlows flows,
  // bit sets of flows per link; more flows, a list per link, still scanning
  // every link each round; more links, a scan of the loaded links (up to
  // kMaxMinScanLinks loaded links); above that, with few flows per link, a
  // heap of links by share (1100-1300 flows of 1-4 links on 600-800 links:
  // at most 5200 pairs x log2(800) < 0.5 x 600^2).
  static_assert(parmsim::kMaxMinScanAllLinks < 300 && 500 <= parmsim::kMaxMinScanLinks &&
                parmsim::kMaxMinScanLinks < 600);
  static_assert(parmsim::kMaxMinMaskFlows == 1024);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 600; ++trial) {
    const int way = trial % 4;
    const int L = way == 3   ? 600 + static_cast<int>(rng() % 200)
                  : way == 2 ? 300 + static_cast<int>(rng() % 200)
                             : 2 + static_cast<int>(rng() % 60);
    // Way 0 takes 1 to 16 words of bit set per link.
    const int F = way == 0 ? 1 + static_cast<int>(rng() % 1024) : 1100 + static_cast<int>(rng() % 200);
    const std::vector<double> cap = tie_capacities(rng, L);
    std::vector<std::vector<int>> paths(F);
    for (auto& p : paths) p = random_path(rng, L);
    const auto got = solve(cap, paths), want = reference(cap, paths);
    REQUIRE(got.size() == want.size());
    for (std::size_t f = 0; f < got.size(); ++f) REQUIRE(got[f] == want[f]);
  }
}

TEST_CASE("rates depend on the multiset of (path, cap) alone, not the flows' order", "[maxmin][memo]") {
  // What the flow model's rate memo (sim/net/rate_memo.hpp) relies on: the
  // same flows listed in another order get the same rates, bit for bit, and
  // flows of one path and cap get one rate. Each of the solver's three ways
  // (as in the tie test above), with repeated paths and a few caps drawn
  // from a small set (so capped flows tie too).
  std::mt19937 rng(21);
  for (int trial = 0; trial < 150; ++trial) {
    const int way = trial % 3;
    const int L = way == 2 ? 300 + static_cast<int>(rng() % 200) : 2 + static_cast<int>(rng() % 60);
    const int F = way == 0 ? 1 + static_cast<int>(rng() % 1024) : 1100 + static_cast<int>(rng() % 200);
    const std::vector<double> cap = tie_capacities(rng, L);
    std::vector<std::vector<int>> paths;
    std::vector<double> caps;
    while (static_cast<int>(paths.size()) < F) {
      const std::vector<int> p = random_path(rng, L);
      const double c = rng() % 4 == 0 ? std::array<double, 2>{3e9, 7e9}[rng() % 2] : 0.0;
      for (int copies = 1 + static_cast<int>(rng() % 3); copies > 0 && static_cast<int>(paths.size()) < F; --copies)
        paths.push_back(p), caps.push_back(c);
    }
    std::vector<std::size_t> order(paths.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::vector<int>> paths2;
    std::vector<double> caps2;
    for (std::size_t i : order) paths2.push_back(paths[i]), caps2.push_back(caps[i]);
    auto run = [](const std::vector<double>& c, const std::vector<std::vector<int>>& ps, const std::vector<double>& k) {
      std::vector<std::span<const int>> p(ps.begin(), ps.end());
      parmsim::MaxMinScratch w;
      std::vector<double> r;
      max_min_rates(c, p, k, w, r);
      return r;
    };
    const auto a = run(cap, paths, caps), b = run(cap, paths2, caps2);
    CAPTURE(trial, way);
    for (std::size_t j = 0; j < order.size(); ++j) REQUIRE(b[j] == a[order[j]]);
    for (std::size_t f = 1; f < paths.size(); ++f)
      if (paths[f] == paths[f - 1] && caps[f] == caps[f - 1]) REQUIRE(a[f] == a[f - 1]);
  }
}

TEST_CASE("a link listed twice in a path counts the flow twice", "[maxmin]") {
  // What a flow standing for a symmetric orbit uses (sim/engine/simulator.hpp):
  // link 0 (capacity 30) carries f0 twice and f1 once: 30 / 3 = 10 each; f0's
  // two copies take 20. Link 1 (capacity 100) carries f1 alone: it stays at 10.
  // Both of the solver's ways: the bit-set one, and the list one (2000 copies
  // of f1 on link 2, unloaded by the others, push it past kMaxMinMaskFlows).
  const auto small = solve({30.0, 100.0}, {{0, 0}, {0, 1}});
  CHECK(small[0] == 10.0);
  CHECK(small[1] == 10.0);
  std::vector<std::vector<int>> paths = {{0, 0}, {0, 1}};
  for (int i = 0; i < 2000; ++i) paths.push_back({2});
  const auto big = solve({30.0, 100.0, 4000.0}, paths);
  CHECK(big[0] == 10.0);
  CHECK(big[1] == 10.0);
  CHECK(big[2] == 2.0);  // 4000 / 2000
}
