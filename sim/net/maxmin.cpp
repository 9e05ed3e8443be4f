#include "sim/net/maxmin.hpp"

#include <limits>

namespace parmsim {

std::vector<double> max_min_rates(const std::vector<double>& capacity,
                                  const std::vector<std::span<const int>>& flows) {
  const std::size_t L = capacity.size(), F = flows.size();
  std::vector<double> rate(F, 0.0);
  // CSR index: flows on each link.
  std::vector<std::uint32_t> start(L + 1, 0);
  for (const auto& p : flows)
    for (int l : p) ++start[l + 1];
  for (std::size_t l = 0; l < L; ++l) start[l + 1] += start[l];
  std::vector<std::uint32_t> on(start[L]);
  std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
  for (std::size_t f = 0; f < F; ++f)
    for (int l : flows[f]) on[fill[l]++] = static_cast<std::uint32_t>(f);

  std::vector<double> cap(capacity);
  std::vector<std::uint32_t> count(L);
  std::vector<int> active;
  for (std::size_t l = 0; l < L; ++l) {
    count[l] = start[l + 1] - start[l];
    if (count[l] > 0) active.push_back(static_cast<int>(l));
  }
  std::vector<char> fixed(F, 0);
  while (!active.empty()) {
    // The bottleneck: smallest fair share; ties broken by lowest link id
    // (active stays sorted), so the result does not depend on hashing.
    int best = -1;
    double share = std::numeric_limits<double>::infinity();
    std::size_t keep = 0;
    for (int l : active) {
      if (count[l] == 0) continue;
      active[keep++] = l;
      const double s = cap[l] / count[l];
      if (s < share) share = s, best = l;
    }
    active.resize(keep);
    if (best < 0) break;
    if (share < 0) share = 0;  // rounding on a nearly exhausted link
    for (std::uint32_t i = start[best]; i < start[best + 1]; ++i) {
      const std::uint32_t f = on[i];
      if (fixed[f]) continue;
      fixed[f] = 1;
      rate[f] = share;
      for (int l : flows[f]) {
        cap[l] -= share;
        --count[l];
      }
    }
  }
  return rate;
}

}  // namespace parmsim
