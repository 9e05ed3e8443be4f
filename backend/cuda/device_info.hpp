#pragma once
// Minimal CUDA entry point: lists the GPUs this process can use. Later the
// CUDA executor builds on this library.
#include <string>
#include <vector>

namespace parmsim::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::size_t memory_bytes = 0;
  int sm_major = 0, sm_minor = 0;
};

// Empty with `why` set when there is no usable GPU (no driver, no device).
std::vector<DeviceInfo> list_devices(std::string* why);

}  // namespace parmsim::cuda
