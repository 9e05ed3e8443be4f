// The CUDA executor in a build without CUDA: says so.
#include "backend/cuda/cuda_executor.hpp"
#include "sim/core/error.hpp"

namespace parmsim::exec {

struct CudaExecutor::Impl {};

bool cuda_built() {
  return false;
}
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
