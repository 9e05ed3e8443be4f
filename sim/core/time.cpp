#include "sim/core/time.hpp"

#include <fmt/format.h>

#include <cmath>

namespace parmsim {

Time duration_for(std::uint64_t amount, std::uint64_t per_second) {
  if (per_second == 0) throw UserError("rate of zero per second: duration is infinite");
  const unsigned __int128 num = static_cast<unsigned __int128>(amount) * 1'000'000'000'000ULL;
  const unsigned __int128 q = (num + per_second - 1) / per_second;
  if (q > static_cast<unsigned __int128>(std::numeric_limits<std::int64_t>::max()))
    throw TimeOverflow("time overflow: transfer duration exceeds 2^63 ps");
  return Time::ps(static_cast<std::int64_t>(q));
}

Time duration_for_rate_checked(double amount, double per_second) {
  if (!(per_second > 0) || !std::isfinite(per_second))
    throw UserError(fmt::format("invalid rate {} per second", per_second));
  if (amount <= 0) return Time::zero();
  const double ps = std::ceil(amount / per_second * 1e12);
  if (ps >= 9.2e18) throw TimeOverflow("time overflow: duration exceeds 2^63 ps");
  return Time::ps(static_cast<std::int64_t>(ps));
}

std::string format_time(Time t) {
  return fmt::format("{:.3f}us", t.to_us());
}

}  // namespace parmsim
