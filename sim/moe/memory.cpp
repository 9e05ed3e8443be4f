// Peak device memory of one MoE layer (docs/memory.md). Line numbers are
// DeepSpeed deepspeed/moe/sharded_moe.py at v0.14.4 (d254d75e) unless noted;
// Parm's SAA kernel is Fragile-azalea/Parm@5e0bc314
// test_overlap_alltoall_and_allgather/src/custom_kernel.cpp.
#include "sim/moe/memory.hpp"

#include <array>
#include <limits>

#include "sim/core/error.hpp"

namespace parmsim::moe {

namespace {

using u128 = unsigned __int128;

// What one forward op allocates and keeps, in bytes (docs/memory.md, "Per op").
struct OpMem {
  u128 out = 0;          // its new output buffer (the next op's input)
  bool view = false;     // no new buffer: the output is (a view of) the input
  bool keep_in = false;  // its input is saved for backward (autograd keeps it)
  u128 saved = 0;        // tensors it makes and autograd keeps until its backward
  u128 fwd_only = 0;     // tensors it makes that live until the layer's forward returns
  u128 temp = 0;         // scratch alive during the op only
  u128 bwd_temp = 0;     // scratch alive during its backward only
  u128 pending = 0;      // a gradient its backward makes that lives until the gate's backward
  bool gate = false;
};

u128 group_size(GroupKind g, const Dims& d) {
  switch (g) {
    case GroupKind::ep:
      return static_cast<u128>(d.n_ep);
    case GroupKind::world:  // the fused collective's block of G*N_EP ranks
      return static_cast<u128>(d.G) * static_cast<u128>(d.n_ep);
    case GroupKind::dense_dp:
      return static_cast<u128>(d.P / d.G);
    case GroupKind::expert_dp:
      return static_cast<u128>(d.dp);
    case GroupKind::mp:
    case GroupKind::esp:
      break;
  }
  return static_cast<u128>(d.G);
}

// `in` is the logical size of the op's input buffer; `wire`: an fp8 layer's collective that
// moves fp8 rows (fp8_wire), whose output is that size.
OpMem describe(const MoeOp& o, const LayerSpec& s, const Dims& d, u128 in, bool wire) {
  const u128 b = static_cast<u128>(d.dtype_bytes), M = static_cast<u128>(s.M), E = static_cast<u128>(s.E);
  const u128 t = static_cast<u128>(o.tokens), n = static_cast<u128>(o.elems), G = static_cast<u128>(d.G);
  const u128 h = static_cast<u128>(s.H / d.G);
  const bool lean = lean_like(s.ds_moe), einsum = s.dispatch == Dispatch::einsum;
  OpMem m;
  switch (o.kind) {
    case MoeStep::gate: {
      // The gate reads the tokens and leaves them as they are; it makes the routing.
      m.view = true;
      m.gate = true;
      const u128 C = static_cast<u128>(o.tokens == d.S ? d.T_base : d.T_parm);
      const u128 sec = t * E * C;
      if (s.ds_moe == DsMoe::mcore) {
        // Megatron-Core's router keeps [t, E] tensors, no [t, E, C] ones: the fp32 probabilities
        // and the bool routing map (docs/moe-costs.md, "Megatron-Core's MoELayer").
        m.saved = t * E * (4 + 1);
        m.bwd_temp = t * M * b;
        break;
      }
      if (lean) {
        // parmsim's idealised gate: combine weights in the layer dtype, the bool mask.
        m.saved = sec * b;
        m.fwd_only = sec;
        m.bwd_temp = t * M * b;
        break;
      }
      // input.float() (L433): a new fp32 copy unless the input is fp32 already
      // (then .float() returns it), saved by the gate GEMM (L437) for its weight gradient.
      if (b != 4) m.saved = t * M * 4;
      // combine_weights, fp32 [t, E, C] (top-2: combine1_sec + combine2_sec, L364-366;
      // top-1: one einsum, L281): a local of MOELayer.forward (L530) until it returns, and
      // saved by the combine einsum (L577) when type_as(input) is itself (an fp32 layer);
      // otherwise its cast is what is saved (counted at I-Order) and it dies with the forward.
      if (b == 4)
        m.saved += sec * 4;
      else
        m.fwd_only += sec * 4;
      // dispatch_mask = combine_weights.bool() (L367, L283): 1 byte per element, a local
      // of MOELayer.forward until it returns.
      m.fwd_only += sec;
      // Top-2 (k > 1): combine1_sec and combine2_sec (L364-365) are alive beside their sum
      // while the mask is made (L366-367); freed when top2gating returns (an add saves nothing).
      // Wider k is read as top2gating generalised: k such tensors.
      if (s.k > 1) m.temp = static_cast<u128>(s.k) * sec * 4;
      // Backward: the fp32 gradient of input_fp32 and its cast back to the layer dtype.
      m.bwd_temp = t * M * 4 + (b != 4 ? t * M * b : 0);
      break;
    }
    case MoeStep::order:
      m.out = n * b;
      m.keep_in = einsum;  // the einsum keeps the tokens for the mask's side (they are the layer input)
      // dispatch_mask.type_as(input) (L531): [t, E, C] in the layer dtype, saved by the einsum
      // for the tokens' gradient. C = elems / (E*M), so t*E*C = t*elems/M.
      if (einsum) m.saved = t * n / M * b;
      break;
    case MoeStep::slot_slice:
      m.out = n * b;
      break;
    case MoeStep::split:
    case MoeStep::mp_gather_free:
    case MoeStep::ar:  // NCCL AllReduce in place
      m.view = true;
      break;
    case MoeStep::kernel:
      // The AllGather dispatcher's permute and unpermute (schedule_ops.cpp) give
      // their output's size: a new tensor. Others (dense parts of whole models)
      // are not part of a layer's op list.
      if (n > 0)
        m.out = n * b;
      else
        m.view = true;
      break;
    case MoeStep::a2a:
      // _AllToAll (L545, L559): torch all_to_all_single into a new tensor of the input's size.
      m.out = wire ? static_cast<u128>(wire_bytes(d, static_cast<std::uint64_t>(n), true)) : n * b;
      break;
    case MoeStep::ag:
      // nccl-tests convention: elems is the gathered size.
      m.out = wire ? static_cast<u128>(wire_bytes(d, static_cast<std::uint64_t>(n), true)) : n * b;
      break;
    case MoeStep::rs:
      m.out = n * b / group_size(o.group, d);
      break;
    case MoeStep::rs_then:
      // ReduceScatter over ESP into elems/G, then an AlltoAll of that (out elems/G) or the
      // SAA (AlltoAll + MP-AllGather, out elems). The ReduceScatter's output is the scratch.
      m.temp = n * b / G;
      m.out = o.then == MoeStep::saa ? n * b : n * b / G;
      break;
    case MoeStep::saa:
      // The released SAA writes the AlltoAll's result straight into the gathered output
      // (output.numel() = mp_size * input.numel(), L157; ncclRecv into output, L174-177):
      // no buffer between.
      m.out = wire ? G * static_cast<u128>(wire_bytes(d, static_cast<std::uint64_t>(n), true)) : G * n * b;
      break;
    case MoeStep::experts: {
      // Experts.forward (deepspeed/moe/experts.py@d254d75e L28-38): inputs.chunk (views,
      // which keep the whole input alive, saved by each fc1), per expert fc1 -> activation
      // -> fc2, then torch.cat. Saved per expert: fc1's output (for the activation's
      // gradient) and the activation's output (for fc2's weight gradient), [rows, H/G] each.
      const u128 R = n / M;
      const u128 reps = lean ? 1 : static_cast<u128>(d.E_local);
      // Gated (glu): fc1's output is [rows, 2H/G], saved whole by the SwiGLU for its backward
      // (SwiGLUFunction: ctx.save_for_backward(input), megatron/core/fusions/fused_bias_swiglu.py
      // @d98e8a64 L235), beside the activation's [rows, H/G] output that fc2 saves.
      const u128 w = s.glu ? 2 : 1;
      m.keep_in = true;
      m.saved = (w + 1) * R * h * b;
      // fp8: fc2 keeps its input as the fp8 copy its weight gradient reads (1 byte an element;
      // fc1's output, the SwiGLU's input, stays bf16 as Megatron-Core saves it). DeepSeek-V3
      // instead caches the SwiGLU's input in fp8 and recomputes its output (arXiv 2412.19437
      // section 3.3.3, "Low-Precision Activation"): not modelled.
      if (d.fp8) m.saved = w * R * h * b + R * h;
      m.out = R * M * b;
      // torch.cat copies: the experts' outputs and the concatenation are alive together.
      if (!lean) m.temp = R * M * b;
      if (s.ds_moe == DsMoe::mcore) {
        // Megatron-Core's probabilities' multiply (experts.py L750-752) saves the activation's
        // output for its backward, and makes an fp32 product and its cast back (transient); with
        // more than one local expert behind the AlltoAll dispatcher the chunk sorts copy the rows
        // before and after the experts (layer_kernels.cpp).
        m.saved += R * h * b;
        m.temp = R * h * (4 + b);
        if (d.E_local > 1 && s.token_dispatcher == TokenDispatcher::alltoall) m.temp += R * M * b;
      }
      // Backward, one expert at a time: the gradients of its activation output and fc1 output.
      m.bwd_temp = (w + 1) * (R / reps) * h * b;
      break;
    }
    case MoeStep::shared: {
      // The shared experts on the layer's input (the rank's S tokens, kept: it is the input):
      // fc1's output and the activation's, saved as the routed experts' are; their output
      // [S, M] lives until the layer adds it to the combined tokens (moe_layer.py@d98e8a64
      // L594-595), the AllReduce after it in place. The routed path's buffer is untouched.
      const u128 hs = static_cast<u128>(s.shared_H / d.G), w = s.glu ? 2 : 1;
      m.view = true;
      m.saved = (w + 1) * t * hs * b;
      // fp8, as the routed experts: fc2's input kept as its fp8 copy, and fc1's input, the layer's
      // input, as its fp8 copy too (the bf16 input is held anyway).
      if (d.fp8) m.saved = w * t * hs * b + t * hs + t * M;
      m.fwd_only = t * M * b;
      // Backward: the gradients of fc1's and the activation's outputs, and the input's
      // gradient it adds to the layer's.
      m.bwd_temp = (w + 1) * t * hs * b + t * M * b;
      break;
    }
    case MoeStep::iorder: {
      m.out = t * M * b;
      m.keep_in = true;  // the expert output: the combine weights' gradient needs it
      if (!einsum) break;
      const u128 sec = t * n / (static_cast<u128>(o.blocks) * M);  // t*E*C, C per block
      // combine_weights.type_as(input) (L577), saved by the einsum: a new tensor unless the
      // layer is fp32 and these are the gate's own weights (one block on the gate's tokens).
      const bool own = b == 4 && o.blocks == 1;
      if (!own) m.saved = sec * b;
      // Backward: the combine weights' gradient, cast to fp32, waits for the gate's
      // backward (autograd runs the gate's nodes last: they were made first).
      m.pending = sec * 4;
      if (b != 4) m.bwd_temp = sec * b;
      break;
    }
  }
  (void)in;
  return m;
}

std::uint64_t sat(u128 v) {
  return v > std::numeric_limits<std::uint64_t>::max() ? std::numeric_limits<std::uint64_t>::max()
                                                        : static_cast<std::uint64_t>(v);
}

}  // namespace

MemoryPeak peak_memory(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d) {
  constexpr std::size_t kMaxOps = 64;  // a layer's forward list has about a dozen
  if (fwd.size() > kMaxOps) throw InternalError("peak_memory: forward op list longer than 64");
  const u128 b = static_cast<u128>(d.dtype_bytes), M = static_cast<u128>(s.M);
  // Persistent: E_local experts, each fc1 [M, H/G] and fc2 [H/G, M] (sharded over ESP:
  // layer_kernels.cpp uses h = H/G), and the gate's Linear(M, E) (L407), all in the layer
  // dtype; their gradients the same again, in the backward pass. Gated (glu), fc1 is
  // [M, 2H/G] (megatron/core/transformer/mlp.py@d98e8a64 L205-206: ffn_hidden_size *= 2):
  // three matrices of [M, H/G]. The shared experts' weights likewise, of shared_H/G.
  const u128 mats = s.glu ? 3 : 2;
  const u128 expert_elems = static_cast<u128>(d.E_local) * mats * M * static_cast<u128>(s.H / d.G) +
                            mats * M * static_cast<u128>(s.shared_H / d.G);
  u128 weights = expert_elems * b + M * static_cast<u128>(s.E) * b, grads = weights;
  if (d.fp8) {
    // fp8: the parameters stay bf16 (b = 2); the experts' GEMMs read fp8 copies of their weights,
    // one as stored and one transposed for the data gradient (Hopper's fp8 GEMMs take one layout:
    // deepseek-ai/DeepGEMM@55ab91f7 README.md L97), 2 bytes an element, alive through the pass;
    // the weight gradients are fp32 (DeepSeek-V3 stores "master weights, weight gradients, and
    // optimizer states ... in higher precision", arXiv 2412.19437 section 3.3.1; the fp32 master
    // weights belong to the optimizer, not counted).
    grads = (expert_elems + M * static_cast<u128>(s.E)) * 4;
    weights += expert_elems * 2;
  }
  const u128 input = static_cast<u128>(d.S) * M * b;
  std::array<u128, kMaxOps> in_alloc{}, in_size{};
  std::array<bool, kMaxOps> wire{};  // fp8_wire of each op, as the simulator sends it
  {
    bool seen = false;
    for (std::size_t j = 0; j < fwd.size(); ++j) {
      if (fwd[j].kind == MoeStep::gate) seen = false;
      if (fwd[j].kind == MoeStep::experts) seen = true;
      wire[j] = fp8_wire(d, fwd[j].kind, fwd[j].data, seen);
    }
  }
  // Forward.
  u128 saved = 0, fwd_only = 0, cur = 0 /* allocated bytes of the current buffer: 0 = the input */,
       cur_size = input, peak_f = weights + input;
  for (std::size_t j = 0; j < fwd.size(); ++j) {
    const MoeOp& o = fwd[j];
    const OpMem m = describe(o, s, d, cur_size, wire[j]);
    in_alloc[j] = cur;
    in_size[j] = cur_size;
    const u128 live = weights + input + saved + fwd_only + cur + m.out + m.temp + m.saved + m.fwd_only;
    if (live > peak_f) peak_f = live;
    saved += m.saved + (m.keep_in ? cur : 0);
    fwd_only += m.fwd_only;
    if (o.kind == MoeStep::split) cur_size = cur_size / static_cast<u128>(d.G);
    if (!m.view) {
      cur = m.out;
      cur_size = m.out;
    }
  }
  // Backward: the same list in reverse. The layer's output gradient arrives; the
  // forward-only tensors and the output itself are gone; the weight gradients exist.
  u128 grad = cur_size, pending = 0, peak_b = 0;
  for (std::size_t r = fwd.size(); r-- > 0;) {
    const MoeOp& o = fwd[r];
    const OpMem m = describe(o, s, d, in_size[r], wire[r]);
    u128 grad_in = 0;  // a new buffer for the input's gradient
    if (o.kind == MoeStep::split) grad_in = in_size[r];  // its adjoint: an AllGather
    else if (!m.view) grad_in = in_size[r];
    const u128 live = weights + grads + input + saved + pending + grad + grad_in + m.bwd_temp + m.pending;
    if (live > peak_b) peak_b = live;
    saved -= m.saved + (m.keep_in ? in_alloc[r] : 0);
    pending += m.pending;
    if (m.gate) pending = 0;
    if (grad_in) grad = grad_in;
  }
  MemoryPeak p;
  p.weights = sat(weights);
  p.grads = sat(grads);
  p.input = sat(input);
  p.forward = sat(peak_f);
  p.backward = sat(peak_b);
  return p;
}

}  // namespace parmsim::moe
