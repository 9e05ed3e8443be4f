#include "sim/net/rate_memo.hpp"

#include <algorithm>
#include <array>
#include <bit>

namespace parmsim {

namespace {
std::uint64_t splitmix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// One multiply per link and a final mix: a path is hashed per transfer, and
// a table of a few thousand paths needs only well-spread low bits.
std::uint64_t hash_path(std::span<const int> links, double cap) {
  std::uint64_t h = (std::bit_cast<std::uint64_t>(cap) ^ links.size()) * 0x9e3779b97f4a7c15ULL;
  for (int l : links) h = (h ^ static_cast<std::uint32_t>(l)) * 0xff51afd7ed558ccdULL;
  return h ^ (h >> 32);
}
}  // namespace

std::uint64_t RateMemo::key_of(std::uint32_t id) {
  return splitmix(0x5851f42d4c957f2dULL ^ id);
}

inline const std::uint32_t* RateMemo::find_path(std::span<const int> links, double cap, std::uint64_t h) const {
  if (slots_.empty()) return nullptr;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t s = h & mask; slots_[s] != 0; s = (s + 1) & mask) {
    const Path& p = paths_[slots_[s] - 1];
    if (p.hash != h || p.len != links.size() ||
        std::bit_cast<std::uint64_t>(p.cap) != std::bit_cast<std::uint64_t>(cap))
      continue;
    const int* q = pool_.data() + p.off;
    std::size_t i = 0;
    while (i < links.size() && q[i] == links[i]) ++i;  // a few links: no memcmp call
    if (i == links.size()) return &slots_[s];
  }
  return nullptr;
}

std::uint32_t RateMemo::path_id(std::span<const int> links, double cap) {
  const std::uint64_t h = hash_path(links, cap);
  if (const std::uint32_t* s = find_path(links, cap, h)) return (tag_ << kIndexBits) | (*s - 1);
  if (paths_.size() >= kMaxPaths) clear();
  if (2 * (paths_.size() + 1) > slots_.size()) {
    // Grow to keep the table at most half full, and place every path again.
    slots_.assign(std::max<std::size_t>(64, 2 * slots_.size()), 0);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t p = 0; p < paths_.size(); ++p) {
      std::size_t s = paths_[p].hash & mask;
      while (slots_[s] != 0) s = (s + 1) & mask;
      slots_[s] = static_cast<std::uint32_t>(p + 1);
    }
  }
  const std::size_t mask = slots_.size() - 1;
  std::size_t s = h & mask;
  while (slots_[s] != 0) s = (s + 1) & mask;
  const auto i = static_cast<std::uint32_t>(paths_.size());
  paths_.push_back(Path{static_cast<std::uint32_t>(pool_.size()), static_cast<std::uint32_t>(links.size()), cap, h});
  pool_.insert(pool_.end(), links.begin(), links.end());
  keys_.push_back(key_of(i));
  slots_[s] = i + 1;
  return (tag_ << kIndexBits) | i;
}

std::uint64_t RateMemo::gather(std::span<const std::uint32_t> ids) {
  if (cnt_.size() < paths_.size()) cnt_.resize(paths_.size(), 0), rate_of_.resize(paths_.size(), 0);
  std::uint64_t h = 0;
  for (std::uint32_t id : ids) {
    if (!current(id)) {
      release();
      return 0;
    }
    h += keys_[index(id)];
    if (cnt_[index(id)]++ == 0) distinct_.push_back(id);
  }
  return h ^ splitmix(distinct_.size());
}

void RateMemo::release() {
  for (std::uint32_t id : distinct_) cnt_[index(id)] = 0;
  distinct_.clear();
}

bool RateMemo::find(std::span<const std::uint32_t> ids, std::vector<double>& rate) {
  ++counts_.lookups;
  const std::uint64_t h = gather(ids);
  if (distinct_.empty()) return false;  // no ids, or one not current
  const auto it = by_hash_.find(h);
  bool hit = false;
  if (it != by_hash_.end()) {
    // The same multiset: as many distinct ids, each with the same count (no
    // id of the query is then left out).
    const Set& set = sets_[it->second];
    hit = set.len == distinct_.size();
    // (The sets held are of this epoch: they go when it ends.)
    for (std::uint32_t i = 0; hit && i < set.len; ++i)
      hit = cnt_[index(rates_[set.off + i].id)] == rates_[set.off + i].count;
    if (hit) {
      for (std::uint32_t i = 0; i < set.len; ++i) rate_of_[index(rates_[set.off + i].id)] = rates_[set.off + i].rate;
      rate.resize(ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) rate[i] = rate_of_[index(ids[i])];
      ++counts_.hits;
    }
  }
  release();
  return hit;
}

void RateMemo::insert(std::span<const std::uint32_t> ids, std::span<const double> rate) {
  const std::uint64_t h = gather(ids);
  bool ok = !distinct_.empty() && rate.size() == ids.size();
  // One rate per path: the first flow's, the others checked against it.
  for (std::uint32_t id : distinct_) rate_of_[index(id)] = -1;
  for (std::size_t i = 0; i < ids.size() && ok; ++i) {
    double& r = rate_of_[index(ids[i])];
    if (r < 0) r = rate[i];
    ok = r == rate[i];
  }
  if (!ok) {
    ++counts_.refused;
    release();
    return;
  }
  if (rates_.size() + distinct_.size() > kMaxRates) {
    // Full: start afresh, keeping the path ids (they are still valid, and the
    // caller holds them).
    rates_.clear();
    sets_.clear();
    by_hash_.clear();
    ++counts_.clears;
  }
  const Set set{static_cast<std::uint32_t>(rates_.size()), static_cast<std::uint32_t>(distinct_.size())};
  for (std::uint32_t id : distinct_) rates_.push_back(Rate{id, cnt_[index(id)], rate_of_[index(id)]});
  by_hash_[h] = static_cast<std::uint32_t>(sets_.size());  // a different set of the same hash is replaced
  sets_.push_back(set);
  ++counts_.inserted;
  release();
}

void RateMemo::clear() {
  pool_.clear();
  paths_.clear();
  slots_.clear();
  rates_.clear();
  sets_.clear();
  by_hash_.clear();
  cnt_.clear();
  rate_of_.clear();
  distinct_.clear();
  keys_.clear();
  ++epoch_;
  tag_ = static_cast<std::uint32_t>(epoch_ % (kNone >> kIndexBits));
  ++counts_.clears;
}

namespace {
// This floor's part of a Workspace: the memos of a few topologies.
struct RateMemos : Workspace::Part {
  static constexpr Workspace::Slot kSlot = Workspace::kRates;
  struct Slot {
    std::vector<double> capacity;
    std::shared_ptr<RateMemo> memo;
    std::uint64_t used = 0;
  };
  std::array<Slot, 4> slots;
  std::uint64_t clock = 0;
  bool on = true;
};
}  // namespace

std::shared_ptr<RateMemo> rate_memo_for(const std::vector<double>& capacity, Workspace& ws) {
  RateMemos& m = ws.get<RateMemos>();
  if (!m.on) return nullptr;
  RateMemos::Slot* lru = &m.slots[0];
  for (RateMemos::Slot& s : m.slots) {
    if (s.memo && s.capacity == capacity) {
      s.used = ++m.clock;
      return s.memo;
    }
    if (!s.memo || s.used < lru->used) lru = &s;
  }
  // A flow model still holding the dropped memo keeps it alive and its own.
  lru->capacity = capacity;
  lru->memo = std::make_shared<RateMemo>();
  lru->used = ++m.clock;
  return lru->memo;
}

void set_rate_memo(Workspace& ws, bool on) { ws.get<RateMemos>().on = on; }

void clear_rate_memos(Workspace& ws) {
  for (auto& s : ws.get<RateMemos>().slots) s = {};
}

}  // namespace parmsim
