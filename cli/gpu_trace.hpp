#pragma once
// Measured traces of an executor spread over processes (the CUDA executor
// under mpirun): every process timed its own ranks' tasks; rank 0 collects them.
#include "backend/cuda/cuda_backend.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim::cli {

// Collective over the processes: afterwards rank 0's `trace` holds every
// rank's rows (start, end, p10/p90 spread) and the makespan. Other processes'
// traces keep their own rows only.
void gather_gpu_trace(const exec::GpuExecutor& gpu, const TaskGraph& g, SimResult& trace);

}  // namespace parmsim::cli
