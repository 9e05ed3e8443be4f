#pragma once
// Mean absolute percentage errors by key, as every validation table reports
// them (per source, per kernel, per system ...).
#include <cmath>
#include <map>
#include <string>

namespace parmsim {

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
