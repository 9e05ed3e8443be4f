#include "sim/moe/layer_kernels.hpp"

#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"

#include <string>
#include <utility>

namespace parmsim::moe {

namespace {

using u64 = std::uint64_t;

// Kernels DeepSpeed-MoE's gate launches per forward call, counted from
// top1gating (sharded_moe.py v0.14.4 L181-285: softmax, argmax, one_hot as
// zeros + scatter, the expert-count sum, the l_aux means, RTS noise, its
// product and top-C selection, zeros + scatter of the kept tokens, the mask
// product, cumsum, the slot arithmetic, the gates' product, one_hot of the
// slots and its cast, the outer product and the bool mask): about 28. top2gating
// (L288-369) repeats the per-choice part: about 22 more per extra choice.
// Counted by us from the source; a profile of the real layer would pin it.
int gate_launches(std::int64_t k) {
  return 28 + 22 * static_cast<int>(k - 1);
}

// Bytes the gate's small kernels move: ~16 B per [S, E] element per kernel
// over [S, E] tensors (an fp32 or int64 read and a write), the slot one-hots
// ([S, C] int64 then fp32, per choice), and the [S, E, C] tensors: one fp32
// outer product per choice (their fp32 sum for top-2) and the bool mask
// (sharded_moe.py L280-283, L362-367).
u64 gate_bytes(u64 t, u64 E, u64 C, u64 k) {
  const u64 se = 16 * t * E * static_cast<u64>(gate_launches(static_cast<std::int64_t>(k)) - 6);
  const u64 sc = k * 12 * t * C;
  const u64 sec = t * E * C * (4 * k + (k > 1 ? 4 * k + 4 : 0) + 5);
  return se + sc + sec;
}

Kernel gemm(const char* name, u64 m, u64 n, u64 k, u64 batch, u64 b) {
  Kernel g;
  g.name = name;
  g.op = OpKind::gemm;
  g.flops = 2 * m * n * k * batch;
  g.bytes = (m * k + k * n + m * n) * batch * b;
  g.shape = {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
             static_cast<std::int64_t>(batch)};
  return g;
}

// An expert GEMM (routed or shared experts). In an fp8 layer it runs on the fp8 tensor cores
// (GpuProfile::sustained(fp8)): both inputs one byte an element (their scales, 1/128 and
// 1/16384 of it, left out), the output bf16, a weight gradient's fp32 (accumulated into the fp32
// main gradient: DeepSeek-V3 keeps "master weights, weight gradients, and optimizer states ...
// in higher precision", arXiv 2412.19437 section 3.3.1). Fprop, Dgrad and Wgrad all run in fp8
// (ibid., Figure 6; TransformerEngine's recipes quantize all three GEMMs' inputs). Elsewhere gemm().
Kernel xgemm(const char* name, u64 m, u64 n, u64 k, u64 batch, u64 b, bool fp8, u64 out_bytes = 2) {
  Kernel g = gemm(name, m, n, k, batch, b);
  if (fp8) {
    g.dtype = DType::fp8;
    g.bytes = (m * k + k * n) * batch + m * n * batch * out_bytes;
  }
  return g;
}

Kernel mem(const char* name, OpKind op, u64 bytes, int launches = 1) {
  Kernel k;
  k.name = name;
  k.op = op;
  k.bytes = bytes;
  k.launches = launches;
  return k;
}

// fp8 layers: the cast of a bf16 tensor of `elems` elements to fp8 for the experts' GEMMs: the
// fp8 data and, for the other GEMM that reads it (a weight gradient needs the operand
// transposed, and Hopper's fp8 GEMMs take one layout only: deepseek-ai/DeepGEMM@55ab91f7
// README.md L97, "it only supports the NT format"), its transposed copy: read 2 bytes an
// element, write 1 + 1. DeepSeek-V3 describes the same round trip: "activations during the
// forward pass are quantized into 1x128 FP8 tiles and stored. During the backward pass, the
// matrix needs to be read out, dequantized, transposed, re-quantized into 128x1 tiles, and
// stored in HBM" (arXiv 2412.19437 section 3.5.2). `fp8_elems`: a tensor already in fp8 (the
// dispatched rows) of which only the transposed copy is made: read 1, write 1. One kernel each:
// the casts fused with the activation or the dispatch are not modelled.
Kernel fp8_cast(const char* name, u64 elems, u64 fp8_elems) {
  Kernel k = mem(name, OpKind::elementwise, 4 * elems + 2 * fp8_elems);
  k.dtype = DType::bf16;
  return k;
}

// Elements the FFN activation moves per row, in units of the (sharded)
// intermediate width h. Ungated: reads h, writes h; backward reads the
// gradient and the saved input, writes h. Gated (SwiGLU, silu(a) * b over fc1's
// two halves: megatron/core/fusions/fused_bias_swiglu.py@d98e8a64 L16-26):
// reads 2h, writes h; backward (swiglu_back, L80-95) reads the gradient (h)
// and both saved halves (2h), writes both halves' gradients (2h).
u64 act_units(bool glu, bool backward) { return glu ? (backward ? 5 : 3) : (backward ? 3 : 2); }

// ds_moe=mcore: Megatron-Core's MoELayer (NVIDIA/Megatron-LM@cf39a4dd, megatron-core 0.16.0;
// TransformerEngine@5c2f2ff5, 2.12.0.dev0, its tree on the day the moe_perf baselines were
// added). Counted by us from the source; docs/moe-costs.md, "Megatron-Core's MoELayer".

// The router's small kernels, forward, each on [t, E] (t tokens, E experts): RandomSTE's
// clone and normal_ (moe_router_force_load_balancing; moe_utils.py L943), the fused top-k
// with score function (L562), the aux loss's fused scores (L643), routing_map.sum (router.py
// L277), the fused aux loss (moe_utils.py L103); then the AlltoAll dispatcher's preprocess
// (token_dispatcher.py L476-525): the tokens per expert, the input splits, and four
// reductions and a copy of the gathered counts. 12 launches (the aux-loss tracker's add,
// moe_utils.py L754, is skipped: the test builds its MoELayer without a layer number,
// tests/functional_tests/test_cases/common/moe_perf/__main__.py L298, and
// save_to_aux_losses_tracker returns at once, moe_utils.py L747-748); about 40 bytes per
// [t, E] element in all (fp32 logits read and written by the first five, the bool map and the
// sums' reads).
constexpr int kMcoreRouterLaunches = 12;
constexpr std::uint64_t kMcoreRouterBytesPerTE = 40;
// Backward: the fused aux loss's, aux scores' and top-k's backward, the sum of the two
// gradients of the logits, MoEAuxLossAutoScaler's ones_like * scale (moe_utils.py
// L206-208): 6 launches, about 24 bytes per [t, E] element.
constexpr int kMcoreRouterBwdLaunches = 6;
constexpr std::uint64_t kMcoreRouterBwdBytesPerTE = 24;

// The probabilities' multiply after the activation (experts.py L750-752): `act * probs` with
// probs fp32 [rows, 1] makes an fp32 [rows, h] tensor (reads b, writes 4 bytes an element),
// `.to(original_dtype)` casts it back (reads 4, writes b; no kernel when the layer is fp32).
// Returns {bytes per element, launches}.
std::pair<u64, int> probs_fwd(u64 b) { return b == 4 ? std::pair<u64, int>{8, 1} : std::pair<u64, int>{b + 4 + 4 + b, 2}; }
// Its autograd backward, in order: the cast's (the gradient to fp32: b + 4), MulBackward's
// gradient of the activation (grad * probs: 4 + 4) and its cast to the activation's dtype
// (4 + b), the gradient of the probabilities (grad * act: 4 + b + 4) and its sum over h (4).
// bf16: 6 + 8 + 6 + 10 + 4 = 34 bytes an element in 5 launches; fp32: 8 + 12 + 4 = 24 in 3.
std::pair<u64, int> probs_bwd(u64 b) {
  return b == 4 ? std::pair<u64, int>{24, 3} : std::pair<u64, int>{(b + 4) + 8 + (4 + b) + (4 + b + 4) + 4, 5};
}

// The capacity a gate over t tokens works with.
u64 gate_capacity(u64 t, const Dims& d) {
  return t == static_cast<u64>(d.S) ? static_cast<u64>(d.T_base) : static_cast<u64>(d.T_parm);
}

}  // namespace

Time kernel_time(const Kernel& k, DType layer_dtype, const GpuProfile& gpu, const Calibration* cal,
                 std::string_view kernel) {
  return with_launches(gpu,
                       compute_time(gpu, k.op, k.flops, k.bytes, k.dtype.value_or(layer_dtype), cal, kernel, k.dims()),
                       k.launches, k.host_wait);
}

std::int64_t expert_repeats(const LayerSpec& s, const Dims& d) {
  return lean_like(s.ds_moe) ? 1 : d.E_local;
}

std::int64_t expert_elems(const MoeOp& o, const LayerSpec& s, const Dims& d) {
  return o.elems / expert_repeats(s, d);
}



namespace {
template <class Out, class... K>
inline __attribute__((always_inline)) void emit(Out& out, const K&... k) {
  (out(k), ...);
}
}  // namespace

// Calls out(kernel) for each kernel of the op, in order, `backward` standing
// for o.backward: one body for kernels(), kernel_list() and kernels_seconds().
template <class Out>
inline __attribute__((always_inline)) void each_kernel_body(const MoeOp& o, bool backward, const LayerSpec& s,
                                                            const Dims& d, Out&& out) {
  const u64 b = static_cast<u64>(d.dtype_bytes);
  const bool q = d.fp8;
  const u64 M = s.M, E = s.E, t = o.tokens, h = s.H / d.G, k = s.k;
  const bool lean = lean_like(s.ds_moe), mcore = s.ds_moe == DsMoe::mcore;
  const bool einsum = s.dispatch == Dispatch::einsum;
  switch (o.kind) {
    case MoeStep::gate: {
      if (mcore) {
        // Megatron-Core's router: the gate GEMM on the bf16 input and weight with fp32 logits
        // (te_general_gemm(..., fp32), moe_utils.py L980-981), the router's small kernels, and
        // the host's wait for the tokens per expert before the AlltoAll
        // (self.d2h_event.synchronize(), token_dispatcher.py L864, at "before_ep_alltoall"
        // with EP > 1, L529): the host then issues the rest of the layer as the GPU runs it.
        const u64 TE = t * E;
        if (!backward) {
          Kernel g = gemm("gate_gemm", t, E, M, 1, b);
          g.bytes = (t * M + M * E) * b + TE * 4;
          if (b == 4) {
            // An fp32 layer's gate GEMM is TE's pure-fp32 GEMM, on TF32 tensor cores as the
            // backward's (below): two bf16 GEMMs of its shape with fp32 bytes.
            g = gemm("gate_gemm", t, E, M, 2, 4);
            g.bytes = (t * M + M * E) * 4 + TE * 4;
            g.dtype = DType::bf16;
          }
          Kernel router = mem("router", OpKind::topk, kMcoreRouterBytesPerTE * TE, kMcoreRouterLaunches);
          Kernel sync = mem("tokens_sync", OpKind::copy, 8 * E);
          sync.host_wait = Time::ns(kHostSyncNs);
          return emit(out, g, router, sync);
        }
        // Backward (RouterGatingLinearFunction.backward, moe_utils.py L1004-1011): fp32 data and
        // weight gradients by TE's GEMM, which runs pure-fp32 GEMMs on TF32 tensor cores
        // (transformer_engine/common/gemm/cublaslt_gemm.cu@5c2f2ff5 L447-451): each timed as two
        // bf16 GEMMs of its shape (TF32 at half the BF16 rate: H100 494.5 against 989 TFLOP/s,
        // sim/compute/gpu_profile.cpp) with fp32 bytes. Four casts: the weight and the input to
        // fp32 for the two GEMMs (L1006, L1009), the input's and the weight's gradients back to
        // bf16 (L1011-1012); last, the layer input's two gradients (through the router and
        // through the permute) summed.
        Kernel router = mem("router_bwd", OpKind::elementwise, kMcoreRouterBwdBytesPerTE * TE, kMcoreRouterBwdLaunches);
        router.dtype = DType::fp32;
        Kernel dg = gemm("gate_dgrad", t, M, E, 2, 4);
        dg.bytes /= 2;
        dg.dtype = DType::bf16;
        Kernel wg = gemm("gate_wgrad", M, E, t, 2, 4);
        wg.bytes /= 2;
        wg.dtype = DType::bf16;
        const Kernel sum = mem("input_grad_sum", OpKind::elementwise, 3 * t * M * b);
        if (b == 4) return emit(out, router, dg, wg, sum);  // fp32 layer: the casts are no-ops
        return emit(out, router, dg, mem("gate_cast_bwd", OpKind::elementwise, 2 * (t + E) * M * (b + 4), 4), wg, sum);
      }
      if (lean) {  // parmsim's earlier gate: one GEMM in the layer's dtype, one softmax/top-k
        // Backward: the data and weight gradients as one kernel of twice the
        // work, a batch of two GEMMs of the forward's shape (the tile model
        // times a GEMM by its shape: doubling only its FLOPs would not count).
        const u64 w = backward ? 2 : 1;
        return emit(out, gemm("gate_gemm", t, E, M, w, b), mem("softmax_topk", OpKind::topk, 2 * t * E * b));
      }
      // DeepSpeed-MoE: "Everything is in fp32 in this function": the input is
      // cast to fp32 (L433) and the logits are an fp32 GEMM (L437).
      const u64 C = gate_capacity(t, d);
      if (!backward) {
        Kernel cast = mem("gate_cast", OpKind::elementwise, t * M * (b + 4));
        Kernel g = gemm("gate_gemm", t, E, M, 1, 4);
        g.dtype = DType::fp32;
        Kernel gating = mem("gating", OpKind::topk, gate_bytes(t, E, C, k), gate_launches(s.k));
        gating.dtype = DType::fp32;
        // exp_counts.to('cpu') (L209, L369): the host waits for the gate's kernels.
        Kernel sync = mem("exp_counts_sync", OpKind::copy, 8 * E);
        sync.host_wait = Time::ns(kHostSyncNs);
        return emit(out, cast, g, gating, sync);
      }
      // Backward: through the outer products and softmax (autograd of the
      // elementwise chain, about half as many kernels), the gate GEMM's data and
      // weight gradients in fp32, and the cast back.
      Kernel gating = mem("gating_bwd", OpKind::elementwise, 8 * k * t * E * C + 12 * t * E, gate_launches(s.k) / 2);
      gating.dtype = DType::fp32;
      Kernel dg = gemm("gate_dgrad", t, M, E, 1, 4);
      dg.dtype = DType::fp32;
      Kernel wg = gemm("gate_wgrad", M, E, t, 1, 4);
      wg.dtype = DType::fp32;
      return emit(out, gating, dg, wg, mem("gate_cast_bwd", OpKind::elementwise, t * M * (b + 4)));
    }
    case MoeStep::order: {
      const u64 C = static_cast<u64>(o.elems) / (E * M);
      if (!einsum) return emit(out, mem("order", OpKind::order, (t * M + static_cast<u64>(o.elems)) * b));
      // einsum("sec,sm->ecm") (L531) over the dispatch mask cast to the input
      // dtype: [E*C, S] x [S, M]. Backward: the tokens' gradient [S, E*C] x [E*C, M].
      if (backward) return emit(out, gemm("dispatch_einsum_bwd", t, M, E * C, 1, b));
      return emit(out, mem("dispatch_mask_cast", OpKind::elementwise, t * E * C * (1 + b)),
              gemm("dispatch_einsum", E * C, M, t, 1, b));
    }
    case MoeStep::iorder: {
      const u64 blocks = static_cast<u64>(o.blocks), tb = t / blocks;
      const u64 C = static_cast<u64>(o.elems) / (blocks * E * M);
      if (!einsum) return emit(out, mem("iorder", OpKind::iorder, (t * M + static_cast<u64>(o.elems)) * b));
      // einsum("sec,ecm->sm") (L577) with the fp32 combine weights cast to the
      // input dtype: [S, E*C] x [E*C, M], per block. Backward: the expert
      // output's gradient [E*C, S] x [S, M] and the combine weights' [S, M] x [M, E*C].
      if (backward)
        return emit(out, gemm("combine_einsum_bwd_data", E * C, M, tb, blocks, b),
                gemm("combine_einsum_bwd_weights", tb, E * C, M, blocks, b));
      return emit(out, mem("combine_weights_cast", OpKind::elementwise, t * E * C * (4 + b)),
              gemm("combine_einsum", tb, M, E * C, blocks, b));
    }
    case MoeStep::experts: {
      // One local expert's rows; `lean`: all local experts as one batched GEMM.
      const u64 reps = static_cast<u64>(expert_repeats(s, d));
      const u64 batch = lean ? static_cast<u64>(d.E_local) : 1;
      const u64 rows = static_cast<u64>(o.elems) / M / reps / batch;
      // Gated (glu): fc1's output is 2h wide (the gate and up projections side by side), see act_units.
      const u64 h1 = s.glu ? 2 * h : h;
      Kernel act = mem("expert_act", OpKind::activation, act_units(s.glu, backward) * rows * h * b * batch);
      if (mcore) {
        // Megatron-Core: the probabilities' multiply after the activation, forward and backward
        // (probs_fwd, probs_bwd); in an fp8 layer TE's GroupedLinear quantizes the bf16 rows it
        // gets, rowwise and columnwise (grouped_linear.py@5c2f2ff5 L109-116, L146), and the
        // weights on every call, rowwise and columnwise when the input needs a gradient
        // (L117-128, L159-170: no cache without is_first_microbatch).
        //
        // With more than one local expert the AlltoAll's output, grouped by source rank, is
        // sorted by local expert before the experts (dispatch_postprocess: sort_chunks_by_idxs
        // of the rows and their fp32 probabilities, token_dispatcher.py L697-703) and back after
        // them (combine_preprocess, L730-737): TE's fused chunk sort, a copy of the rows each
        // (read and written), and in backward its adjoint, the same copy the other way. Each
        // local expert's GEMMs run on one of TE's 4 compute streams (multi_stream_cublas_gemm,
        // transformer_engine/common/gemm/cublaslt_gemm.cu@5c2f2ff5 L947-1000; 4 streams,
        // common/util/multi_stream.cpp L53): concurrent per-expert cuBLAS GEMMs, which lean's
        // batched GEMM stands for.
        const u64 n = rows * h * batch, R = rows * batch;
        const auto [pf, lf] = probs_fwd(b);
        const auto [pb, lb] = probs_bwd(b);
        Kernel probs = backward ? mem("expert_probs", OpKind::elementwise, pb * n, lb)
                                : mem("expert_probs", OpKind::elementwise, pf * n, lf);
        // No chunk sort with one local expert, nor behind the AllGather dispatcher, whose permute
        // orders the rows by local expert itself (token_dispatcher.py L287-293): a kernel of no
        // bytes and no launch, left out.
        const bool sorts = d.E_local > 1 && s.token_dispatcher == TokenDispatcher::alltoall;
        Kernel sort_in = mem("expert_sort_chunks", OpKind::order, sorts ? 2 * R * (M * b + 4) : 0, sorts ? 1 : 0);
        Kernel sort_out = mem("expert_unsort_chunks", OpKind::iorder, sorts ? 2 * R * M * b : 0, sorts ? 1 : 0);
        auto put = [&out](const Kernel& k) {
          if (k.launches > 0) out(k);
        };
        if (!q) {
          if (!backward)
            return emit(put, sort_in, gemm("expert_fc1", rows, h1, M, batch, b), act, probs,
                        gemm("expert_fc2", rows, M, h, batch, b), sort_out);
          return emit(put, sort_out, gemm("expert_fc2", rows, M, h, 2 * batch, b), probs, act,
                      gemm("expert_fc1", rows, h1, M, 2 * batch, b), sort_in);
        }
        if (!backward)
          return emit(put, sort_in, fp8_cast("expert_fp8_cast_in", rows * M * batch, 0),
                      fp8_cast("expert_fp8_cast_w", (M * h1 + h * M) * batch, 0),
                      xgemm("expert_fc1", rows, h1, M, batch, b, true), act, probs,
                      fp8_cast("expert_fp8_cast", rows * h * batch, 0), xgemm("expert_fc2", rows, M, h, batch, b, true),
                      sort_out);
        return emit(put, sort_out, fp8_cast("expert_fp8_cast_dout", rows * M * batch, 0),
                    xgemm("expert_fc2", rows, M, h, 2 * batch, b, true), probs, act,
                    fp8_cast("expert_fp8_cast_dact", rows * h1 * batch, 0),
                    xgemm("expert_fc1", rows, h1, M, 2 * batch, b, true), sort_in);
      }
      if (q) {
        // fp8 (fp8_cast): fc1's input arrives in fp8 (the dispatch); forward, its transposed copy
        // for fc1's weight gradient, and the activation's output cast to fc2's fp8 input and its
        // transpose; backward, the output gradient [rows, M] and the activation's input gradient
        // [rows, h1] each cast to fp8 and transposed for the data and weight gradients.
        if (!backward)
          return emit(out, xgemm("expert_fc1", rows, h1, M, batch, b, true), act,
                      fp8_cast("expert_fp8_cast", rows * h * batch, rows * M * batch),
                      xgemm("expert_fc2", rows, M, h, batch, b, true));
        Kernel dout = fp8_cast("expert_fp8_cast_dout", rows * M * batch, 0);
        Kernel dact = fp8_cast("expert_fp8_cast_dact", rows * h1 * batch, 0);
        if (lean)
          return emit(out, dout, xgemm("expert_fc2", rows, M, h, 2 * batch, b, true), act, dact,
                      xgemm("expert_fc1", rows, h1, M, 2 * batch, b, true));
        return emit(out, dout, xgemm("expert_fc2_dgrad", rows, h, M, 1, b, true),
                    xgemm("expert_fc2_wgrad", h, M, rows, 1, b, true, 4), act, dact,
                    xgemm("expert_fc1_dgrad", rows, M, h1, 1, b, true),
                    xgemm("expert_fc1_wgrad", M, h1, rows, 1, b, true, 4));
      }
      if (!backward)
        return emit(out, gemm("expert_fc1", rows, h1, M, batch, b), act, gemm("expert_fc2", rows, M, h, batch, b));
      if (lean) {  // parmsim's earlier backward: data and weight gradients as one batched kernel of twice the work
        return emit(out, gemm("expert_fc2", rows, M, h, 2 * batch, b), act, gemm("expert_fc1", rows, h1, M, 2 * batch, b));
      }
      return emit(out, gemm("expert_fc2_dgrad", rows, h, M, 1, b), gemm("expert_fc2_wgrad", h, M, rows, 1, b), act,
              gemm("expert_fc1_dgrad", rows, M, h1, 1, b), gemm("expert_fc1_wgrad", M, h1, rows, 1, b));
    }
    case MoeStep::shared: {
      // The shared experts on the rank's t = S tokens, a dense FFN sharded
      // over mp (hs = shared_H/G), gated with glu: the experts' kernels above
      // on one weight set, with the data and weight gradients in backward.
      const u64 hs = static_cast<u64>(s.shared_H) / d.G, hs1 = s.glu ? 2 * hs : hs;
      Kernel act = mem("shared_act", OpKind::activation, act_units(s.glu, backward) * t * hs * b);
      if (q) {
        // fp8: as the routed experts, with the layer's bf16 input cast too (rowwise and transposed).
        if (!backward)
          return emit(out, fp8_cast("shared_fp8_cast_in", t * M, 0), xgemm("shared_fc1", t, hs1, M, 1, b, true), act,
                      fp8_cast("shared_fp8_cast", t * hs, 0), xgemm("shared_fc2", t, M, hs, 1, b, true));
        return emit(out, fp8_cast("shared_fp8_cast_dout", t * M, 0), xgemm("shared_fc2_dgrad", t, hs, M, 1, b, true),
                    xgemm("shared_fc2_wgrad", hs, M, t, 1, b, true, 4), act, fp8_cast("shared_fp8_cast_dact", t * hs1, 0),
                    xgemm("shared_fc1_dgrad", t, M, hs1, 1, b, true), xgemm("shared_fc1_wgrad", M, hs1, t, 1, b, true, 4));
      }
      if (!backward)
        return emit(out, gemm("shared_fc1", t, hs1, M, 1, b), act, gemm("shared_fc2", t, M, hs, 1, b));
      return emit(out, gemm("shared_fc2_dgrad", t, hs, M, 1, b), gemm("shared_fc2_wgrad", hs, M, t, 1, b), act,
                  gemm("shared_fc1_dgrad", t, M, hs1, 1, b), gemm("shared_fc1_wgrad", M, hs1, t, 1, b));
    }
    case MoeStep::kernel: {
      Kernel x;
      x.name = o.label;
      x.op = o.kernel_op;
      x.flops = o.flops;
      x.bytes = o.bytes;
      x.shape = o.shape;
      return emit(out, x);
    }
    case MoeStep::slot_slice:
      return emit(out, mem("slot_slice", OpKind::copy, 2 * static_cast<u64>(o.elems) * b));
    default:
      return;
  }
}


// each_kernel_body's kernels; in an fp8 layer, every kernel it gives no dtype is bf16 (the
// gate, dispatch and combine, the activations): only the experts' GEMMs run in fp8.
template <class Out>
inline __attribute__((always_inline)) void each_kernel(const MoeOp& o, bool backward, const LayerSpec& s, const Dims& d,
                                                       Out&& out) {
  if (d.fp8) [[unlikely]] {
    auto bf16 = [&out](const Kernel& k) __attribute__((always_inline)) {
      if (k.dtype) return out(k);
      Kernel c = k;
      c.dtype = DType::bf16;
      out(c);
    };
    return each_kernel_body(o, backward, s, d, bf16);
  }
  each_kernel_body(o, backward, s, d, out);
}

HostSplit host_split(const Kernel& k) {
  HostSplit h;
  h.main = k;
  h.sync = k.host_wait > Time::zero();
  h.main.host_wait = Time::zero();
  h.last.launches = 0;
  if (k.launches > 1) {
    const auto L = static_cast<std::uint64_t>(k.launches);
    h.last = h.main;
    h.last.launches = 1;
    h.last.bytes = k.bytes / L;
    h.last.flops = k.flops / L;
    h.main.launches = k.launches - 1;
    h.main.bytes = k.bytes - h.last.bytes;
    h.main.flops = k.flops - h.last.flops;
  }
  return h;
}

std::vector<Kernel> kernels(const MoeOp& o, const LayerSpec& s, const Dims& d) {
  std::vector<Kernel> v;
  each_kernel(o, o.backward, s, d, [&v](const Kernel& k) { v.push_back(k); });
  return v;
}

KernelList kernel_list(const MoeOp& o, const LayerSpec& s, const Dims& d) {
  KernelList v;
  each_kernel(o, o.backward, s, d, [&v](const Kernel& k) { v.push_back(k); });
  return v;
}

namespace {
// kernels_seconds with a calibration: each kernel by kernel_time, which takes
// its calibration table when it has one, else model_compute_time.
__attribute__((noinline)) double calibrated_seconds(const MoeOp& o, bool backward, const LayerSpec& s, const Dims& d,
                                                    const GpuProfile& gpu, const Calibration* cal) {
  double t = 0;
  each_kernel(o, backward, s, d, [&](const Kernel& k) {
    const std::string kind = backward ? std::string("bwd_") + k.name : std::string(k.name);
    t += kernel_time(k, s.dtype, gpu, cal, kind).to_seconds();
  });
  return t;
}
}  // namespace

double kernels_seconds(const MoeOp& o, bool backward, const LayerSpec& s, const Dims& d, const ComputeRates& r,
                       const Calibration* cal) {
  if (cal) return calibrated_seconds(o, backward, s, d, r.gpu, cal);
  double t = 0;
  // model_compute_time per kernel; its shaped-GEMM case called directly with
  // the layer dtype's per-SM rate looked up once (ModelLayerEval: 440 -> 366 ns).
  const double layer_sm = r.sm_for(s.dtype);
  each_kernel(o, backward, s, d, [&](const Kernel& k) __attribute__((always_inline)) {
    const DType dt = k.dtype.value_or(s.dtype);
    const Time cost = k.op == OpKind::gemm && k.shape[0] > 0
                          ? fast_gemm_time(r, k.dtype ? r.sm_for(dt) : layer_sm, k.flops, k.bytes, dt, k.shape[0],
                                           k.shape[1], k.shape[2], k.shape[3])
                          : model_compute_time(r, k.op, k.flops, k.bytes, dt, k.dims());
    t += with_launches(r.gpu, cost, k.launches, k.host_wait).to_seconds();
  });
  return t;
}

}  // namespace parmsim::moe
