#pragma once
// The CPU reference executor: one thread per (rank, stream), each running its
// stream's tasks in order; a task waits for its dependencies on any rank or
// stream; a collective waits for all its members, and the last to arrive
// moves the data. If every thread is waiting and none can go on, the run
// stops with a UserError naming the blocked tasks (never a hang).
#include "backend/executor.hpp"

namespace parmsim::exec {

class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(KernelTable kernels) : kernels_(std::move(kernels)) {}
  std::string name() const override { return "cpu"; }
  SimResult run(const TaskGraph& g, Memory& mem) override;

 private:
  KernelTable kernels_;
};

}  // namespace parmsim::exec
