// parmsim-gpu-info: prints the GPUs visible to this process; exits 2 without one.
#include <cstdio>

#include "backend/cuda/device_info.hpp"

int main() {
  std::string why;
  const auto devs = parmsim::cuda::list_devices(&why);
  if (devs.empty()) {
    std::fprintf(stderr, "parmsim-gpu-info: no usable GPU: %s\n", why.c_str());
    return 2;
  }
  for (const auto& d : devs)
    std::printf("gpu %d: %s, %.1f GiB, sm_%d%d\n", d.index, d.name.c_str(),
                static_cast<double>(d.memory_bytes) / (1 << 30), d.sm_major, d.sm_minor);
  return 0;
}
