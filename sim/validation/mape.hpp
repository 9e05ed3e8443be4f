#pragma once
// Mean absolute percentage errors by key, as every validation table reports
// them (per source, per kernel, per system ...).
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>

#include "sim/core/error.hpp"

namespace parmsim {

// A validation CSV's column `quality`: "ok", or "suspect" for a run known or likely not to time
// what its columns say (counted in no headline MAPE). Returns whether it is suspect; anything
// else throws UserError "WHERE: column 'quality': expected ok or suspect, got '...'".
inline bool quality_suspect(const std::string& value, const std::string& where) {
  if (value != "ok" && value != "suspect")
    throw UserError(fmt::format("{}: column 'quality': expected ok or suspect, got '{}'", where, value));
  return value == "suspect";
}

struct MapeTally {
  std::map<std::string, double> sum;
  std::map<std::string, int> count;
  void add(const std::string& key, double error_pct) {
    sum[key] += std::abs(error_pct);
    ++count[key];
  }
  // The mean per key (every key has at least one row).
  std::map<std::string, double> means() const {
    std::map<std::string, double> m;
    for (const auto& [k, s] : sum) m[k] = s / count.at(k);
    return m;
  }
};

}  // namespace parmsim
