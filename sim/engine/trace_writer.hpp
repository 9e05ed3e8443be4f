#pragma once
// Trace files of a simulated or measured run: one row per task, the same
// format for the simulator and the executors (README, "Traces").
#include <ostream>
#include <span>
#include <string>

#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim {

// CSV: task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops
// (times with 6 decimals: exact picoseconds).
void write_trace_csv(std::ostream& os, const TaskGraph& g, const SimResult& r);
// Chrome / Perfetto trace-event JSON: pid = rank, tid = stream, ts/dur in us.
void write_chrome_trace(std::ostream& os, const TaskGraph& g, const SimResult& r);

// Several simulated runs in one trace (`parmsim layer --trace`: every schedule,
// forward and backward). Each part is a run with its label ("s1", "forward")
// and the time its clock starts at on the file's clock (a backward pass after
// its forward pass).
struct TracePart {
  std::string run, pass;
  const TaskGraph* graph = nullptr;
  const SimResult* result = nullptr;
  Time offset;
  // Write only ranks below this (0: every rank). A run simulated by symmetry classes
  // (SimResult::symmetry > 1) ran ranks 0 .. representative_ranks(r) - 1; each stands for
  // its class, and the file says so.
  int ranks = 0;
};
// The ranks a run simulated, each standing for SimResult::symmetry ranks: the first
// P / symmetry (docs/performance.md, "Symmetry").
inline int representative_ranks(const TaskGraph& g, const SimResult& r) { return g.num_ranks() / r.symmetry; }
// CSV: run,pass, then the columns above; times on the file's clock. With a part that writes
// representatives only, a last column `stands_for`: the ranks each row stands for.
void write_trace_csv(std::ostream& os, std::span<const TracePart> parts);
// Chrome / Perfetto JSON: a process per part ("s1 forward"), a thread per rank
// and stream ("rank 0 compute"); ts/dur in us on the file's clock.
void write_chrome_trace(std::ostream& os, std::span<const TracePart> parts);

}  // namespace parmsim
