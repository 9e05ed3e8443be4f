#pragma once
// Runs a task graph on a topology: the engine owns the only clock. Compute
// tasks take the roofline time of the topology's GPU profile; collective
// tasks expand into their algorithm's transfers, timed by the network model.
//
// Rank r of the graph runs on GPU r of the topology. Tasks on different
// streams of one GPU run concurrently; compute kernels do not slow each other
// (no SM sharing is modelled). Reductions inside collectives cost no time.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {

struct TraceRow {
  int task = 0;
  Time start, end;
  std::uint64_t bytes = 0;  // compute: memory bytes; collective: bytes this rank sent
  std::uint64_t flops = 0;
};

struct Calibration;

struct SimOptions {
  std::string network = "flow";
  // Measured collective costs that replace the modelled algorithm where an
  // entry matches (sim/calib/calibration.hpp); null: everything is modelled.
  const Calibration* calibration = nullptr;
  // Simulate each class of symmetric ranks once (docs/performance.md,
  // "Symmetry"): where shifting the servers maps the topology, its routes,
  // the task graph and every collective's plan onto themselves, only the
  // ranks of the first shift run, each flow stands for its whole orbit in
  // the max-min shares, and the other ranks' rows are copied from theirs.
  // Where any of that fails the graph is simulated rank by rank. False:
  // always rank by rank (--no-symmetry).
  bool symmetry = true;
};

struct SimResult {
  Time makespan;
  std::vector<TraceRow> trace;  // one row per task, in task id order
  std::uint64_t intra_node_bytes = 0, inter_node_bytes = 0;
  std::uint64_t transfers = 0;  // point-to-point transfers simulated
  std::uint64_t events = 0;     // engine events processed
  int symmetry = 1;             // ranks each simulated rank stood for (1: every rank simulated)
  // Measured runs only (executors that repeat a run): per task, the 10th and
  // 90th percentile of its duration; rows' start/end are then medians. Empty
  // for simulations and single runs.
  std::vector<std::pair<Time, Time>> spread;
};

// Plans, the flow model's rate memo and the engine's pools are kept in ws
// for the next simulation with it (a Workspace per thread).
SimResult simulate(const TaskGraph& g, const Topology& topo, const SimOptions& opt, Workspace& ws);
// The same with a fresh workspace (a caller that simulates once).
SimResult simulate(const TaskGraph& g, const Topology& topo, const SimOptions& opt = {});

// Called by simulate() before each simulation that has a calibration, on the
// simulating thread (a sweep's many at once: it must be thread-safe), so that
// a command can report which collectives and kernels the calibration timed
// (cli/coverage.cpp). Null (the default): nothing is called.
using SimulationObserver = void (*)(const TaskGraph& g, const Topology& topo, const SimOptions& opt);
void set_simulation_observer(SimulationObserver f);

}  // namespace parmsim
