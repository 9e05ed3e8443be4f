#include "sim/core/units.hpp"

#include <fmt/format.h>

#include <cctype>
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace parmsim::units {
namespace {

// Splits "12.5GBps" into 12.5 and "GBps". Rejects empty numbers and negatives.
bool split(const std::string& s, double* value, std::string* unit, std::string* why) {
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' ||
                          ((s[i] == '+' || s[i] == '-') && i > 0 && s[i - 1] == 'e')))
    ++i;
  // 'e' may start a unit only if no digit follows; back off a dangling 'e'.
  if (i > 0 && s[i - 1] == 'e') --i;
  if (i == 0) {
    *why = s.empty() ? "an empty value" : (s[0] == '-' ? "a negative value" : "a value starting with a number");
    return false;
  }
  try {
    std::size_t used = 0;
    *value = std::stod(s.substr(0, i), &used);
    if (used != i) throw std::invalid_argument("x");
  } catch (...) {
    *why = fmt::format("'{}' is not a number", s.substr(0, i));
    return false;
  }
  std::size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  *unit = s.substr(j);
  if (!std::isfinite(*value)) {
    *why = "a finite value";
    return false;
  }
  return true;
}

double lookup(const std::string& unit, const std::vector<std::pair<std::string, double>>& table) {
  for (const auto& [name, factor] : table)
    if (name == unit) return factor;
  return -1;
}

std::string names(const std::vector<std::pair<std::string, double>>& table) {
  std::string out;
  for (std::size_t i = 0; i < table.size(); ++i) out += (i ? ", " : "") + table[i].first;
  return out;
}

template <class T>
std::optional<T> parse_with(const std::string& s, std::string* why, const char* what,
                            const std::vector<std::pair<std::string, double>>& table, bool whole = false) {
  double v = 0;
  std::string unit;
  if (!split(s, &v, &unit, why)) {
    *why = fmt::format("a {} with a unit (one of {}), got '{}': {}", what, names(table), s, *why);
    return std::nullopt;
  }
  if (unit.empty()) {
    *why = fmt::format("a {} with a unit (one of {}), got the bare number '{}'", what, names(table), s);
    return std::nullopt;
  }
  const double f = lookup(unit, table);
  if (f < 0) {
    *why = fmt::format("a {} with a unit (one of {}), got unknown unit '{}' in '{}'", what, names(table), unit, s);
    return std::nullopt;
  }
  const double r = std::round(v * f);
  if (whole && std::abs(v * f - r) > 1e-9 * std::max(1.0, r)) {
    *why = fmt::format("a whole number of bytes, got '{}' ({:g} bytes)", s, v * f);
    return std::nullopt;
  }
  if (r >= 9.2e18) {
    *why = fmt::format("a {} below 2^63 in base units, got '{}'", what, s);
    return std::nullopt;
  }
  return static_cast<T>(r);
}

const std::vector<std::pair<std::string, double>> kBandwidth = {{"Bps", 1},
                                                                {"B/s", 1},
                                                                {"KBps", 1e3},
                                                                {"KB/s", 1e3},
                                                                {"MBps", 1e6},
                                                                {"MB/s", 1e6},
                                                                {"GBps", 1e9},
                                                                {"GB/s", 1e9},
                                                                {"TBps", 1e12},
                                                                {"TB/s", 1e12},
                                                                {"bps", 0.125},
                                                                {"Kbps", 125},
                                                                {"Mbps", 1.25e5},
                                                                {"Gbps", 1.25e8},
                                                                {"Tbps", 1.25e11},
                                                                {"GiBps", 1073741824.0},
                                                                {"GiB/s", 1073741824.0}};
const std::vector<std::pair<std::string, double>> kTime = {
    {"ps", 1}, {"ns", 1e3}, {"us", 1e6}, {"ms", 1e9}, {"s", 1e12}};
const std::vector<std::pair<std::string, double>> kSize = {
    {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
const std::vector<std::pair<std::string, double>> kFlops = {{"FLOPs", 1},     {"FLOP/s", 1},    {"GFLOPs", 1e9},
                                                            {"GFLOP/s", 1e9}, {"TFLOPs", 1e12}, {"TFLOP/s", 1e12},
                                                            {"PFLOPs", 1e15}, {"PFLOP/s", 1e15}};

}  // namespace

std::optional<std::uint64_t> parse_bandwidth(const std::string& s, std::string* why) {
  auto r = parse_with<std::uint64_t>(s, why, "bandwidth", kBandwidth);
  if (r && *r == 0) {
    *why = fmt::format("a positive bandwidth, got '{}'", s);
    return std::nullopt;
  }
  return r;
}

std::optional<Time> parse_time(const std::string& s, std::string* why) {
  auto r = parse_with<std::int64_t>(s, why, "time", kTime);
  if (!r) return std::nullopt;
  return Time::ps(*r);
}

std::optional<std::uint64_t> parse_size(const std::string& s, std::string* why) {
  return parse_with<std::uint64_t>(s, why, "size", kSize, true);
}

std::optional<double> parse_flops(const std::string& s, std::string* why) {
  auto r = parse_with<std::uint64_t>(s, why, "rate in FLOP/s", kFlops);
  if (r && *r == 0) {
    *why = fmt::format("a positive rate, got '{}'", s);
    return std::nullopt;
  }
  if (!r) return std::nullopt;
  return static_cast<double>(*r);
}

std::string format_bytes(std::uint64_t b) {
  // Exact binary units when they fit, else two or one decimals of the largest unit.
  if (b >= (1ULL << 30)) {
    if (b % (1ULL << 30) == 0) return fmt::format("{}GiB", b >> 30);
    return fmt::format("{:.2f}GiB", static_cast<double>(b) / (1ULL << 30));
  }
  if (b >= (1ULL << 20)) {
    if (b % (1ULL << 20) == 0) return fmt::format("{}MiB", b >> 20);
    return fmt::format("{:.1f}MiB", static_cast<double>(b) / (1ULL << 20));
  }
  if (b >= (1ULL << 10) && b % (1ULL << 10) == 0) return fmt::format("{}KiB", b >> 10);
  return fmt::format("{}B", b);
}

}  // namespace parmsim::units
