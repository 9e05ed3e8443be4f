#include "sim/moe/layer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <span>

#include "sim/calib/calibration.hpp"
#include "sim/coll/collective_plan.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"

namespace parmsim::moe {

// ---------------------------------------------------------------- options

std::string ScheduleOptions::describe() const {
  if (!parm) return "baseline";
  return fmt::format("split={},gather={},fuse_dispatch={},fuse_combine={},chunks={},a2a_algo={}",
                     split == Split::before_gate ? "before_gate" : "after_order",
                     gather == Gather::after_iorder ? "after_iorder" : "before_iorder", fuse_dispatch ? 1 : 0,
                     fuse_combine ? 1 : 0, chunks, a2a_algo);
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> n = {"baseline", "s1", "s2"};
  return n;
}

ScheduleOptions preset(const std::string& name) {
  ScheduleOptions o;
  o.name = name;
  if (name == "baseline") {
    o.parm = false;
  } else if (name == "s1") {
    // defaults: split before gate, gather after I-Order, nothing fused
  } else if (name == "s2") {
    o.gather = Gather::before_iorder;
    o.fuse_dispatch = true;
    o.fuse_combine = true;
    o.chunks = 2;
  } else {
    throw ParmError(fmt::format("unknown schedule '{}': expected baseline, s1, s2, auto or all", name));
  }
  return o;
}

std::vector<ScheduleOptions> search_space() {
  std::vector<ScheduleOptions> out;
  for (Split sp : {Split::before_gate, Split::after_order})
    for (Gather ga : {Gather::after_iorder, Gather::before_iorder})
      for (bool fd : {false, true})
        for (bool fc : {false, true}) {
          if (fc && ga != Gather::before_iorder) continue;  // nothing to fuse with
          // Slots split after Order: I-Order needs every member's slots, so it
          // must follow the MP-AllGather (an I-Order on a slice of the slots
          // would leave partial sums, not a slice of the output).
          if (sp == Split::after_order && ga != Gather::before_iorder) continue;
          for (int c : {1, 2, 4}) {
            ScheduleOptions o;
            o.name = "custom";
            o.split = sp;
            o.gather = ga;
            o.fuse_dispatch = fd;
            o.fuse_combine = fc;
            o.chunks = c;
            out.push_back(o);
          }
        }
  return out;
}

namespace {

std::int64_t parse_int(const std::string& key, const std::string& v, const std::string& where, std::int64_t lo) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument("x");
    if (x < lo) throw ParmError(fmt::format("{}: key '{}': expected an integer >= {}, got '{}'", where, key, lo, v));
    return x;
  } catch (const std::logic_error&) {
    throw ParmError(fmt::format("{}: key '{}': expected an integer, got '{}'", where, key, v));
  }
}

bool parse_bool(const std::string& key, const std::string& v, const std::string& where) {
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  throw ParmError(fmt::format("{}: key '{}': expected true/false or 1/0, got '{}'", where, key, v));
}

}  // namespace

void set_key(LayerSpec* s, ScheduleOptions* o, const std::string& key, const std::string& v, const std::string& where) {
  if (key == "B")
    s->B = parse_int(key, v, where, 1);
  else if (key == "L")
    s->L = parse_int(key, v, where, 1);
  else if (key == "M")
    s->M = parse_int(key, v, where, 1);
  else if (key == "H")
    s->H = parse_int(key, v, where, 1);
  else if (key == "E")
    s->E = parse_int(key, v, where, 1);
  else if (key == "k")
    s->k = parse_int(key, v, where, 1);
  else if (key == "mp")
    s->mp = static_cast<int>(parse_int(key, v, where, 1));
  else if (key == "f") {
    try {
      std::size_t used = 0;
      s->f = std::stod(v, &used);
      if (used != v.size() || !(s->f > 0) || !std::isfinite(s->f)) throw std::invalid_argument("x");
    } catch (const std::logic_error&) {
      throw ParmError(fmt::format("{}: key 'f': expected a capacity factor > 0, got '{}'", where, v));
    }
  } else if (key == "dtype") {
    try {
      s->dtype = parse_dtype(v);
    } catch (const ParmError& e) {
      throw ParmError(fmt::format("{}: key 'dtype': {}", where, e.what()));
    }
  } else if (o && key == "split") {
    if (v == "before_gate")
      o->split = Split::before_gate;
    else if (v == "after_order")
      o->split = Split::after_order;
    else
      throw ParmError(fmt::format("{}: key 'split': expected before_gate or after_order, got '{}'", where, v));
    o->name = "custom";
  } else if (o && key == "gather") {
    if (v == "after_iorder")
      o->gather = Gather::after_iorder;
    else if (v == "before_iorder")
      o->gather = Gather::before_iorder;
    else
      throw ParmError(fmt::format("{}: key 'gather': expected after_iorder or before_iorder, got '{}'", where, v));
    o->name = "custom";
  } else if (o && key == "fuse_dispatch") {
    o->fuse_dispatch = parse_bool(key, v, where);
    o->name = "custom";
  } else if (o && key == "fuse_combine") {
    o->fuse_combine = parse_bool(key, v, where);
    o->name = "custom";
  } else if (o && key == "chunks") {
    o->chunks = static_cast<int>(parse_int(key, v, where, 1));
    o->name = "custom";
  } else if (o && key == "a2a_algo") {
    if (v != "pairwise" && v != "direct")
      throw ParmError(fmt::format("{}: key 'a2a_algo': expected pairwise or direct, got '{}'", where, v));
    o->a2a_algo = v;
  } else {
    throw ParmError(
        fmt::format("{}: unknown layer key '{}'; layer keys: B, L, M, H, E, k, f, mp, dtype{}", where, key,
                    o ? "; schedule options: split, gather, fuse_dispatch, fuse_combine, chunks, a2a_algo" : ""));
  }
}

void apply_assignments(LayerSpec* s, ScheduleOptions* o, const std::vector<std::string>& kv, const std::string& where) {
  for (const std::string& a : kv) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0) throw ParmError(fmt::format("{}: '{}' is not key=value", where, a));
    set_key(s, o, a.substr(0, eq), a.substr(eq + 1), where);
  }
}

std::string spec_string(const LayerSpec& s) {
  return fmt::format("B={},L={},M={},H={},E={},k={},f={},mp={},dtype={}", s.B, s.L, s.M, s.H, s.E, s.k, s.f, s.mp,
                     to_string(s.dtype));
}

// ---------------------------------------------------------------- groups, dims

Groups make_groups(int P, int G) {
  if (G <= 0 || P <= 0 || P % G != 0) throw ParmError(fmt::format("mp={} must divide the number of GPUs P={}", G, P));
  Groups g;
  g.P = P;
  g.G = G;
  g.n_ep = P / G;
  g.mp.assign(g.n_ep, {});
  g.ep.assign(G, {});
  g.mp_of.assign(P, 0);
  g.ep_of.assign(P, 0);
  for (int r = 0; r < P; ++r) {
    g.mp[r / G].push_back(r);
    g.ep[r % G].push_back(r);
    g.mp_of[r] = r / G;
    g.ep_of[r] = r % G;
  }
  return g;
}

namespace {
// ceil(k * f * tokens / E), with f a decimal: a tiny epsilon keeps 153.6000000001 from rounding to 155.
std::int64_t capacity(std::int64_t k, double f, std::int64_t tokens, std::int64_t E) {
  const double t = static_cast<double>(k) * f * static_cast<double>(tokens) / static_cast<double>(E);
  return static_cast<std::int64_t>(std::ceil(t - 1e-9));
}
}  // namespace

Dims make_dims(const LayerSpec& s, int P, int gpus_per_node) {
  Dims d;
  d.P = P;
  d.G = s.mp;
  if (s.mp < 1) throw ParmError("mp must be at least 1");
  if (gpus_per_node % s.mp != 0)
    throw ParmError(fmt::format("mp={} must divide the GPUs of a node ({}): MP and ESP groups stay inside a node", s.mp,
                                gpus_per_node));
  if (P % s.mp != 0) throw ParmError(fmt::format("mp={} must divide the number of GPUs P={}", s.mp, P));
  d.n_ep = P / s.mp;
  if (s.E % d.n_ep != 0)
    throw ParmError(
        fmt::format("E={} experts must be divisible by the expert-parallel size N_EP = P/mp = {}", s.E, d.n_ep));
  if (s.k > s.E) throw ParmError(fmt::format("top-k k={} exceeds the number of experts E={}", s.k, s.E));
  d.S = s.B * s.L;
  if (d.S % s.mp != 0)
    throw ParmError(
        fmt::format("B*L = {} tokens must be divisible by mp={} (MP-Split keeps S/mp tokens per rank)", d.S, s.mp));
  d.E_local = s.E / d.n_ep;
  d.T_base = capacity(s.k, s.f, d.S, s.E);
  d.T_parm = capacity(s.k, s.f, d.S / s.mp, s.E);
  if (d.T_parm < 1 || d.T_base < 1)
    throw ParmError(fmt::format("capacity of zero tokens per expert: k*f*B*L/(mp*E) = {}*{}*{}/({}*{}) < 1", s.k, s.f,
                                d.S, s.mp, s.E));
  if (s.H % s.mp != 0) throw ParmError(fmt::format("H={} must be divisible by mp={} (expert sharding)", s.H, s.mp));
  d.dtype_bytes = dtype_bytes(s.dtype);
  return d;
}

// ---------------------------------------------------------------- op lists

namespace {

MoeOp coll_op(MoeStep k, GroupKind g, std::int64_t elems, const char* label) {
  MoeOp o{k};
  o.group = g;
  o.elems = elems;
  o.label = label;
  return o;
}

MoeOp compute_op(MoeStep k, std::int64_t tokens, std::int64_t elems, const char* label) {
  MoeOp o{k};
  o.tokens = tokens;
  o.elems = elems;
  o.label = label;
  return o;
}

}  // namespace

std::vector<MoeOp> forward_ops(const LayerSpec& s, const Dims& d, const ScheduleOptions& o) {
  std::vector<MoeOp> v;
  const std::int64_t M = s.M, G = d.G;
  if (!o.parm) {
    const std::int64_t D = s.E * d.T_base * M;
    v.push_back(compute_op(MoeStep::gate, d.S, 0, "gate"));
    v.push_back(compute_op(MoeStep::order, d.S, D, "order"));
    v.push_back(coll_op(MoeStep::a2a, GroupKind::ep, D, "dispatch_a2a"));
    v.push_back(compute_op(MoeStep::experts, 0, D, "experts"));
    v.push_back(coll_op(MoeStep::ar, GroupKind::esp, D, "esp_allreduce"));
    v.push_back(coll_op(MoeStep::a2a, GroupKind::ep, D, "combine_a2a"));
    v.push_back(compute_op(MoeStep::iorder, d.S, D, "iorder"));
    return v;
  }
  if (o.fuse_combine && o.gather != Gather::before_iorder)
    throw ParmError("fuse_combine needs gather=before_iorder (the MP-AllGather must follow the combine AlltoAll)");
  if (o.chunks < 1) throw ParmError("chunks must be at least 1");
  if (o.split == Split::after_order && o.gather != Gather::before_iorder)
    throw ParmError("split=after_order needs gather=before_iorder (I-Order must see every member's slots)");
  std::int64_t Dl = 0;  // per-rank dispatch buffer after MP-Split (D/G)
  if (o.split == Split::before_gate) {
    Dl = s.E * d.T_parm * M;
    v.push_back(coll_op(MoeStep::split, GroupKind::mp, d.S * M, "mp_split"));
    v.push_back(compute_op(MoeStep::gate, d.S / G, 0, "gate"));
    v.push_back(compute_op(MoeStep::order, d.S / G, Dl, "order"));
  } else {
    const std::int64_t Tl = (d.T_base + G - 1) / G;
    Dl = s.E * Tl * M;
    v.push_back(compute_op(MoeStep::gate, d.S, 0, "gate"));
    v.push_back(compute_op(MoeStep::order, d.S, s.E * d.T_base * M, "order"));
    // Keep this member's share of every expert's slots (a copy), then the split.
    v.push_back(compute_op(MoeStep::slot_slice, d.S, Dl, "slot_slice"));
    v.push_back(coll_op(MoeStep::split, GroupKind::mp, G * Dl, "mp_split"));
  }
  const std::int64_t Dfull = G * Dl;
  if (o.fuse_dispatch) {
    v.push_back(coll_op(MoeStep::saa, GroupKind::world, Dl, "dispatch_saa"));
  } else {
    v.push_back(coll_op(MoeStep::a2a, GroupKind::ep, Dl, "dispatch_a2a"));
    v.push_back(coll_op(MoeStep::ag, GroupKind::esp, Dfull, "esp_allgather"));
  }
  v.push_back(compute_op(MoeStep::experts, 0, Dfull, "experts"));
  MoeOp rs = coll_op(MoeStep::rs_then, GroupKind::esp, Dfull, "esp_rs_combine");
  rs.chunks = o.chunks;
  if (o.gather == Gather::after_iorder) {
    rs.then = MoeStep::a2a;
    v.push_back(rs);
    v.push_back(compute_op(MoeStep::iorder, d.S / G, Dl, "iorder"));
    v.push_back(coll_op(MoeStep::ag, GroupKind::mp, d.S * M, "mp_allgather"));
  } else {
    rs.then = o.fuse_combine ? MoeStep::saa : MoeStep::a2a;
    // I-Order on all S tokens needs every MP member's routing (expert, slot,
    // weight per token choice): a small AllGather over MP.
    if (o.split == Split::before_gate)
      v.push_back(coll_op(MoeStep::ag, GroupKind::mp, d.S * s.k * 3, "route_allgather"));
    v.push_back(rs);
    if (!o.fuse_combine) v.push_back(coll_op(MoeStep::ag, GroupKind::mp, Dfull, "mp_allgather"));
    v.push_back(compute_op(MoeStep::iorder, d.S, Dfull, "iorder"));
  }
  return v;
}

std::vector<MoeOp> backward_ops(const std::vector<MoeOp>& fwd, const LayerSpec& spec, const Dims& d,
                                const ScheduleOptions& o) {
  // 1. Reverse and take adjoints, expanding fused ops into primitives.
  //    - MP-Split (a view of replicated tokens): AllGather over MP.
  //    - MP-AllGather (its result is consumed redundantly by every MP rank,
  //      so every rank holds the same gradient): a free slice.
  //    - ESP-AllGather (feeds a different expert shard on each rank):
  //      ReduceScatter over ESP, and the other way round.
  //    - AlltoAll: AlltoAll. AllReduce: AllReduce.
  //    Primitives that come from a fused forward op are marked, so the pass
  //    below fuses them again.
  struct Prim {
    MoeOp op;
    bool fused = false;
  };
  std::vector<Prim> prim;
  const std::int64_t G = d.G;
  auto ag = [](GroupKind g, std::int64_t n, const char* l) { return coll_op(MoeStep::ag, g, n, l); };
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    const MoeOp& f = *it;
    switch (f.kind) {
      case MoeStep::split:
        prim.push_back({ag(GroupKind::mp, f.elems, "bwd_mp_split_allgather")});
        break;
      case MoeStep::slot_slice:
        break;  // its adjoint is the AllGather above; Order's backward reads that layout
      case MoeStep::gate: {
        MoeOp x = f;
        x.backward = true;
        prim.push_back({x});
        // With MP split before the gate, each MP rank saw other tokens: the
        // replicated gate weights' gradient is summed over the MP group.
        if (o.parm && o.split == Split::before_gate)
          prim.push_back({coll_op(MoeStep::ar, GroupKind::mp, spec.M * spec.E, "gate_grad_allreduce")});
        break;
      }
      case MoeStep::ag:
        if (f.group == GroupKind::mp)
          prim.push_back({coll_op(MoeStep::mp_gather_free, GroupKind::mp, f.elems, "bwd_mp_allgather_slice")});
        else
          prim.push_back({coll_op(MoeStep::rs, f.group, f.elems, "bwd_esp_allgather")});
        break;
      case MoeStep::rs:
        prim.push_back({ag(f.group, f.elems, "bwd_esp_reducescatter")});
        break;
      case MoeStep::saa:  // dispatch: AllGather_esp(AlltoAll(x))
        prim.push_back({coll_op(MoeStep::rs, GroupKind::esp, G * f.elems, "bwd_dispatch_rs"), true});
        prim.push_back({coll_op(MoeStep::a2a, GroupKind::ep, f.elems, "bwd_dispatch_a2a"), true});
        break;
      case MoeStep::rs_then: {
        // ReduceScatter_esp(n), then AlltoAll(n/G) (and, fused, the MP-AllGather,
        // whose adjoint is free): adjoint = AlltoAll(n/G), then AllGather_esp(n).
        const bool fz = f.then == MoeStep::saa;
        prim.push_back({coll_op(MoeStep::a2a, GroupKind::ep, f.elems / G, "bwd_combine_a2a"), fz});
        prim.push_back({ag(GroupKind::esp, f.elems, "bwd_combine_esp_allgather"), fz});
        break;
      }
      default: {
        MoeOp x = f;
        x.backward = true;
        prim.push_back({x});
      }
    }
  }
  // The baseline's AllReduce sums fc2's partial outputs; its adjoint is the
  // identity, and fc1's input gradient needs an AllReduce after the experts.
  for (std::size_t i = 0; i + 1 < prim.size(); ++i)
    if (prim[i].op.kind == MoeStep::ar && prim[i + 1].op.kind == MoeStep::experts) std::swap(prim[i], prim[i + 1]);
  // 2. Fuse as the forward pass did: an AlltoAll followed by an ESP-AllGather
  //    of G times its size becomes an SAA when the pair came from a fused op;
  //    an ESP-ReduceScatter followed by an AlltoAll of 1/G its size becomes a
  //    chunked pipeline when the schedule pipelines or the pair was fused.
  std::vector<MoeOp> out;
  for (std::size_t i = 0; i < prim.size(); ++i) {
    const MoeOp& a = prim[i].op;
    const bool has_next = i + 1 < prim.size();
    if (has_next && a.kind == MoeStep::a2a && prim[i].fused && prim[i + 1].fused &&
        prim[i + 1].op.kind == MoeStep::ag && prim[i + 1].op.elems == G * a.elems) {
      out.push_back(coll_op(MoeStep::saa, GroupKind::world, a.elems, "bwd_combine_saa"));
      out.back().backward = true;
      ++i;
      continue;
    }
    if (has_next && a.kind == MoeStep::rs && prim[i + 1].op.kind == MoeStep::a2a &&
        prim[i + 1].op.elems * G == a.elems && (o.chunks > 1 || prim[i].fused)) {
      MoeOp p = coll_op(MoeStep::rs_then, a.group, a.elems, "bwd_dispatch_rs_a2a");
      p.then = MoeStep::a2a;
      p.chunks = o.chunks;
      p.backward = true;
      out.push_back(p);
      ++i;
      continue;
    }
    MoeOp x = a;
    x.backward = true;
    out.push_back(x);
  }
  return out;
}

// ---------------------------------------------------------------- kernels

namespace {

struct Kernel {
  const char* name;
  OpKind op;
  std::uint64_t flops, bytes;
  std::array<std::int64_t, 4> shape{};  // gemm: m, n, k, batch (0 = unknown)
  std::span<const std::int64_t> dims() const {
    return shape[0] > 0 ? std::span<const std::int64_t>(shape.data(), 4) : std::span<const std::int64_t>();
  }
};

// The compute kernels of one op on one rank; shared by the graph builder and the closed form.
std::vector<Kernel> kernels(const MoeOp& o, const LayerSpec& s, const Dims& d) {
  const std::uint64_t b = static_cast<std::uint64_t>(d.dtype_bytes);
  const std::uint64_t M = s.M, E = s.E, t = o.tokens, h = s.H / d.G;
  const std::uint64_t w = o.backward ? 2 : 1;  // backward GEMMs: data and weight gradients
  switch (o.kind) {
    case MoeStep::gate:
      return {{"gate_gemm", OpKind::gemm, w * 2 * t * M * E, w * (t * M + M * E + t * E) * b},
              {"softmax_topk", OpKind::topk, 0, 2 * t * E * b}};
    case MoeStep::order:
      return {{"order", OpKind::order, 0, (t * M + static_cast<std::uint64_t>(o.elems)) * b}};
    case MoeStep::iorder:
      return {{"iorder", OpKind::iorder, 0, (t * M + static_cast<std::uint64_t>(o.elems)) * b}};
    case MoeStep::experts: {
      const std::uint64_t rows = static_cast<std::uint64_t>(o.elems) / M;
      Kernel fc1{"expert_fc1", OpKind::gemm, w * 2 * rows * M * h, w * (rows * M + M * h + rows * h) * b};
      Kernel act{"expert_act", OpKind::activation, 0, (o.backward ? 3 : 2) * rows * h * b};
      Kernel fc2{"expert_fc2", OpKind::gemm, w * 2 * rows * h * M, w * (rows * h + h * M + rows * M) * b};
      if (o.backward) return {fc2, act, fc1};
      return {fc1, act, fc2};
    }
    case MoeStep::kernel:
      return {{o.label, o.kernel_op, o.flops, o.bytes, o.shape}};
    case MoeStep::slot_slice:
      return {{"slot_slice", OpKind::copy, 0, 2 * static_cast<std::uint64_t>(o.elems) * b}};
    default:
      return {};
  }
}

}  // namespace

// ---------------------------------------------------------------- task graph

namespace {

// The builder also gives every task its data: buffers (the same names on
// every rank), the CPU kernel to run and its arguments, so that executors can
// run the graph with real tensors. The simulator ignores the data. Tracked
// state: the buffer the next op reads, the current expert capacity C, and the
// layout of combine-side buffers:
//   0  [E, C, M]           one member's slots
//   1  [G, E, C, M]        every MP member's slots, members hold different tokens
//   2  [G, E, Tl, M]       every MP member's share of the slots (split after Order)
class GraphBuilder {
 public:
  GraphBuilder(const LayerSpec& s, const Dims& d, const ScheduleOptions& o)
      : s_(s), d_(d), o_(o), g_(make_groups(d.P, d.G)), b_(d.P), prev_(d.P, -1) {
    b_.add_stream_all("compute");
    b_.add_stream_all("comm");
    b_.add_stream_all("rs");
    const std::int64_t M = s.M, h = s.H / d.G;
    buf("x", d.S * M);
    buf("Wg", M * s.E);
    buf("W1", d.E_local * M * h);
    buf("W2", d.E_local * h * M);
  }

  void add(const MoeOp& op) {
    if (op.backward && !in_backward_) start_backward();
    switch (op.kind) {
      case MoeStep::gate:
        return op.backward ? gate_bwd(op) : gate(op);
      case MoeStep::order:
        return op.backward ? order_bwd(op) : order(op);
      case MoeStep::slot_slice:
        return slot_slice(op);
      case MoeStep::experts:
        return op.backward ? experts_bwd(op) : experts(op);
      case MoeStep::iorder:
        return op.backward ? iorder_bwd(op) : iorder(op);
      case MoeStep::kernel:
        return kernel_task(op);
      case MoeStep::split:
      case MoeStep::mp_gather_free:
        return;  // views: no work, no task
      case MoeStep::rs_then:
        return rs_then(op);
      case MoeStep::a2a:
        return coll_step(CollOp::alltoall, GroupKind::ep, op, 1);
      case MoeStep::saa:
        return coll_step(CollOp::saa, GroupKind::world, op, d_.G);
      case MoeStep::rs:
        return coll_step(CollOp::reducescatter, op.group, op, 0);
      case MoeStep::ag:
        if (std::string(op.label) == "route_allgather") {
          collective(CollOp::allgather, GroupKind::mp, op.elems, "comm", op.label, "route", "route_all", 0, 1);
          buf("route_all", op.elems);
          route_ = "route_all";
          return;
        }
        if (op.backward && std::string(op.label) == "bwd_mp_split_allgather" && dx_started_) {
          // MP-Split's adjoint after the gate: gather every member's dx rows.
          buf("dx", d_.S * s_.M);
          collective(CollOp::allgather, GroupKind::mp, op.elems, "comm", op.label, "dxl", "dx", 0, s_.M);
          return;
        }
        if (op.group == GroupKind::mp && !op.backward && std::string(op.label) == "mp_allgather" && cur_ == "outl") {
          buf("out", d_.S * s_.M);
          collective(CollOp::allgather, GroupKind::mp, op.elems, "comm", op.label, "outl", "out", 0, s_.M);
          cur_ = "out";
          return;
        }
        return coll_step(CollOp::allgather, op.group, op, -1);
      case MoeStep::ar: {
        // In place: the ESP AllReduce on the current buffer, or the gate gradient's over MP.
        const bool gate_grad = std::string(op.label) == "gate_grad_allreduce";
        const std::string target = gate_grad ? "dWg" : cur_;
        collective(CollOp::allreduce, op.group, op.elems, "comm", op.label, target, target, 0, gate_grad ? s_.E : s_.M);
        return;
      }
    }
  }

  TaskGraph build() && { return std::move(b_).build(); }
  // Dry: ops set up buffers and state but emit no tasks (a backward-only
  // graph replays its forward pass this way).
  void set_dry(bool dry) { dry_ = dry; }

 private:
  static std::int64_t cdiv(std::int64_t n, std::int64_t c) { return (n + c - 1) / c; }
  int mp_index(int r) const { return r % d_.G; }

  void buf(const std::string& name, std::int64_t elems) {
    auto it = size_.find(name);
    if (it != size_.end()) {
      if (it->second != elems)
        throw ParmError(fmt::format("internal: buffer '{}' declared with {} and {} elements", name, it->second, elems));
      return;
    }
    size_[name] = elems;
    // Routing metadata (expert, slot, weight triples; gate probabilities and
    // their gradients) stays fp32; activations and weights are of the layer's dtype.
    const bool meta = name == "route" || name == "route_all" || name == "probs" || name == "dw";
    const DType dt = meta ? DType::fp32 : s_.dtype;
    for (int r = 0; r < d_.P; ++r) b_.add_buffer({r, name, static_cast<std::uint64_t>(elems), dt});
  }

  void start_backward() {
    in_backward_ = true;
    buf("dout", d_.S * s_.M);
    buf("dWg", s_.M * s_.E);
    buf("dW1", size_["W1"]);
    buf("dW2", size_["W2"]);
    cur_ = "dout";
    offset_next_ = false;
  }

  void chain(int rank, int task) {
    if (prev_[rank] >= 0) b_.add_dep(task, prev_[rank]);
    prev_[rank] = task;
  }

  // One compute task per rank from a Kernel, with data bindings.
  void compute(const Kernel& k, bool bwd, const std::string& kname, const std::vector<std::string>& in,
               const std::vector<std::string>& out, const std::function<std::vector<std::int64_t>(int)>& args) {
    if (dry_) return;
    for (int r = 0; r < d_.P; ++r) {
      Task t;
      t.name = fmt::format("{}{}#{}@{}", bwd ? "bwd_" : "", k.name, n_++, r);
      t.rank = r;
      t.stream = 0;
      t.op = k.op;
      t.flops = k.flops;
      t.bytes = k.bytes;
      t.dtype = s_.dtype;
      if (!k.dims().empty()) t.shape.assign(k.shape.begin(), k.shape.end());
      t.kernel = kname;
      t.inputs = in;
      t.outputs = out;
      t.iargs = args(r);
      chain(r, b_.add_task(t));
    }
  }
  // Timing-only kernels of an op (the extra kernels of a fused op).
  void timing_only(const std::vector<Kernel>& ks, bool bwd) {
    for (const Kernel& k : ks) compute(k, bwd, "", {}, {}, [](int) { return std::vector<std::int64_t>{}; });
  }

  std::int64_t tok_begin(int r, std::int64_t count) const { return count == d_.S ? 0 : mp_index(r) * count; }

  void gate(const MoeOp& op) {
    const auto ks = kernels(op, s_, d_);
    count_ = op.tokens;
    C_ = o_.parm && o_.split == Split::before_gate ? d_.T_parm : d_.T_base;
    buf("probs", count_ * s_.E);
    buf("route", count_ * s_.k * 3);
    route_ = "route";
    compute(ks[0], false, "moe_gate", {"x", "Wg"}, {"probs", "route"},
            [&](int r) { return std::vector<std::int64_t>{tok_begin(r, count_), count_, s_.M, s_.E, s_.k, C_}; });
    timing_only({ks.begin() + 1, ks.end()}, false);
  }

  void order(const MoeOp& op) {
    buf("disp", s_.E * C_ * s_.M);
    compute(kernels(op, s_, d_)[0], false, "moe_order", {"x", "route"}, {"disp"},
            [&](int r) { return std::vector<std::int64_t>{tok_begin(r, count_), count_, s_.M, s_.E, s_.k, C_}; });
    cur_ = "disp";
  }

  void slot_slice(const MoeOp& op) {
    const std::int64_t Tl = cdiv(C_, d_.G);
    buf("displ", s_.E * Tl * s_.M);
    const std::int64_t C = C_;
    compute(kernels(op, s_, d_)[0], false, "moe_slot_slice", {"disp"}, {"displ"}, [&, C, Tl](int r) {
      return std::vector<std::int64_t>{s_.E, C, Tl, s_.M, mp_index(r)};
    });
    full_C_ = C_;
    C_ = Tl;
    slot_split_ = true;
    cur_ = "displ";
  }

  void experts(const MoeOp& op) {
    const std::int64_t h = s_.H / d_.G, n = size_[cur_];
    const std::int64_t X = n / (d_.E_local * C_ * s_.M);
    buf("eout", n);
    buf("h1", X * d_.E_local * C_ * h);
    const auto ks = kernels(op, s_, d_);
    const std::int64_t C = C_;
    compute(ks[0], false, "moe_experts", {cur_, "W1", "W2"}, {"eout", "h1"}, [&, X, C, h](int) {
      return std::vector<std::int64_t>{X, d_.E_local, C, s_.M, h};
    });
    timing_only({ks.begin() + 1, ks.end()}, false);
    ein_ = cur_;
    cur_ = "eout";
  }

  void experts_bwd(const MoeOp& op) {
    const std::int64_t h = s_.H / d_.G, n = size_[ein_];
    const std::int64_t X = n / (d_.E_local * C_ * s_.M);
    buf("dein", n);
    const auto ks = kernels(op, s_, d_);
    const std::int64_t C = C_;
    compute(ks[0], true, "moe_experts_bwd", {cur_, ein_, "h1", "W1", "W2"}, {"dein", "dW1", "dW2"}, [&, X, C, h](int) {
      return std::vector<std::int64_t>{X, d_.E_local, C, s_.M, h};
    });
    timing_only({ks.begin() + 1, ks.end()}, true);
    cur_ = "dein";
  }

  // Layout of a buffer of combine-side slots of this size.
  int layout_of(std::int64_t n) const {
    if (n == s_.E * C_ * s_.M) return 0;
    return slot_split_ ? 2 : 1;
  }

  std::vector<std::int64_t> iorder_args(int r) const {
    return {tok_begin(r, icount_), icount_, s_.M, s_.E, s_.k, C_, layout_, d_.G, icount_ / d_.G};
  }

  void iorder(const MoeOp& op) {
    icount_ = op.tokens;
    layout_ = layout_of(size_[cur_]);
    const std::string out = icount_ == d_.S ? "out" : "outl";
    buf(out, icount_ * s_.M);
    comb_ = cur_;
    compute(kernels(op, s_, d_)[0], false, "moe_iorder", {cur_, route_}, {out}, [&](int r) { return iorder_args(r); });
    cur_ = out;
  }

  void iorder_bwd(const MoeOp& op) {
    icount_ = op.tokens;
    layout_ = layout_of(size_[comb_]);
    buf("dcomb", size_[comb_]);
    buf("dw", icount_ * s_.k);
    compute(kernels(op, s_, d_)[0], true, "moe_iorder_bwd", {"dout", comb_, route_}, {"dcomb", "dw"},
            [&](int r) { return iorder_args(r); });
    cur_ = "dcomb";
    // A gathered layout: the next collective sends this member's part only.
    offset_next_ = layout_ != 0;
  }

  void order_bwd(const MoeOp& op) {
    dx_started_ = true;
    // Parm with the split before the gate gathers every member's dx rows
    // afterwards (bwd_mp_split_allgather), so it writes its own rows apart,
    // even when the MP group has one member.
    const bool gathered = o_.parm && o_.split == Split::before_gate;
    const std::string out = count_ == d_.S && !gathered ? "dx" : "dxl";
    buf(out, count_ * s_.M);
    const int layout = size_[cur_] == s_.E * C_ * s_.M ? 0 : 2;
    compute(kernels(op, s_, d_)[0], true, "moe_order_bwd", {cur_, route_ == "route_all" ? "route" : route_}, {out},
            [&, layout](int r) {
              return std::vector<std::int64_t>{tok_begin(r, count_),       count_, s_.M, s_.E, s_.k,
                                               slot_split_ ? full_C_ : C_, layout, d_.G, C_};
            });
    dx_ = out;
  }

  void gate_bwd(const MoeOp& op) {
    const auto ks = kernels(op, s_, d_);
    // dw covers icount_ tokens; the gate saw count_ of them, starting at this member's offset.
    compute(ks[0], true, "moe_gate_bwd", {"dw", "probs", "route", "x", "Wg"}, {"dWg", dx_}, [&](int r) {
      const std::int64_t dw_off = icount_ == count_ ? 0 : mp_index(r) * count_;
      return std::vector<std::int64_t>{tok_begin(r, count_), count_, s_.M, s_.E, s_.k, dw_off};
    });
    timing_only({ks.begin() + 1, ks.end()}, true);
  }

  void kernel_task(const MoeOp& op) {
    compute(kernels(op, s_, d_)[0], op.backward, "", {}, {}, [](int) { return std::vector<std::int64_t>{}; });
  }

  // A collective that maps the current buffer to `label`.out. grow: output =
  // input x grow; 0 = ReduceScatter (input / G); -1 = AllGather (x group size).
  void coll_step(CollOp cop, GroupKind kind, const MoeOp& op, int grow) {
    std::int64_t in = size_[cur_];
    std::uint64_t off = 0;
    if (offset_next_) {
      in /= d_.G;
      off = 1;  // per rank: mp_index * in, set in collective()
      offset_next_ = false;
    }
    const std::int64_t gsize = kind == GroupKind::ep ? d_.n_ep : d_.G;
    const std::int64_t out = grow > 0 ? in * grow : grow == 0 ? in / gsize : in * gsize;
    const std::string name = std::string(op.backward ? "g." : "") + op.label + ".out";
    buf(name, out);
    collective(cop, kind, op.elems, "comm", op.label, cur_, name, off ? static_cast<std::uint64_t>(in) : 0, s_.M);
    if (cop == CollOp::allgather && op.group == GroupKind::mp && !op.backward) layout_ = slot_split_ ? 2 : 1;
    cur_ = name;
  }

  void rs_then(const MoeOp& op) {
    const std::int64_t c = op.chunks;
    const std::int64_t in = size_[cur_];
    const std::string rs_out = std::string(op.backward ? "g." : "") + op.label + ".rs",
                      out_name = std::string(op.backward ? "g." : "") + op.label + ".out";
    const std::int64_t mid = in / d_.G;
    const std::int64_t out = op.then == MoeStep::saa ? mid * d_.G : mid;
    buf(rs_out, mid);
    buf(out_name, out);
    const std::int64_t cw = cdiv(s_.M, c);
    std::vector<int> start = prev_;
    std::vector<int> last(d_.P, -1);
    for (std::int64_t j = 0; j < c; ++j) {
      const std::int64_t c0 = j * cw, cn = std::min(s_.M, c0 + cw) - c0;
      if (cn <= 0) break;
      const std::string tag = c > 1 ? fmt::format("{}[{}]", op.label, j) : std::string(op.label);
      prev_ = start;
      collective(CollOp::reducescatter, op.group, cdiv(op.elems, c), "rs", tag + ".rs", cur_, rs_out, 0, s_.M, c0,
                 c > 1 ? cn : 0);
      if (j == 0)
        for (int r = 0; r < d_.P; ++r) start[r] = -1;  // later chunks follow on the rs stream
      const std::vector<int> after_rs = prev_;
      if (op.then == MoeStep::saa)
        collective(CollOp::saa, GroupKind::world, cdiv(op.elems, c) / d_.G, "comm", tag + ".saa", rs_out, out_name, 0,
                   s_.M, c0, c > 1 ? cn : 0, last);
      else
        collective(CollOp::alltoall, GroupKind::ep, cdiv(op.elems, c) / d_.G, "comm", tag + ".a2a", rs_out, out_name, 0,
                   s_.M, c0, c > 1 ? cn : 0, last);
      last = prev_;
      prev_ = after_rs;
    }
    prev_ = last;
    cur_ = out_name;
  }

  // One collective per group of `kind`; each rank's part depends on prev_ and
  // on `extra` (when given), and becomes the new prev_. `offset_per_mp`: the
  // send buffer starts at mp_index * offset_per_mp on each rank.
  void collective(CollOp op, GroupKind kind, std::int64_t elems, const std::string& stream, const std::string& label,
                  const std::string& send, const std::string& recv, std::uint64_t offset_per_mp, std::int64_t row,
                  std::int64_t c0 = 0, std::int64_t cn = 0, const std::vector<int>& extra = {}) {
    if (dry_) return;
    std::vector<std::vector<int>> groups;
    if (kind == GroupKind::ep)
      groups = g_.ep;
    else if (kind == GroupKind::world)
      groups = {std::vector<int>()};
    else
      groups = g_.mp;
    if (kind == GroupKind::world)
      for (int r = 0; r < d_.P; ++r) groups[0].push_back(r);
    const std::uint64_t bytes = static_cast<std::uint64_t>(elems) * static_cast<std::uint64_t>(d_.dtype_bytes);
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const bool solo = groups[gi].size() < 2 && op != CollOp::saa;
      Collective c;
      c.name = fmt::format("{}#{}.{}", label, n_, gi);
      c.op = op;
      c.group = groups[gi];
      c.bytes = bytes;
      c.inner = op == CollOp::saa ? d_.G : 0;
      if (op == CollOp::alltoall) c.algo = o_.a2a_algo;
      c.send_buf = send;
      c.recv_buf = recv;
      if (offset_per_mp) {
        for (int r : c.group) c.member_send_offset.push_back(offset_per_mp * static_cast<std::uint64_t>(mp_index(r)));
        c.send_count = offset_per_mp;
      }
      c.row = static_cast<std::uint64_t>(row);
      c.col_begin = static_cast<std::uint64_t>(c0);
      c.col_count = static_cast<std::uint64_t>(cn);
      if (solo) {
        // A group of one moves no bytes; it still has to put its data in place.
        c.bytes = 0;
      }
      const auto ids = b_.add_collective_tasks(c, stream, c.name);
      for (std::size_t m = 0; m < ids.size(); ++m) {
        const int r = groups[gi][m];
        if (!extra.empty() && extra[r] >= 0) b_.add_dep(ids[m], extra[r]);
        chain(r, ids[m]);
      }
    }
    ++n_;
  }

  const LayerSpec& s_;
  const Dims& d_;
  const ScheduleOptions& o_;
  Groups g_;
  TaskGraphBuilder b_;
  std::vector<int> prev_;
  int n_ = 0;
  std::map<std::string, std::int64_t> size_;
  std::string cur_ = "x", route_ = "route", ein_, comb_, dx_ = "dx";
  std::int64_t C_ = 0, full_C_ = 0, count_ = 0, icount_ = 0;
  int layout_ = 0;
  bool slot_split_ = false, in_backward_ = false, offset_next_ = false, dx_started_ = false, dry_ = false;
};

}  // namespace

TaskGraph build_graph(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions& o) {
  GraphBuilder gb(s, d, o);
  for (const MoeOp& op : ops) gb.add(op);
  return std::move(gb).build();
}

TaskGraph build_backward_graph(const std::vector<MoeOp>& fwd, const std::vector<MoeOp>& bwd, const LayerSpec& s,
                               const Dims& d, const ScheduleOptions& o) {
  GraphBuilder gb(s, d, o);
  gb.set_dry(true);
  for (const MoeOp& op : fwd) gb.add(op);
  gb.set_dry(false);
  for (const MoeOp& op : bwd) gb.add(op);
  return std::move(gb).build();
}

TaskGraph build_training_graph(const std::vector<MoeOp>& fwd, const std::vector<MoeOp>& bwd, const LayerSpec& s,
                               const Dims& d, const ScheduleOptions& o) {
  GraphBuilder gb(s, d, o);
  for (const MoeOp& op : fwd) gb.add(op);
  for (const MoeOp& op : bwd) gb.add(op);
  return std::move(gb).build();
}

// ---------------------------------------------------------------- closed form

AlphaBeta alpha_beta_from_topology(const Topology& t) {
  AlphaBeta ab;
  const int gpn = t.gpus_per_node();
  const Route intra = gpn > 1 ? t.route(0, 1) : (t.num_gpus() > 1 ? t.route(0, 1) : Route{});
  auto set = [](const Route& r, double* a, double* b) {
    *a = r.latency.to_seconds();
    *b = r.links.empty() ? 0.0 : 1.0 / static_cast<double>(r.bottleneck);
  };
  set(intra, &ab.alpha_intra, &ab.beta_intra);
  if (t.num_nodes() > 1) {
    set(t.route(0, gpn), &ab.alpha_inter, &ab.beta_inter);
    int nics = 0;
    for (int v = 0; v < t.num_devices(); ++v)
      if (t.device(v).node == 0 && t.device(v).kind == DeviceKind::nic) ++nics;
    // GPUs of a node share its NICs: inter-node beta times GPUs per NIC.
    const double share = static_cast<double>(gpn) / std::max(1, nics);
    ab.beta_inter *= std::max(1.0, share);
  } else {
    ab.alpha_inter = ab.alpha_intra;
    ab.beta_inter = ab.beta_intra;
  }
  return ab;
}

namespace {

struct Costs {
  const AlphaBeta& ab;
  const Dims& d;
  bool ep_inter;  // EP groups cross nodes
  double a(bool inter) const { return inter ? ab.alpha_inter : ab.alpha_intra; }
  double b(bool inter) const { return inter ? ab.beta_inter : ab.beta_intra; }
  // Ring-style forms with group size p, n bytes (PARM.md).
  double ring(double n, int p, bool inter) const {
    if (p < 2) return 0;
    return (p - 1) * a(inter) + n * (p - 1) / p * b(inter);
  }
  // A measured cost when the calibration has this (op, group size, link), else `form`.
  double measured(CollOp op, int p, bool inter, double n, double form) const {
    if (ab.calibration && p >= 2)
      if (const CalibratedCollective* e = ab.calibration->find(op, p, inter))
        return e->time(static_cast<std::uint64_t>(n)).to_seconds();
    return form;
  }
  double a2a(double n) const { return measured(CollOp::alltoall, d.n_ep, ep_inter, n, ring(n, d.n_ep, ep_inter)); }
  double ag(double n) const { return measured(CollOp::allgather, d.G, false, n, ring(n, d.G, false)); }
  double rs(double n) const { return measured(CollOp::reducescatter, d.G, false, n, ring(n, d.G, false)); }
  double ar(double n) const { return measured(CollOp::allreduce, d.G, false, n, 2 * ring(n, d.G, false)); }
  double ar_ep(double n) const {
    return measured(CollOp::allreduce, d.n_ep, ep_inter, n, 2 * ring(n, d.n_ep, ep_inter));
  }
  // The fused collective: W rounds. Round i's AlltoAll chunk (none in round 0,
  // which is the rank's own) goes out on one chain; its AllGather to the G-1
  // node peers starts when the chunk is in and the previous gather is done.
  double saa(double n) const {
    const int W = d.n_ep;
    const double chunk = n / W;
    const double tx = a(ep_inter) + chunk * b(ep_inter);
    const double tg = d.G > 1 ? ab.alpha_intra + (d.G - 1) * chunk * ab.beta_intra : 0.0;
    double g_end = 0;
    for (int i = 0; i < W; ++i) g_end = std::max(i * tx, g_end) + tg;
    return std::max(g_end, (W - 1) * tx);
  }
};

}  // namespace

double model_time(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions&,
                  const AlphaBeta& ab, const GpuProfile& gpu) {
  const Costs c{ab, d, ab.alpha_inter != ab.alpha_intra || ab.beta_inter != ab.beta_intra};
  const double bytes = d.dtype_bytes;
  double t = 0;
  for (const MoeOp& op : ops) {
    const double n = static_cast<double>(op.elems) * bytes;
    switch (op.kind) {
      case MoeStep::gate:
      case MoeStep::order:
      case MoeStep::iorder:
      case MoeStep::experts:
      case MoeStep::kernel:
      case MoeStep::slot_slice:
        for (const auto& k : kernels(op, s, d)) {
          std::string kind;  // only needed to look up a calibration table
          if (ab.calibration) kind = op.backward ? std::string("bwd_") + k.name : std::string(k.name);
          t += compute_time(gpu, k.op, k.flops, k.bytes, s.dtype, ab.calibration, kind, k.dims()).to_seconds();
        }
        break;
      case MoeStep::a2a:
        t += c.a2a(n);
        break;
      case MoeStep::ag:
        t += c.ag(n);
        break;
      case MoeStep::rs:
        t += c.rs(n);
        break;
      case MoeStep::ar:
        t += op.group == GroupKind::ep ? c.ar_ep(n) : c.ar(n);
        break;
      case MoeStep::saa:
        t += c.saa(n);
        break;
      case MoeStep::rs_then: {
        const int ch = op.chunks;
        const double t1 = c.rs(n / ch);
        const double t2 = op.then == MoeStep::saa ? c.saa(n / ch / d.G) : c.a2a(n / ch / d.G);
        t += t1 + (ch - 1) * std::max(t1, t2) + t2;
        break;
      }
      default:
        break;
    }
  }
  return t;
}

ModelTime model_layer(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, const AlphaBeta& ab,
                      const GpuProfile& gpu) {
  const auto fwd = forward_ops(s, d, o);
  const auto bwd = backward_ops(fwd, s, d, o);
  return {model_time(fwd, s, d, o, ab, gpu), model_time(bwd, s, d, o, ab, gpu)};
}

}  // namespace parmsim::moe
