// The closed-form (alpha-beta) time of a layer's op lists.
#include "sim/moe/layer.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <span>

#include "sim/core/error.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/coll/collective_cost.hpp"
#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/moe/layer_kernels.hpp"

namespace parmsim::moe {

// ---------------------------------------------------------------- closed form

AlphaBeta alpha_beta_from_topology(const Topology& t, Workspace* ws, bool symmetry) {
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
  ab.topo = &t;
  ab.costs = std::make_shared<const CollectiveCosts>(t, ws, symmetry);
  ab.handles = std::make_shared<BoundHandles>();
  return ab;
}

namespace {

struct Costs {
  const AlphaBeta& ab;
  const Dims& d;
  const std::string& a2a_algo;
  const std::string& saa_algo;
  bool ep_inter;  // EP groups cross nodes
  bool block_gather = false;  // the AllGather dispatcher's block collectives are bound (kAgWorld, kRsWorld)
  double a(bool inter) const { return inter ? ab.alpha_inter : ab.alpha_intra; }
  double b(bool inter) const { return inter ? ab.beta_inter : ab.beta_intra; }
  // Ring-style forms with group size p, n bytes (docs/parm.md): the fallback without a topology.
  double ring(double n, int p, bool inter) const {
    if (p < 2) return 0;
    return (p - 1) * a(inter) + n * (p - 1) / p * b(inter);
  }
  // The collectives the closed form asks for, on group 0 of each kind
  // (groups of a kind are alike: MP groups are G consecutive ranks, EP groups
  // stride G), bound once per (CollectiveCosts, P, G, algorithms) and kept in
  // the AlphaBeta's table: a lookup per evaluation, then each collective is
  // timed by its bound form (no cache lookups, no NCCL tuner search).
  enum Slot { kA2aEp, kAgMp, kRsMp, kArMp, kArEp, kSaa, kAgWorld, kRsWorld, kSlots };
  // Per slot, the bound collective where planned() times with it (a group of
  // two or more; the fused collective's world group always), else null. They
  // live as long as ab.costs.
  std::array<const BoundCollective*, kSlots> live{};
  void init_handles() {
    static_assert(kSlots == std::tuple_size_v<BoundHandles::Handles>);
    BoundHandles::Key key{ab.costs.get(), d.P, d.G, d.n_ep, a2a_algo, saa_algo, block_gather};
    if (ab.handles && ab.handles->find(key, live)) return;
    // Every group of a kind runs at once: EP groups are copies of group 0
    // shifted by 1 rank, MP groups by G ranks; they share NICs and PCIe links.
    // With DP > 1 replicas of the G*N_EP block (docs/parm.md, "Layouts"), the
    // fused collective's copies are the blocks; the EP groups' copies are the
    // G of a block (stride 1) or, with G = 1, the DP blocks' (stride N_EP):
    // with G > 1 and DP > 1 the other blocks' EP groups are left out of the
    // closed form (copies on one stride only), the simulator runs them all.
    Collective ep, mp, world;
    const int block = d.G * d.n_ep;
    for (int r = 0; r < block; r += d.G) ep.group.push_back(r);
    for (int r = 0; r < d.G; ++r) mp.group.push_back(r);
    for (int r = 0; r < block; ++r) world.group.push_back(r);
    const Concurrent ep_k = d.dp > 1 && d.G == 1 ? Concurrent{d.dp, d.n_ep} : Concurrent{d.G, 1},
                     mp_k{d.P / d.G, d.G}, world_k = d.dp > 1 ? Concurrent{d.dp, block} : Concurrent{};
    auto bind = [&](Collective& c, CollOp op, const std::string& algo, Concurrent k) {
      c.op = op;
      c.algo = algo;
      c.inner = op == CollOp::saa ? d.G : 0;
      return &ab.costs->bound(c, k);
    };
    const BoundCollective* h[kSlots] = {};
    h[kA2aEp] = bind(ep, CollOp::alltoall, a2a_algo, ep_k);
    h[kArEp] = bind(ep, CollOp::allreduce, "", ep_k);
    h[kAgMp] = bind(mp, CollOp::allgather, "", mp_k);
    h[kRsMp] = bind(mp, CollOp::reducescatter, "", mp_k);
    h[kArMp] = bind(mp, CollOp::allreduce, "", mp_k);
    h[kSaa] = bind(world, CollOp::saa, saa_algo, world_k);
    if (block_gather) {
      Collective wa = world, wr = world;  // bind() sets op and algo on its copy
      h[kAgWorld] = bind(wa, CollOp::allgather, "", world_k);
      h[kRsWorld] = bind(wr, CollOp::reducescatter, "", world_k);
    }
    for (int slot = 0; slot < kSlots; ++slot) {
      const int size = slot == kA2aEp || slot == kArEp             ? d.n_ep
                       : slot == kAgWorld || slot == kRsWorld ? block
                                                              : d.G;  // the groups built above
      live[slot] = slot == kSaa || size >= 2 ? h[slot] : nullptr;
    }
    if (ab.handles) ab.handles->add(std::move(key), live);  // else an AlphaBeta made by hand: bound again next time
  }
  // The cost form of the plan the simulator runs, on group 0 of this kind, or
  // `fallback()` without a topology (called only then: the ring forms and the
  // SAA round loop are not worked out when a cost form decides).
  template <class Fallback>
  double planned(Slot slot, double n, Fallback fallback) const {
    if (!ab.costs) return fallback();
    const BoundCollective* b = live[slot];
    return b ? b->time_s(n) : 0;
  }
  // A measured cost when the calibration has this (op, group size, link), else `form`.
  double measured(CollOp op, int p, bool inter, double n, double form) const {
    if (ab.calibration && p >= 2)
      if (const CalibratedCollective* e = ab.calibration->find(op, p, inter))
        return e->time(static_cast<std::uint64_t>(n)).to_seconds();
    return form;
  }
  double a2a(double n) const {
    if (d.n_ep < 2) return 0;
    return measured(CollOp::alltoall, d.n_ep, ep_inter, n,
                    planned(kA2aEp, n, [&] { return ring(n, d.n_ep, ep_inter); }));
  }
  double ag(double n) const {
    return measured(CollOp::allgather, d.G, false, n,
                    planned(kAgMp, n, [&] { return ring(n, d.G, false); }));
  }
  double rs(double n) const {
    return measured(CollOp::reducescatter, d.G, false, n,
                    planned(kRsMp, n, [&] { return ring(n, d.G, false); }));
  }
  double ar(double n) const {
    return measured(CollOp::allreduce, d.G, false, n,
                    planned(kArMp, n, [&] { return 2 * ring(n, d.G, false); }));
  }
  // The block's (G*N_EP ranks) AllGather and ReduceScatter: the AllGather dispatcher's.
  double ag_block(double n) const {
    const int p = d.G * d.n_ep;
    return measured(CollOp::allgather, p, ep_inter, n, planned(kAgWorld, n, [&] { return ring(n, p, ep_inter); }));
  }
  double rs_block(double n) const {
    const int p = d.G * d.n_ep;
    return measured(CollOp::reducescatter, p, ep_inter, n,
                    planned(kRsWorld, n, [&] { return ring(n, p, ep_inter); }));
  }
  double ar_ep(double n) const {
    return measured(CollOp::allreduce, d.n_ep, ep_inter, n,
                    planned(kArEp, n, [&] { return 2 * ring(n, d.n_ep, ep_inter); }));
  }
  // The fused collective: the released kernel's plan; without a topology, the
  // paper's form over W = N_EP rounds: round i's AlltoAll chunk goes out on one
  // chain, its AllGather to the G-1 node peers when the chunk is in and the
  // previous gather is done.
  double saa(double n) const {
    return planned(kSaa, n, [&] {
      const int W = d.n_ep;
      const double chunk = n / W;
      const double tx = a(ep_inter) + chunk * b(ep_inter);
      const double tg = d.G > 1 ? ab.alpha_intra + (d.G - 1) * chunk * ab.beta_intra : 0.0;
      double g_end = 0;
      for (int i = 0; i < W; ++i) g_end = std::max(i * tx, g_end) + tg;
      return std::max(g_end, (W - 1) * tx);
    });
  }
};

}  // namespace

namespace {

Costs make_costs(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, const AlphaBeta& ab) {
  Costs c{ab, d, o.a2a_algo, s.saa_algo, ab.alpha_inter != ab.alpha_intra || ab.beta_inter != ab.beta_intra,
          !o.parm && s.token_dispatcher == TokenDispatcher::allgather};
  if (ab.costs) c.init_handles();
  return c;
}

// The closed-form time of ops, one at a time. `c`: make_costs(s, d, o, ab),
// made once for a layer's forward and backward lists; `rates`, the GPU's
// (used without a calibration).
struct Clock {
  const LayerSpec& s;
  const Dims& d;
  const Costs& c;
  const AlphaBeta& ab;
  const GpuProfile& gpu;
  const ComputeRates& rates;
  double bytes = d.dtype_bytes;
  double reps = static_cast<double>(expert_repeats(s, d));

  // The op's time, `backward` standing for op.backward.
  // `seen`: fp8_wire's experts_seen at this op (the caller tracks it along the list: track).
  __attribute__((always_inline)) double op(const MoeOp& op, bool backward, bool seen = false) const {
    switch (op.kind) {
      case MoeStep::gate:
      case MoeStep::order:
      case MoeStep::iorder:
      case MoeStep::experts:
      case MoeStep::kernel:
      case MoeStep::shared:
      case MoeStep::slot_slice: {
        double one = kernels_seconds(op, backward, s, d, rates, ab.calibration);
        if (op.kind == MoeStep::experts) {
          one *= reps;
          if (op.allreduce_each) one += reps * c.ar(static_cast<double>(expert_elems(op, s, d)) * bytes);
        }
        return one;
      }
      default:
        return coll(op.kind, op.group, op.elems, op.then, op.chunks, fp8_wire(d, op.kind, op.data, seen));
    }
  }
  // fp8_wire's experts_seen along a list: set by an experts op, cleared by a gate (a layer's start).
  static void track(bool& seen, MoeStep kind) {
    if (kind == MoeStep::gate) seen = false;
    if (kind == MoeStep::experts) seen = true;
  }
  // A collective's time (0 for a view or a compute step).
  __attribute__((always_inline)) double coll(MoeStep kind, GroupKind group, std::int64_t elems, MoeStep then,
                                             int chunks, bool wire = false) const {
    const double n = wire ? static_cast<double>(wire_bytes(d, static_cast<std::uint64_t>(elems), true))
                          : static_cast<double>(elems) * bytes;
    switch (kind) {
      case MoeStep::a2a:
        return c.a2a(n);
      case MoeStep::ag:
        return group == GroupKind::world ? c.ag_block(n) : c.ag(n);
      case MoeStep::rs:
        return group == GroupKind::world ? c.rs_block(n) : c.rs(n);
      case MoeStep::ar:
        return group == GroupKind::ep ? c.ar_ep(n) : c.ar(n);
      case MoeStep::saa:
        return c.saa(n);
      case MoeStep::rs_then: {
        const int ch = chunks;
        const double t1 = c.rs(n / ch);
        const double t2 = then == MoeStep::saa ? c.saa(n / ch / d.G) : c.a2a(n / ch / d.G);
        return t1 + (ch - 1) * std::max(t1, t2) + t2;
      }
      default:
        return 0;
    }
  }
  double sum(std::span<const MoeOp> ops) const {
    bool seen = false;
    if (s.host_op > Time::zero()) {
      HostRun st;
      for (const MoeOp& o : ops) {
        track(seen, o.kind);
        hosted(st, o, o.backward, seen);
      }
      return st.gpu;
    }
    double t = 0;
    for (const MoeOp& o : ops) {
      track(seen, o.kind);
      t += op(o, o.backward, seen);
    }
    return t;
  }
  // A backward list as backward_plan gives it: the same sum as over the
  // MoeOps backward_ops writes out.
  double sum(std::span<const BackwardOp> ops) const {
    bool seen = false;
    if (s.host_op > Time::zero()) {
      HostRun st;
      for (const BackwardOp& b : ops) {
        track(seen, b.kind);
        if (b.src)
          hosted(st, *b.src, true, seen);
        else
          hosted_coll(st, b.kind, coll(b.kind, b.group, b.elems, b.then, b.chunks, fp8_wire(d, b.kind, b.data, seen)),
                      b.chunks);
      }
      return st.gpu;
    }
    double t = 0;
    for (const BackwardOp& b : ops) {
      track(seen, b.kind);
      t += b.src ? op(*b.src, true, seen)
                 : coll(b.kind, b.group, b.elems, b.then, b.chunks, fp8_wire(d, b.kind, b.data, seen));
    }
    return t;
  }

  // ---- the host (LayerSpec::host_op > 0), as the graph builder's host tasks
  // run it on each rank: the host issues every kernel launch and collective
  // call in order, host_op each; the GPU runs a task once the host issued it
  // (layer_kernels.hpp: host_split) and after the task before it.
  struct HostRun {
    double gpu = 0, host = 0;  // when the GPU is free, and when the host is
  };
  double host_s() const { return s.host_op.to_seconds(); }
  double ktime(const Kernel& k, bool backward) const {
    std::string kind;  // only needed to look up a calibration table
    if (ab.calibration) kind = backward ? std::string("bwd_") + k.name : std::string(k.name);
    return kernel_time(k, s.dtype, gpu, ab.calibration, kind).to_seconds();
  }
  void hosted_kernel(HostRun& st, const Kernel& k, bool backward) const {
    const HostSplit h = host_split(k);
    st.host += host_s();
    st.gpu = std::max(st.gpu, st.host) + ktime(h.main, backward);
    if (h.last.launches > 0) {
      st.host += (k.launches - 1) * host_s();
      st.gpu = std::max(st.gpu, st.host) + ktime(h.last, backward);
    }
    if (h.sync) st.host = std::max(st.host, st.gpu);
  }
  // A collective step taking `t`: one call each (a ReduceScatter pipelined
  // into an AlltoAll or SAA: two per chunk, the first starting the pair).
  void hosted_coll(HostRun& st, MoeStep kind, double t, int chunks) const {
    int calls = 0;
    switch (kind) {
      case MoeStep::a2a:
      case MoeStep::ag:
      case MoeStep::rs:
      case MoeStep::ar:
      case MoeStep::saa:
        calls = 1;
        break;
      case MoeStep::rs_then:
        calls = 2 * chunks;
        break;
      default:
        return;  // a view: no task
    }
    st.host += host_s();
    st.gpu = std::max(st.gpu, st.host) + t;
    st.host += (calls - 1) * host_s();
  }
  void hosted(HostRun& st, const MoeOp& o, bool backward, bool seen) const {
    switch (o.kind) {
      case MoeStep::gate:
      case MoeStep::order:
      case MoeStep::iorder:
      case MoeStep::kernel:
      case MoeStep::shared:
      case MoeStep::slot_slice:
      case MoeStep::experts: {
        MoeOp copy = o;
        copy.backward = backward;
        const KernelList ks = kernel_list(copy, s, d);
        const std::int64_t n = o.kind == MoeStep::experts ? expert_repeats(s, d) : 1;
        for (std::int64_t e = 0; e < n; ++e) {
          if (o.kind == MoeStep::kernel)
            hosted_kernel(st, ks[0], backward);
          else
            for (const Kernel& k : ks) hosted_kernel(st, k, backward);
          if (o.kind == MoeStep::experts && o.allreduce_each)
            hosted_coll(st, MoeStep::ar, c.ar(static_cast<double>(expert_elems(o, s, d)) * bytes), 1);
        }
        return;
      }
      default:
        return hosted_coll(st, o.kind, coll(o.kind, o.group, o.elems, o.then, o.chunks, fp8_wire(d, o.kind, o.data, seen)),
                           o.chunks);
    }
  }
};

}  // namespace

double model_time(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                  const AlphaBeta& ab, const GpuProfile& gpu) {
  const ComputeRates rates(gpu);
  const Costs c = make_costs(s, d, o, ab);
  return Clock{s, d, c, ab, gpu, rates}.sum(ops);
}

ModelTime model_layer(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, const AlphaBeta& ab,
                      const GpuProfile& gpu) {
  OpList fwd;
  forward_ops(s, d, o, &fwd);
  const std::span<const MoeOp> f(fwd.data(), fwd.size());
  BackwardPlan bwd;
  backward_plan(f, s, d, o, &bwd);
  const ComputeRates rates(gpu);
  const Costs c = make_costs(s, d, o, ab);
  const Clock clock{s, d, c, ab, gpu, rates};
  return {clock.sum(f), clock.sum(bwd.ops())};
}

}  // namespace parmsim::moe

