#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_info.hpp"

namespace parmsim::cuda {

std::vector<DeviceInfo> list_devices(std::string* why) {
  std::vector<DeviceInfo> out;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.totalGlobalMem, p.major, p.minor});
  }
  if (out.empty()) *why = "no CUDA device";
  return out;
}

}  // namespace parmsim::cuda
