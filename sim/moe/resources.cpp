#include "sim/moe/resources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/moe/layer_kernels.hpp"

namespace parmsim::moe {

namespace {

// Measured (docs/performance.md, "What a run needs"): peak RSS and wall time
// of `parmsim layer -t topologies/dgx-h100.yaml --topo-set nodes=N --set
// E=8N,mp=1` (all three schedules) on this project's 2-core x86 VM, N = 16,
// 32, 64, 128 (128 to 1024 GPUs), against the counts estimate_schedule gives:
//   N    tasks   transfers  events   peak RSS   wall
//   16   1.2e4   2.0e5      4.1e5    25 MB      0.07 s
//   32   2.4e4   7.8e5      1.6e6    66 MB      0.40 s
//   64   4.8e4   3.1e6      6.4e6    190 MB     2.40 s
//   128  9.5e4   1.3e7      2.5e7    694 MB     11.8 s
// Memory: 12 MiB + 610 B per task + 48 B per transfer reproduces N = 64 and
// 128 (the two fitted) and gives 63 MB at N = 32. Time: the seconds per event
// grow with the flows in flight (the max-min rates are recomputed over more
// of them): 0.25 us at N = 32, 0.47 us at N = 128, a power 0.23 of the events.
constexpr double kBytesPerTask = 610;
constexpr double kBytesPerTransfer = 48;
constexpr double kBaseBytes = 12.0 * (1 << 20);
constexpr double kSecondsPerEventAt = 0.47e-6, kEventsAt = 2.5e7, kEventPower = 0.23;
// NCCL's algorithms (ring, tree, NVLS) as flows: at most two per member per
// channel, and NCCL runs at most 32 channels (MAXCHANNELS).
constexpr double kNcclFlowsPerMember = 2.0 * 32;

double transfers_of(CollOp op, double g, double inner, const std::string& saa_algo, double* a2a) {
  if (g < 2 && op != CollOp::saa) return 0;
  switch (op) {
    case CollOp::alltoall:
    case CollOp::alltoallv:
      *a2a += g * (g - 1);
      return g * (g - 1);
    case CollOp::saa: {
      // collective_plan.cpp: W rounds of g transfers, each gathered to the inner-1 peers.
      const double W = saa_algo == "released" ? g : g / inner;
      *a2a += W * g * inner;
      return W * g * inner;
    }
    default:
      return kNcclFlowsPerMember * g;
  }
}

}  // namespace

SimCost& SimCost::operator+=(const SimCost& o) {
  tasks += o.tasks, transfers += o.transfers, a2a_transfers += o.a2a_transfers;
  events += o.events, bytes += o.bytes, seconds += o.seconds;
  return *this;
}

SimCost estimate_schedule(const LayerSpec& s, const Dims& d, const ScheduleOptions& o) {
  SimCost c;
  const double P = d.P, G = d.G, n_ep = d.n_ep;
  auto groups = [&](GroupKind k) { return k == GroupKind::ep ? G : k == GroupKind::world ? 1.0 : P / G; };
  auto size = [&](GroupKind k) { return k == GroupKind::ep ? n_ep : k == GroupKind::world ? P : G; };
  auto coll = [&](CollOp op, GroupKind k, double times) {
    c.tasks += times * P;
    c.transfers += times * groups(k) * transfers_of(op, size(k), G, s.saa_algo, &c.a2a_transfers);
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
  c.events = 2 * (c.tasks + c.transfers);
  c.bytes = kBaseBytes + c.tasks * kBytesPerTask + c.transfers * kBytesPerTransfer;
  c.seconds = c.events * kSecondsPerEventAt * std::pow(c.events / kEventsAt, kEventPower);
  return c;
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
