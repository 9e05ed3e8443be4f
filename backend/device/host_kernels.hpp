#pragma once
// The device kernels (moe_tasks + kernel bodies) run by the host emulation,
// as a CPU KernelTable: the CPU executor can run whole graphs with them, so
// the GPU code path's arithmetic is checked against the dense reference
// without a GPU.
#include <map>

#include "backend/device/coll_plan.hpp"
#include "backend/executor.hpp"

namespace parmsim::exec::dev {

KernelTable emulated_device_kernels();

// run_phases on host Memory (fp32), with stage buffers of its own.
class MemoryMover final : public Mover {
 public:
  explicit MemoryMover(Memory& mem) : mem_(mem) {}
  void copy(int dst_rank, const Ref& dst, int src_rank, const Ref& src, std::uint64_t n) override;
  void copy2d(int dst_rank, const Ref& dst, std::uint64_t dpitch, int src_rank, const Ref& src, std::uint64_t spitch,
              std::uint64_t width, std::uint64_t rows) override;
  void acc_zero(std::uint64_t n) override;
  void acc_add(int rank, const Ref& src, std::uint64_t n) override;
  void acc_store(int rank, const Ref& dst, std::uint64_t n) override;

 private:
  float* at(int rank, const Ref& r, std::uint64_t n);  // checks that n elements fit
  Memory& mem_;
  std::map<std::pair<int, std::string>, std::vector<float>> stage_;
  std::vector<float> acc_;
};

}  // namespace parmsim::exec::dev
