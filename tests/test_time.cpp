#include <catch2/catch.hpp>

#include "sim/core/error.hpp"
#include "sim/core/time.hpp"

using parmsim::duration_for;
using parmsim::duration_for_rate;
using parmsim::UserError;
using parmsim::Time;

TEST_CASE("time units convert to picoseconds", "[time]") {
  CHECK(Time::ns(3).count_ps() == 3000);
  CHECK(Time::us(2).count_ps() == 2'000'000);
  CHECK(Time::ms(1).count_ps() == 1'000'000'000);
  CHECK((Time::us(1) + Time::ns(5)).count_ps() == 1'005'000);
  CHECK((Time::us(1) - Time::ns(5)).count_ps() == 995'000);
}

TEST_CASE("duration_for rounds up to the next picosecond", "[time]") {
  // 1 byte at 3 B/s: 1e12/3 = 333333333333.33 ps -> 333333333334
  CHECK(duration_for(1, 3).count_ps() == 333'333'333'334);
  // 1 byte at 900 GB/s: 1e12/9e11 = 1.11 ps -> 2 (truncation would say 1: 10% too fast)
  CHECK(duration_for(1, 900'000'000'000ULL).count_ps() == 2);
  // 64 MiB at 12.5 GB/s: 67108864 * 1e12 / 12.5e9 = 67108864 * 80 = 5368709120 ps exactly
  CHECK(duration_for(67'108'864, 12'500'000'000ULL).count_ps() == 5'368'709'120);
  // Exact division does not round up: 1000 B at 1e15 B/s = 1 ps
  CHECK(duration_for(1000, 1'000'000'000'000'000ULL).count_ps() == 1);
  CHECK(duration_for(0, 5).count_ps() == 0);
}

TEST_CASE("duration_for computes in 128 bits", "[time]") {
  // 2^40 bytes * 1e12 overflows 64 bits; at 2^40 B/s it is exactly 1 s.
  CHECK(duration_for(1ULL << 40, 1ULL << 40).count_ps() == 1'000'000'000'000);
}

TEST_CASE("time arithmetic overflow is an error, not a wrap", "[time]") {
  CHECK_THROWS_AS(Time::max() + Time::ps(1), UserError);
  CHECK_THROWS_AS(Time::ps(-1) - Time::max() - Time::ps(2), UserError);
  CHECK_THROWS_AS(Time::ms(1) * (INT64_MAX / 1000), UserError);
  CHECK_THROWS_AS(Time::us(INT64_MAX / 10), UserError);
  // 2^64-1 bytes at 1 B/s is 1.8e31 ps, beyond 2^63.
  CHECK_THROWS_AS(duration_for(UINT64_MAX, 1), UserError);
  CHECK_THROWS_AS(duration_for(1, 0), UserError);
}

TEST_CASE("duration_for_rate rounds fractional rates up", "[time]") {
  // 10 bytes at 4 B/s = 2.5 s
  CHECK(duration_for_rate(10, 4).count_ps() == 2'500'000'000'000);
  // 1 byte at 3e12 B/s = 0.33 ps -> 1 ps
  CHECK(duration_for_rate(1, 3e12).count_ps() == 1);
  CHECK_THROWS_AS(duration_for_rate(1, 0), UserError);
}
