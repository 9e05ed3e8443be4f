#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <string>

#include "sim/core/event_queue.hpp"

using parmsim::EventQueue;
using parmsim::Time;

// One test body for every payload type the engine uses.
TEMPLATE_TEST_CASE("events pop in (time, insertion) order", "[event_queue]", int, std::string) {
  EventQueue<TestType> q;
  auto make = [](int i) {
    if constexpr (std::is_same_v<TestType, int>)
      return i;
    else
      return std::to_string(i);
  };
  // Insert 1000 events at 50 distinct times in a scrambled order.
  std::mt19937 rng(7);
  std::vector<std::pair<std::int64_t, int>> expect;
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t t = static_cast<std::int64_t>(rng() % 50);
    q.push(Time::ps(t), make(i));
    expect.emplace_back(t, i);
  }
  // Expected: sorted by time, ties by insertion index.
  std::stable_sort(expect.begin(), expect.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (const auto& [t, i] : expect) {
    REQUIRE_FALSE(q.empty());
    auto e = q.pop();
    REQUIRE(e.time.count_ps() == t);
    REQUIRE(e.payload == make(i));
  }
  CHECK(q.empty());
}

// A second method: a std::multimap keyed by time keeps insertion order among
// equal keys, which is exactly the queue's contract. Interleave pushes (never
// before the last pop, as a simulation does), peeks and pops at random, with
// times spread over many bits so entries move through many buckets.
TEST_CASE("interleaved push, top and pop agree with an ordered multimap", "[event_queue]") {
  EventQueue<int> q;
  std::multimap<std::int64_t, int> ref;
  std::mt19937_64 rng(11);
  std::int64_t now = 0;
  int next = 0;
  for (int step = 0; step < 200000; ++step) {
    const auto r = rng() % 10;
    if (r < 5 || ref.empty()) {
      // Mostly near future, sometimes the same time, sometimes far ahead.
      const std::int64_t span = (r == 0) ? 0 : (r == 1) ? (std::int64_t{1} << 40) : 1000;
      const std::int64_t t = now + (span ? static_cast<std::int64_t>(rng() % span) : 0);
      q.push(Time::ps(t), next);
      ref.emplace(t, next++);
    } else if (r < 7) {
      REQUIRE(q.top().time.count_ps() == ref.begin()->first);
      REQUIRE(q.top().payload == ref.begin()->second);
    } else {
      const auto e = q.pop();
      REQUIRE(e.time.count_ps() == ref.begin()->first);
      REQUIRE(e.payload == ref.begin()->second);
      now = e.time.count_ps();
      ref.erase(ref.begin());
    }
    REQUIRE(q.size() == ref.size());
  }
}

TEST_CASE("a peek does not stop an earlier event from being scheduled", "[event_queue]") {
  // The engine peeks at its next event (t = 100), then a network completion
  // at t = 40 schedules an event at t = 50: it must come out first.
  EventQueue<int> q;
  q.push(Time::ps(10), 0);
  q.push(Time::ps(100), 1);
  CHECK(q.pop().payload == 0);  // last popped: t = 10
  CHECK(q.top().time.count_ps() == 100);
  q.push(Time::ps(50), 2);
  CHECK(q.top().payload == 2);
  CHECK(q.pop().payload == 2);
  CHECK(q.pop().payload == 1);
  CHECK(q.empty());
}

TEST_CASE("an event before the last one popped is refused", "[event_queue]") {
  EventQueue<int> q;
  q.push(Time::ps(10), 0);
  q.push(Time::ps(20), 1);
  q.pop();
  q.pop();
  CHECK_THROWS_WITH(q.push(Time::ps(19), 2), Catch::Contains("before the last event taken"));
  CHECK_NOTHROW(q.push(Time::ps(20), 3));  // the same time is fine
}

TEST_CASE("an event earlier than the first one pops first, whichever child of the root it lands on", "[event_queue]") {
  // A 4-ary heap: the second to fifth events are the root's children. Each, earlier than
  // the root, must replace it.
  for (int slot = 1; slot <= 4; ++slot) {
    EventQueue<int> q;
    q.push(Time::ps(100), 0);
    for (int i = 1; i < slot; ++i) q.push(Time::ps(200 + i), i);
    q.push(Time::ps(5), slot);
    CAPTURE(slot);
    CHECK(q.top().time == Time::ps(5));
    CHECK(q.pop().payload == slot);
    CHECK(q.pop().payload == 0);
  }
}

// Above EventQueue::kFarAbove pending events the queue keeps only the earliest
// in a heap and the rest in time buckets; below kHeapBelow it goes back to one
// heap. Grow well past the first, hold, drain to empty, three times, and check
// every pop and peek against the multimap (the independent order). Times mix a
// narrow spread, equal times, an earlier-than-top push after a peek, and a rare
// far outlier that stretches a rebuilt row of buckets.
TEMPLATE_TEST_CASE("bucket mode: growing past the threshold, holding and draining keep the multimap order",
                   "[event_queue]", int, std::string) {
  auto make = [](int i) {
    if constexpr (std::is_same_v<TestType, int>)
      return i;
    else
      return "event " + std::to_string(i);  // a payload that owns memory: moves must carry it
  };
  using Q = EventQueue<TestType>;
  static_assert(Q::kHeapBelow < Q::kFarAbove);
  const int big = static_cast<int>(3 * Q::kFarAbove);  // 12,288 pending at the peak
  Q q;
  std::multimap<std::int64_t, int> ref;
  std::mt19937_64 rng(23);
  std::int64_t now = 0;
  int next = 0;
  auto push = [&](std::int64_t t) {
    q.push(Time::ps(t), make(next));
    ref.emplace(t, next++);
  };
  auto pop_and_check = [&] {
    REQUIRE(q.top().time.count_ps() == ref.begin()->first);
    REQUIRE(q.top().payload == make(ref.begin()->second));
    const auto e = q.pop();
    REQUIRE(e.time.count_ps() == ref.begin()->first);
    REQUIRE(e.payload == make(ref.begin()->second));
    now = e.time.count_ps();
    ref.erase(ref.begin());
  };
  auto random_time = [&] {
    const auto r = rng() % 100;
    if (r < 10) return now;                                                     // the current time
    if (r < 20 && !ref.empty()) return std::max(now, ref.begin()->first - 1);  // just before the top
    if (r == 20) return now + static_cast<std::int64_t>(rng() % (std::int64_t{1} << 40));  // far outlier
    return now + static_cast<std::int64_t>(rng() % 1'000'000);
  };
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    while (static_cast<int>(ref.size()) < big) {  // grow: two pushes per pop
      push(random_time());
      push(random_time());
      pop_and_check();
      REQUIRE(q.size() == ref.size());
    }
    for (int i = 0; i < 20000; ++i) {  // hold: one push per pop
      push(random_time());
      pop_and_check();
    }
    REQUIRE(q.size() == ref.size());
    for (int i = 0; !ref.empty(); ++i) {  // drain: one push per three pops, down through kHeapBelow to empty
      if (i % 3 == 0) push(random_time());
      pop_and_check();
      REQUIRE(q.size() == ref.size());
    }
    CHECK(q.empty());
  }
}

TEST_CASE("bucket mode: thousands of events at one time pop by insertion, with pushes at that time between", "[event_queue]") {
  // 5000 events at t = 7 (more than kFarAbove, so in buckets, and more than a
  // sorted near list holds) and 5000 at t = 8, scrambled; then each pop at
  // t = 7 schedules one more at t = 7. Expected (by hand): the 5000 first t = 7
  // events in insertion order, then the ones scheduled while popping, in that
  // order, then the t = 8 events in insertion order.
  EventQueue<int> q;
  std::vector<int> at7, at8;
  std::mt19937 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const bool seven = (rng() % 2 == 0 && at7.size() < 5000) || at8.size() == 5000;
    q.push(Time::ps(seven ? 7 : 8), i);
    (seven ? at7 : at8).push_back(i);
  }
  REQUIRE(q.size() == 10000);
  std::vector<int> expect = at7;
  for (int i = 0; i < 5000; ++i) expect.push_back(10000 + i);
  expect.insert(expect.end(), at8.begin(), at8.end());
  int extra = 10000;
  for (std::size_t k = 0; k < expect.size(); ++k) {
    CAPTURE(k);
    const auto e = q.pop();
    REQUIRE(e.payload == expect[k]);
    REQUIRE(e.time.count_ps() == (k < 10000 ? 7 : 8));
    if (extra < 15000) q.push(Time::ps(7), extra++);
  }
  CHECK(q.empty());
}

TEST_CASE("bucket mode: an event before the last one popped is still refused, Time::max() still ordered", "[event_queue]") {
  EventQueue<int> q;
  const int n = static_cast<int>(EventQueue<int>::kFarAbove) + 100;
  for (int i = 0; i < n; ++i) q.push(Time::ps(1000 + i), i);  // 1000 .. 1000 + n - 1
  q.push(Time::max(), n);
  q.push(Time::max(), n + 1);
  for (int i = 0; i < 10; ++i) CHECK(q.pop().payload == i);  // last popped: t = 1009
  CHECK_THROWS_WITH(q.push(Time::ps(1008), -1), Catch::Contains("before the last event taken"));
  CHECK(q.size() == static_cast<std::size_t>(n + 2 - 10));  // the refused event was not kept
  q.push(Time::ps(1009), n + 2);  // the last popped time itself is fine, and pops next
  q.push(Time::max(), n + 3);
  CHECK(q.pop().payload == n + 2);
  for (int i = 10; i < n; ++i) REQUIRE(q.pop().payload == i);
  // Three at Time::max(), in insertion order.
  CHECK(q.pop().payload == n);
  CHECK(q.pop().payload == n + 1);
  CHECK(q.pop().payload == n + 3);
  CHECK(q.empty());
}
