#pragma once
// The CUDA executor: the task graphs the simulator times, run on GPUs with
// cuBLAS GEMMs, CUDA kernels and NCCL collectives, timing every task with
// CUDA events.
//
// Two modes:
//  - NCCL (under `mpirun -np N`, one process per GPU): this process runs the
//    graph's rank equal to its MPI rank; rank 0 makes the NCCL unique id and
//    broadcasts it over MPI; the communicators of every collective group are
//    split from the world communicator with the simulator's rank mapping; one
//    CUDA stream per task-graph stream (and a second one for SAA's inner
//    group); events for cross-stream edges.
//  - loopback (one process): every rank on this process's GPU, a stream set
//    per rank, collectives as device-to-device copies and sums, since NCCL
//    refuses two ranks on one GPU.
// Timing: a start and an end event around every task on its own stream,
// against one reference event per device; `warmup` runs, then `reps` runs;
// rows hold median start and duration, `spread` the p10/p90 of durations.
// It is built into the module libparmsim_cuda.so (and the GPU tools); parmsim
// reaches it through backend/cuda/cuda_backend.hpp.
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.hpp"

namespace parmsim::exec {

// Why no GPU can be used by this process, in one line; empty when one can.
std::string cuda_unavailable();

class CudaExecutor final : public GpuExecutor {
 public:
  explicit CudaExecutor(CudaOptions o);
  ~CudaExecutor() override;
  std::string name() const override { return "cuda"; }
  // Loads every buffer of the ranks this process runs from `mem` (fp32,
  // converted to the buffers' type), runs, and writes them back. The trace
  // has rows for every task; rows of other processes' ranks are zero.
  SimResult run(const TaskGraph& g, Memory& mem) override;
  bool owns(int rank) const override;
  int world_rank() const override;
  int world_size() const override;
  std::string device_name() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parmsim::exec
