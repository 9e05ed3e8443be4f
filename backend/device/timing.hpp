#pragma once
// Summaries of repeated measured runs: per task the median start, the median
// duration and the 10th/90th percentiles of the duration.
#include <utility>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/engine/simulator.hpp"

namespace parmsim::exec::dev {

// Nearest-rank percentile (q in [0, 1]) of `v`; v must not be empty.
Time percentile(std::vector<Time> v, double q);

// reps[rep][task] = {start, end} of that run, relative to its reference
// event. Fills out->trace (start = median start, end = start + median
// duration; task ids in order) and out->spread; makespan = largest end.
void summarize(const std::vector<std::vector<std::pair<Time, Time>>>& reps, SimResult* out);

}  // namespace parmsim::exec::dev
