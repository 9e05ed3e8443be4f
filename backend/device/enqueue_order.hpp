#pragma once
// The order in which a device executor enqueues a task graph from one host
// thread. Work on a stream runs in enqueue order and an event can only be
// waited for once it has been recorded, so the order must put every task after
// its dependencies and keep each stream's task order; a collective is enqueued
// as one unit for all its members (loopback moves the data for all at once;
// NCCL needs every process to issue its collectives in the same order).
#include <vector>

#include "sim/graph/task_graph.hpp"

namespace parmsim::exec::dev {

// One compute task, or a whole collective (all its member tasks).
struct Unit {
  int task = -1;        // compute
  int collective = -1;  // collective
};

// Kahn's algorithm over units, the unit with the lowest task id first: the
// same order on every process. Throws UserError when collectives and stream
// orders form a cycle (a graph no in-order stream executor can run).
std::vector<Unit> enqueue_order(const TaskGraph& g);

}  // namespace parmsim::exec::dev
