#pragma once
// What simulating one layer will take, from its shape alone, before any graph
// is built: the tasks and transfers of its forward and backward graphs, the
// events the engine will process, and the memory and time they need. The
// commands that simulate (layer, sweep, simulate, execute's --compare) refuse
// up front when the memory is above --max-memory, with this estimate and what
// lowers it; the time is printed when it is long.
#include <cstdint>
#include <string>

#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"
#include "sim/moe/layer.hpp"

namespace parmsim::moe {

struct SimCost {
  double tasks = 0;          // compute and collective tasks over all ranks
  double transfers = 0;      // point-to-point transfers of every collective's plan
  double a2a_transfers = 0;  // of which AlltoAll and SAA plans (exact: every pair exchanges)
  double flows = 0;          // transfers in flight at once, at most (one collective's groups together)
  double events = 0;         // engine events: a start and an end per task and per transfer
  double bytes = 0;          // peak memory of the simulation
  double seconds = 0;        // single-thread run time on a 2-core x86 VM (the measurements in resources.cpp)
  SimCost& operator+=(const SimCost& o);
};

// One schedule's forward and backward graphs (run_schedule). The per-unit
// figures are measured (resources.cpp): bytes per task and per transfer from
// peak RSS, seconds per event from wall time, of `parmsim layer` on dgx-h100
// at 128 to 1024 GPUs. Not counted: the closed form's routes, which on
// topologies past 1024 GPUs can take longer than the simulation (issue 28).
SimCost estimate_schedule(const LayerSpec& s, const Dims& d, const ScheduleOptions& o);

// Any task graph (`parmsim simulate`, `collective`): its tasks, and each
// collective's transfers by its operation, group and algorithm.
SimCost estimate_graph(const TaskGraph& g);
// Events, memory and time from a cost's tasks and transfers.
SimCost finish_cost(SimCost c);
// One collective alone (`parmsim collective`): its members' tasks, its transfers and its flows at once.
SimCost estimate_collective(const Collective& c);

// The cost under the engine's symmetry of this order (docs/performance.md,
// "Symmetry"): a collective with members on and off the representatives is
// planned for them alone (make_rep_plan) and only their transfers run, so
// 1/order of the transfers and of the flows at once; every rank's tasks are
// still built and traced. order 1: c unchanged.
SimCost with_symmetry(SimCost c, int order);
// The order of the smallest server shift of topo (Topology::node_shift), 1 if none:
// the symmetry a layer on every GPU of topo runs with, when its checks pass.
int topology_symmetry_order(const Topology& topo);
// The order a layer on every GPU of topo runs with: topology_symmetry_order under the flow
// network with symmetry on, else 1 (the other networks and --no-symmetry simulate every rank).
int symmetry_order(const Topology& topo, const std::string& network, bool symmetry);
// The order layer `s` (dims `d`) runs with where the topology's is `order`: 1 for a layer with
// a load model (dropless routing, `load`), whose per-rank counts the shift does not preserve, so
// the engine's check falls back to every rank (docs/performance.md, "Symmetry"). With data-
// parallel replicas of the G*N_EP block (dp > 1) a shift must also move whole blocks: the
// smallest is lcm(P/order, G*N_EP) GPUs, of order P / that.
int layer_symmetry_order(const LayerSpec& s, const Dims& d, int order);

// "12.3 GiB and about 40 min (1.2e9 transfers, 2.5e9 events)", for messages.
std::string describe(const SimCost& c);

}  // namespace parmsim::moe
