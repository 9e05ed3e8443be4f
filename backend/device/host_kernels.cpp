#include "backend/device/host_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backend/device/moe_tasks.hpp"
#include "sim/core/error.hpp"

namespace parmsim::exec::dev {

KernelTable emulated_device_kernels() {
  KernelTable k;
  for (const KernelRoleInfo& role : kKernelRoles) {
    if (role.role == KernelRole::none) continue;
    k[role.role] = [](const Task& t, Memory& mem) {
      HostOps ops;
      const auto need = scratch_bytes(t, Elem::f32);
      std::vector<std::uint64_t> s0(need[0] / 8 + 1), s1(need[1] / 8 + 1);  // 8-byte aligned storage
      run_task(
          t, ops,
          [&](const std::string& name) {
            auto& v = mem.at(t.rank, name);
            return BufRef{v.data(), Elem::f32, v.size()};
          },
          s0.data(), s1.data());
    };
  }
  return k;
}

float* MemoryMover::at(int rank, const Ref& r, std::uint64_t n) {
  std::vector<float>* v = nullptr;
  if (r.buf == kStageSend || r.buf == kStageRecv) {
    v = &stage_[{rank, r.buf}];
    if (v->size() < r.off + n) v->resize(r.off + n);
  } else {
    v = &mem_.at(rank, r.buf);
  }
  if (r.off + n > v->size())
    throw UserError(fmt::format("rank {}: {} elements at {} of '{}' ({} elements) out of bounds", rank, n, r.off, r.buf,
                                v->size()));
  return v->data() + r.off;
}

void MemoryMover::copy(int dst_rank, const Ref& dst, int src_rank, const Ref& src, std::uint64_t n) {
  const float* s = at(src_rank, src, n);
  std::copy_n(s, n, at(dst_rank, dst, n));
}

void MemoryMover::copy2d(int dst_rank, const Ref& dst, std::uint64_t dpitch, int src_rank, const Ref& src,
                         std::uint64_t spitch, std::uint64_t width, std::uint64_t rows) {
  if (rows == 0) return;
  const float* s = at(src_rank, src, (rows - 1) * spitch + width);
  float* d = at(dst_rank, dst, (rows - 1) * dpitch + width);
  for (std::uint64_t r = 0; r < rows; ++r) std::copy_n(s + r * spitch, width, d + r * dpitch);
}

void MemoryMover::acc_zero(std::uint64_t n) {
  acc_.assign(n, 0.0f);
}
void MemoryMover::acc_add(int rank, const Ref& src, std::uint64_t n) {
  const float* s = at(rank, src, n);
  for (std::uint64_t i = 0; i < n; ++i) acc_[i] += s[i];
}
void MemoryMover::acc_store(int rank, const Ref& dst, std::uint64_t n) {
  std::copy_n(acc_.begin(), n, at(rank, dst, n));
}

}  // namespace parmsim::exec::dev
