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
