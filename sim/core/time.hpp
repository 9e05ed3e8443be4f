#pragma once
// Simulated time: a signed 64-bit count of picoseconds in a strong type.
// 2^63 ps is about 106 days, far beyond any run; every arithmetic operation is
// checked and throws UserError on overflow rather than wrapping.
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <string>

#include "sim/core/error.hpp"

namespace parmsim {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time ps(std::int64_t v) { return Time(v); }
  static constexpr Time ns(std::int64_t v) { return Time(checked_mul(v, 1000)); }
  static constexpr Time us(std::int64_t v) { return Time(checked_mul(v, 1000000)); }
  static constexpr Time ms(std::int64_t v) { return Time(checked_mul(v, 1000000000)); }
  static constexpr Time zero() { return Time(0); }
  static constexpr Time max() { return Time(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t count_ps() const { return ps_; }
  // Conversions for output only; the engine never computes with them.
  constexpr double to_us() const { return static_cast<double>(ps_) / 1e6; }
  constexpr double to_seconds() const { return static_cast<double>(ps_) / 1e12; }

  constexpr auto operator<=>(const Time&) const = default;

  constexpr Time operator+(Time o) const { return Time(checked_add(ps_, o.ps_)); }
  constexpr Time operator-(Time o) const {
    if (o.ps_ == std::numeric_limits<std::int64_t>::min()) throw TimeOverflow("time overflow in subtraction");
    return Time(checked_add(ps_, -o.ps_));
  }
  constexpr Time& operator+=(Time o) { return *this = *this + o; }
  constexpr Time& operator-=(Time o) { return *this = *this - o; }
  constexpr Time operator*(std::int64_t k) const { return Time(checked_mul(ps_, k)); }

 private:
  constexpr explicit Time(std::int64_t v) : ps_(v) {}
  static constexpr std::int64_t checked_add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) throw TimeOverflow("time overflow: result exceeds 2^63 ps");
    return r;
  }
  static constexpr std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw TimeOverflow("time overflow: result exceeds 2^63 ps");
    return r;
  }
  std::int64_t ps_ = 0;
};

// Time to move `amount` units (bytes, FLOPs) at `per_second` units per second,
// rounded up to the next picosecond. The product is formed in 128 bits so that
// no intermediate overflows and no rate is silently made faster by truncation.
// Throws on a zero rate or a result beyond the Time range.
Time duration_for(std::uint64_t amount, std::uint64_t per_second);

// The same for a fractional rate (max-min shares, efficiency-scaled peaks).
// The rate is finite and positive; the result is rounded up.
// Inline: the common case (a positive amount, a finite positive rate, a result
// below 2^63 ps) is the same expression as the checked path in time.cpp,
// which handles everything else (zero, errors) and throws as before.
Time duration_for_rate_checked(double amount, double per_second);
// ceil(x) for 0 <= x < 9.2e18, by truncation (std::ceil is a library call
// without SSE4.1): int64(x) is floor(x) and exact as a double, so one more
// when it falls short of x is ceil(x); past 2^53 every double is an integer
// and nothing is added.
inline std::int64_t ceil_below_2p63(double x) {
  const auto i = static_cast<std::int64_t>(x);
  return i + (static_cast<double>(i) < x ? 1 : 0);
}
inline Time duration_for_rate(double amount, double per_second) {
  if (amount > 0 && per_second > 0 && per_second <= std::numeric_limits<double>::max()) {
    const double x = amount / per_second * 1e12;
    if (x < 9.2e18) return Time::ps(ceil_below_2p63(x));
  }
  return duration_for_rate_checked(amount, per_second);
}

std::string format_time(Time t);  // "12.345us"

}  // namespace parmsim
