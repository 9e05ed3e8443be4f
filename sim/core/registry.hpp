#pragma once
// What every registry (layer keys, schedule presets, network models, collective
// algorithms) does with its table of entries, each with a `name`: find an
// entry by name, and list the names as messages and help show them
// ("a, b or c", "a | b | c").
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// The entry of `table` called `name`, or null.
template <typename Entry>
const Entry* find_named(std::span<const Entry> table, std::string_view name) {
  for (const Entry& e : table)
    if (e.name == name) return &e;
  return nullptr;
}

// The entries' names, in table order.
template <typename Entry>
std::vector<std::string_view> names_of(std::span<const Entry> table) {
  std::vector<std::string_view> v;
  v.reserve(table.size());
  for (const Entry& e : table) v.push_back(e.name);
  return v;
}

}  // namespace parmsim
