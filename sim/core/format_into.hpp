#pragma once
// Formatting into a string with one allocation of the final size:
// fmt::format grows its result as it writes (two or three allocations for a
// task name of 20-odd characters, thousands of names per task graph).
#include <fmt/compile.h>
#include <fmt/format.h>

#include <iterator>
#include <string>

namespace parmsim {

template <class S, class... A>
void format_into(std::string& out, const S& format, const A&... args) {
  fmt::basic_memory_buffer<char, 128> buf;  // on the stack up to 128 characters
  fmt::format_to(std::back_inserter(buf), format, args...);
  out.assign(buf.data(), buf.size());
}

}  // namespace parmsim
