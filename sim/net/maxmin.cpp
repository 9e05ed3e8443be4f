#include "sim/net/maxmin.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace parmsim {

namespace {
// The smallest of n doubles (none NaN), +inf when n is 0. Which of two
// equal values (0 and -0) it returns does not matter: the caller looks the
// value up again with ==.
double min_of(const double* v, std::size_t n) {
  double m = std::numeric_limits<double>::infinity();
  std::size_t i = 0;
#ifdef __SSE2__
  __m128d a = _mm_set1_pd(m), b = a;
  for (; i + 4 <= n; i += 4) {
    a = _mm_min_pd(a, _mm_loadu_pd(v + i));
    b = _mm_min_pd(b, _mm_loadu_pd(v + i + 2));
  }
  a = _mm_min_pd(a, b);
  m = std::min(_mm_cvtsd_f64(a), _mm_cvtsd_f64(_mm_unpackhi_pd(a, a)));
#endif
  for (; i < n; ++i) m = std::min(m, v[i]);
  return m;
}

// The bottleneck of a round when shares hold +inf for a finished or
// unloaded link: the first link with the smallest share, or n when every
// share is +inf (a loaded link's share is finite: finite capacity over a
// positive count). Min is exact, so this is the link a plain scan picks,
// ties to the lowest id.
std::size_t first_min(const double* sh, std::size_t n) {
  const double min = min_of(sh, n);
  if (min == std::numeric_limits<double>::infinity()) return n;
  std::size_t l = 0;
#ifdef __SSE2__
  // Four shares per step: the equality masks of two pairs, low bit first.
  const __m128d m = _mm_set1_pd(min);
  for (; l + 4 <= n; l += 4) {
    const int eq = _mm_movemask_pd(_mm_cmpeq_pd(_mm_loadu_pd(sh + l), m)) |
                   (_mm_movemask_pd(_mm_cmpeq_pd(_mm_loadu_pd(sh + l + 2), m)) << 2);
    if (eq != 0) return l + static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(eq)));
  }
#endif
  while (sh[l] != min) ++l;
  return l;
}

// Progressive filling for at most kMaxMinMaskFlows flows on at most
// kMaxMinScanAllLinks links (a 32-GPU layer's solves: ~80 flows, 112 links).
// Each link holds its flows as a bit set, so the index is built in one pass
// with the link counts; each round scans every link's share with
// a vectorized min. The same rounds, bottlenecks and arithmetic as the
// general solver below (the flows fixed in one round all get the same share,
// so the order they are fixed in does not matter).
void max_min_small(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows,
                   std::span<const double> caps, MaxMinScratch& w, std::vector<double>& rate) {
  const std::size_t L = capacity.size(), F = flows.size(), W = (F + 63) / 64;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  rate.assign(F, 0.0);
  w.mask.assign(L * W, 0);
  w.count.assign(L, 0);
  std::uint64_t* mask = w.mask.data();
  std::uint32_t* count = w.count.data();
  // (Counted here rather than by popcount of the masks: without a -m flag
  // for it, popcount is a library call.)
  for (std::size_t f = 0; f < F; ++f)
    for (int l : flows[f]) mask[l * W + f / 64] |= std::uint64_t{1} << (f % 64), ++count[l];
  w.cap = capacity;
  w.share.resize(L);
  double* cap = w.cap.data();
  double* sh = w.share.data();
  for (std::size_t l = 0; l < L; ++l) sh[l] = count[l] > 0 ? cap[l] / count[l] : kNone;
  std::array<std::uint64_t, kMaxMinMaskFlows / 64> fixed{};
  auto is_fixed = [&fixed](std::size_t f) { return (fixed[f / 64] >> (f % 64)) & 1; };
  // Fixes flow f at rate r on every link of its path but `skip` (the round's
  // bottleneck, which is done once its flows are: its count and share are
  // set after the round, and its capacity is never read again).
  auto fix = [&](std::size_t f, double r, std::size_t skip) {
    fixed[f / 64] |= std::uint64_t{1} << (f % 64);
    rate[f] = r;
    for (int l : flows[f]) {
      if (static_cast<std::size_t>(l) == skip) continue;
      cap[l] -= r;
      sh[l] = --count[l] > 0 ? cap[l] / count[l] : kNone;
    }
  };
  w.by_cap.clear();
  for (std::size_t f = 0; f < caps.size(); ++f)
    if (caps[f] > 0) w.by_cap.push_back(static_cast<std::uint32_t>(f));
  std::stable_sort(w.by_cap.begin(), w.by_cap.end(), [&](std::uint32_t a, std::uint32_t b) { return caps[a] < caps[b]; });
  std::size_t next_cap = 0;
  auto& tied = w.tied;
  while (true) {
    const std::size_t best = first_min(sh, L);
    if (best == L) break;
    const double level = sh[best];
    const double share = level < 0 ? 0 : level;  // rounding on a nearly exhausted link
    while (next_cap < w.by_cap.size() && is_fixed(w.by_cap[next_cap])) ++next_cap;
    if (next_cap < w.by_cap.size() && caps[w.by_cap[next_cap]] < share) {
      const double c0 = caps[w.by_cap[next_cap]];
      while (next_cap < w.by_cap.size() && (is_fixed(w.by_cap[next_cap]) || caps[w.by_cap[next_cap]] <= c0)) {
        if (!is_fixed(w.by_cap[next_cap])) fix(w.by_cap[next_cap], c0, L);
        ++next_cap;
      }
      continue;
    }
    // Every link at exactly this share is a bottleneck of this round, all
    // found before any flow is fixed: links alike before the round stay alike
    // after it (what a symmetric simulation relies on, sim/engine/simulator.hpp).
    tied.clear();
    for (std::size_t l = best; l < L; ++l)
      if (sh[l] == level) tied.push_back(static_cast<std::uint32_t>(l));
    for (std::uint32_t b : tied)
      for (std::size_t i = 0; i < W; ++i)
        for (std::uint64_t bits = mask[b * W + i] & ~fixed[i]; bits != 0; bits &= bits - 1)
          fix(i * 64 + static_cast<std::size_t>(std::countr_zero(bits)), share, L);
    for (std::uint32_t b : tied) count[b] = 0, sh[b] = kNone;
  }
}
}  // namespace

std::vector<double> max_min_rates(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows) {
  MaxMinScratch scratch;
  std::vector<double> rate;
  max_min_rates(capacity, flows, scratch, rate);
  return rate;
}

void max_min_rates(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows,
                   MaxMinScratch& w, std::vector<double>& rate) {
  max_min_rates(capacity, flows, {}, w, rate);
}

void max_min_rates(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows,
                   std::span<const double> caps, MaxMinScratch& w, std::vector<double>& rate) {
  const std::size_t L = capacity.size(), F = flows.size();
  if (L <= kMaxMinScanAllLinks && F <= kMaxMinMaskFlows) return max_min_small(capacity, flows, caps, w, rate);
  rate.assign(F, 0.0);
  // CSR index: flows on each link.
  w.start.assign(L + 1, 0);
  for (const auto& p : flows)
    for (int l : p) ++w.start[l + 1];
  for (std::size_t l = 0; l < L; ++l) w.start[l + 1] += w.start[l];
  w.on.resize(w.start[L]);
  w.fill.assign(w.start.begin(), w.start.end() - 1);
  for (std::size_t f = 0; f < F; ++f)
    for (int l : flows[f]) w.on[w.fill[l]++] = static_cast<std::uint32_t>(f);

  w.cap = capacity;
  w.count.resize(L);
  w.share.resize(L);
  w.active.clear();
  // Few links: every round scans all of them for the smallest share, with
  // +inf standing for an unloaded or finished link, which vectorizes and has
  // no bookkeeping of ties or changes (see bottleneck below).
  const bool scan_all = L <= kMaxMinScanAllLinks;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  for (std::size_t l = 0; l < L; ++l) {
    w.count[l] = w.start[l + 1] - w.start[l];
    if (w.count[l] > 0) {
      w.active.push_back(static_cast<std::uint32_t>(l));
      w.share[l] = w.cap[l] / w.count[l];
    } else if (scan_all) {
      w.share[l] = kNone;
    }
  }
  auto& cap = w.cap;
  auto& count = w.count;
  // The bottleneck of each round is the loaded link with the smallest fair
  // share, the lowest link id among equals (so the result does not depend on
  // a container's layout). Few links: scan them every round. Many: keep them
  // in a min-heap by (share, id); shares only grow as flows are fixed (a
  // fixed flow took at most the link's share), so an entry whose share is no
  // longer its link's is stale and skipped, and a link whose share changed is
  // pushed again once per round. Both find the same link.
  // A scan costs up to (links x rounds) <= links^2; the heap at most one
  // push per (flow, link) pair, times log(links). Many flows per link (an
  // AlltoAll) favour the scan, few (a ring step: one flow per link) the heap.
  const std::size_t loaded = w.active.size();
  const bool use_heap = loaded > kMaxMinScanLinks &&
                        static_cast<double>(w.start[L]) * std::log2(static_cast<double>(loaded)) <
                            0.5 * static_cast<double>(loaded) * static_cast<double>(loaded);
  auto later = [](const MaxMinScratch::Share& a, const MaxMinScratch::Share& b) {
    return a.share != b.share ? a.share > b.share : a.link > b.link;
  };
  w.heap.clear();
  if (use_heap) {
    for (std::uint32_t l : w.active) w.heap.push_back({cap[l] / count[l], l});
    std::make_heap(w.heap.begin(), w.heap.end(), later);
  }
  w.touched.assign(L, 0);
  w.changed.clear();
  w.tied.clear();
  w.fixed.assign(F, 0);
  // Capped flows by increasing cap (ties by index): the next one to fix.
  w.by_cap.clear();
  for (std::size_t f = 0; f < caps.size(); ++f)
    if (caps[f] > 0) w.by_cap.push_back(static_cast<std::uint32_t>(f));
  std::stable_sort(w.by_cap.begin(), w.by_cap.end(), [&](std::uint32_t a, std::uint32_t b) { return caps[a] < caps[b]; });
  std::size_t next_cap = 0;
  auto fix = [&](std::uint32_t f, double r) {
    w.fixed[f] = 1;
    rate[f] = r;
    if (scan_all) {
      for (int l : flows[f]) {
        cap[l] -= r;
        w.share[l] = --count[l] > 0 ? cap[l] / count[l] : kNone;
      }
      return;
    }
    for (int l : flows[f]) {
      cap[l] -= r;
      // The share is kept current as cap / count (the same division the
      // scan would make), so a round's scan compares without dividing.
      if (--count[l] > 0) w.share[l] = cap[l] / count[l];
      if (use_heap && !w.touched[l]) w.touched[l] = 1, w.changed.push_back(static_cast<std::uint32_t>(l));
    }
  };
  auto repush = [&] {
    for (std::uint32_t l : w.changed) {
      w.touched[l] = 0;
      if (count[l] > 0) {
        w.heap.push_back({cap[l] / count[l], l});
        std::push_heap(w.heap.begin(), w.heap.end(), later);
      }
    }
    w.changed.clear();
  };
  // The next round's bottlenecks: every loaded link at the smallest fair
  // share, in id order (w.tied), found before any flow is fixed, so that
  // links alike before a round stay alike after it (a symmetric simulation
  // relies on it, sim/engine/simulator.hpp); *level is that share. False
  // when every link is done. Few links: a vectorized scan of all; many: a
  // scan of the loaded ones, or the heap's entries at the top share.
  auto bottlenecks = [&](double* level) -> bool {
    auto& tied = w.tied;
    tied.clear();
    if (use_heap) {
      double min = 0;
      while (!w.heap.empty()) {
        const MaxMinScratch::Share top = w.heap.front();
        const bool current = count[top.link] > 0 && top.share == cap[top.link] / count[top.link];
        if (current && !tied.empty() && top.share != min) break;
        std::pop_heap(w.heap.begin(), w.heap.end(), later);  // taken, or stale
        w.heap.pop_back();
        if (!current || (!tied.empty() && tied.back() == top.link)) continue;
        min = top.share;
        tied.push_back(top.link);
      }
      *level = min;
      return !tied.empty();
    }
    if (scan_all) {
      const std::size_t l = first_min(w.share.data(), L);
      if (l == L) return false;
      *level = w.share[l];
      for (std::size_t k = l; k < L; ++k)
        if (w.share[k] == *level) tied.push_back(static_cast<std::uint32_t>(k));
      return true;
    }
    // Raw pointers: through the vectors the compiler reloads their data
    // pointers after every store (they might alias).
    const std::uint32_t* cnt = count.data();
    const double* sh = w.share.data();
    std::uint32_t* act = w.active.data();
    const std::size_t n = w.active.size();
    double min = std::numeric_limits<double>::infinity();
    std::size_t keep = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t l = act[i];
      if (cnt[l] == 0) continue;
      act[keep++] = l;
      if (sh[l] < min) {
        min = sh[l];
        tied.clear();
        tied.push_back(l);
      } else if (sh[l] == min) {
        tied.push_back(l);
      }
    }
    w.active.resize(keep);
    *level = min;
    return !tied.empty();
  };
  while (true) {
    double level = 0;
    if (!bottlenecks(&level)) break;
    const double share = level < 0 ? 0 : level;  // rounding on a nearly exhausted link
    // A cap below the bottleneck's share binds first: fix those flows at
    // their caps and look for the bottlenecks again.
    while (next_cap < w.by_cap.size() && w.fixed[w.by_cap[next_cap]]) ++next_cap;
    if (next_cap < w.by_cap.size() && caps[w.by_cap[next_cap]] < share) {
      if (use_heap)  // the tied links' entries were taken: back into the heap
        for (std::uint32_t l : w.tied) w.heap.push_back({cap[l] / count[l], l}), std::push_heap(w.heap.begin(), w.heap.end(), later);
      const double c0 = caps[w.by_cap[next_cap]];
      while (next_cap < w.by_cap.size() && (w.fixed[w.by_cap[next_cap]] || caps[w.by_cap[next_cap]] <= c0)) {
        if (!w.fixed[w.by_cap[next_cap]]) fix(w.by_cap[next_cap], c0);
        ++next_cap;
      }
    } else {
      for (std::uint32_t b : w.tied)
        for (std::uint32_t i = w.start[b]; i < w.start[b + 1]; ++i) {
          const std::uint32_t f = w.on[i];
          if (w.fixed[f]) continue;
          fix(f, share);
        }
    }
    if (use_heap) repush();
  }
}

}  // namespace parmsim
