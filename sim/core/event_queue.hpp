#pragma once
// Pending events in a binary heap keyed by (time, insertion sequence).
// Two events at the same time pop in the order they were scheduled, so a run
// is repeatable bit for bit whatever the heap's internal layout. Both push and
// pop are O(log n).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/core/time.hpp"

namespace parmsim {

template <class Payload>
class EventQueue {
 public:
  struct Entry {
    Time time;
    std::uint64_t seq;
    Payload payload;
  };

  void push(Time t, Payload p) {
    heap_.push_back(Entry{t, next_seq_++, std::move(p)});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const Entry& top() const { return heap_.front(); }
  Entry pop() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    Entry e = std::move(heap_.back());
    heap_.pop_back();
    return e;
  }
  void reserve(std::size_t n) { heap_.reserve(n); }

 private:
  // std heap functions build a max-heap; "later" as less-than puts the
  // earliest (time, seq) at the front.
  static bool later(const Entry& a, const Entry& b) {
    if (a.time != b.time) return a.time > b.time;
    return a.seq > b.seq;
  }
  std::vector<Entry> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace parmsim
