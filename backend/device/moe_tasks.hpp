#pragma once
// The MoE compute tasks on a device: each task of the graph (its kernel's
// arguments, sim/graph/kernel_args.hpp, inputs and outputs, as the CPU
// kernels read them) turned into GEMMs and kernel-body launches on a DeviceOps. The same code drives
// cuBLAS and the CUDA kernels on a GPU, and the host emulation in the tests.
#include <array>
#include <functional>
#include <string>

#include "backend/device/device_ops.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim::exec::dev {

struct BufRef {
  void* p = nullptr;
  Elem elem = Elem::f32;
  std::uint64_t elems = 0;
};
// A buffer of the task's rank by name; throws UserError when there is none.
using BufferLookup = std::function<BufRef(const std::string&)>;

// Device element type of a graph buffer: fp32 metadata stays fp32.
Elem elem_of(DType d);

// Bytes of the two scratch areas `run_task` needs for `t` (0 when none).
std::array<std::uint64_t, 2> scratch_bytes(const Task& t, Elem act);

// Enqueues task `t` (a compute task with a kernel: every role has one here) on `ops`. The scratch areas
// hold at least scratch_bytes(t, ops.act()). Throws UserError naming the task
// when a buffer is missing or too small.
void run_task(const Task& t, DeviceOps& ops, const BufferLookup& buf, void* scratch0, void* scratch1);

}  // namespace parmsim::exec::dev
