#pragma once
// Max-min fair rates by progressive filling: repeatedly find the links whose
// remaining capacity divided by their unfixed flows is smallest (all links at
// exactly that share, found before any is fixed: links alike stay alike, so
// a symmetric set of flows gets the same rates as its quotient), give each of
// their flows that share, and remove them with their bandwidth. Every flow
// ends with the largest rate it can get without lowering a smaller one.
//
// Cost: O(sum of path lengths) to index flows by link, plus, per bottleneck
// round, a scan of the loaded links; or, above kMaxMinScanLinks loaded links
// with few flows per link, a heap of links by fair share (one push per
// changed link per round). Both pick the same bottleneck.
#include <cstdint>
#include <span>
#include <vector>

namespace parmsim {

// Up to this many loaded links the solver always scans them every round
// (measured: cheaper than the heap for a 32-GPU layer's links; the heap wins
// for a ring step on a 1024-port switch, one flow per link).
inline constexpr std::size_t kMaxMinScanLinks = 512;
// Up to this many links in all (loaded or not), each round scans every link
// with a vectorized min and keeps no tie or change lists (measured on a
// 32-GPU layer, 112 links: the bookkeeping cost more than the scan).
inline constexpr std::size_t kMaxMinScanAllLinks = 256;
// Up to this many flows (and kMaxMinScanAllLinks links), each link keeps its
// flows as a bit set instead of a list (built in one pass, no counting sort;
// 1024 covers a 32-GPU AlltoAll of k = 2, 992 flows).
inline constexpr std::size_t kMaxMinMaskFlows = 1024;

// `capacity[l]` in bytes/s; `flows[f]` = link ids on flow f's path (non-empty).
// Returns rates in bytes/s, one per flow.
std::vector<double> max_min_rates(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows);

// The same, reusing the scratch space of earlier calls (the flow model solves
// thousands of times per run). `rate` is resized to the number of flows.
struct MaxMinScratch {
  std::vector<std::uint32_t> start, on, fill, count;
  std::vector<double> cap, share;  // share[l] = cap[l] / count[l] while count[l] > 0
  struct Share {
    double share;
    std::uint32_t link;
  };
  std::vector<Share> heap;
  std::vector<std::uint32_t> active;
  std::vector<char> fixed, touched;
  std::vector<std::uint32_t> changed;
  std::vector<std::uint32_t> tied;  // a round's bottlenecks: the links at the smallest share, in id order
  std::vector<std::uint32_t> by_cap;
  std::vector<std::uint64_t> mask;  // the small solver's flows per link, as bit sets
};
void max_min_rates(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows,
                   MaxMinScratch& scratch, std::vector<double>& rate);
// With a rate cap per flow (`caps[f]` bytes/s, 0 = none; empty = no caps): a
// capped flow is fixed at its cap as soon as the fair share on every link of
// its path would exceed it, and the bandwidth it leaves goes to the others.
void max_min_rates(const std::vector<double>& capacity, const std::vector<std::span<const int>>& flows,
                   std::span<const double> caps, MaxMinScratch& scratch, std::vector<double>& rate);

}  // namespace parmsim
