#include "backend/device/timing.hpp"

#include <algorithm>
#include <cmath>

#include "sim/core/error.hpp"

namespace parmsim::exec::dev {

Time percentile(std::vector<Time> v, double q) {
  if (v.empty()) throw UserError("percentile of no values");
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const std::size_t i = rank < 1 ? 0 : std::min(v.size() - 1, static_cast<std::size_t>(rank) - 1);
  return v[i];
}

void summarize(const std::vector<std::vector<std::pair<Time, Time>>>& reps, SimResult* out) {
  if (reps.empty()) throw UserError("no measured runs to summarize");
  const std::size_t n = reps[0].size();
  out->trace.resize(n);
  out->spread.assign(n, {});
  out->makespan = Time();
  std::vector<Time> starts(reps.size()), durs(reps.size());
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t r = 0; r < reps.size(); ++r) {
      starts[r] = reps[r].at(t).first;
      durs[r] = reps[r].at(t).second - reps[r].at(t).first;
    }
    TraceRow& row = out->trace[t];
    row.task = static_cast<int>(t);
    row.start = percentile(starts, 0.5);
    row.end = row.start + percentile(durs, 0.5);
    out->spread[t] = {percentile(durs, 0.1), percentile(durs, 0.9)};
    out->makespan = std::max(out->makespan, row.end);
  }
}

}  // namespace parmsim::exec::dev
