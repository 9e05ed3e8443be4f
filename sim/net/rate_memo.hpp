#pragma once
// Max-min rates remembered by the set of flows they were solved for.
//
// The flow model's global solve gives each flow a rate that is a function of
// the links' capacities and the multiset of (route, cap) of the flows in
// flight, and of nothing else: progressive filling takes links in id order,
// the flows fixed in one round all get that round's share, and two flows
// with the same route and cap are fixed in the same round at the same share
// (sim/net/maxmin.cpp). Neither the order the flows are listed in nor their
// sizes enter. A layer's collectives pass through the same sets of flows
// again and again (the dispatch and combine AlltoAlls, every layer of a
// sweep on one topology: the 1296-layer grid's 315,690 solves are 370
// distinct sets), so the rates of a set solved once are looked up instead of
// solved again. A lookup gives the rates the solver gives, bit for bit: the
// multiset is compared whole, never trusted to its hash (docs/performance.md).
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "sim/core/workspace.hpp"

namespace parmsim {

class RateMemo {
 public:
  // Solves of more flows are neither looked up nor kept (they seldom repeat,
  // and would fill the memo).
  static constexpr std::size_t kMaxFlows = 1024;
  // Bounds on what the memo keeps: past the paths it starts afresh (epoch()
  // changes and every path id given before is void), past the rates it
  // drops the sets it holds.
  static constexpr int kIndexBits = 15;
  static constexpr std::size_t kMaxPaths = std::size_t{1} << kIndexBits;
  static constexpr std::size_t kMaxRates = 1 << 17;
  // An id that is never current: for a flow that has none yet.
  static constexpr std::uint32_t kNone = UINT32_MAX;

  // The id of a (route, cap) pair: equal pairs get equal ids until the epoch
  // changes (this call may change it, when the memo is full). An id carries
  // its epoch, so one of an earlier epoch is never taken for a path of this
  // one (find() and insert() refuse it).
  std::uint32_t path_id(std::span<const int> links, double cap);
  bool current(std::uint32_t id) const { return id >> kIndexBits == tag_; }
  std::uint64_t epoch() const { return epoch_; }
  std::size_t paths() const { return paths_.size(); }
  std::size_t sets() const { return sets_.size(); }

  // `ids[i]`: flow i's path id. Sets rate[i] for every flow and returns
  // true when this multiset of ids was inserted before; otherwise (or when
  // an id is not current) returns false and leaves `rate` alone.
  bool find(std::span<const std::uint32_t> ids, std::vector<double>& rate);
  // Remembers `rate` (one per flow, as the solver gave them) for the
  // multiset `ids`. Not kept if an id is not current, or if two flows of one
  // path have different rates (never, by the argument above; checked, so the
  // memo cannot be wrong).
  void insert(std::span<const std::uint32_t> ids, std::span<const double> rate);
  void clear();

  struct Counts {
    std::uint64_t lookups = 0, hits = 0, inserted = 0, refused = 0, clears = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  struct Path {
    std::uint32_t off, len;  // links in pool_[off, off + len)
    double cap;
    std::uint64_t hash;
  };
  struct Rate {
    std::uint32_t id, count;  // a path id and how many flows of the set have it
    double rate;
  };
  struct Set {
    std::uint32_t off, len;  // rates_[off, off + len): one per distinct path, in first-seen order
  };
  // The multiset's hash (a sum of per-path keys, so it does not depend on
  // the order), its distinct ids, and cnt_[index] for each; undone by release().
  // (Nothing is gathered when an id is not current: distinct_ stays empty.)
  std::uint64_t gather(std::span<const std::uint32_t> ids);
  static std::uint32_t index(std::uint32_t id) { return id & (kMaxPaths - 1); }
  // The slot holding this path (its id + 1), or null.
  inline const std::uint32_t* find_path(std::span<const int> links, double cap, std::uint64_t h) const;
  void release();
  static std::uint64_t key_of(std::uint32_t id);

  std::vector<int> pool_;
  std::vector<Path> paths_;
  std::vector<std::uint32_t> slots_;  // open addressing over paths_: index + 1, 0 = empty
  std::vector<Rate> rates_;
  std::vector<Set> sets_;
  std::unordered_map<std::uint64_t, std::uint32_t> by_hash_;  // multiset hash -> index in sets_
  std::vector<std::uint32_t> cnt_, distinct_;
  std::vector<double> rate_of_;
  std::uint64_t epoch_ = 0;
  std::uint32_t tag_ = 0;            // the epoch in an id's upper bits: epoch_ mod 2^17 - 1, never kNone's
  std::vector<std::uint64_t> keys_;  // key_of(id), by index
  Counts counts_;
};

// The workspace's memo for a topology with these link capacities (shared by
// every flow model made with the workspace on a topology with the same
// capacities; a few topologies are kept, the least recently asked for
// dropped first). Null when memos are off in the workspace.
std::shared_ptr<RateMemo> rate_memo_for(const std::vector<double>& capacity, Workspace& ws);
// Turns the workspace's memos on or off (on by default) for flow models made
// after the call; tests and benchmarks compare the two.
void set_rate_memo(Workspace& ws, bool on);
// Drops the workspace's memos (a benchmark's cold start).
void clear_rate_memos(Workspace& ws);

}  // namespace parmsim
