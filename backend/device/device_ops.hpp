#pragma once
// What a device must offer to run the MoE tasks: row-major strided-batched
// GEMMs, zero fills, and launches of the kernel bodies (kernel_bodies.hpp).
// Two implementations: the CUDA one (cuBLAS and CUDA kernels, backend/cuda)
// and the host emulation (plain loops, fp32 only) the CPU tests use.
#include <cstdint>
#include <variant>

#include "backend/device/kernel_bodies.hpp"

namespace parmsim::exec::dev {

// Element types of device buffers.
enum class Elem { f32, f16, bf16 };
int elem_bytes(Elem e);

// D[b] = alpha op(A[b]) op(B[b]) + beta D[b], b < batch, all row-major:
// op(A) is r x k, op(B) is k x c, D is r x c; lda/ldb/ldd are the stored
// matrices' row lengths; strides are in elements. A and B are of type `ab`,
// D of type `d`; the GEMM accumulates in fp32.
struct Gemm {
  bool ta = false, tb = false;
  I r = 0, c = 0, k = 0;
  const void* A = nullptr;
  I lda = 0, sa = 0;
  const void* B = nullptr;
  I ldb = 0, sb = 0;
  void* D = nullptr;
  I ldd = 0, sd = 0;
  I batch = 1;
  float alpha = 1, beta = 0;
  Elem ab = Elem::f32, d = Elem::f32;
};

// The same product as a column-major (cuBLAS) call: D^T = op(B)^T op(A)^T.
struct ColMajorGemm {
  bool ta, tb;  // transposes of the first and second operand
  I m, n, k;
  const void* A;
  I lda, sa;
  const void* B;
  I ldb, sb;
  void* C;
  I ldc, sc;
};
ColMajorGemm to_col_major(const Gemm& g);

// One launch: `n` indices of a body; `act` says which T the body runs with
// (bodies that touch only fp32 metadata ignore it).
using LaunchArgs = std::variant<SoftmaxTopkArgs, SlotsArgs, OrderArgs, OrderBwdArgs, SlotSliceArgs, ReluArgs,
                                ReluMaskArgs, IOrderArgs, IOrderBwdArgs, GateDlArgs, CastArgs>;
enum class Body {
  softmax_topk,
  slot_count,
  slot_scan,
  slot_assign,
  order,
  order_vec,  // Order with M in 16-byte units
  order_bwd,
  slot_slice,
  relu,
  relu_mask,
  iorder,
  iorder_bwd_comb,
  iorder_bwd_weight,
  gate_dl,
  to_act,
  from_act
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual Elem act() const = 0;  // the activation type
  virtual void gemm(const Gemm& g) = 0;
  virtual void zero(void* p, std::uint64_t bytes) = 0;
  virtual void launch(Body b, I n, const LaunchArgs& a) = 0;
};

// Runs every body and GEMM with plain loops on host memory (fp32 only).
class HostOps final : public DeviceOps {
 public:
  Elem act() const override { return Elem::f32; }
  void gemm(const Gemm& g) override;
  void zero(void* p, std::uint64_t bytes) override;
  void launch(Body b, I n, const LaunchArgs& a) override;
};

// Calls `fn(body)` with the body object of `b` for element type T: the one
// switch both implementations share.
template <class T, class Fn>
void with_body(Body b, const LaunchArgs& a, Fn&& fn) {
  switch (b) {
    case Body::softmax_topk:
      return fn(SoftmaxTopk<T>{std::get<SoftmaxTopkArgs>(a)});
    case Body::slot_count:
      return fn(SlotCount<T>{std::get<SlotsArgs>(a)});
    case Body::slot_scan:
      return fn(SlotScan<T>{std::get<SlotsArgs>(a)});
    case Body::slot_assign:
      return fn(SlotAssign<T>{std::get<SlotsArgs>(a)});
    case Body::order:
      return fn(Order<T>{std::get<OrderArgs>(a)});
    case Body::order_vec:
      return fn(Order<Vec16>{std::get<OrderArgs>(a)});
    case Body::order_bwd:
      return fn(OrderBwd<T>{std::get<OrderBwdArgs>(a)});
    case Body::slot_slice:
      return fn(SlotSlice<T>{std::get<SlotSliceArgs>(a)});
    case Body::relu:
      return fn(Relu<T>{std::get<ReluArgs>(a)});
    case Body::relu_mask:
      return fn(ReluMask<T>{std::get<ReluMaskArgs>(a)});
    case Body::iorder:
      return fn(IOrder<T>{std::get<IOrderArgs>(a)});
    case Body::iorder_bwd_comb:
      return fn(IOrderBwdComb<T>{std::get<IOrderBwdArgs>(a)});
    case Body::iorder_bwd_weight:
      return fn(IOrderBwdWeight<T>{std::get<IOrderBwdArgs>(a)});
    case Body::gate_dl:
      return fn(GateDl<T>{std::get<GateDlArgs>(a)});
    case Body::to_act:
      return fn(ToAct<T>{std::get<CastArgs>(a)});
    case Body::from_act:
      return fn(FromAct<T>{std::get<CastArgs>(a)});
  }
}

}  // namespace parmsim::exec::dev
