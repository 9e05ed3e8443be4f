#include "sim/moe/layer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

void set_key(LayerSpec* s, ScheduleOptions* o, const std::string& key, const std::string& v,
             const std::string& where) {
  if (key == "B") s->B = parse_int(key, v, where, 1);
  else if (key == "L") s->L = parse_int(key, v, where, 1);
  else if (key == "M") s->M = parse_int(key, v, where, 1);
  else if (key == "H") s->H = parse_int(key, v, where, 1);
  else if (key == "E") s->E = parse_int(key, v, where, 1);
  else if (key == "k") s->k = parse_int(key, v, where, 1);
  else if (key == "mp") s->mp = static_cast<int>(parse_int(key, v, where, 1));
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
    if (v == "before_gate") o->split = Split::before_gate;
    else if (v == "after_order") o->split = Split::after_order;
    else throw ParmError(fmt::format("{}: key 'split': expected before_gate or after_order, got '{}'", where, v));
    o->name = "custom";
  } else if (o && key == "gather") {
    if (v == "after_iorder") o->gather = Gather::after_iorder;
    else if (v == "before_iorder") o->gather = Gather::before_iorder;
    else throw ParmError(fmt::format("{}: key 'gather': expected after_iorder or before_iorder, got '{}'", where, v));
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
    throw ParmError(fmt::format("{}: unknown layer key '{}'; layer keys: B, L, M, H, E, k, f, mp, dtype{}", where, key,
                                o ? "; schedule options: split, gather, fuse_dispatch, fuse_combine, chunks, a2a_algo"
                                  : ""));
  }
}

void apply_assignments(LayerSpec* s, ScheduleOptions* o, const std::vector<std::string>& kv, const std::string& where) {
  for (const std::string& a : kv) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ParmError(fmt::format("{}: '{}' is not key=value", where, a));
    set_key(s, o, a.substr(0, eq), a.substr(eq + 1), where);
  }
}

std::string spec_string(const LayerSpec& s) {
  return fmt::format("B={},L={},M={},H={},E={},k={},f={},mp={},dtype={}", s.B, s.L, s.M, s.H, s.E, s.k, s.f, s.mp,
                     to_string(s.dtype));
}

// ---------------------------------------------------------------- groups, dims

Groups make_groups(int P, int G) {
  if (G <= 0 || P <= 0 || P % G != 0)
    throw ParmError(fmt::format("mp={} must divide the number of GPUs P={}", G, P));
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
    throw ParmError(fmt::format("mp={} must divide the GPUs of a node ({}): MP and ESP groups stay inside a node",
                                s.mp, gpus_per_node));
  if (P % s.mp != 0) throw ParmError(fmt::format("mp={} must divide the number of GPUs P={}", s.mp, P));
  d.n_ep = P / s.mp;
  if (s.E % d.n_ep != 0)
    throw ParmError(fmt::format("E={} experts must be divisible by the expert-parallel size N_EP = P/mp = {}", s.E,
                                d.n_ep));
  if (s.k > s.E) throw ParmError(fmt::format("top-k k={} exceeds the number of experts E={}", s.k, s.E));
  d.S = s.B * s.L;
  if (d.S % s.mp != 0)
    throw ParmError(fmt::format("B*L = {} tokens must be divisible by mp={} (MP-Split keeps S/mp tokens per rank)",
                                d.S, s.mp));
  d.E_local = s.E / d.n_ep;
  d.T_base = capacity(s.k, s.f, d.S, s.E);
  d.T_parm = capacity(s.k, s.f, d.S / s.mp, s.E);
  if (d.T_parm < 1 || d.T_base < 1)
    throw ParmError(fmt::format("capacity of zero tokens per expert: k*f*B*L/(mp*E) = {}*{}*{}/({}*{}) < 1", s.k,
                                s.f, d.S, s.mp, s.E));
  if (s.H % s.mp != 0) throw ParmError(fmt::format("H={} must be divisible by mp={} (expert sharding)", s.H, s.mp));
  d.dtype_bytes = dtype_bytes(s.dtype);
  return d;
}

// ---------------------------------------------------------------- op lists

namespace {

MoeOp coll_op(OpKind2 k, GroupKind g, std::int64_t elems, const char* label) {
  MoeOp o{k};
  o.group = g;
  o.elems = elems;
  o.label = label;
  return o;
}

MoeOp compute_op(OpKind2 k, std::int64_t tokens, std::int64_t elems, const char* label) {
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
    v.push_back(compute_op(OpKind2::gate, d.S, 0, "gate"));
    v.push_back(compute_op(OpKind2::order, d.S, D, "order"));
    v.push_back(coll_op(OpKind2::a2a, GroupKind::ep, D, "dispatch_a2a"));
    v.push_back(compute_op(OpKind2::experts, 0, D, "experts"));
    v.push_back(coll_op(OpKind2::ar, GroupKind::esp, D, "esp_allreduce"));
    v.push_back(coll_op(OpKind2::a2a, GroupKind::ep, D, "combine_a2a"));
    v.push_back(compute_op(OpKind2::iorder, d.S, D, "iorder"));
    return v;
  }
  if (o.fuse_combine && o.gather != Gather::before_iorder)
    throw ParmError("fuse_combine needs gather=before_iorder (the MP-AllGather must follow the combine AlltoAll)");
  if (o.chunks < 1) throw ParmError("chunks must be at least 1");
  std::int64_t Dl = 0;  // per-rank dispatch buffer after MP-Split (D/G)
  if (o.split == Split::before_gate) {
    Dl = s.E * d.T_parm * M;
    v.push_back(coll_op(OpKind2::split, GroupKind::mp, d.S * M, "mp_split"));
    v.push_back(compute_op(OpKind2::gate, d.S / G, 0, "gate"));
    v.push_back(compute_op(OpKind2::order, d.S / G, Dl, "order"));
  } else {
    const std::int64_t Tl = (d.T_base + G - 1) / G;
    Dl = s.E * Tl * M;
    v.push_back(compute_op(OpKind2::gate, d.S, 0, "gate"));
    v.push_back(compute_op(OpKind2::order, d.S, s.E * d.T_base * M, "order"));
    v.push_back(coll_op(OpKind2::split, GroupKind::mp, G * Dl, "mp_split"));
  }
  const std::int64_t Dfull = G * Dl;
  if (o.fuse_dispatch) {
    v.push_back(coll_op(OpKind2::saa, GroupKind::world, Dl, "dispatch_saa"));
  } else {
    v.push_back(coll_op(OpKind2::a2a, GroupKind::ep, Dl, "dispatch_a2a"));
    v.push_back(coll_op(OpKind2::ag, GroupKind::esp, Dfull, "esp_allgather"));
  }
  v.push_back(compute_op(OpKind2::experts, 0, Dfull, "experts"));
  MoeOp rs = coll_op(OpKind2::rs_then, GroupKind::esp, Dfull, "esp_rs_combine");
  rs.chunks = o.chunks;
  if (o.gather == Gather::after_iorder) {
    rs.then = OpKind2::a2a;
    v.push_back(rs);
    v.push_back(compute_op(OpKind2::iorder, d.S / G, Dl, "iorder"));
    v.push_back(coll_op(OpKind2::ag, GroupKind::mp, d.S * M, "mp_allgather"));
  } else {
    rs.then = o.fuse_combine ? OpKind2::saa : OpKind2::a2a;
    v.push_back(rs);
    if (!o.fuse_combine) v.push_back(coll_op(OpKind2::ag, GroupKind::mp, Dfull, "mp_allgather"));
    v.push_back(compute_op(OpKind2::iorder, d.S, Dfull, "iorder"));
  }
  return v;
}

std::vector<MoeOp> backward_ops(const std::vector<MoeOp>& fwd, const LayerSpec&, const Dims& d,
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
  auto ag = [](GroupKind g, std::int64_t n, const char* l) { return coll_op(OpKind2::ag, g, n, l); };
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    const MoeOp& f = *it;
    switch (f.kind) {
      case OpKind2::split: prim.push_back({ag(GroupKind::mp, f.elems, "bwd_mp_split_allgather")}); break;
      case OpKind2::ag:
        if (f.group == GroupKind::mp)
          prim.push_back({coll_op(OpKind2::mp_gather_free, GroupKind::mp, f.elems, "bwd_mp_allgather_slice")});
        else
          prim.push_back({coll_op(OpKind2::rs, f.group, f.elems, "bwd_esp_allgather")});
        break;
      case OpKind2::rs: prim.push_back({ag(f.group, f.elems, "bwd_esp_reducescatter")}); break;
      case OpKind2::saa:  // dispatch: AllGather_esp(AlltoAll(x))
        prim.push_back({coll_op(OpKind2::rs, GroupKind::esp, G * f.elems, "bwd_dispatch_rs"), true});
        prim.push_back({coll_op(OpKind2::a2a, GroupKind::ep, f.elems, "bwd_dispatch_a2a"), true});
        break;
      case OpKind2::rs_then: {
        // ReduceScatter_esp(n), then AlltoAll(n/G) (and, fused, the MP-AllGather,
        // whose adjoint is free): adjoint = AlltoAll(n/G), then AllGather_esp(n).
        const bool fz = f.then == OpKind2::saa;
        prim.push_back({coll_op(OpKind2::a2a, GroupKind::ep, f.elems / G, "bwd_combine_a2a"), fz});
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
    if (prim[i].op.kind == OpKind2::ar && prim[i + 1].op.kind == OpKind2::experts) std::swap(prim[i], prim[i + 1]);
  // 2. Fuse as the forward pass did: an AlltoAll followed by an ESP-AllGather
  //    of G times its size becomes an SAA when the pair came from a fused op;
  //    an ESP-ReduceScatter followed by an AlltoAll of 1/G its size becomes a
  //    chunked pipeline when the schedule pipelines or the pair was fused.
  std::vector<MoeOp> out;
  for (std::size_t i = 0; i < prim.size(); ++i) {
    const MoeOp& a = prim[i].op;
    const bool has_next = i + 1 < prim.size();
    if (has_next && a.kind == OpKind2::a2a && prim[i].fused && prim[i + 1].fused &&
        prim[i + 1].op.kind == OpKind2::ag && prim[i + 1].op.elems == G * a.elems) {
      out.push_back(coll_op(OpKind2::saa, GroupKind::world, a.elems, "bwd_combine_saa"));
      out.back().backward = true;
      ++i;
      continue;
    }
    if (has_next && a.kind == OpKind2::rs && prim[i + 1].op.kind == OpKind2::a2a &&
        prim[i + 1].op.elems * G == a.elems && (o.chunks > 1 || prim[i].fused)) {
      MoeOp p = coll_op(OpKind2::rs_then, a.group, a.elems, "bwd_dispatch_rs_a2a");
      p.then = OpKind2::a2a;
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
};

// The compute kernels of one op on one rank; shared by the graph builder and the closed form.
std::vector<Kernel> kernels(const MoeOp& o, const LayerSpec& s, const Dims& d) {
  const std::uint64_t b = static_cast<std::uint64_t>(d.dtype_bytes);
  const std::uint64_t M = s.M, E = s.E, t = o.tokens, h = s.H / d.G;
  const std::uint64_t w = o.backward ? 2 : 1;  // backward GEMMs: data and weight gradients
  switch (o.kind) {
    case OpKind2::gate:
      return {{"gate_gemm", OpKind::gemm, w * 2 * t * M * E, w * (t * M + M * E + t * E) * b},
              {"softmax_topk", OpKind::topk, 0, 2 * t * E * b}};
    case OpKind2::order:
      return {{"order", OpKind::order, 0, (t * M + static_cast<std::uint64_t>(o.elems)) * b}};
    case OpKind2::iorder:
      return {{"iorder", OpKind::iorder, 0, (t * M + static_cast<std::uint64_t>(o.elems)) * b}};
    case OpKind2::experts: {
      const std::uint64_t rows = static_cast<std::uint64_t>(o.elems) / M;
      Kernel fc1{"expert_fc1", OpKind::gemm, w * 2 * rows * M * h, w * (rows * M + M * h + rows * h) * b};
      Kernel act{"expert_act", OpKind::activation, 0, (o.backward ? 3 : 2) * rows * h * b};
      Kernel fc2{"expert_fc2", OpKind::gemm, w * 2 * rows * h * M, w * (rows * h + h * M + rows * M) * b};
      if (o.backward) return {fc2, act, fc1};
      return {fc1, act, fc2};
    }
    case OpKind2::kernel:
      return {{o.label, o.kernel_op, o.flops, o.bytes}};
    default:
      return {};
  }
}

bool is_compute(OpKind2 k) {
  return k == OpKind2::gate || k == OpKind2::order || k == OpKind2::iorder || k == OpKind2::experts ||
         k == OpKind2::kernel;
}

}  // namespace

// ---------------------------------------------------------------- task graph

namespace {

class GraphBuilder {
 public:
  GraphBuilder(const LayerSpec& s, const Dims& d, const ScheduleOptions& o)
      : s_(s), d_(d), o_(o), g_(make_groups(d.P, d.G)), b_(d.P), prev_(d.P, -1) {
    b_.add_stream_all("compute");
    b_.add_stream_all("comm");
    b_.add_stream_all("rs");
  }

  void add(const MoeOp& op) {
    if (is_compute(op.kind)) {
      for (const Kernel& k : kernels(op, s_, d_))
        for (int r = 0; r < d_.P; ++r) {
          Task t;
          t.name = fmt::format("{}{}#{}@{}", op.backward ? "bwd_" : "", k.name, n_++, r);
          t.rank = r;
          t.stream = 0;
          t.op = k.op;
          t.flops = k.flops;
          t.bytes = k.bytes;
          t.dtype = s_.dtype;
          chain(r, b_.add_task(t));
        }
      return;
    }
    switch (op.kind) {
      case OpKind2::split:
      case OpKind2::mp_gather_free:
        return;  // views: no work
      case OpKind2::rs_then: {
        const std::int64_t c = op.chunks;
        std::vector<int> start = prev_;
        std::vector<int> last(d_.P, -1);
        for (std::int64_t j = 0; j < c; ++j) {
          const std::string tag = c > 1 ? fmt::format("{}[{}]", op.label, j) : std::string(op.label);
          // Stage 1: ReduceScatter of chunk j on the rs stream, in order.
          prev_ = start;
          collective(CollOp::reducescatter, op.group, chunk(op.elems, c), "rs", tag + ".rs");
          if (j == 0)
            for (int r = 0; r < d_.P; ++r) start[r] = -1;  // later chunks follow on the rs stream
          // Stage 2: AlltoAll or SAA of the reduced chunk on the comm stream.
          const std::vector<int> after_rs = prev_;
          for (int r = 0; r < d_.P; ++r) prev_[r] = after_rs[r];
          if (op.then == OpKind2::saa)
            collective(CollOp::saa, GroupKind::world, chunk(op.elems, c) / d_.G, "comm", tag + ".saa", last);
          else
            collective(CollOp::alltoall, GroupKind::ep, chunk(op.elems, c) / d_.G, "comm", tag + ".a2a", last);
          last = prev_;
          prev_ = after_rs;
        }
        prev_ = last;
        return;
      }
      case OpKind2::a2a: collective(CollOp::alltoall, op.group, op.elems, "comm", op.label); return;
      case OpKind2::ag: collective(CollOp::allgather, op.group, op.elems, "comm", op.label); return;
      case OpKind2::rs: collective(CollOp::reducescatter, op.group, op.elems, "comm", op.label); return;
      case OpKind2::ar: collective(CollOp::allreduce, op.group, op.elems, "comm", op.label); return;
      case OpKind2::saa: collective(CollOp::saa, GroupKind::world, op.elems, "comm", op.label); return;
      default: throw ParmError("internal: unexpected op in the MoE graph builder");
    }
  }

  TaskGraph build() && { return std::move(b_).build(); }

 private:
  static std::int64_t chunk(std::int64_t n, std::int64_t c) { return (n + c - 1) / c; }

  void chain(int rank, int task) {
    if (prev_[rank] >= 0) b_.add_dep(task, prev_[rank]);
    prev_[rank] = task;
  }

  // One collective per group of `kind`; each rank's part depends on prev_ and
  // on `extra` (when given), and becomes the new prev_.
  void collective(CollOp op, GroupKind kind, std::int64_t elems, const std::string& stream, const std::string& label,
                  const std::vector<int>& extra = {}) {
    std::vector<std::vector<int>> groups;
    if (kind == GroupKind::ep) groups = g_.ep;
    else if (kind == GroupKind::world) groups = {std::vector<int>()};
    else groups = g_.mp;
    if (kind == GroupKind::world)
      for (int r = 0; r < d_.P; ++r) groups[0].push_back(r);
    const std::uint64_t bytes = static_cast<std::uint64_t>(elems) * static_cast<std::uint64_t>(d_.dtype_bytes);
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      if (groups[gi].size() < 2 && op != CollOp::saa) continue;  // a group of one moves nothing
      Collective c;
      c.name = fmt::format("{}#{}.{}", label, n_, gi);
      c.op = op;
      c.group = groups[gi];
      c.bytes = bytes;
      c.inner = op == CollOp::saa ? d_.G : 0;
      if (op == CollOp::alltoall) c.algo = o_.a2a_algo;
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
};

}  // namespace

TaskGraph build_graph(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions& o) {
  GraphBuilder gb(s, d, o);
  for (const MoeOp& op : ops) gb.add(op);
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
  double a2a(double n) const { return ring(n, d.n_ep, ep_inter); }
  double ag(double n) const { return ring(n, d.G, false); }
  double ar(double n) const { return 2 * ring(n, d.G, false); }
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
      case OpKind2::gate:
      case OpKind2::order:
      case OpKind2::iorder:
      case OpKind2::experts:
      case OpKind2::kernel:
        for (const auto& k : kernels(op, s, d)) t += compute_time(gpu, k.op, k.flops, k.bytes, s.dtype).to_seconds();
        break;
      case OpKind2::a2a: t += c.a2a(n); break;
      case OpKind2::ag:
      case OpKind2::rs: t += c.ag(n); break;
      case OpKind2::ar: t += op.group == GroupKind::ep ? 2 * c.a2a(n) : c.ar(n); break;
      case OpKind2::saa: t += c.saa(n); break;
      case OpKind2::rs_then: {
        const int ch = op.chunks;
        const double t1 = c.ag(n / ch);
        const double t2 = op.then == OpKind2::saa ? c.saa(n / ch / d.G) : c.a2a(n / ch / d.G);
        t += t1 + (ch - 1) * std::max(t1, t2) + t2;
        break;
      }
      default: break;
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
