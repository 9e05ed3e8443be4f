// The entry points of libparmsim_cuda.so, the module parmsim opens for
// --backend cuda (backend/cuda/cuda_backend.cpp). Everything else the module
// uses from parmsim (task graphs, errors, the MPI shim) comes from the program
// that opened it.
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_executor.hpp"

extern "C" {

int parmsim_cuda_module_interface() {
  return parmsim::exec::kCudaModuleInterface;
}

void parmsim_cuda_unavailable(std::string* why) {
  *why = parmsim::exec::cuda_unavailable();
}

parmsim::exec::GpuExecutor* parmsim_cuda_make_executor(const parmsim::exec::CudaOptions* o) {
  return new parmsim::exec::CudaExecutor(*o);
}
}
