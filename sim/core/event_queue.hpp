#pragma once
// Pending events in a heap keyed by (time, insertion sequence).
// Two events at the same time pop in the order they were scheduled, so a run
// is repeatable bit for bit whatever the heap's internal layout. Both push and
// pop are O(log n). Scheduling before the last event popped is a bug and throws.
// (A radix heap was measured against this layout: 11-12 M against 10.8 M
// schedule+pop/s with 100,000 pending, but 3% more instructions on a layer's
// small queues; docs/performance.md.)
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/core/error.hpp"
#include "sim/core/time.hpp"

namespace parmsim {

template <class Payload>
class EventQueue {
 public:
  // 32-bit sequence numbers keep an entry with a 4-byte payload at 16 bytes
  // (a quarter fewer cache lines per sift than 24); a queue that would
  // schedule more than 2^32 events says so instead of wrapping.
  struct Entry {
    Time time;
    std::uint32_t seq;
    Payload payload;
  };

  void push(Time t, Payload p) {
    if (next_seq_ == UINT32_MAX) throw ParmError("event queue: more than 2^32 events scheduled in one run");
    if (t < floor_) throw ParmError("internal: event queue: an event scheduled before the last event taken");
    heap_.push_back(Entry{t, next_seq_++, std::move(p)});
    sift_up(heap_.size() - 1);
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const Entry& top() const { return heap_.front(); }
  Entry pop() {
    Entry out = std::move(heap_.front());
    floor_ = out.time;
    if (heap_.size() > 1) {
      Entry last = std::move(heap_.back());
      heap_.pop_back();
      sift_down(std::move(last));
    } else {
      heap_.pop_back();
    }
    return out;
  }
  void reserve(std::size_t n) { heap_.reserve(n); }

 private:
  // A 4-ary heap: half the depth of a binary one, and the four children of a
  // node share a cache line or two. Sifting moves a hole instead of swapping.
  static constexpr std::size_t kArity = 4;
  static bool before(const Entry& a, const Entry& b) {
    if (a.time != b.time) return a.time < b.time;
    return a.seq < b.seq;
  }
  void sift_up(std::size_t i) {
    Entry e = std::move(heap_[i]);
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!before(e, heap_[parent])) break;
      heap_[i] = std::move(heap_[parent]);
      i = parent;
    }
    heap_[i] = std::move(e);
  }
  // Places `e` starting from the (vacated) root.
  void sift_down(Entry e) {
    const std::size_t n = heap_.size();
    std::size_t i = 0;
    while (true) {
      const std::size_t first = i * kArity + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t last = std::min(first + kArity, n);
      for (std::size_t c = first + 1; c < last; ++c)
        if (before(heap_[c], heap_[best])) best = c;
      if (!before(heap_[best], e)) break;
      heap_[i] = std::move(heap_[best]);
      i = best;
    }
    heap_[i] = std::move(e);
  }
  std::vector<Entry> heap_;
  std::uint32_t next_seq_ = 0;
  Time floor_;  // time of the last event popped: nothing may be scheduled before it
};

}  // namespace parmsim
