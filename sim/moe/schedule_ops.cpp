// The three schedules (and every option combination) as forward op lists, and
// the backward list derived from a forward one by reversal and adjoints.
#include "sim/moe/layer.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <span>

#include "sim/core/error.hpp"
#include "sim/moe/layer_kernels.hpp"

namespace parmsim::moe {

// ---------------------------------------------------------------- op lists

namespace {

// A value-initialized op, to copy from: GCC clears a value-initialized
// 104-byte MoeOp with `rep stos`, whose start-up costs more than copying
// this in a few vector moves.
const MoeOp kBlankOp{};

// An op constructed in place at the end of `v` (no temporary to copy: the
// closed form builds two op lists per evaluation). MoeOp is an aggregate and
// clang before 16 has no MoeOp(k), so it is copied from a value-initialized
// one, then set.
template <class Ops>
__attribute__((always_inline)) inline MoeOp& add_op(Ops& v, MoeStep k, std::int64_t elems, const char* label) {
  MoeOp& o = v.emplace_back(kBlankOp);
  o.kind = k;
  o.elems = elems;
  o.label = label;
  return o;
}

template <class Ops>
__attribute__((always_inline)) inline MoeOp& add_coll(Ops& v, MoeStep k, GroupKind g, std::int64_t elems,
                                                      const char* label) {
  MoeOp& o = add_op(v, k, elems, label);
  o.group = g;
  return o;
}

template <class Ops>
__attribute__((always_inline)) inline MoeOp& add_compute(Ops& v, MoeStep k, std::int64_t tokens, std::int64_t elems,
                                                         const char* label) {
  MoeOp& o = add_op(v, k, elems, label);
  o.tokens = tokens;
  return o;
}

// The shared experts (shared_H > 0), first in every schedule: Megatron-Core's
// MoELayer runs them on the layer's input before the router when they do not
// overlap the dispatch (moe_shared_expert_overlap false, the default;
// megatron/core/transformer/moe/moe_layer.py@d98e8a64 L658-663), on the
// compute stream. Sharded over mp as a tensor-parallel MLP is (SharedExpertMLP
// is an MLP, moe/shared_experts.py L102-133): fc2 is row-parallel, so its
// partial outputs are summed by an AllReduce over the MP group
// (megatron/core/tensor_parallel/layers.py@d98e8a64 L1557-1566, without
// sequence parallelism); its adjoint, fc1's input gradient, is the AllReduce
// after the shared experts' backward (plan_backward below).
template <class Ops>
void add_shared(const LayerSpec& s, const Dims& d, Ops& v) {
  if (s.shared_H <= 0) return;
  add_compute(v, MoeStep::shared, d.S, d.S * s.M, "shared_experts");
  if (d.G > 1) add_coll(v, MoeStep::ar, GroupKind::mp, d.S * s.M, "shared_allreduce");
}

// The builders, for any vector-like container of MoeOps (std::vector for the
// graph builder, OpList for the closed form).
template <class Ops>
void build_forward(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, Ops& v) {
  const std::int64_t M = s.M, G = d.G;
  add_shared(s, d, v);
  if (!o.parm && s.token_dispatcher == TokenDispatcher::allgather) {
    // Megatron-Core's MoEAllGatherTokenDispatcher
    // (megatron/core/transformer/moe/token_dispatcher.py@0014f137, token_permutation
    // and token_unpermutation; docs/moe-costs.md, "The AllGather dispatcher").
    // Each MP member takes its S/G share of the MP group's S tokens (a view: the
    // share sequence parallelism gives it, which Megatron-Core requires with
    // TP and MoE), gates them, and the block of G*N_EP ranks (its tp_ep_group)
    // AllGathers the routing map (bool), the probabilities (fp32) and the token
    // rows. Every rank then permutes the block's N_EP*S rows routed to its local
    // experts (every expert's G shards take the same rows, as the capacity
    // buffers do: E*T_base rows in all), runs its experts, unpermutes into N_EP*S
    // rows of partial sums (over its experts and over the expert's shards), and
    // a ReduceScatter over the block returns each member its S/G rows. The
    // layer ends there, as Megatron-Core's does under sequence parallelism: the
    // other schedules end with all S rows on every MP rank, an AllGather over MP
    // more, which a sequence-parallel model pays at the next block's attention
    // (docs/moe-costs.md, "The AllGather dispatcher").
    const std::int64_t Sb = d.n_ep * d.S;  // the block's tokens
    // The rows a rank's local experts take: the capacity buffers' E*T_base, or
    // dropless (a load model) the mean, k*S (the block's k*N_EP*S choices over
    // N_EP ranks' experts); the experts' GEMMs then take each rank's drawn rows.
    const std::int64_t D = (s.load ? s.k * d.S : s.E * d.T_base) * M;
    add_coll(v, MoeStep::split, GroupKind::mp, d.S * M, "mp_split").data = CollData::token_rows;
    add_compute(v, MoeStep::gate, d.S / G, 0, "gate");
    // routing_map [tokens, E] bool and probs [tokens, E] fp32, in the layer's elements.
    const std::int64_t route_elems = (Sb * s.E * 5 + d.dtype_bytes - 1) / d.dtype_bytes;
    add_coll(v, MoeStep::ag, GroupKind::world, route_elems, "route_allgather").data = CollData::route;
    add_coll(v, MoeStep::ag, GroupKind::world, Sb * M, "token_allgather");
    // Kernel ops with elems: their output's size (sim/moe/memory.cpp).
    // permute (moe_utils.permute: an index_select of the D/M routed rows) reads
    // and writes them; unpermute (a zeroed [N_EP*S, M] output, the D/M rows
    // scatter-added into it) writes the output and reads and writes the rows.
    // Backward, their adjoints move the same bytes the other way.
    const std::int64_t b = d.dtype_bytes;
    MoeOp& perm = add_op(v, MoeStep::kernel, D, "permute");
    perm.kernel_op = OpKind::order;
    perm.bytes = static_cast<std::uint64_t>(2 * D * b);
    MoeOp& ex = add_compute(v, MoeStep::experts, 0, D, "experts");
    ex.allreduce_each = false;  // the shards' partial sums are reduced by the ReduceScatter below
    MoeOp& unperm = add_op(v, MoeStep::kernel, Sb * M, "unpermute");
    unperm.kernel_op = OpKind::iorder;
    unperm.bytes = static_cast<std::uint64_t>((Sb * M + 2 * D) * b);
    add_coll(v, MoeStep::rs, GroupKind::world, Sb * M, "token_reducescatter");
    return;
  }
  if (!o.parm) {
    // DeepSpeed-MoE (docs/moe-costs.md): every MP rank gates and dispatches
    // the same S tokens (MoE runs on the TP-replicated layernorm output).
    const std::int64_t D = s.E * d.T_base * M;
    // 0.14.5+ drops the MP duplicates before each AlltoAll and gathers them
    // back over MP after it (sharded_moe.py v0.14.5 L536-586): a free narrow,
    // an AlltoAll of D/G, an AllGather of D. Before, with expert sharding,
    // every MP rank sent all of D (v0.14.4 L536-543 drop only without ESP).
    const bool drop = s.ds_moe == DsMoe::v0_14_5 && G > 1;
    auto alltoall = [&](const char* drop_label, const char* a2a_label, const char* gather_label) {
      if (!drop) {
        add_coll(v, MoeStep::a2a, GroupKind::ep, D, a2a_label);
        return;
      }
      add_coll(v, MoeStep::split, GroupKind::mp, D, drop_label);
      add_coll(v, MoeStep::a2a, GroupKind::ep, D / G, a2a_label);
      add_coll(v, MoeStep::ag, GroupKind::mp, D, gather_label);
    };
    add_compute(v, MoeStep::gate, d.S, 0, "gate");
    add_compute(v, MoeStep::order, d.S, D, "order");
    alltoall("drop_tokens", "dispatch_a2a", "gather_tokens");
    MoeOp& ex = add_compute(v, MoeStep::experts, 0, D, "experts");
    // Megatron-DeepSpeed's RowParallelLinear ends each sharded expert with an
    // AllReduce over TP (mappings.py L76-105 @c2402048), one per local expert.
    ex.allreduce_each = !lean_like(s.ds_moe) && G > 1;
    if (lean_like(s.ds_moe)) add_coll(v, MoeStep::ar, GroupKind::esp, D, "esp_allreduce");
    alltoall("drop_tokens_combine", "combine_a2a", "gather_tokens_combine");
    add_compute(v, MoeStep::iorder, d.S, D, "iorder");
    return;
  }
  if (o.fuse_combine && o.gather != Gather::before_iorder)
    throw UserError("fuse_combine needs gather=before_iorder (the MP-AllGather must follow the combine AlltoAll)");
  if (o.chunks < 1) throw UserError("chunks must be at least 1");
  if (o.split == Split::after_order && o.gather != Gather::before_iorder)
    throw UserError("split=after_order needs gather=before_iorder (I-Order must see every member's slots)");
  std::int64_t Dl = 0;  // per-rank dispatch buffer after MP-Split (D/G)
  if (o.split == Split::before_gate) {
    Dl = s.E * d.T_parm * M;
    add_coll(v, MoeStep::split, GroupKind::mp, d.S * M, "mp_split").data = CollData::token_rows;
    add_compute(v, MoeStep::gate, d.S / G, 0, "gate");
    add_compute(v, MoeStep::order, d.S / G, Dl, "order");
  } else {
    const std::int64_t Tl = (d.T_base + G - 1) / G;
    Dl = s.E * Tl * M;
    add_compute(v, MoeStep::gate, d.S, 0, "gate");
    add_compute(v, MoeStep::order, d.S, s.E * d.T_base * M, "order");
    // Keep this member's share of every expert's slots (a copy), then the split.
    add_compute(v, MoeStep::slot_slice, d.S, Dl, "slot_slice");
    add_coll(v, MoeStep::split, GroupKind::mp, G * Dl, "mp_split");
  }
  const std::int64_t Dfull = G * Dl;
  if (o.fuse_dispatch) {
    add_coll(v, MoeStep::saa, GroupKind::world, Dl, "dispatch_saa");
  } else {
    add_coll(v, MoeStep::a2a, GroupKind::ep, Dl, "dispatch_a2a");
    add_coll(v, MoeStep::ag, GroupKind::esp, Dfull, "esp_allgather");
  }
  add_compute(v, MoeStep::experts, 0, Dfull, "experts");
  // The combine's ReduceScatter, pipelined into the AlltoAll or the SAA.
  auto combine = [&](MoeStep then) {
    MoeOp& rs = add_coll(v, MoeStep::rs_then, GroupKind::esp, Dfull, "esp_rs_combine");
    rs.then = then;
    rs.chunks = o.chunks;
  };
  if (o.gather == Gather::after_iorder) {
    combine(MoeStep::a2a);
    add_compute(v, MoeStep::iorder, d.S / G, Dl, "iorder");
    add_coll(v, MoeStep::ag, GroupKind::mp, d.S * M, "mp_allgather").data = CollData::token_rows;
  } else {
    // I-Order on all S tokens needs every MP member's routing (expert, slot,
    // weight per token choice): a small AllGather over MP.
    if (o.split == Split::before_gate)
      add_coll(v, MoeStep::ag, GroupKind::mp, d.S * s.k * 3, "route_allgather").data = CollData::route;
    combine(o.fuse_combine ? MoeStep::saa : MoeStep::a2a);
    if (!o.fuse_combine) add_coll(v, MoeStep::ag, GroupKind::mp, Dfull, "mp_allgather");
    MoeOp& io = add_compute(v, MoeStep::iorder, d.S, Dfull, "iorder");
    // Split before the gate: member g's S/G tokens were routed to its own
    // block of slots, so the combine is G independent einsums.
    if (o.split == Split::before_gate) io.blocks = static_cast<int>(G);
  }
}

// The backward list as BackwardOps (layer_kernels.hpp) into `out`.
void plan_backward(std::span<const MoeOp> fwd, const LayerSpec& spec, const Dims& d, const ScheduleOptions& o,
                   BackwardPlan& out) {
  // 1. Reverse and take adjoints, expanding fused ops into primitives.
  //    - MP-Split (a view of replicated tokens): AllGather over MP.
  //    - MP-AllGather (its result is consumed redundantly by every MP rank,
  //      so every rank holds the same gradient): a free slice.
  //    - ESP-AllGather (feeds a different expert shard on each rank):
  //      ReduceScatter over ESP, and the other way round.
  //    - AlltoAll: AlltoAll. AllReduce: AllReduce.
  //    Primitives that come from a fused forward op are marked, so the pass
  //    below fuses them again.
  // A primitive is either a forward op taken over (its copy, marked
  // backward, goes out) or a collective given by its kind, group, size and
  // label: small records (BackwardOp) instead of whole MoeOps, and so is the
  // list that comes out, written over them (the closed form times it without
  // writing MoeOps). At most two per forward op.
  BackwardOp* prim = out.reset(2 * fwd.size());
  std::size_t np = 0;
  auto coll = [&](MoeStep k, GroupKind g, std::int64_t n, const char* l, bool fused = false,
                  CollData data = CollData::current) {
    prim[np++] = BackwardOp{nullptr, k, g, MoeStep::a2a, 1, n, l, fused, data};
  };
  auto take = [&](const MoeOp& f) {
    prim[np++] = BackwardOp{&f, f.kind, f.group, MoeStep::a2a, 1, f.elems, "", false, CollData::current};
  };
  const std::int64_t G = d.G;
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    const MoeOp& f = *it;
    switch (f.kind) {
      case MoeStep::split:
        coll(MoeStep::ag, GroupKind::mp, f.elems, "bwd_mp_split_allgather", false, f.data);
        break;
      case MoeStep::slot_slice:
        break;  // its adjoint is the AllGather above; Order's backward reads that layout
      case MoeStep::gate: {
        take(f);
        // With MP split before the gate, each MP rank saw other tokens: the
        // replicated gate weights' gradient is summed over the MP group.
        if ((o.parm && o.split == Split::before_gate) ||
            (!o.parm && spec.token_dispatcher == TokenDispatcher::allgather && G > 1))
          coll(MoeStep::ar, GroupKind::mp, spec.M * spec.E, "gate_grad_allreduce", false, CollData::gate_grad);
        break;
      }
      case MoeStep::ag:
        if (f.data == CollData::route && f.group == GroupKind::world) {
          // The AllGather dispatcher's routing: the map has no gradient; the
          // probabilities' (fp32, 4 of the 5 bytes per [token, expert]) are
          // ReduceScattered back over the block.
          coll(MoeStep::rs, GroupKind::world, f.elems * 4 / 5, "bwd_probs_reducescatter");
          break;
        }
        if (f.group == GroupKind::mp)
          coll(MoeStep::mp_gather_free, GroupKind::mp, f.elems, "bwd_mp_allgather_slice");
        else
          coll(MoeStep::rs, f.group, f.elems, "bwd_esp_allgather");
        break;
      case MoeStep::rs:
        coll(MoeStep::ag, f.group, f.elems, "bwd_esp_reducescatter");
        break;
      case MoeStep::saa:  // dispatch: AllGather_esp(AlltoAll(x))
        coll(MoeStep::rs, GroupKind::esp, G * f.elems, "bwd_dispatch_rs", true);
        coll(MoeStep::a2a, GroupKind::ep, f.elems, "bwd_dispatch_a2a", true);
        break;
      case MoeStep::rs_then: {
        // ReduceScatter_esp(n), then AlltoAll(n/G) (and, fused, the MP-AllGather,
        // whose adjoint is free): adjoint = AlltoAll(n/G), then AllGather_esp(n).
        const bool fz = f.then == MoeStep::saa;
        coll(MoeStep::a2a, GroupKind::ep, f.elems / G, "bwd_combine_a2a", fz);
        coll(MoeStep::ag, GroupKind::esp, f.elems, "bwd_combine_esp_allgather", fz);
        break;
      }
      default:
        take(f);
    }
  }
  // The baseline's AllReduce sums fc2's partial outputs; its adjoint is the
  // identity, and fc1's input gradient needs an AllReduce after the experts
  // (the shared experts' likewise).
  for (std::size_t i = 0; i + 1 < np; ++i)
    if (prim[i].kind == MoeStep::ar && (prim[i + 1].kind == MoeStep::experts || prim[i + 1].kind == MoeStep::shared))
      std::swap(prim[i], prim[i + 1]);
  // 2. Fuse as the forward pass did: an AlltoAll followed by an ESP-AllGather
  //    of G times its size becomes an SAA when the pair came from a fused op;
  //    an ESP-ReduceScatter followed by an AlltoAll of 1/G its size becomes a
  //    chunked pipeline when the schedule pipelines or the pair was fused.
  //    The ops go out over the primitives (never ahead of the one read).
  std::size_t w = 0;
  for (std::size_t i = 0; i < np; ++i) {
    const BackwardOp a = prim[i];
    const bool has_next = i + 1 < np;
    if (has_next && a.kind == MoeStep::a2a && a.fused && prim[i + 1].fused && prim[i + 1].kind == MoeStep::ag &&
        prim[i + 1].elems == G * a.elems) {
      prim[w++] = BackwardOp{nullptr,           MoeStep::saa, GroupKind::world, MoeStep::a2a, 1, a.elems,
                             "bwd_combine_saa", false,        CollData::current};
      ++i;
      continue;
    }
    if (has_next && a.kind == MoeStep::rs && prim[i + 1].kind == MoeStep::a2a && prim[i + 1].elems * G == a.elems &&
        (o.chunks > 1 || a.fused)) {
      prim[w++] = BackwardOp{nullptr, MoeStep::rs_then,      a.group, MoeStep::a2a,     o.chunks,
                             a.elems, "bwd_dispatch_rs_a2a", false,   CollData::current};
      ++i;
      continue;
    }
    prim[w++] = a;  // taken over, or the collective as it is
  }
  out.resize(w);
}

// The backward list written out as MoeOps, each constructed or copied once.
template <class Ops>
void build_backward(std::span<const MoeOp> fwd, const LayerSpec& spec, const Dims& d, const ScheduleOptions& o,
                    Ops& out) {
  BackwardPlan plan;
  plan_backward(fwd, spec, d, o, plan);
  for (const BackwardOp& b : plan.ops()) {
    if (b.src) {
      out.emplace_back(*b.src).backward = true;
      continue;
    }
    MoeOp& p = add_coll(out, b.kind, b.group, b.elems, b.label);
    p.data = b.data;
    p.then = b.then;
    p.chunks = b.chunks;
    p.backward = true;
  }
}

}  // namespace

std::vector<MoeOp> forward_ops(const LayerSpec& s, const Dims& d, const ScheduleOptions& o) {
  std::vector<MoeOp> v;
  build_forward(s, d, o, v);
  return v;
}

std::vector<MoeOp> backward_ops(const std::vector<MoeOp>& fwd, const LayerSpec& s, const Dims& d,
                                const ScheduleOptions& o) {
  std::vector<MoeOp> v;
  build_backward(fwd, s, d, o, v);
  return v;
}

void forward_ops(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, OpList* out) {
  out->clear();
  build_forward(s, d, o, *out);
}

void backward_ops(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                  OpList* out) {
  out->clear();
  build_backward(fwd, s, d, o, *out);
}

void backward_plan(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                   BackwardPlan* out) {
  plan_backward(fwd, s, d, o, *out);
}


}  // namespace parmsim::moe
