#pragma once
// Result files. Every file is written to "<path>.tmp.<pid>" and renamed into
// place, so a crash or an error never leaves a half-written output.
#include <functional>
#include <ostream>
#include <string>

#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim {

void write_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill);

// CSV: task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops
// (times with 6 decimals: exact picoseconds).
void write_trace_csv(std::ostream& os, const TaskGraph& g, const SimResult& r);
// Chrome / Perfetto trace-event JSON: pid = rank, tid = stream, ts/dur in us.
void write_chrome_trace(std::ostream& os, const TaskGraph& g, const SimResult& r);

// Picoseconds as microseconds with all six decimals ("12.000345").
std::string us_exact(Time t);

}  // namespace parmsim
