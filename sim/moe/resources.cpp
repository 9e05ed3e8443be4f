#include "sim/moe/resources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/moe/layer_kernels.hpp"

namespace parmsim::moe {

namespace {

// Measured (docs/performance.md, "What a run needs"): peak RSS and wall time
// on this project's 2-core x86 VM of `parmsim layer -t topologies/dgx-h100.yaml
// --topo-set nodes=N --set E=8N,mp=1` (all three schedules) and of `parmsim
// collective -t topologies/fat-tree-1024.yaml --op alltoall -b 64MiB [--gpus
// 0-511]`, against the counts estimate_schedule and estimate_graph give:
//   run              tasks   transfers  flows at once  events   peak RSS   wall
//   layer, N = 64    4.8e4   3.1e6      2.6e5          6.4e6    190 MB     2.40 s
//   layer, N = 128   9.5e4   1.3e7      1.05e6         2.5e7    694 MB     11.8 s
//   AlltoAll, 512    512     2.6e5      2.6e5                   126 MB     0.26 s
//   AlltoAll, 1024   1024    1.05e6     1.05e6                  448 MB     1.95 s
// A stored plan's transfer costs little; a flow in flight (its route, its
// max-min state) costs most. 12 MiB + 610 B per task + 16 B per transfer +
// 396 B per flow at once fits the layer at N = 128 and the 1024-GPU AlltoAll
// (the two fitted, with the 512-GPU one: 445 - 12 = 433 MB over 1.05e6 flows
// gives 412 B for a transfer and its flow) and gives 195 MB at N = 64 and 118
// MB for the 512-GPU AlltoAll.
constexpr double kBytesPerTask = 610;
constexpr double kBytesPerTransfer = 16;
constexpr double kBytesPerFlow = 396;
constexpr double kBaseBytes = 12.0 * (1 << 20);
constexpr double kSecondsPerEventAt = 0.47e-6, kEventsAt = 2.5e7, kEventPower = 0.23;
// NCCL's algorithms (ring, tree, NVLS) as flows: at most two per member per
// channel, and NCCL runs at most 32 channels (MAXCHANNELS).
constexpr double kNcclFlowsPerMember = 2.0 * 32;

// How many of a collective's transfers over one group run at once: every
// pair for a grouped send/recv or direct AlltoAll, one round of g for the
// round-based algorithms, a round of the SAA (g to their peers and g (inner -
// 1) gathers), NCCL's flows.
double concurrent_of(CollOp op, double g, double inner, const std::string& algo) {
  if (g < 2 && op != CollOp::saa) return 0;
  if (op == CollOp::saa) return g * inner;
  if (algo == "pairwise" || algo == "flat_ring") return g;
  if (op == CollOp::alltoall || op == CollOp::alltoallv || algo == "direct" || algo == "hierarchical")
    return g * (g - 1);
  return kNcclFlowsPerMember * g;
}

// A collective's transfers over one group of g members (collective_plan.cpp).
// `algo`: the collective's algorithm ("" or "auto": the default for its op).
double transfers_of(CollOp op, double g, double inner, const std::string& algo, double* a2a) {
  if (g < 2 && op != CollOp::saa) return 0;
  switch (op) {
    case CollOp::alltoall:
    case CollOp::alltoallv:
      *a2a += g * (g - 1);
      return g * (g - 1);
    case CollOp::saa: {
      // W rounds (released W = g, pipelined g / inner): in each but the first (a member's own chunk)
      // every member sends one chunk, and every round's chunk is gathered to the inner - 1 peers.
      const double W = algo == "pipelined" ? g / inner : g;
      const double x = (W - 1) * g + W * g * (inner - 1);
      *a2a += x;
      return x;
    }
    default:
      break;
  }
  // AllReduce, AllGather, ReduceScatter, SendRecv.
  const double rounds = op == CollOp::allreduce ? 2 : 1;  // AllReduce: reduce-scatter, then all-gather
  if (algo == "direct" || algo == "pairwise" || algo == "hierarchical") return rounds * g * (g - 1);
  if (algo == "flat_ring") return rounds * g * (g - 1);
  return kNcclFlowsPerMember * g;  // NCCL's ring, tree, NVLS
}

}  // namespace

SimCost finish_cost(SimCost c) {
  c.events = 2 * (c.tasks + c.transfers);
  c.bytes = kBaseBytes + c.tasks * kBytesPerTask + c.transfers * kBytesPerTransfer + c.flows * kBytesPerFlow;
  c.seconds = c.events * kSecondsPerEventAt * std::pow(c.events / kEventsAt, kEventPower);
  return c;
}

SimCost& SimCost::operator+=(const SimCost& o) {
  // Counts add up (plans stay cached together); flows at once do not; the
  // memory and time follow from the sums.
  tasks += o.tasks, transfers += o.transfers, a2a_transfers += o.a2a_transfers, flows = std::max(flows, o.flows);
  return *this = finish_cost(*this);
}

SimCost estimate_schedule(const LayerSpec& s, const Dims& d, const ScheduleOptions& o) {
  SimCost c;
  const double P = d.P, G = d.G, n_ep = d.n_ep;
  const double dp = d.dp;
  auto groups = [&](GroupKind k) {
    switch (k) {
      case GroupKind::ep: return G * dp;
      case GroupKind::world: return dp;
      case GroupKind::dense_dp: return G;
      case GroupKind::expert_dp: return G * n_ep;
      default: return P / G;
    }
  };
  auto size = [&](GroupKind k) {
    switch (k) {
      case GroupKind::ep: return n_ep;
      case GroupKind::world: return G * n_ep;
      case GroupKind::dense_dp: return P / G;
      case GroupKind::expert_dp: return dp;
      default: return G;
    }
  };
  auto coll = [&](CollOp op, GroupKind k, double times) {
    const std::string algo = op == CollOp::saa ? s.saa_algo : op == CollOp::alltoall ? o.a2a_algo : std::string();
    c.tasks += times * P;
    double a2a = 0;
    c.transfers += times * groups(k) * transfers_of(op, size(k), G, algo, &a2a);
    c.a2a_transfers += times * groups(k) * a2a;
    c.flows = std::max(c.flows, groups(k) * concurrent_of(op, size(k), G, algo));  // a collective's groups run together
  };
  const std::vector<MoeOp> fwd = forward_ops(s, d, o);
  const std::vector<MoeOp> bwd = backward_ops(fwd, s, d, o);
  for (const auto* list : {&fwd, &bwd})
    for (const MoeOp& op : *list) {
      switch (op.kind) {
        case MoeStep::split:
        case MoeStep::mp_gather_free:
          break;
        case MoeStep::a2a:
          coll(CollOp::alltoall, GroupKind::ep, 1);
          break;
        case MoeStep::saa:
          coll(CollOp::saa, GroupKind::world, 1);
          break;
        case MoeStep::rs:
          coll(CollOp::reducescatter, op.group, 1);
          break;
        case MoeStep::ag:
          coll(CollOp::allgather, op.group, 1);
          break;
        case MoeStep::ar:
          coll(CollOp::allreduce, op.group, 1);
          break;
        case MoeStep::rs_then:
          coll(CollOp::reducescatter, op.group, op.chunks);
          coll(op.then == MoeStep::saa ? CollOp::saa : CollOp::alltoall,
               op.then == MoeStep::saa ? GroupKind::world : GroupKind::ep, op.chunks);
          break;
        case MoeStep::experts: {
          const double n = static_cast<double>(expert_repeats(s, d));
          c.tasks += n * P * static_cast<double>(kernels(op, s, d).size());
          if (op.allreduce_each) coll(CollOp::allreduce, GroupKind::esp, n);
          break;
        }
        default:
          c.tasks += P * static_cast<double>(std::max<std::size_t>(1, kernels(op, s, d).size()));
      }
    }
  if (s.host_op > Time()) c.tasks *= 2;  // a host task beside each GPU task
  return finish_cost(c);
}

namespace {

// One collective of a graph: its transfers, how many run at once, and the
// AlltoAll/SAA share of its transfers.
SimCost counts_of(const Collective& c) {
  SimCost e;
  if (c.op == CollOp::sendrecv) {
    e.transfers = e.flows = 1;
    return e;
  }
  const double g = static_cast<double>(c.group.size());
  e.transfers = transfers_of(c.op, g, std::max(1, c.inner), c.algo, &e.a2a_transfers);
  e.flows = concurrent_of(c.op, g, std::max(1, c.inner), c.algo);
  return e;
}

}  // namespace

SimCost estimate_collective(const Collective& c) {
  SimCost e = counts_of(c);
  e.tasks = static_cast<double>(c.group.size());
  return finish_cost(e);
}

SimCost estimate_graph(const TaskGraph& g) {
  SimCost c;
  for (const Collective& col : g.collectives()) c += counts_of(col);
  c.tasks = static_cast<double>(g.tasks().size());
  return finish_cost(c);
}

SimCost with_symmetry(SimCost c, int order) {
  if (order <= 1) return c;
  c.transfers /= order;
  c.a2a_transfers /= order;
  c.flows /= order;
  return finish_cost(c);
}

int topology_symmetry_order(const Topology& topo) {
  const int N = topo.num_nodes();
  for (int nodes = 1; nodes < N; ++nodes)
    if (N % nodes == 0)
      if (const std::optional<NodeShift> s = topo.node_shift(nodes)) return s->order;
  return 1;
}

int symmetry_order(const Topology& topo, const std::string& network, bool symmetry) {
  return symmetry && network == "flow" ? topology_symmetry_order(topo) : 1;
}

int layer_symmetry_order(const LayerSpec& s, const Dims& d, int order) {
  if (s.load || order <= 1) return 1;
  const int block = d.G * d.n_ep;
  if (block >= d.P) return order;
  return d.P / std::lcm(d.P / order, block);
}

std::string describe(const SimCost& c) {
  const double gib = c.bytes / (1u << 30);
  const std::string t = c.seconds < 120    ? fmt::format("{:.0f} s", c.seconds)
                        : c.seconds < 7200 ? fmt::format("{:.0f} min", c.seconds / 60)
                                           : fmt::format("{:.0f} h", c.seconds / 3600);
  return fmt::format("{:.{}f} GiB and about {} ({:.2g} tasks, {:.2g} transfers, {:.2g} events)", gib, gib < 10 ? 2 : 1,
                     t, c.tasks, c.transfers, c.events);
}

}  // namespace parmsim::moe
