#pragma once
// The CUDA backend as the command line sees it. The CUDA executor (CUDA
// runtime, cuBLAS, NCCL) is built as a module, libparmsim_cuda.so, beside the
// parmsim program, and opened with dlopen only when a command asks for
// --backend cuda: no other run loads the CUDA libraries. A build without nvcc
// has no module and says so. This header has no CUDA types.
#include <memory>
#include <string>

#include "backend/executor.hpp"

namespace parmsim::exec {

struct CudaOptions {
  bool loopback = true;
  int device = -1;  // -1: loopback uses GPU 0; NCCL mode uses local rank % GPUs
  int warmup = 2, reps = 10;
};

// An executor on GPUs, possibly spread over processes (one per GPU).
class GpuExecutor : public Executor {
 public:
  virtual int world_rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string device_name() const = 0;
};

// Why this process cannot use the CUDA backend, in one line ("this parmsim
// was built without CUDA ...", "the CUDA backend is not available: <why the
// module did not load>", or the module's "no usable GPU: ..."); empty when it
// can. Opens the module the first time.
std::string cuda_backend_unavailable();

// The CUDA executor, from the module; throws UserError with the reason above
// when there is none.
std::unique_ptr<GpuExecutor> make_cuda_executor(const CudaOptions& o);

// The module's entry points, found with dlsym. The interface number changes
// whenever CudaOptions, GpuExecutor or these functions do, so a module from
// another build is refused instead of misread.
inline constexpr int kCudaModuleInterface = 1;

}  // namespace parmsim::exec

extern "C" {
int parmsim_cuda_module_interface();
// Writes why no GPU can be used (empty: one can).
void parmsim_cuda_unavailable(std::string* why);
// A new executor (the caller owns it); throws UserError.
parmsim::exec::GpuExecutor* parmsim_cuda_make_executor(const parmsim::exec::CudaOptions* o);
}
