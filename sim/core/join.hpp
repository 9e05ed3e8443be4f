#pragma once
// Lists of names as messages and help show them: "a, b or c", "a | b | c".
#include <string>
#include <string_view>

namespace parmsim {

// The names of `range` (anything whose elements convert to std::string_view),
// `sep` between them and `last` before the last: join_names(v, ", ", " or ").
template <typename Range>
std::string join_names(const Range& range, std::string_view sep, std::string_view last) {
  std::size_t n = 0;
  for (const auto& x : range) (void)x, ++n;
  std::string out;
  std::size_t i = 0;
  for (const auto& x : range) {
    if (i > 0) out += i + 1 == n ? last : sep;
    out += std::string_view(x);
    ++i;
  }
  return out;
}

}  // namespace parmsim
