#pragma once
// Pending events keyed by (time, insertion sequence). Two events at the same
// time pop in the order they were scheduled, so a run is repeatable bit for
// bit whatever the queue's internal layout. Scheduling before the last event
// popped is a bug and throws.
//
// Two layouts, one order:
// - While few events are pending (at most kFarAbove), everything sits in a
//   4-ary heap: push and pop are O(log n) on a handful of cache lines.
// - Above that, only the events before `bound_` (the near events) are kept in
//   order: sorted latest first, or a heap when a bucket brought many. Later ones
//   wait unsorted in a row of equal-width time buckets (a one-rung ladder
//   queue) or, past the row's end, in an unsorted overflow list. When the near
//   events run out they take the next non-empty bucket whole; when the row runs
//   out it is rebuilt over the overflow's time span. Each event is moved a
//   bounded number of times, so push and pop are O(1) amortized.
// Every event before `bound_` is a near event and none from `bound_` on is, so
// the near minimum is the queue's minimum; ties are broken by the sequence
// number there. docs/performance.md has the measurements.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
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

  // The queue switches to buckets when the heap would hold more than kFarAbove
  // events, and back to one heap when a rebuild finds fewer than kHeapBelow left.
  static constexpr std::size_t kFarAbove = 4096;
  static constexpr std::size_t kHeapBelow = 1024;

  void push(Time t, Payload p) {
    if (next_seq_ == UINT32_MAX) throw UserError("event queue: more than 2^32 events scheduled in one run");
    if (t < floor_) throw UserError("internal: event queue: an event scheduled before the last event taken");
    if (t.count_ps() < heap_bound_) {
      heap_.push_back(Entry{t, next_seq_++, std::move(p)});
      sift_up(heap_.size() - 1);
      if (heap_.size() > kFarAbove) [[unlikely]]
        grown();
    } else {
      push_far(Entry{t, next_seq_++, std::move(p)});
    }
  }
  // The near events are empty only when the whole queue is: pop refills them.
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size() + far_count_; }
  const Entry& top() const { return sorted_ ? heap_.back() : heap_.front(); }
  Entry pop() {
    if (sorted_) return pop_sorted();
    Entry out = std::move(heap_.front());
    floor_ = out.time;
    if (heap_.size() > 1) {
      Entry last = std::move(heap_.back());
      heap_.pop_back();
      sift_down(std::move(last));
    } else {
      heap_.pop_back();
      if (far_) refill();
    }
    return out;
  }
  void reserve(std::size_t n) { heap_.reserve(std::min(n, kFarAbove + 1)); }

 private:
  static constexpr std::int64_t kNoBound = std::numeric_limits<std::int64_t>::max();
  static constexpr std::size_t kPerBucket = 4;  // events per bucket a rebuild aims at
  // A bucket of more near events than this (many at one time) is kept as a heap:
  // inserting into a sorted array would move them all.
  static constexpr std::size_t kSortedMax = 64;

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
  // Places `e` starting from the (vacated) root. (Floyd's way, the hole down to
  // a leaf and `e` back up, saved instructions on a random queue of 64 but cost
  // 0.15 % more on a layer's queues; docs/performance.md.)
  void sift_down(Entry e) {
    const std::size_t n = heap_.size();
    std::size_t i = 0;
    while (true) {
      const std::size_t first = i * kArity + 1;
      if (first >= n) break;
      std::size_t best = first;
      if (first + kArity <= n) {  // all four children: no loop counter
        if (before(heap_[first + 1], heap_[best])) best = first + 1;
        if (before(heap_[first + 2], heap_[best])) best = first + 2;
        if (before(heap_[first + 3], heap_[best])) best = first + 3;
      } else {
        for (std::size_t c = first + 1; c < n; ++c)
          if (before(heap_[c], heap_[best])) best = c;
      }
      if (!before(heap_[best], e)) break;
      heap_[i] = std::move(heap_[best]);
      i = best;
    }
    heap_[i] = std::move(e);
  }

  // Bucket mode (or an event at Time::max() in heap mode).
  [[gnu::noinline]] void push_far(Entry&& e) {  // out of line: keeps push small enough to inline
    if (!far_) {
      heap_.push_back(std::move(e));
      sift_up(heap_.size() - 1);
      if (heap_.size() > kFarAbove) grown();
      return;
    }
    const std::int64_t ps = e.time.count_ps();
    if (ps < bound_) {  // sorted near events (a heap would have taken it in push)
      // Latest first. `e` has the highest sequence yet, so it pops after every
      // event at its time: it goes in front of them.
      auto at = std::partition_point(heap_.begin(), heap_.end(), [&](const Entry& x) { return x.time > e.time; });
      heap_.insert(at, std::move(e));
      if (heap_.size() > kSortedMax) near_as_heap();
      return;
    }
    ++far_count_;
    if (ps < end_) {
      buckets_[static_cast<std::size_t>(static_cast<std::uint64_t>(ps - base_) >> shift_)].push_back(std::move(e));
    } else {
      overflow_.push_back(std::move(e));
    }
  }

  Entry pop_sorted() {
    Entry out = std::move(heap_.back());
    floor_ = out.time;
    heap_.pop_back();
    if (heap_.empty()) refill();
    return out;
  }

  // Insertion sort, for at most kSortedMax events.
  void sort_latest_first() {
    const std::size_t n = heap_.size();
    for (std::size_t i = 1; i < n; ++i) {
      Entry e = std::move(heap_[i]);
      std::size_t j = i;
      for (; j > 0 && before(heap_[j - 1], e); --j) heap_[j] = std::move(heap_[j - 1]);
      heap_[j] = std::move(e);
    }
  }

  // Sorted latest first to a heap: reversed, an ascending array is a valid heap.
  void near_as_heap() {
    std::reverse(heap_.begin(), heap_.end());
    sorted_ = false;
    heap_bound_ = bound_;
  }

  // Heap mode to bucket mode: every pending event goes through a rebuild. (In
  // bucket mode the near events are a heap this big only when a bucket holds
  // that many: many events at one time. Nothing to do then.)
  [[gnu::noinline]] void grown() {
    if (far_) return;
    far_ = true;
    far_count_ += heap_.size();
    overflow_.insert(overflow_.end(), std::make_move_iterator(heap_.begin()), std::make_move_iterator(heap_.end()));
    heap_.clear();
    cur_ = nb_ = 0;
    refill();
  }

  // Bucket mode, no near events left: move the next non-empty bucket in, or go
  // back to heap mode when few events are left (none at all included).
  [[gnu::noinline]] void refill() {
    while (true) {
      while (cur_ < nb_ && buckets_[cur_].empty()) ++cur_;
      if (cur_ < nb_) {
        std::vector<Entry>& b = buckets_[cur_];
        ++cur_;
        // Never past end_: the last bucket may reach beyond it when end_ is clamped.
        bound_ = cur_ == nb_ ? end_ : base_ + (static_cast<std::int64_t>(cur_) << shift_);
        far_count_ -= b.size();
        // Moved, not swapped: both keep their capacity, so steady state allocates nothing.
        heap_.assign(std::make_move_iterator(b.begin()), std::make_move_iterator(b.end()));
        b.clear();
        if (heap_.size() <= kSortedMax) {
          sort_latest_first();
          sorted_ = true;
          heap_bound_ = std::numeric_limits<std::int64_t>::min();  // every push to push_far
        } else {  // many events at one time, or a row stretched by an outlier
          std::sort(heap_.begin(), heap_.end(), [](const Entry& x, const Entry& y) { return before(x, y); });  // a valid heap
          sorted_ = false;
          heap_bound_ = bound_;
        }
        return;
      }
      if (overflow_.size() < kHeapBelow) {  // few left: back to one heap
        heap_.swap(overflow_);
        std::sort(heap_.begin(), heap_.end(), [](const Entry& x, const Entry& y) { return before(x, y); });  // a valid heap
        far_count_ = 0;
        bound_ = end_ = kNoBound;
        nb_ = cur_ = 0;
        far_ = sorted_ = false;
        heap_bound_ = kNoBound;
        return;
      }
      rebuild();
    }
  }

  // Spreads the overflow over a new row of buckets spanning its times.
  void rebuild() {
    std::int64_t lo = overflow_.front().time.count_ps(), hi = lo;
    for (const Entry& e : overflow_) {
      lo = std::min(lo, e.time.count_ps());
      hi = std::max(hi, e.time.count_ps());
    }
    const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;  // >= 1; hi - lo < 2^63
    const std::uint64_t want = std::max<std::uint64_t>(1, overflow_.size() / kPerBucket);
    // Width: the smallest power of two with want * width >= span.
    const std::uint64_t width_min = (span + want - 1) / want;
    shift_ = static_cast<unsigned>(std::bit_width(width_min - 1));  // 2^shift_ >= width_min
    base_ = lo;
    nb_ = static_cast<std::size_t>(((span - 1) >> shift_) + 1);
    cur_ = 0;
    // lo >= 0 (nothing is scheduled before time 0). A row reaching past the
    // last representable time ends there.
    const unsigned __int128 end =
        static_cast<unsigned __int128>(lo) + (static_cast<unsigned __int128>(nb_) << shift_);
    end_ = end < static_cast<unsigned __int128>(kNoBound) ? static_cast<std::int64_t>(end) : kNoBound;
    bound_ = lo;
    if (buckets_.size() < nb_) buckets_.resize(nb_);
    for (Entry& e : overflow_)
      buckets_[static_cast<std::size_t>(static_cast<std::uint64_t>(e.time.count_ps() - lo) >> shift_)].push_back(
          std::move(e));
    overflow_.clear();
  }

  // The near events: every pending event before bound_. A 4-ary heap (min at
  // the front), or in bucket mode sorted latest first (min at the back).
  std::vector<Entry> heap_;
  std::vector<std::vector<Entry>> buckets_;  // bucket i: [base_ + i * 2^shift_, base_ + (i + 1) * 2^shift_)
  std::vector<Entry> overflow_;  // events at or after end_, unsorted
  std::int64_t bound_ = kNoBound;  // heap mode: everything goes to the heap
  std::int64_t base_ = 0;
  std::int64_t end_ = kNoBound;
  unsigned shift_ = 0;
  std::size_t nb_ = 0;   // buckets in the current row
  std::size_t cur_ = 0;  // next bucket to move into the heap
  std::size_t far_count_ = 0;  // events in buckets and overflow
  // Pushes before heap_bound_ go straight into the heap: in heap mode every
  // one before Time::max(); in bucket mode those before bound_ while the near
  // events are a heap, none while they are sorted.
  std::int64_t heap_bound_ = kNoBound;
  bool far_ = false;     // bucket mode
  bool sorted_ = false;  // the near events are sorted latest first (bucket mode), not a heap
  std::uint32_t next_seq_ = 0;
  Time floor_;  // time of the last event popped: nothing may be scheduled before it
};

}  // namespace parmsim
