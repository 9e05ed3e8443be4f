#include "sim/moe/dispatch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <memory>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include "sim/coll/nccl_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/io/output.hpp"
#include "sim/net/network_model.hpp"

namespace parmsim::moe {

namespace {

// DeepEP's hard limits (csrc/kernels/configs.cuh@d8dd185 lines 3-4): a node
// forwards among at most 8 NVLink peers; the normal kernels reach at most 20
// RDMA peers (nodes).
constexpr int kMaxNvlPeers = 8;
constexpr int kMaxRdmaPeers = 20;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, n): the high bits of a 128-bit product (Lemire's method
// without its rejection step; the bias is below n / 2^64).
std::uint64_t below(std::mt19937_64& g, std::uint64_t n) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(g()) * n) >> 64);
}

// Bytes of one token as DeepEP's tests count it: hidden x 2 in bf16, times
// (1 + 4/128) / 2 in fp8 (the float32 scale per 128 elements), i.e. hidden +
// hidden / 32 (tests/test_internode.py@d8dd185 line 170, fp8_factor).
double test_token_bytes(int hidden, WireDtype d) {
  return d == WireDtype::fp8 ? hidden * 2.0 * (1.0 + 4.0 / 128.0) / 2.0 : hidden * 2.0;
}
std::uint64_t hidden_bytes(int hidden, WireDtype d) {
  return d == WireDtype::fp8 ? static_cast<std::uint64_t>(hidden) : 2ULL * static_cast<std::uint64_t>(hidden);
}
std::uint64_t scale_bytes(int hidden, WireDtype d) {
  return d == WireDtype::fp8 ? 4ULL * static_cast<std::uint64_t>(hidden / 128) : 0;
}
std::uint64_t align16(std::uint64_t x) { return (x + 15) / 16 * 16; }

// One transfer: `bytes` from GPU src to GPU dst along `route`.
struct Transfer {
  int src = 0, dst = 0;
  std::uint64_t bytes = 0;
  Route route;
};

// The path an RDMA write takes between two GPUs: out through the sender's
// NIC into the fabric and back in through the receiver's, never over NVLink,
// through another GPU or a host bridge (GPUDirect RDMA). A shortest path over
// (device, whether a network link was crossed yet), chosen as the topology
// chooses its routes (sim/topo/topology.hpp): among the next hops on a
// shortest path the fastest links, then ECMP by (src + dst) mod their count.
// Empty when there is none (no NIC, no fabric).
Route rdma_route(const Topology& topo, int src, int dst) {
  const Topology::Graph& g = topo.graph();
  int sv = -1, dv = -1;
  for (int v = 0; v < topo.num_devices(); ++v) {
    if (topo.device(v).kind != DeviceKind::gpu) continue;
    if (topo.device(v).gpu == src) sv = v;
    if (topo.device(v).gpu == dst) dv = v;
  }
  // A link may be taken from state (v, phase) when it is no NVLink and leads to
  // no GPU or host bridge other than the destination, reached past the fabric.
  auto next = [&](int id, int w, int phase) {
    if (topo.link_class(id) == LinkClass::nvlink) return -1;
    const int np = phase | (topo.link_class(id) == LinkClass::network ? 1 : 0);
    const DeviceKind k = topo.device(w).kind;
    if (k == DeviceKind::host_bridge || (k == DeviceKind::gpu && !(w == dv && np == 1))) return -1;
    return 2 * w + np;
  };
  // Hops to the goal state (dv, 1), by breadth-first search backwards.
  std::vector<int> dist(2 * static_cast<std::size_t>(topo.num_devices()), -1);
  std::deque<int> q;
  dist[2 * dv + 1] = 0;
  q.push_back(2 * dv + 1);
  while (!q.empty()) {
    const int st = q.front();
    q.pop_front();
    const int w = st / 2;
    for (auto [e, end] = boost::in_edges(w, g); e != end; ++e) {
      const int v = static_cast<int>(boost::source(*e, g));
      if (v != sv && (topo.device(v).kind == DeviceKind::gpu || topo.device(v).kind == DeviceKind::host_bridge))
        continue;
      for (int phase = 0; phase < 2; ++phase)
        if (dist[2 * v + phase] < 0 && next(g[*e].id, w, phase) == st) {
          dist[2 * v + phase] = dist[st] + 1;
          q.push_back(2 * v + phase);
        }
    }
  }
  Route r;
  if (dist[2 * sv] < 0) return r;
  r.bottleneck = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::pair<int, int>> cand;  // (link, next state)
  for (int st = 2 * sv; dist[st] > 0;) {
    cand.clear();
    std::uint64_t best = 0;
    for (auto [e, end] = boost::out_edges(st / 2, g); e != end; ++e) {
      const int id = g[*e].id;
      const int ns = next(id, static_cast<int>(boost::target(*e, g)), st % 2);
      if (ns < 0 || dist[ns] != dist[st] - 1) continue;
      const std::uint64_t bw = topo.link(id).bandwidth;
      if (bw > best) cand.clear(), best = bw;
      if (bw == best) cand.emplace_back(id, ns);
    }
    const auto [id, ns] = cand[static_cast<unsigned>(src + dst) % cand.size()];
    r.links.push_back(id);
    r.latency = r.latency + topo.link(id).latency;
    r.bottleneck = std::min(r.bottleneck, topo.link(id).bandwidth);
    st = ns;
  }
  return r;
}

// Starts every transfer at time zero on the flow network and returns when the
// last one ends. DeepEP's kernels pipeline their stages by chunks of a few
// tokens, so the RDMA sends and the NVLink forwarding of what has arrived run
// at once; the fill of the first chunk is left out.
Time run_transfers(const Topology& topo, const std::vector<Transfer>& ts, Workspace& ws) {
  const std::unique_ptr<NetworkModel> net = make_network("flow", topo, &ws);
  for (std::size_t i = 0; i < ts.size(); ++i)
    if (ts[i].bytes > 0) net->start(i, ts[i].route, ts[i].bytes, Time::zero());
  Time last = Time::zero();
  std::vector<std::uint64_t> done;
  while (const std::optional<Time> t = net->next_completion()) {
    done.clear();
    net->complete(*t, &done);
    last = *t;
  }
  return last;
}

Transfer routed(const Topology& topo, int src, int dst, std::uint64_t bytes, Workspace& ws) {
  return Transfer{src, dst, bytes, topo.route(src, dst, ws)};
}

std::vector<Transfer> reversed(const Topology& topo, const std::vector<Transfer>& ts, bool rdma_only,
                               const std::vector<std::uint64_t>& bytes, Workspace& ws) {
  std::vector<Transfer> out;
  out.reserve(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Transfer& t = ts[i];
    if (rdma_only && topo.same_node(t.src, t.dst))
      out.push_back(Transfer{t.dst, t.src, bytes[i], rdma_route(topo, t.dst, t.src)});
    else
      out.push_back(routed(topo, t.dst, t.src, bytes[i], ws));
  }
  return out;
}

void sum_wire(const Topology& topo, const std::vector<Transfer>& ts, bool rdma_only, DispatchResult& r) {
  for (const Transfer& t : ts) {
    if (t.bytes == 0) continue;
    ++r.transfers;
    if (rdma_only || !topo.same_node(t.src, t.dst))
      r.wire_rdma_bytes += t.bytes;
    else
      r.wire_nvl_bytes += t.bytes;
  }
}

Time with_floor(const Topology& topo, Time t) { return topo.gpu().launch + t; }

std::optional<double> per_second(std::optional<double> bytes, Time t) {
  if (!bytes || t.count_ps() <= 0) return std::nullopt;
  return *bytes / 1e9 / t.to_seconds();
}

// DeepEP normal kernels' test byte counts for rank 0 (tests/test_intranode.py
// and tests/test_internode.py@d8dd185 lines 157-160, 168-171): RDMA = unique
// (token, destination node) pairs of rank 0's tokens, its own node included,
// x token bytes; NVL = tokens rank 0 receives (recv_x, one per (token, rank)),
// x token bytes. Combine: the same counts in bf16 (the combine dtype).
void normal_test_bytes(const DispatchSpec& s, const DispatchTraffic& t, DispatchResult& r) {
  double nvl = 0, rdma = 0;
  for (int src = 0; src < t.ranks; ++src) nvl += static_cast<double>(t.rank_tokens[src * t.ranks + 0]);
  for (int n = 0; n < t.nodes; ++n) rdma += static_cast<double>(t.node_tokens[n]);
  r.dispatch_nvl_bytes = nvl * test_token_bytes(s.hidden, s.dispatch_dtype);
  r.combine_nvl_bytes = nvl * test_token_bytes(s.hidden, s.combine_dtype);
  if (t.nodes > 1) {
    r.dispatch_rdma_bytes = rdma * test_token_bytes(s.hidden, s.dispatch_dtype);
    r.combine_rdma_bytes = rdma * test_token_bytes(s.hidden, s.combine_dtype);
  }
}

void finish(DispatchResult& r) {
  r.dispatch_rdma_GBps = per_second(r.dispatch_rdma_bytes, r.dispatch);
  r.dispatch_nvl_GBps = per_second(r.dispatch_nvl_bytes, r.dispatch);
  r.combine_rdma_GBps = per_second(r.combine_rdma_bytes, r.combine);
  r.combine_nvl_GBps = per_second(r.combine_nvl_bytes, r.combine);
}

// The SMs' own bound on DeepEP's normal kernels. A kernel runs on s.sms SMs
// in channels of two (Config::num_sms; intranode.cu@d8dd185 lines 185-195,
// internode.cu lines 493-511), and every byte it moves is copied by warps of
// those SMs (UNROLLED_WARP_COPY: loads into registers, stores to the
// destination). Each half of the SMs has its own copies:
//   one node (intranode.cu): the even SMs send, each token once into every
//     rank needing it, its own rank included (line 297); the odd SMs copy
//     what arrived from the ring buffers into recv_x (line 396);
//   several nodes (internode.cu): the odd SMs' RDMA senders store each token
//     into the send buffer of every destination node, its own included
//     (st_broadcast, line 654), and their NVLink receivers copy what arrives
//     into recv_x (line 1033); the even SMs' forwarders copy each token
//     arriving from a node into the NVLink buffer of every rank of the node
//     needing it, the forwarder's own included (line 880).
// One SM copies at sm_copy_rate (below). The busiest half of the busiest GPU
// over its SMs' rate is a floor on the kernel time; the transfers'
// link-bound time is the other, and the kernel takes the larger (its stages
// overlap, so the slower one sets the pace). Combine (intranode.cu lines
// 580-700, internode.cu lines 1306-1600) runs the same copies backwards
// (senders, forwarders gathering, receivers reducing into the output),
// counted with the same bytes in the combine dtype.
struct SmBound {
  Time dispatch, combine;
};
SmBound normal_sm_bound(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t) {
  if (topo.gpu().sm_count <= 0) return SmBound{Time::zero(), Time::zero()};
  const double rate = sm_copy_rate(topo.gpu()) * (s.sms / 2);  // bytes/s one half of the SMs copies
  const int R = t.ranks, G = t.group, N = t.nodes, k = s.topk;
  auto bound = [&](WireDtype d) {
    const std::uint64_t h = hidden_bytes(s.hidden, d), sc = scale_bytes(s.hidden, d);
    double worst = 0;  // bytes copied by the busiest half of a GPU's SMs
    for (int a = 0; a < R; ++a) {
      double recv = 0;
      for (int b = 0; b < R; ++b) recv += static_cast<double>(t.rank_tokens[b * R + a]);
      if (N == 1) {
        const double per = static_cast<double>(h + sc + 8ULL * k + 4ULL * k + 4);
        double sent = 0;
        for (int b = 0; b < R; ++b) sent += static_cast<double>(t.rank_tokens[a * R + b]);
        worst = std::max({worst, sent * per, recv * per});
      } else {
        const double rdma = static_cast<double>(align16(h + 8 + sc + 4ULL * k + 4ULL * k));
        const double nvl = static_cast<double>(h + sc + 4ULL * k + 4ULL * k + 8);
        double sent = 0, fwd = 0;
        for (int n = 0; n < N; ++n) sent += static_cast<double>(t.node_tokens[a * N + n]);
        // Forwarder a: the tokens of the ranks with a's local index, to the ranks of a's node.
        for (int src = a % G; src < R; src += G)
          for (int b = a / G * G; b < a / G * G + G; ++b) fwd += static_cast<double>(t.rank_tokens[src * R + b]);
        worst = std::max({worst, sent * rdma + recv * nvl, fwd * nvl});
      }
    }
    return worst > 0 ? duration_for_rate(worst, rate) : Time::zero();
  };
  return SmBound{bound(s.dispatch_dtype), bound(s.combine_dtype)};
}

// DeepEP normal. One node (ranks <= its NVLink peers): the intranode kernel,
// each rank writes each of its tokens once into every rank that holds one of
// its experts, over NVLink. Several nodes: the internode kernel, each token
// crosses RDMA once per destination node, to the GPU there with the sender's
// local index, which forwards it over NVLink to the node's ranks that need it.
DispatchResult deepep_normal(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t, Workspace& ws) {
  DispatchResult r;
  r.nodes = t.nodes;
  const int R = t.ranks, G = t.group, N = t.nodes;
  if (N > kMaxRdmaPeers)
    throw UserError(fmt::format("--ranks: deepep-normal reaches at most {} nodes of {} ranks (DeepEP's "
                                "NUM_MAX_RDMA_PEERS), got {} nodes ({} ranks)",
                                kMaxRdmaPeers, G, N, R));
  const int k = s.topk;
  const std::uint64_t h_d = hidden_bytes(s.hidden, s.dispatch_dtype), sc = scale_bytes(s.hidden, s.dispatch_dtype);
  const std::uint64_t h_c = hidden_bytes(s.hidden, s.combine_dtype), sc_c = scale_bytes(s.hidden, s.combine_dtype);
  std::vector<Transfer> ts;
  std::vector<std::uint64_t> back;
  if (N == 1) {
    // Per token (csrc/kernels/intranode.cu@d8dd185 lines 229-233): x, its
    // scales, int64 top-k indices, float top-k weights, an int source index.
    // Combine (lines 580-582): x, the source index, the weights.
    const std::uint64_t per_d = h_d + sc + 8ULL * k + 4ULL * k + 4, per_c = h_c + sc_c + 4 + 4ULL * k;
    for (int a = 0; a < R; ++a)
      for (int b = 0; b < R; ++b)
        if (a != b && t.rank_tokens[a * R + b] > 0) {
          ts.push_back(routed(topo, a, b, t.rank_tokens[a * R + b] * per_d, ws));
          back.push_back(t.rank_tokens[a * R + b] * per_c);
        }
  } else {
    // Per RDMA token (csrc/kernels/internode.cu@d8dd185 lines 167-168, 523):
    // x, a SourceMeta (8 B), the scales, int top-k indices and float weights,
    // 16-byte aligned; combine (line 1466): x and the weights. Per NVLink
    // token (line 185): the same fields unaligned.
    const std::uint64_t rdma_d = align16(h_d + 8 + sc + 4ULL * k + 4ULL * k), rdma_c = align16(h_c + 8 + sc_c + 4ULL * k);
    const std::uint64_t nvl_d = h_d + sc + 4ULL * k + 4ULL * k + 8, nvl_c = h_c + sc_c + 4ULL * k + 8;
    for (int a = 0; a < R; ++a)
      for (int n = 0; n < N; ++n) {
        const int f = n * G + a % G;  // the forwarder: node n's rank with a's local index
        if (n == a / G || t.node_tokens[a * N + n] == 0) continue;
        ts.push_back(routed(topo, a, f, t.node_tokens[a * N + n] * rdma_d, ws));
        back.push_back(t.node_tokens[a * N + n] * rdma_c);
      }
    for (int f = 0; f < R; ++f)
      for (int b = f / G * G; b < f / G * G + G; ++b) {
        if (b == f) continue;  // the forwarder's own tokens stay in its memory
        std::uint64_t tokens = 0;  // sources with f's local index, whose tokens f forwards to b
        for (int a = f % G; a < R; a += G) tokens += t.rank_tokens[a * R + b];
        if (tokens == 0) continue;
        ts.push_back(routed(topo, f, b, tokens * nvl_d, ws));
        back.push_back(tokens * nvl_c);
      }
  }
  sum_wire(topo, ts, false, r);
  const SmBound sm = normal_sm_bound(topo, s, t);
  r.dispatch = with_floor(topo, std::max(run_transfers(topo, ts, ws), sm.dispatch));
  r.combine = with_floor(topo, std::max(run_transfers(topo, reversed(topo, ts, false, back, ws), ws), sm.combine));
  normal_test_bytes(s, t, r);
  return r;
}

// DeepEP low-latency (csrc/kernels/internode_ll.cu@d8dd185): every (token,
// expert) selection is one RDMA write of a message (line 71: 16 B of header,
// then hidden bytes and the scales in fp8, or hidden x 2 in bf16) to the
// expert's rank, through the NICs even within a node (the kernels as first
// released; deepep-ll-nvlink below: later ones take NVLink to peers of the
// same node). Combine sends each selection's result back in the combine dtype.
DispatchResult low_latency(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t, Workspace& ws,
                           bool nvlink) {
  DispatchResult r;
  r.nodes = t.nodes;
  const int R = t.ranks;
  const std::uint64_t msg = 16 + hidden_bytes(s.hidden, s.dispatch_dtype) + scale_bytes(s.hidden, s.dispatch_dtype);
  const std::uint64_t msg_c = hidden_bytes(s.hidden, s.combine_dtype) + scale_bytes(s.hidden, s.combine_dtype);
  std::vector<Transfer> ts;
  std::vector<std::uint64_t> back;
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < R; ++b) {
      const std::uint64_t sel = t.selections[a * R + b];
      if (a == b || sel == 0) continue;
      if (topo.same_node(a, b) && !nvlink) {
        Route route = rdma_route(topo, a, b);
        if (route.links.empty())
          throw UserError(fmt::format("--kernel deepep-ll: no RDMA path from GPU {} to GPU {} through their NICs "
                                      "(topology '{}' has no NIC fabric within a node)",
                                      a, b, topo.name()));
        ts.push_back(Transfer{a, b, sel * msg, std::move(route)});
      } else {
        ts.push_back(routed(topo, a, b, sel * msg, ws));
      }
      back.push_back(sel * msg_c);
    }
  sum_wire(topo, ts, !nvlink, r);
  r.dispatch = with_floor(topo, run_transfers(topo, ts, ws));
  r.combine = with_floor(topo, run_transfers(topo, reversed(topo, ts, !nvlink, back, ws), ws));
  // tests/test_low_latency.py@d8dd185 lines 131-137: valid selections of the
  // rank's tokens, local experts included, x (hidden + hidden/128 x 4 + 16) in
  // fp8, x hidden x 2 for combine (and for a bf16 dispatch).
  double sel0 = 0;
  for (int b = 0; b < R; ++b) sel0 += static_cast<double>(t.selections[b]);
  const double per = s.dispatch_dtype == WireDtype::fp8 ? s.hidden + s.hidden / 128.0 * 4 + 16 : s.hidden * 2.0;
  r.dispatch_rdma_bytes = sel0 * per;
  r.combine_rdma_bytes = sel0 * (s.combine_dtype == WireDtype::fp8 ? s.hidden + s.hidden / 128.0 * 4 : s.hidden * 2.0);
  return r;
}

DispatchResult deepep_ll(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t, Workspace& ws) {
  return low_latency(topo, s, t, ws, false);
}
// The same kernels since DeepEP PR #173 (2025-06-05): a peer the GPU reaches
// by peer-to-peer memory (nvshmemi_get_p2p_ptr non-null: its own node) is
// written with NVLink stores, the others by RDMA (internode_ll.cu@d8dd185
// lines 152-158, 420-427).
DispatchResult deepep_ll_nvlink(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t, Workspace& ws) {
  return low_latency(topo, s, t, ws, true);
}

// Megatron-Core's alltoall token dispatcher: the tokens permuted by expert,
// one copy per (token, expert) selection, exchanged by NCCL's AlltoAllv
// (grouped send/recv); combine is the reverse AlltoAllv. Simulated by the
// engine as any collective of a task graph.
DispatchResult nccl_alltoall(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t, Workspace& ws) {
  DispatchResult r;
  r.nodes = t.nodes;
  const int R = t.ranks;
  auto time = [&](WireDtype d, bool transpose) {
    const std::uint64_t per = hidden_bytes(s.hidden, d) + scale_bytes(s.hidden, d);
    Collective c;
    c.name = transpose ? "combine" : "dispatch";
    c.op = CollOp::alltoallv;
    c.matrix.assign(R, std::vector<std::uint64_t>(R, 0));
    for (int a = 0; a < R; ++a) {
      c.group.push_back(a);
      for (int b = 0; b < R; ++b)
        if (a != b) (transpose ? c.matrix[b][a] : c.matrix[a][b]) = t.selections[a * R + b] * per;
    }
    if (!transpose)
      for (int a = 0; a < R; ++a)
        for (int b = 0; b < R; ++b)
          if (a != b && c.matrix[a][b] > 0) {
            ++r.transfers;
            (topo.same_node(a, b) ? r.wire_nvl_bytes : r.wire_rdma_bytes) += c.matrix[a][b];
          }
    TaskGraphBuilder b(R);
    b.add_stream_all("comm");
    b.add_collective_tasks(std::move(c), "comm", transpose ? "combine" : "dispatch");
    const TaskGraph g = std::move(b).build();
    return simulate(g, topo, {}, ws).makespan;
  };
  r.dispatch = time(s.dispatch_dtype, false);
  r.combine = time(s.combine_dtype, true);
  normal_test_bytes(s, t, r);
  return r;
}

constexpr std::array<Dispatcher, 4> kDispatchers = {{
    {"deepep-normal",
     "DeepEP's normal kernels: within one node each token is written once into every rank holding one of its "
     "experts over NVLink; across nodes it crosses RDMA once per destination node (to the GPU with the sender's "
     "local index) and is forwarded over NVLink there",
     deepep_normal},
    {"deepep-ll",
     "DeepEP's low-latency kernels as first released: one RDMA write per (token, expert) selection, through the "
     "NICs even between GPUs of one node",
     deepep_ll},
    {"deepep-ll-nvlink",
     "DeepEP's low-latency kernels since June 2025: the same per-selection writes, over NVLink to GPUs of the "
     "sender's node and by RDMA to the others",
     deepep_ll_nvlink},
    {"nccl-alltoall",
     "Megatron-Core's alltoall dispatcher: one copy per (token, expert) selection, exchanged by NCCL's AlltoAllv",
     nccl_alltoall},
}};

}  // namespace

double sm_copy_rate(const GpuProfile& gpu) {
  // NCCL's per-channel LL128 cap (sim/coll/nccl_model.hpp): what one SM's CTA moves.
  return nccl_channel_ll128_rate(gpu.compute_capability);
}

const char* to_string(WireDtype d) { return d == WireDtype::fp8 ? "fp8" : "bf16"; }

WireDtype parse_wire_dtype(const std::string& s, const std::string& option) {
  if (s == "bf16") return WireDtype::bf16;
  if (s == "fp8") return WireDtype::fp8;
  throw UserError(fmt::format("{}: expected fp8 or bf16, got '{}'", option, s));
}

std::span<const Dispatcher> dispatchers() { return kDispatchers; }

const Dispatcher& find_dispatcher(std::string_view name) {
  if (const Dispatcher* d = find_named(dispatchers(), name)) return *d;
  throw UserError(fmt::format("--kernel: unknown dispatcher '{}': expected {}", name,
                              join_names(names_of(dispatchers()), ", ", " or ")));
}

int dispatch_group(const DispatchSpec& s, const Topology& topo) {
  return std::min({kMaxNvlPeers, topo.gpus_per_node(), s.ranks});
}

void check_dispatch_spec(const DispatchSpec& s, const Topology& topo) {
  if (s.ranks < 1 || s.ranks > topo.num_gpus())
    throw UserError(fmt::format("--ranks: {} ranks on topology '{}' of {} GPUs (use --topo-set nodes=N for more)",
                                s.ranks, topo.name(), topo.num_gpus()));
  if (s.tokens < 1 || s.hidden < 1 || s.experts < 1 || s.topk < 1)
    throw UserError("--tokens, --hidden, --experts and --topk must be at least 1");
  if (s.topk > s.experts)
    throw UserError(fmt::format("--topk: {} experts per token but only --experts {}", s.topk, s.experts));
  if (s.experts % s.ranks != 0)
    throw UserError(fmt::format("--experts: {} experts do not divide among --ranks {}", s.experts, s.ranks));
  if (s.dispatch_dtype == WireDtype::fp8 && s.hidden % 128 != 0)
    throw UserError(fmt::format("--hidden: fp8 dispatch scales blocks of 128 elements; {} is not a multiple of 128",
                                s.hidden));
  for (auto [d, opt] : {std::pair{s.dispatch_dtype, "--dispatch-dtype"}, std::pair{s.combine_dtype, "--combine-dtype"}})
    if (d == WireDtype::fp8 && !(topo.gpu().peak_fp8 > 0))
      throw UserError(fmt::format("{}: fp8 needs FP8 tensor cores; GPU '{}' of topology '{}' has none", opt,
                                  topo.gpu_model(), topo.name()));
  if (s.load.kind == LoadModel::Kind::histogram) {
    if (static_cast<std::int64_t>(s.load.weights.size()) != s.experts)
      throw UserError(fmt::format("--load {}: {} counts, expected one per expert (--experts {})", s.load.text,
                                  s.load.weights.size(), s.experts));
    const auto used = std::count_if(s.load.weights.begin(), s.load.weights.end(), [](double w) { return w > 0; });
    if (used < s.topk)
      throw UserError(fmt::format("--load {}: {} experts have tokens, fewer than --topk {}", s.load.text, used,
                                  s.topk));
  }
  if (s.load.kind != LoadModel::Kind::uniform && s.topk_groups > 0)
    throw UserError(fmt::format("--topk-groups: node-limited routing is drawn from uniform scores; not with --load {}",
                                s.load.text));
  // A profile without SMs (the cpu profile, sm_count 0) takes any even count and has no SMs' bound.
  if (s.sms < 2 || s.sms % 2 != 0 || (topo.gpu().sm_count > 0 && s.sms > topo.gpu().sm_count))
    throw UserError(fmt::format("--sms: DeepEP's normal kernels run on an even number of SMs (channels of two), "
                                "from 2 to the {} of GPU '{}'; got {}",
                                topo.gpu().sm_count, topo.gpu_model(), s.sms));
  const int group = dispatch_group(s, topo);
  if (s.ranks % group != 0)
    throw UserError(fmt::format("--ranks: {} ranks are not whole nodes of {} GPUs", s.ranks, group));
  const int nodes = s.ranks / group;
  if (s.topk_groups < 0) throw UserError(fmt::format("--topk-groups: expected 0 or more, got {}", s.topk_groups));
  if (s.topk_groups > 0 && s.topk_groups < nodes) {
    if (s.experts % nodes != 0)
      throw UserError(fmt::format("--topk-groups: {} experts do not divide among {} nodes", s.experts, nodes));
    if (s.topk > s.topk_groups * (s.experts / nodes))
      throw UserError(fmt::format("--topk: {} experts per token but the {} node(s) --topk-groups allows hold only {}", s.topk,
                                  s.topk_groups, s.topk_groups * (s.experts / nodes)));
  }
}

namespace {
// The experts' weights under a load model (empty: uniform).
std::vector<double> load_weights(const LoadModel& load, int E, std::uint64_t seed) {
  std::vector<double> weight;
  if (load.kind == LoadModel::Kind::histogram) weight = load.weights;
  if (load.kind == LoadModel::Kind::zipf) {
    // Popularity ranks dealt by a shuffle of its own generator (Fisher-Yates).
    std::vector<int> rank_of(E);
    std::iota(rank_of.begin(), rank_of.end(), 0);
    std::mt19937_64 deal(splitmix64(seed ^ 0x5a17f00dULL));
    for (int i = E - 1; i > 0; --i) std::swap(rank_of[i], rank_of[below(deal, static_cast<std::uint64_t>(i) + 1)]);
    weight.resize(E);
    for (int e = 0; e < E; ++e) weight[e] = std::pow(static_cast<double>(rank_of[e] + 1), -load.exponent);
  }
  return weight;
}

// Scratch of draw_limited, kept across a source's tokens.
struct GroupDraw {
  std::vector<std::uint64_t> score, best;
  std::vector<int> order, pool;
};

// One token's k distinct experts into `chosen` (cleared first), drawn with `gen`: by weight among
// those not taken (a taken expert drawn again is drawn anew: the same law) when `cdf` holds the
// weights' running sums, else uniformly by Floyd's method (for j = E-k .. E-1, draw x in [0, j];
// take x, or j if x was taken). `taken` (E zeros) is left all zeros.
void draw_k(std::mt19937_64& gen, int E, int k, const std::vector<double>& weight, const std::vector<double>& cdf,
            std::vector<char>& taken, std::vector<int>& chosen) {
  chosen.clear();
  if (!cdf.empty()) {
    while (static_cast<int>(chosen.size()) < k) {
      const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53 * cdf.back();
      const int e = static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      if (e >= E || taken[e] || !(weight[e] > 0)) continue;
      taken[e] = 1;
      chosen.push_back(e);
    }
  } else {
    for (int j = E - k; j < E; ++j) {
      const int x = static_cast<int>(below(gen, static_cast<std::uint64_t>(j) + 1));
      const int e = taken[x] ? j : x;
      taken[e] = 1;
      chosen.push_back(e);
    }
  }
  for (int e : chosen) taken[e] = 0;
}

// One token's k experts under group-limited routing into `chosen`, drawn with `gen`: DeepEP's
// tests' procedure on i.i.d. scores (tests/test_internode.py@d8dd185 lines 24-28): E scores, the
// E/groups consecutive experts of each group ranked by their best score (ties: the lower index),
// the experts of the `topk` best groups pooled, the k best of the pool taken. `w` is scratch.
void draw_limited(std::mt19937_64& gen, int E, int k, int groups, int topk, GroupDraw& w, std::vector<int>& chosen) {
  const int per = E / groups;
  w.score.resize(E);
  for (int e = 0; e < E; ++e) w.score[e] = gen();
  // Groups by their best expert's score, best first (ties: lower index).
  w.order.resize(groups);
  w.best.assign(groups, 0);
  for (int n = 0; n < groups; ++n) {
    w.order[n] = n;
    for (int e = n * per; e < (n + 1) * per; ++e) w.best[n] = std::max(w.best[n], w.score[e]);
  }
  std::partial_sort(w.order.begin(), w.order.begin() + topk, w.order.end(),
                    [&](int a, int b) { return w.best[a] != w.best[b] ? w.best[a] > w.best[b] : a < b; });
  w.pool.clear();
  for (int g = 0; g < topk; ++g)
    for (int e = w.order[g] * per; e < (w.order[g] + 1) * per; ++e) w.pool.push_back(e);
  std::partial_sort(w.pool.begin(), w.pool.begin() + k, w.pool.end(),
                    [&](int a, int b) { return w.score[a] != w.score[b] ? w.score[a] > w.score[b] : a < b; });
  chosen.assign(w.pool.begin(), w.pool.begin() + k);
}
}  // namespace

std::vector<std::uint64_t> draw_expert_counts(const LoadModel& load, std::uint64_t seed, int sources,
                                              std::int64_t tokens, int parts, int E, int k, int groups,
                                              int topk_groups) {
  if (E < 1 || k < 1 || k > E || parts < 1 || tokens % parts != 0 || groups < 1 || E % groups != 0 ||
      topk_groups < 0 || topk_groups > groups || (topk_groups > 0 && k > topk_groups * (E / groups)))
    throw InternalError(fmt::format("draw_expert_counts: E={} k={} parts={} tokens={} groups={} topk_groups={}", E, k,
                                    parts, tokens, groups, topk_groups));
  const bool limited = topk_groups > 0 && topk_groups < groups;
  if (limited && load.kind != LoadModel::Kind::uniform)
    throw InternalError("draw_expert_counts: group-limited routing draws uniform scores only");
  GroupDraw limited_draw;
  std::vector<std::uint64_t> out(static_cast<std::size_t>(sources) * parts * E, 0);
  const std::vector<double> weight = load_weights(load, E, seed);
  std::vector<double> cdf;
  if (!weight.empty()) {
    cdf.resize(E);
    std::partial_sum(weight.begin(), weight.end(), cdf.begin());
    int positive = 0;
    for (double w : weight) positive += w > 0 ? 1 : 0;
    if (positive < k)
      throw UserError(fmt::format("load {}: {} experts have a count above 0, fewer than top-k k={}", load.text,
                                  positive, k));
  }
  std::vector<char> taken(E, 0);
  std::vector<int> chosen;
  const std::int64_t per_part = tokens / parts;
  for (int src = 0; src < sources; ++src) {
    // As route_tokens draws: the source's own generator, k distinct experts per token.
    std::mt19937_64 gen(splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(src) + 1)));
    for (std::int64_t tok = 0; tok < tokens; ++tok) {
      if (limited)
        draw_limited(gen, E, k, groups, topk_groups, limited_draw, chosen);
      else
        draw_k(gen, E, k, weight, cdf, taken, chosen);
      const std::size_t row = (static_cast<std::size_t>(src) * parts + static_cast<std::size_t>(tok / per_part)) * E;
      for (int e : chosen) ++out[row + static_cast<std::size_t>(e)];
    }
  }
  return out;
}

DispatchTraffic route_tokens(const DispatchSpec& s, int group) {
  DispatchTraffic t;
  const int R = s.ranks, E = s.experts, k = s.topk;
  t.ranks = R;
  t.group = group;
  t.nodes = R / group;
  const int N = t.nodes, per_rank = E / R;
  t.rank_tokens.assign(static_cast<std::size_t>(R) * R, 0);
  t.selections.assign(static_cast<std::size_t>(R) * R, 0);
  t.node_tokens.assign(static_cast<std::size_t>(R) * N, 0);
  const bool limited = s.topk_groups > 0 && s.topk_groups < N;
  std::vector<int> chosen;
  std::vector<char> taken(E, 0);
  GroupDraw limited_draw;
  std::vector<int> hit_rank(R, -1), hit_node(N, -1);
  t.expert_tokens.assign(E, 0);
  // Per-expert weights and their running sums (empty: uniform).
  std::vector<double> weight = load_weights(s.load, E, s.seed), cdf;
  if (!weight.empty()) {
    cdf.resize(E);
    std::partial_sum(weight.begin(), weight.end(), cdf.begin());
  }
  for (int src = 0; src < R; ++src) {
    std::mt19937_64 gen(splitmix64(s.seed ^ splitmix64(static_cast<std::uint64_t>(src) + 1)));
    for (int tok = 0; tok < s.tokens; ++tok) {
      if (!limited || !cdf.empty()) {
        draw_k(gen, E, k, weight, cdf, taken, chosen);
      } else {
        draw_limited(gen, E, k, N, s.topk_groups, limited_draw, chosen);
      }
      for (int e : chosen) {
        const int dst = e / per_rank, n = dst / group;
        ++t.selections[static_cast<std::size_t>(src) * R + dst];
        ++t.expert_tokens[e];
        if (hit_rank[dst] != tok) {
          hit_rank[dst] = tok;
          ++t.rank_tokens[static_cast<std::size_t>(src) * R + dst];
        }
        if (hit_node[n] != tok) {
          hit_node[n] = tok;
          ++t.node_tokens[static_cast<std::size_t>(src) * N + n];
        }
      }
    }
    std::fill(hit_rank.begin(), hit_rank.end(), -1);
    std::fill(hit_node.begin(), hit_node.end(), -1);
  }
  return t;
}

double DispatchTraffic::expert_imbalance() const {
  const std::uint64_t total = std::accumulate(expert_tokens.begin(), expert_tokens.end(), std::uint64_t{0});
  if (total == 0) return 1;
  const std::uint64_t mx = *std::max_element(expert_tokens.begin(), expert_tokens.end());
  return static_cast<double>(mx) * static_cast<double>(expert_tokens.size()) / static_cast<double>(total);
}

double DispatchTraffic::rank_imbalance() const {
  std::uint64_t total = 0, mx = 0;
  for (int b = 0; b < ranks; ++b) {
    std::uint64_t in = 0;
    for (int a = 0; a < ranks; ++a) in += selections[static_cast<std::size_t>(a) * ranks + b];
    total += in, mx = std::max(mx, in);
  }
  return total == 0 ? 1 : static_cast<double>(mx) * ranks / static_cast<double>(total);
}

LoadModel parse_load_model(const std::string& s, const std::string& option) {
  LoadModel m;
  m.text = s;
  if (s == "uniform") return m;
  if (s.rfind("zipf:", 0) == 0) {
    m.kind = LoadModel::Kind::zipf;
    const std::string v = s.substr(5);
    char* end = nullptr;
    m.exponent = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(m.exponent) || !(m.exponent > 0))
      throw UserError(fmt::format("{} {}: the Zipf exponent must be a number above 0, got '{}'", option, s, v));
    return m;
  }
  if (s.rfind("zipf", 0) == 0)
    throw UserError(fmt::format("{} {}: expected zipf:EXPONENT, e.g. zipf:1.2", option, s));
  m.kind = LoadModel::Kind::histogram;
  if (!std::filesystem::exists(s))
    throw UserError(fmt::format("{} {}: expected uniform, zipf:EXPONENT or a histogram file, and no such file can "
                                "be found",
                                option, s));
  std::istringstream in(read_file(s));
  note_input_file(s);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    line = line.substr(0, line.find('#'));
    for (char& c : line)
      if (c == ',' || c == '\t' || c == ';') c = ' ';
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      char* end = nullptr;
      const double x = std::strtod(w.c_str(), &end);
      if (*end != '\0' || !std::isfinite(x) || x < 0)
        throw UserError(fmt::format("{}:{}: --load: expected a count of tokens (a number >= 0), got '{}'", s, n, w));
      m.weights.push_back(x);
    }
  }
  return m;
}

DispatchResult simulate_dispatch(const Topology& topo, const DispatchSpec& s, const Dispatcher& d, Workspace& ws) {
  check_dispatch_spec(s, topo);
  const DispatchTraffic t = route_tokens(s, dispatch_group(s, topo));
  DispatchResult r = d.run(topo, s, t, ws);
  r.kernel = std::string(d.name);
  finish(r);
  r.expert_imbalance = t.expert_imbalance();
  r.rank_imbalance = t.rank_imbalance();
  r.max_expert_tokens = *std::max_element(t.expert_tokens.begin(), t.expert_tokens.end());
  r.mean_expert_tokens = static_cast<double>(s.tokens) * s.topk * s.ranks / s.experts;
  r.mean_rank_tokens = static_cast<double>(s.tokens) * s.topk;
  r.max_rank_tokens = static_cast<std::uint64_t>(std::llround(r.rank_imbalance * r.mean_rank_tokens));
  return r;
}

}  // namespace parmsim::moe
