#pragma once
// Trace files of a simulated or measured run: one row per task, the same
// format for the simulator and the executors (README, "Traces").
#include <ostream>

#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim {

// CSV: task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops
// (times with 6 decimals: exact picoseconds).
void write_trace_csv(std::ostream& os, const TaskGraph& g, const SimResult& r);
// Chrome / Perfetto trace-event JSON: pid = rank, tid = stream, ts/dur in us.
void write_chrome_trace(std::ostream& os, const TaskGraph& g, const SimResult& r);

}  // namespace parmsim
