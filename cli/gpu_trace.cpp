#include "cli/gpu_trace.hpp"

#include <fmt/format.h>

#include <sstream>

#include "sim/mpi/mpi_shim.hpp"

namespace parmsim::cli {

void gather_gpu_trace(const exec::GpuExecutor& gpu, const TaskGraph& g, SimResult& trace) {
  std::string mine;
  for (const Task& t : g.tasks())
    if (gpu.owns(t.rank)) {
      const auto& row = trace.trace[t.id];
      const auto& sp = trace.spread[t.id];
      mine += fmt::format("{} {} {} {} {}\n", t.id, row.start.count_ps(), row.end.count_ps(), sp.first.count_ps(),
                          sp.second.count_ps());
    }
  const auto all = mpi::gather_strings(mine);
  if (gpu.world_rank() != 0) return;
  for (const std::string& part : all) {
    std::istringstream in(part);
    long long id, a, b, p10, p90;
    while (in >> id >> a >> b >> p10 >> p90) {
      trace.trace[id].start = Time::ps(a), trace.trace[id].end = Time::ps(b);
      trace.spread[id] = {Time::ps(p10), Time::ps(p90)};
      trace.makespan = std::max(trace.makespan, Time::ps(b));
    }
  }
}

}  // namespace parmsim::cli
