#pragma once
// Executors run a task graph for real and return a trace in the simulator's
// format (one row per task: start, end, bytes, flops), so simulated and
// measured runs compare row by row.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim::exec {

// Every rank's buffers, as fp32 arrays, made from the graph's buffer
// declarations (zero-filled). Names are per rank.
class Memory {
 public:
  explicit Memory(const TaskGraph& g);
  std::vector<float>& at(int rank, const std::string& name);  // throws UserError naming rank and buffer
  bool has(int rank, const std::string& name) const;
  int ranks() const { return static_cast<int>(buf_.size()); }

 private:
  std::vector<std::map<std::string, std::vector<float>>> buf_;
};

// A compute kernel: reads the task's `inputs`, writes its `outputs`, with the
// arguments of its role (ComputeTask::args). A table holds one per role.
using Kernel = std::function<void(const Task&, Memory&)>;
using KernelTable = std::map<KernelRole, Kernel>;

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  virtual SimResult run(const TaskGraph& g, Memory& mem) = 0;
  // Whether this process holds rank `rank`'s buffers after run() (an executor
  // spread over processes holds only its own ranks).
  virtual bool owns(int /*rank*/) const { return true; }
};

}  // namespace parmsim::exec
