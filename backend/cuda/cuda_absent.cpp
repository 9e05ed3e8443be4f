// The CUDA executor's entry points in a build configured without nvcc: every
// one reports that this parmsim has no CUDA backend, so `--backend cuda` fails
// with that one line instead of the CLI failing to link. (With nvcc, as in CI,
// cuda_executor.cpp is built instead.)
#include "backend/cuda/cuda_executor.hpp"
#include "sim/core/error.hpp"

namespace parmsim::exec {

struct CudaExecutor::Impl {};

std::string cuda_unavailable() {
  return "this parmsim was built without CUDA (nvcc was not found when it was configured)";
}
CudaExecutor::CudaExecutor(CudaOptions) {
  throw ParmError(cuda_unavailable());
}
CudaExecutor::~CudaExecutor() = default;
SimResult CudaExecutor::run(const TaskGraph&, Memory&) {
  throw ParmError(cuda_unavailable());
}
bool CudaExecutor::owns(int) const {
  return false;
}
int CudaExecutor::world_rank() const {
  return 0;
}
int CudaExecutor::world_size() const {
  return 1;
}
std::string CudaExecutor::device_name() const {
  return "";
}

}  // namespace parmsim::exec
