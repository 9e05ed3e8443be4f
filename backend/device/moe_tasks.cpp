#include "backend/device/moe_tasks.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <variant>

#include "sim/core/error.hpp"

namespace parmsim::exec::dev {

int elem_bytes(Elem e) {
  return e == Elem::f32 ? 4 : 2;
}

Elem elem_of(DType d) {
  switch (d) {
    case DType::fp16:
      return Elem::f16;
    case DType::bf16:
      return Elem::bf16;
    case DType::fp32:
      break;
    case DType::fp8:  // check_executable refuses fp8 layers before any graph is built
      throw InternalError("the device executor has no fp8 kernels");
  }
  return Elem::f32;
}

ColMajorGemm to_col_major(const Gemm& g) {
  // Row-major X (r x c, row length ld) is column-major X^T with the same ld, so
  // D = op(A) op(B) is D^T = op(B)^T op(A)^T: swap the operands and keep each
  // one's transpose flag.
  return {g.tb, g.ta, g.c, g.r, g.k, g.B, g.ldb, g.sb, g.A, g.lda, g.sa, g.D, g.ldd, g.sd};
}

namespace {

// Choices per chunk of the capacity passes (kernel_bodies.hpp, SlotsArgs).
constexpr I kSlotChunk = 64;
I slot_chunks(I choices) {
  return (choices + kSlotChunk - 1) / kSlotChunk;
}

struct Ctx {
  const Task& t;
  DeviceOps& ops;
  const BufferLookup& lookup;

  BufRef get(const std::string& name, std::uint64_t need, bool metadata) const {
    BufRef b = lookup(name);
    const Elem want = metadata ? Elem::f32 : ops.act();
    if (b.elem != want)
      throw UserError(fmt::format("task '{}': buffer '{}' holds {}-byte elements, the kernel needs {}-byte ones",
                                  t.name, name, elem_bytes(b.elem), elem_bytes(want)));
    if (b.elems < need)
      throw UserError(
          fmt::format("task '{}': buffer '{}' has {} elements, the kernel needs {}", t.name, name, b.elems, need));
    return b;
  }
  BufRef in(std::size_t i, std::uint64_t need, bool metadata = false) const {
    return get(t.inputs.at(i), need, metadata);
  }
  BufRef out(std::size_t i, std::uint64_t need, bool metadata = false) const {
    return get(t.outputs.at(i), need, metadata);
  }
  const char* at(const BufRef& b, I elems) const { return static_cast<const char*>(b.p) + elems * elem_bytes(b.elem); }
  char* at_mut(const BufRef& b, I elems) const { return static_cast<char*>(b.p) + elems * elem_bytes(b.elem); }
  void zero(const BufRef& b, std::uint64_t elems) const { ops.zero(b.p, elems * elem_bytes(b.elem)); }
};

void gate(const Ctx& c, const MoeGateArgs& a, void* s0, void* s1) {
  const I begin = a.begin, count = a.count, M = a.M, E = a.E, k = a.k, C = a.C;
  const BufRef x = c.in(0, (begin + count) * M), wg = c.in(1, M * E);
  const BufRef probs = c.out(0, count * E, true), route = c.out(1, count * k * 3, true);
  auto* logits = static_cast<float*>(s0);
  auto* top = static_cast<int*>(s1);
  // logits [count, E] = x rows [count, M] . Wg [M, E]
  Gemm g;
  g.r = count, g.c = E, g.k = M;
  g.A = c.at(x, begin * M), g.lda = M;
  g.B = wg.p, g.ldb = E;
  g.D = logits, g.ldd = E;
  g.ab = c.ops.act(), g.d = Elem::f32;
  c.ops.gemm(g);
  c.ops.launch(Body::softmax_topk, count, SoftmaxTopkArgs{logits, static_cast<float*>(probs.p), top, E, k});
  const I chunks = slot_chunks(count * k);
  const SlotsArgs sa{top,
                     static_cast<const float*>(probs.p),
                     static_cast<float*>(route.p),
                     top + count * k,
                     count,
                     E,
                     k,
                     C,
                     kSlotChunk,
                     chunks};
  c.ops.launch(Body::slot_count, E * chunks, sa);
  c.ops.launch(Body::slot_scan, E, sa);
  c.ops.launch(Body::slot_assign, E * chunks, sa);
}

void order(const Ctx& c, const MoeOrderArgs& a) {
  const I begin = a.begin, count = a.count, M = a.M, E = a.E, k = a.k, C = a.C;
  const BufRef x = c.in(0, (begin + count) * M), route = c.in(1, count * k * 3, true);
  const BufRef disp = c.out(0, E * C * M);
  c.zero(disp, E * C * M);
  const I row_bytes = M * elem_bytes(c.ops.act());
  const bool aligned =
      reinterpret_cast<std::uintptr_t>(x.p) % 16 == 0 && reinterpret_cast<std::uintptr_t>(disp.p) % 16 == 0;
  const I units = row_bytes % 16 == 0 && aligned ? row_bytes / 16 : M;
  c.ops.launch(units == M ? Body::order : Body::order_vec, count * k * units,
               OrderArgs{x.p, static_cast<const float*>(route.p), disp.p, begin, count, units, k, C});
}

void order_bwd(const Ctx& c, const MoeOrderBwdArgs& a) {
  const I count = a.count, M = a.M, E = a.E, k = a.k;
  const bool sliced = a.layout == SlotLayout::sliced;
  const BufRef dd = c.in(0, 0), route = c.in(1, count * k * 3, true);
  const BufRef dx = c.out(0, count * M);
  c.ops.launch(Body::order_bwd, count * M,
               OrderBwdArgs{dd.p, static_cast<const float*>(route.p), dx.p, M, E, k, sliced ? a.Tl : a.C,
                            static_cast<I>(a.layout)});
}

void slot_slice(const Ctx& c, const MoeSlotSliceArgs& a) {
  const I E = a.E, C = a.C, Tl = a.Tl, M = a.M, mb = a.member;
  const BufRef src = c.in(0, E * C * M), dst = c.out(0, E * Tl * M);
  c.ops.launch(Body::slot_slice, E * Tl * M, SlotSliceArgs{src.p, dst.p, C, Tl, M, mb});
}

// One GEMM per source block x, batched over the local experts.
Gemm expert_gemm(Elem act, bool ta, bool tb, I r, I cc, I k, const void* A, I lda, I sa, const void* B, I ldb, I sb,
                 void* D, I ldd, I sd, I batch, float beta) {
  Gemm g;
  g.ta = ta, g.tb = tb, g.r = r, g.c = cc, g.k = k;
  g.A = A, g.lda = lda, g.sa = sa, g.B = B, g.ldb = ldb, g.sb = sb, g.D = D, g.ldd = ldd, g.sd = sd;
  g.batch = batch, g.beta = beta, g.ab = act, g.d = act;
  return g;
}

// in [X, El, C, M]; W1 [El, M, h]; W2 [El, h, M].
void experts(const Ctx& c, const MoeExpertsArgs& args, void* act_buf) {
  const I X = args.X, El = args.E_local, C = args.C, M = args.M, h = args.h;
  const BufRef x = c.in(0, X * El * C * M), w1 = c.in(1, El * M * h), w2 = c.in(2, El * h * M);
  const BufRef y = c.out(0, X * El * C * M), h1 = c.out(1, X * El * C * h);
  const Elem a = c.ops.act();
  for (I xi = 0; xi < X; ++xi) {
    const I row = xi * El * C;
    // h1[e] (C x h) = in[e] (C x M) . W1[e] (M x h)
    c.ops.gemm(expert_gemm(a, false, false, C, h, M, c.at(x, row * M), M, C * M, w1.p, h, M * h, c.at_mut(h1, row * h),
                           h, C * h, El, 0));
  }
  c.ops.launch(Body::relu, X * El * C * h, ReluArgs{h1.p, act_buf});
  const BufRef act{act_buf, a, static_cast<std::uint64_t>(X * El * C * h)};
  for (I xi = 0; xi < X; ++xi) {
    const I row = xi * El * C;
    // y[e] (C x M) = relu(h1[e]) (C x h) . W2[e] (h x M)
    c.ops.gemm(expert_gemm(a, false, false, C, M, h, c.at(act, row * h), h, C * h, w2.p, M, h * M, c.at_mut(y, row * M),
                           M, C * M, El, 0));
  }
}

// inputs: dy, x, h1, W1, W2; outputs: dx, dW1, dW2.
void experts_bwd(const Ctx& c, const MoeExpertsBwdArgs& args, void* act_buf, void* dh_buf) {
  const I X = args.X, El = args.E_local, C = args.C, M = args.M, h = args.h;
  const I n = X * El * C;
  const BufRef dy = c.in(0, n * M), x = c.in(1, n * M), h1 = c.in(2, n * h), w1 = c.in(3, El * M * h),
               w2 = c.in(4, El * h * M);
  const BufRef dx = c.out(0, n * M), dw1 = c.out(1, El * M * h), dw2 = c.out(2, El * h * M);
  const Elem a = c.ops.act();
  const BufRef act{act_buf, a, static_cast<std::uint64_t>(n * h)}, dh{dh_buf, a, static_cast<std::uint64_t>(n * h)};
  c.ops.launch(Body::relu, n * h, ReluArgs{h1.p, act_buf});
  for (I xi = 0; xi < X; ++xi) {
    const I row = xi * El * C;
    // dact[e] (C x h) = dy[e] (C x M) . W2[e]^T
    c.ops.gemm(expert_gemm(a, false, true, C, h, M, c.at(dy, row * M), M, C * M, w2.p, M, h * M, c.at_mut(dh, row * h),
                           h, C * h, El, 0));
  }
  c.ops.launch(Body::relu_mask, n * h, ReluMaskArgs{dh_buf, h1.p});
  for (I xi = 0; xi < X; ++xi) {
    const I row = xi * El * C;
    const float beta = xi == 0 ? 0.0f : 1.0f;  // weight gradients sum over the source blocks
    // dW2[e] (h x M) += act[e]^T . dy[e]
    c.ops.gemm(expert_gemm(a, true, false, h, M, C, c.at(act, row * h), h, C * h, c.at(dy, row * M), M, C * M, dw2.p, M,
                           h * M, El, beta));
    // dx[e] (C x M) = dh[e] (C x h) . W1[e]^T
    c.ops.gemm(expert_gemm(a, false, true, C, M, h, c.at(dh, row * h), h, C * h, w1.p, h, M * h, c.at_mut(dx, row * M),
                           M, C * M, El, 0));
    // dW1[e] (M x h) += x[e]^T . dh[e]
    c.ops.gemm(expert_gemm(a, true, false, M, h, C, c.at(x, row * M), M, C * M, c.at(dh, row * h), h, C * h, dw1.p, h,
                           M * h, El, beta));
  }
  if (X == 0) c.zero(dw1, El * M * h), c.zero(dw2, El * h * M);
}

template <class A>  // MoeIOrderArgs or MoeIOrderBwdArgs
IOrderArgs iorder_args(const A& a, const BufRef& comb, const BufRef& route, void* out) {
  return {comb.p,
          static_cast<const float*>(route.p),
          out,
          a.M,
          a.E,
          a.k,
          a.C,
          static_cast<I>(a.layout),
          std::max<I>(1, a.per)};
}

void iorder(const Ctx& c, const MoeIOrderArgs& a) {
  const I count = a.count, M = a.M, k = a.k;
  const BufRef comb = c.in(0, 0), route = c.in(1, count * k * 3, true), out = c.out(0, count * M);
  c.ops.launch(Body::iorder, count * M, iorder_args(a, comb, route, out.p));
}

void iorder_bwd(const Ctx& c, const MoeIOrderBwdArgs& a) {
  const I begin = a.begin, count = a.count, M = a.M, k = a.k;
  const BufRef dout = c.in(0, (begin + count) * M), comb = c.in(1, 0), route = c.in(2, count * k * 3, true);
  const BufRef dcomb = c.out(0, 0), dw = c.out(1, count * k, true);
  if (dcomb.elems < comb.elems)
    throw UserError(fmt::format("task '{}': '{}' is smaller than '{}'", c.t.name, c.t.outputs[0], c.t.inputs[1]));
  const IOrderArgs ia = iorder_args(a, comb, route, dcomb.p);
  const IOrderBwdArgs ba{dout.p, comb.p, ia.route,  dcomb.p, static_cast<float*>(dw.p), begin, M, ia.E,
                         k,      ia.C,   ia.layout, ia.per};
  c.zero(dcomb, dcomb.elems);
  c.ops.launch(Body::iorder_bwd_comb, count * k * M, ba);
  c.ops.launch(Body::iorder_bwd_weight, count * k, ba);
}

// Inputs dw, probs, route, x, Wg; outputs dWg, dx (accumulated into: Order's backward wrote it).
void gate_bwd(const Ctx& c, const MoeGateBwdArgs& args, void* dl) {
  const I begin = args.begin, count = args.count, M = args.M, E = args.E, k = args.k, dw_off = args.dw_offset;
  const BufRef dw = c.in(0, (dw_off + count) * k, true), probs = c.in(1, count * E, true),
               route = c.in(2, count * k * 3, true), x = c.in(3, (begin + count) * M), wg = c.in(4, M * E);
  const BufRef dwg = c.out(0, M * E), dx = c.out(1, count * M);
  c.ops.launch(Body::gate_dl, count,
               GateDlArgs{static_cast<const float*>(dw.p), static_cast<const float*>(probs.p),
                          static_cast<const float*>(route.p), dl, E, k, dw_off});
  const Elem a = c.ops.act();
  // dWg (M x E) = x rows^T . dl
  c.ops.gemm(expert_gemm(a, true, false, M, E, count, c.at(x, begin * M), M, 0, dl, E, 0, dwg.p, E, 0, 1, 0));
  // dx (count x M) += dl . Wg^T
  c.ops.gemm(expert_gemm(a, false, true, count, M, E, dl, E, 0, wg.p, E, 0, dx.p, M, 0, 1, 1));
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

std::array<std::uint64_t, 2> scratch_bytes(const Task& t, Elem act) {
  using u64 = std::uint64_t;
  const u64 ab = static_cast<u64>(elem_bytes(act));
  const auto n = [](I v) { return static_cast<u64>(v); };
  return std::visit(
      Overloaded{
          // fp32 logits; top-k experts (int) then the per-(expert, chunk) counts.
          [&](const MoeGateArgs& a) -> std::array<u64, 2> {
            return {n(a.count) * n(a.E) * 4, (n(a.count) * n(a.k) + n(a.E) * n(slot_chunks(a.count * a.k))) * 4};
          },
          [&](const MoeExpertsArgs& a) -> std::array<u64, 2> {
            return {n(a.X) * n(a.E_local) * n(a.C) * n(a.h) * ab, 0};
          },
          [&](const MoeExpertsBwdArgs& a) -> std::array<u64, 2> {
            const u64 hb = n(a.X) * n(a.E_local) * n(a.C) * n(a.h) * ab;
            return {hb, hb};
          },
          [&](const MoeGateBwdArgs& a) -> std::array<u64, 2> {
            return {n(a.count) * n(a.E) * ab, 0};
          },
          // The others need none.
          [](const auto&) -> std::array<u64, 2> {
            return {0, 0};
          },
      },
      t.compute().args);
}

void run_task(const Task& t, DeviceOps& ops, const BufferLookup& buf, void* s0, void* s1) {
  const Ctx c{t, ops, buf};
  std::visit(Overloaded{
                 [&](std::monostate) {
                   throw InternalError(fmt::format("task '{}': run_task on a task without a kernel", t.name));
                 },
                 [&](const MoeGateArgs& a) { gate(c, a, s0, s1); },
                 [&](const MoeOrderArgs& a) { order(c, a); },
                 [&](const MoeOrderBwdArgs& a) { order_bwd(c, a); },
                 [&](const MoeSlotSliceArgs& a) { slot_slice(c, a); },
                 [&](const MoeExpertsArgs& a) { experts(c, a, s0); },
                 [&](const MoeExpertsBwdArgs& a) { experts_bwd(c, a, s0, s1); },
                 [&](const MoeIOrderArgs& a) { iorder(c, a); },
                 [&](const MoeIOrderBwdArgs& a) { iorder_bwd(c, a); },
                 [&](const MoeGateBwdArgs& a) { gate_bwd(c, a, s0); },
             },
             t.compute().args);
}

// ---------------------------------------------------------------- host emulation

void HostOps::gemm(const Gemm& g) {
  if (g.ab != Elem::f32 || g.d != Elem::f32) throw UserError("host device emulation: fp32 only");
  for (I b = 0; b < g.batch; ++b) {
    const float* A = static_cast<const float*>(g.A) + b * g.sa;
    const float* B = static_cast<const float*>(g.B) + b * g.sb;
    float* D = static_cast<float*>(g.D) + b * g.sd;
    for (I i = 0; i < g.r; ++i)
      for (I j = 0; j < g.c; ++j) {
        float s = 0;
        for (I q = 0; q < g.k; ++q) {
          const float av = g.ta ? A[q * g.lda + i] : A[i * g.lda + q];
          const float bv = g.tb ? B[j * g.ldb + q] : B[q * g.ldb + j];
          s += av * bv;
        }
        float& d = D[i * g.ldd + j];
        d = g.alpha * s + (g.beta != 0 ? g.beta * d : 0.0f);
      }
  }
}

void HostOps::zero(void* p, std::uint64_t bytes) {
  std::memset(p, 0, bytes);
}

void HostOps::launch(Body b, I n, const LaunchArgs& a) {
  with_body<float>(b, a, [n](const auto& body) {
    for (I i = 0; i < n; ++i) body(i);
  });
}

}  // namespace parmsim::exec::dev
