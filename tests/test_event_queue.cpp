#include <catch2/catch.hpp>
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
