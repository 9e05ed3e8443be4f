#include "sim/topo/topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <boost/graph/reverse_graph.hpp>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"

namespace parmsim {

const char* to_string(DeviceKind k) {
  switch (k) {
    case DeviceKind::gpu:
      return "gpu";
    case DeviceKind::nvswitch:
      return "nvswitch";
    case DeviceKind::pcie_switch:
      return "pcie_switch";
    case DeviceKind::host_bridge:
      return "host_bridge";
    case DeviceKind::nic:
      return "nic";
    case DeviceKind::network_switch:
      return "network_switch";
  }
  return "?";
}

const char* to_string(LinkClass c) {
  switch (c) {
    case LinkClass::nvlink:
      return "nvlink";
    case LinkClass::pcie:
      return "pcie";
    case LinkClass::network:
      return "network";
  }
  return "?";
}

Topology::Topology(std::string name, std::string gpu_model, int gpus_per_node)
    : name_(std::move(name)),
      gpu_model_(std::move(gpu_model)),
      gpus_per_node_(gpus_per_node),
      gpu_(gpu_profile(gpu_model_)) {}

void Topology::set_compute(double gemm_efficiency, std::optional<Time> launch) {
  // Each dtype's sustained GEMM throughput (the profile's, or its peak where it has none)
  // scaled; sustained() reads the field, so a dtype without a peak stays refused.
  for (auto [peak, sustained] : {std::pair{gpu_.peak_fp32, &gpu_.sustained_fp32},
                                 std::pair{gpu_.peak_fp16, &gpu_.sustained_fp16},
                                 std::pair{gpu_.peak_bf16, &gpu_.sustained_bf16},
                                 std::pair{gpu_.peak_fp8, &gpu_.sustained_fp8}})
    if (peak > 0) *sustained = (*sustained > 0 ? *sustained : peak) * gemm_efficiency;
  if (launch) gpu_.launch = *launch;
}

std::uint64_t Topology::gpu_memory() const {
  return gpu_memory_ > 0 ? gpu_memory_ : gpu_.memory_bytes;
}

int Topology::add_device(Device d) {
  const int v = static_cast<int>(boost::add_vertex(d, graph_));
  if (d.kind == DeviceKind::gpu) {
    if (d.gpu != static_cast<int>(gpu_vertex_.size()))
      throw UserError(fmt::format("topology {}: GPU {} added out of order", name_, d.name));
    gpu_vertex_.push_back(v);
  }
  if (d.kind == DeviceKind::nic && d.node == 0) ++nics_per_node_;
  return v;
}

void Topology::add_link(int a, int b, std::uint64_t bw_ab, std::uint64_t bw_ba, Time latency) {
  const DeviceKind ka = graph_[a].kind, kb = graph_[b].kind;
  auto either = [&](DeviceKind k) { return ka == k || kb == k; };
  LinkClass cls = LinkClass::pcie;
  if (either(DeviceKind::network_switch))
    cls = LinkClass::network;
  else if (either(DeviceKind::nvswitch) || (ka == DeviceKind::gpu && kb == DeviceKind::gpu))
    cls = LinkClass::nvlink;
  for (auto [from, to, bw] : {std::tuple{a, b, bw_ab}, std::tuple{b, a, bw_ba}}) {
    Link l{static_cast<int>(links_.size()), bw, latency};
    boost::add_edge(from, to, l, graph_);
    links_.push_back(l);
    link_ends_.emplace_back(from, to);
    link_class_.push_back(cls);
  }
}

void Topology::apply_efficiency(const LinkEfficiency& e) {
  eff_ = e;
  for (auto [it, end] = boost::edges(graph_); it != end; ++it) {
    Link& l = graph_[*it];
    l.bandwidth = static_cast<std::uint64_t>(static_cast<double>(l.bandwidth) * e.of(link_class_[l.id]));
    if (l.bandwidth == 0) l.bandwidth = 1;
    links_[l.id].bandwidth = l.bandwidth;
  }
}

std::string Topology::link_name(int id) const {
  return fmt::format("{}->{}", graph_[link_ends_[id].first].name, graph_[link_ends_[id].second].name);
}

std::size_t Topology::footprint_bytes() const {
  auto vec = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  std::size_t b = sizeof(*this);
  // adjacency_list (vecS, bidirectional): a vertex holds its property and two
  // edge lists; an edge its property, a list node and two out/in entries.
  b += boost::num_vertices(graph_) * (sizeof(Device) + 6 * sizeof(void*));
  b += boost::num_edges(graph_) * (sizeof(Link) + 7 * sizeof(void*));
  b += vec(gpu_vertex_) + vec(links_) + vec(link_ends_) + vec(link_class_) + vec(out_start_) + vec(out_) +
       vec(local_hb_) + vec(table_) + vec(hb_dist_) + vec(in_start_) + vec(in_) + vec(is_gpu_) + vec(dist_shift_);
  for (const Route& r : table_) b += vec(r.links);
  for (const auto& d : hb_dist_) b += vec(d);
  return b;
}

std::vector<int> Topology::bfs_to(int dst_gpu) const { return bfs_to_vertex(gpu_vertex_[dst_gpu]); }

// A breadth-first search backwards from `to` over the links, where GPUs other
// than `to` do not forward (a GPU is reached, never passed through): hop
// counts, the same as any breadth-first search gives. On the CSR of links
// into each vertex (finalize), not on the graph: above kRouteTableGpus a
// route costs one search per destination GPU.
std::vector<int> Topology::bfs_to_vertex(int to) const {
  std::vector<int> dist(num_devices(), -1), queue;
  queue.reserve(num_devices());
  dist[to] = 0;
  queue.push_back(to);
  for (std::size_t h = 0; h < queue.size(); ++h) {
    const int u = queue[h];
    if (u != to && is_gpu_[u]) continue;
    for (int k = in_start_[u]; k < in_start_[u + 1]; ++k) {
      const int v = in_[k];
      if (dist[v] < 0) dist[v] = dist[u] + 1, queue.push_back(v);
    }
  }
  return dist;
}

namespace {

// This floor's part of a Workspace. Hop distances to destination GPUs,
// computed on demand for the topology last used with the workspace, up to
// kDistCacheBytes (then dropped and recomputed): memory grows with the links
// searched, not with GPUs x devices. Routes of topologies above
// kRouteTableGpus in a direct-mapped cache of recent routes (a ring or a
// repeated collective asks for the same pairs again and again), filled in
// place so that a miss allocates nothing once the slot has grown. And the
// walk's scratch list of candidate links.
struct RouteCache : Workspace::Part {
  static constexpr Workspace::Slot kSlot = Workspace::kRoutes;
  static constexpr int kBits = 13;
  std::uint64_t topo = 0;
  std::vector<std::vector<int>> dist;  // by destination GPU; empty = not computed
  std::size_t bytes = 0;
  struct Slot {
    std::uint64_t topo = 0;
    int src = -1, dst = -1;
    Route r;
  };
  std::vector<Slot> slots;  // 2^kBits once a route is asked for (a workspace that only searches distances has none)
  std::vector<int> cand;  // link ids
  // When set, walk appends each ECMP choice of more than one link: the
  // count, then the candidates (Topology::shift_route_ok).
  std::vector<int>* record = nullptr;
};
constexpr std::size_t kDistCacheBytes = std::size_t{128} << 20;
std::atomic<std::uint64_t> g_next_topology_id{1};

}  // namespace

Topology::DistView Topology::dist_to(int dst_gpu, Workspace& ws) const {
  RouteCache& c = ws.get<RouteCache>();
  if (c.topo != id_) {
    c.topo = id_;
    c.dist.assign(num_gpus(), {});
    c.bytes = 0;
  }
  const std::size_t need = static_cast<std::size_t>(num_devices()) * sizeof(int);
  int j = 0;
  if (!dist_shift_.empty()) {
    // The representative's distances, read through the shift (set_dist_shift).
    // Kept rotated per destination instead, the 8,192-GPU layer took 3.7 s
    // CPU and 668 MiB, against 2.6 s and 458 MiB (docs/performance.md).
    j = dst_gpu / dist_shift_gpus_;
    dst_gpu %= dist_shift_gpus_;
  }
  std::vector<int>& v = c.dist[dst_gpu];
  if (v.empty()) {
    if (c.bytes + need > kDistCacheBytes) {
      for (auto& x : c.dist) std::vector<int>().swap(x);
      c.bytes = 0;
    }
    v = bfs_to(dst_gpu);
    c.bytes += need;
  }
  if (j == 0) return DistView(v);
  return DistView(v, this, j);
}

std::vector<int> Topology::hop_distances(int dst_gpu, Workspace& ws) const {
  const DistView d = dist_to(dst_gpu, ws);
  std::vector<int> out(num_devices());
  for (int v = 0; v < num_devices(); ++v) out[v] = d[v];
  return out;
}

void Topology::set_dist_shift() {
  dist_shift_.clear();
  dist_shift_gpus_ = 0;
  const int N = num_nodes(), V = num_devices();
  // The smallest server shift that is an automorphism (node_shift checks
  // every link against its image, device kinds included); none: every
  // destination is searched, as before.
  std::optional<NodeShift> sh;
  for (int nodes = 1; nodes < N && !sh; ++nodes)
    if (N % nodes == 0) sh = node_shift(nodes);
  if (!sh) return;
  dist_shift_.assign(static_cast<std::size_t>(4) * V, -1);
  int at = 0;
  for (int v = 0; v < V; ++v) {
    if (dist_shift_[V + v] >= 0) continue;
    const int start = at;
    for (int w = v; dist_shift_[V + w] < 0; w = sh->vertex[w]) {
      dist_shift_[at] = w;
      dist_shift_[V + w] = at++;
    }
    for (int i = start; i < at; ++i) {
      dist_shift_[2 * V + dist_shift_[i]] = start;
      dist_shift_[3 * V + dist_shift_[i]] = at - start;
    }
  }
  dist_shift_gpus_ = sh->gpus;
}

void Topology::finalize() {
  const int n = num_gpus();
  if (n == 0) throw UserError(fmt::format("topology {}: no GPUs", name_));
  id_ = g_next_topology_id++;
  // Every vertex's outgoing links sorted by (target, link id): link id order is
  // declaration order, as boost's out-edge lists, so ECMP picks stay the same.
  out_start_.assign(num_devices() + 1, 0);
  for (const auto& [a, b] : link_ends_) ++out_start_[a + 1];
  for (int v = 0; v < num_devices(); ++v) out_start_[v + 1] += out_start_[v];
  out_.resize(link_ends_.size());
  in_start_.assign(num_devices() + 1, 0);
  for (const auto& [a, b] : link_ends_) ++in_start_[b + 1];
  for (int v = 0; v < num_devices(); ++v) in_start_[v + 1] += in_start_[v];
  in_.resize(link_ends_.size());
  {
    std::vector<int> fill(in_start_.begin(), in_start_.end() - 1);
    for (const auto& [a, b] : link_ends_) in_[fill[b]++] = a;
  }
  is_gpu_.assign(num_devices(), 0);
  for (int v = 0; v < num_devices(); ++v) is_gpu_[v] = graph_[v].kind == DeviceKind::gpu;
  {
    std::vector<int> fill(out_start_.begin(), out_start_.end() - 1);
    for (int id = 0; id < static_cast<int>(link_ends_.size()); ++id)
      out_[fill[link_ends_[id].first]++] = OutLink{link_ends_[id].second, id};
    for (int v = 0; v < num_devices(); ++v)
      std::sort(out_.begin() + out_start_[v], out_.begin() + out_start_[v + 1],
                [](const OutLink& x, const OutLink& y) { return x.target != y.target ? x.target < y.target : x.link < y.link; });
  }
  auto unreachable = [&](int s, int d) {
    return UserError(fmt::format("topology {}: GPU {} cannot reach GPU {} (no path of links; GPUs do not forward)",
                                 name_, graph_[gpu_vertex_[s]].name, graph_[gpu_vertex_[d]].name));
  };
  // Every GPU reaches every other when one group of connected non-GPU
  // devices touches every GPU (links run both ways; GPUs do not forward).
  // Union-find over the links between non-GPU devices: O(links).
  const int V = num_devices();
  std::vector<int> parent(V);
  for (int v = 0; v < V; ++v) parent[v] = v;
  auto find = [&](int v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  };
  for (const auto& [a, b] : link_ends_)
    if (graph_[a].kind != DeviceKind::gpu && graph_[b].kind != DeviceKind::gpu) parent[find(a)] = find(b);
  std::vector<int> touched(V, 0);  // how many GPUs touch each group
  std::vector<int> seen(V, -1);
  for (int g = 0; g < n; ++g)
    for (auto [it, end] = boost::out_edges(gpu_vertex_[g], graph_); it != end; ++it) {
      const int w = static_cast<int>(boost::target(*it, graph_));
      if (graph_[w].kind == DeviceKind::gpu) continue;
      const int r = find(w);
      if (seen[r] != g) seen[r] = g, ++touched[r];
    }
  const bool all_reach = n == 1 || std::find(touched.begin(), touched.end(), n) != touched.end();
  local_hb_.clear();
  hb_dist_.clear();
  if (!hints_.p2p || !hints_.gdr) {
    // Each GPU's local host bridge: the nearest of its server's (NCCL's
    // ncclGetLocalCpu, src/graph/paths.cc@5067397c: the CPU with the best path).
    hb_dist_.assign(V, {});
    std::vector<std::vector<int>> hbs(num_nodes());
    for (int v = 0; v < V; ++v)
      if (graph_[v].kind == DeviceKind::host_bridge && graph_[v].node >= 0 && graph_[v].node < num_nodes()) {
        hb_dist_[v] = bfs_to_vertex(v);
        hbs[graph_[v].node].push_back(v);
      }
    local_hb_.assign(n, -1);
    for (int g = 0; g < n; ++g) {
      int best = -1;
      for (int hb : hbs[node_of(g)]) {
        const int d = hb_dist_[hb][gpu_vertex_[g]];
        if (d >= 0 && (best < 0 || d < hb_dist_[best][gpu_vertex_[g]])) best = hb;
      }
      const bool needed = !hints_.p2p ? gpus_per_node_ > 1 : num_nodes() > 1;
      if (best < 0 && needed)
        throw UserError(fmt::format("topology {}: {} is off, so traffic of GPU {} passes through its server's CPU, "
                                    "but no host_bridge device reaches it (declare one in node.devices and link it)",
                                    name_, !hints_.p2p ? "p2p" : "gdr", graph_[gpu_vertex_[g]].name));
      local_hb_[g] = best;
    }
  }
  table_.clear();
  dist_shift_.clear();
  dist_shift_gpus_ = 0;
  if (n > kRouteTableGpus) set_dist_shift();
  if (n <= kRouteTableGpus || !all_reach) {
    Workspace ws;
    // Small clusters (and any whose reachability the shortcut cannot show):
    // a search from every destination; small ones keep every route.
    std::vector<int> no_path;  // senders without a direct path to d: PXN's, or an error
    for (int d = 0; d < n; ++d) {
      no_path.clear();
      const DistView dist = dist_to(d, ws);
      for (int s = 0; s < n; ++s)
        if (dist[gpu_vertex_[s]] < 0) no_path.push_back(s);
      for (int s : no_path) {
        if (same_node(s, d)) throw unreachable(s, d);
        if (const std::string why = pxn_unreachable(s, d, ws); !why.empty())
          throw UserError(fmt::format("topology {}: GPU {} cannot reach GPU {} (no path of links; GPUs do not forward, "
                                      "except through NCCL's PXN, and {})",
                                      name_, graph_[gpu_vertex_[s]].name, graph_[gpu_vertex_[d]].name, why));
      }
    }
    if (n <= kRouteTableGpus) {
      table_.reserve(static_cast<std::size_t>(n) * n);
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d) compute_route(s, d, table_.emplace_back(), ws);
    }
  }
  // Which GPUs of a server reach each other over NVLink alone (server 0; every
  // server is alike): NCCL's PXN relays only through such a GPU.
  const int g = gpus_per_node_;
  nvlinked_.assign(static_cast<std::size_t>(g) * g, 0);
  if (hints_.p2p && g > 1) {
    Workspace ws;
    Route r;
    for (int a = 0; a < g; ++a)
      for (int b = 0; b < g; ++b) {
        if (a == b) continue;
        compute_route(a, b, r, ws);
        bool nv = !r.links.empty();
        for (int l : r.links) nv = nv && link_class_[l] == LinkClass::nvlink;
        nvlinked_[static_cast<std::size_t>(a) * g + b] = nv;
      }
  }
}

const Route& Topology::route(int src_gpu, int dst_gpu, Workspace& ws) const {
  if (!table_.empty()) return table_[static_cast<std::size_t>(src_gpu) * num_gpus() + dst_gpu];
  RouteCache& c = ws.get<RouteCache>();
  if (c.slots.empty()) c.slots.resize(std::size_t{1} << RouteCache::kBits);
  const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(src_gpu)) << 32) |
                            static_cast<std::uint32_t>(dst_gpu);
  RouteCache::Slot& s = c.slots[(key * 0x9E3779B97F4A7C15ULL) >> (64 - RouteCache::kBits)];
  if (s.topo != id_ || s.src != src_gpu || s.dst != dst_gpu) {
    compute_route(src_gpu, dst_gpu, s.r, ws);
    s.topo = id_, s.src = src_gpu, s.dst = dst_gpu;
  }
  return s.r;
}

Route Topology::route(int src_gpu, int dst_gpu) const {
  if (!table_.empty()) return table_[static_cast<std::size_t>(src_gpu) * num_gpus() + dst_gpu];
  Workspace ws;
  Route r;
  compute_route(src_gpu, dst_gpu, r, ws);
  return r;
}

void Topology::compute_route(int src_gpu, int dst_gpu, Route& r, Workspace& ws) const {
  r.links.clear();
  r.latency = Time{};
  r.bottleneck = UINT64_MAX;
  if (src_gpu == dst_gpu) return;
  const int sv = gpu_vertex_.at(src_gpu), dv = gpu_vertex_.at(dst_gpu);
  const unsigned pick = static_cast<unsigned>(src_gpu + dst_gpu);
  const bool same = same_node(src_gpu, dst_gpu);
  if (!hints_.p2p && same && local_hb_[dst_gpu] >= 0) {
    // No peer-to-peer: up to the CPU local to the receiver, into host
    // memory, and down again (NCCL's addInterStep through that CPU,
    // src/graph/paths.cc@5067397c lines 763-773; the SHM transport's
    // buffers live in host memory, src/transport/shm.cc@5067397c line 134).
    const int hb = local_hb_[dst_gpu];
    walk(sv, hb, hb_dist_[hb], pick, r, ws);
    walk(hb, dv, dist_to(dst_gpu, ws), pick, r, ws);
    return;
  }
  if (!hints_.gdr && !same && local_hb_[src_gpu] >= 0 && local_hb_[dst_gpu] >= 0) {
    // No GPUDirect RDMA: GPU -> local CPU -> NIC, NIC -> local CPU -> GPU
    // (src/graph/paths.cc@5067397c lines 844-855).
    const int hs = local_hb_[src_gpu], hd = local_hb_[dst_gpu];
    walk(sv, hs, hb_dist_[hs], pick, r, ws);
    walk(hs, hd, hb_dist_[hd], pick, r, ws);
    walk(hd, dv, dist_to(dst_gpu, ws), pick, r, ws);
    return;
  }
  if (!same && pxn_route(src_gpu, dst_gpu, pick, r, ws)) return;
  walk(sv, dv, dist_to(dst_gpu, ws), pick, r, ws);
}

bool Topology::pxn_route(int src_gpu, int dst_gpu, unsigned pick, Route& r, Workspace& ws) const {
  auto none = [&r] {
    r.links.clear();
    r.latency = Time{};
    r.bottleneck = UINT64_MAX;
    return false;
  };
  none();
  // NCCL takes PXN only with GPUDirect RDMA (the proxy GPU's NIC reads its memory).
  if (same_node(src_gpu, dst_gpu) || !hints_.gdr) return false;
  const int p = pxn_gpu(src_gpu, dst_gpu);
  if (p == src_gpu) return false;
  const int sv = gpu_vertex_[src_gpu], pv = gpu_vertex_[p], dv = gpu_vertex_[dst_gpu];
  {
    const DistView to_dst = dist_to(dst_gpu, ws);  // read before dist_to(p) may drop it
    if (to_dst[sv] >= 0 || to_dst[pv] < 0) return false;
  }
  {
    const DistView to_p = dist_to(p, ws);
    if (to_p[sv] < 0) return false;
    walk(sv, pv, to_p, pick, r, ws);
  }
  // To the PXN GPU over NVLink alone (NCCL: PATH_NVL or better)...
  for (int l : r.links)
    if (link_class_[l] != LinkClass::nvlink) return none();
  const std::size_t first = r.links.size();
  walk(pv, dv, dist_to(dst_gpu, ws), pick, r, ws);
  // ... and from it to its NIC through PCIe switches, no CPU (PATH_PXB or better).
  for (std::size_t i = first; i < r.links.size() && link_class_[r.links[i]] != LinkClass::network; ++i)
    if (graph_[link_ends_[r.links[i]].second].kind == DeviceKind::host_bridge) return none();
  return true;
}

std::string Topology::pxn_unreachable(int src_gpu, int dst_gpu, Workspace& ws) const {
  Route r;
  if (pxn_route(src_gpu, dst_gpu, static_cast<unsigned>(src_gpu + dst_gpu), r, ws)) return "";
  const int p = pxn_gpu(src_gpu, dst_gpu), sv = gpu_vertex_[src_gpu], pv = gpu_vertex_[p];
  const std::string &sn = graph_[sv].name, &pn = graph_[pv].name, &dn = graph_[gpu_vertex_[dst_gpu]].name;
  if (!hints_.gdr) return "PXN needs GPUDirect RDMA (gdr is false)";
  if (p == src_gpu) return fmt::format("{} is itself its server's GPU on {}'s rail", sn, dn);
  const std::string which = fmt::format("{}, its server's GPU on {}'s rail,", pn, dn);
  if (dist_to(dst_gpu, ws)[pv] < 0) return fmt::format("{} does not reach {} either", which, dn);
  if (dist_to(p, ws)[sv] < 0) return fmt::format("{} is not reached from {}", which, sn);
  walk(sv, pv, dist_to(p, ws), 0, r, ws);
  for (int l : r.links)
    if (link_class_[l] != LinkClass::nvlink)
      return fmt::format("{} is not reached over NVLink alone (link {} is {})", which, link_name(l),
                         to_string(link_class_[l]));
  return fmt::format("{} reaches its NIC only through a host_bridge (a CPU)", which);
}

void Topology::walk(int v, int to, DistView dist, unsigned pick, Route& r, Workspace& ws) const {
  std::vector<int>& cand = ws.get<RouteCache>().cand;
  while (dist[v] > 0) {
    cand.clear();
    // Among the next hops on a shortest path, the fastest links (a GPU pair
    // sharing both an NVSwitch and a PCIe switch talks over NVLink), then ECMP.
    // One hop away, only links to the destination qualify: found by binary
    // search in the vertex's links sorted by target (a switch of 1024 GPUs
    // is not scanned per route).
    const OutLink* b = out_.data() + out_start_[v];
    const OutLink* e = out_.data() + out_start_[v + 1];
    if (dist[v] == 1) {
      b = std::lower_bound(b, e, to, [](const OutLink& o, int t) { return o.target < t; });
      e = std::upper_bound(b, e, to, [](int t, const OutLink& o) { return t < o.target; });
    }
    std::uint64_t best = 0;
    for (const OutLink* o = b; o != e; ++o) {
      if (dist[o->target] != dist[v] - 1) continue;
      const std::uint64_t bw = links_[o->link].bandwidth;
      if (bw > best) cand.clear(), best = bw;
      if (bw == best) cand.push_back(o->link);
    }
    if (cand.size() > 1)
      if (std::vector<int>* rec = ws.get<RouteCache>().record) {
        rec->push_back(static_cast<int>(cand.size()));
        rec->insert(rec->end(), cand.begin(), cand.end());
      }
    const Link& l = links_[cand[pick % cand.size()]];
    r.links.push_back(l.id);
    r.latency += l.latency;
    r.bottleneck = std::min(r.bottleneck, l.bandwidth);
    v = link_ends_[l.id].second;
  }
}

const std::vector<FabricTransport>& fabric_transports() {
  // Each plugin's behaviour as its source shows it; docs/collectives.md
  // ("Rented fabrics") and the topologies/ files that use them cite each figure.
  static const std::vector<FabricTransport> k = {
      {"ib", "", false, "InfiniBand through NCCL's own IB verbs transport, which reports no latency (0)"},
      {"roce", "", false,
       "RoCE through NCCL's IB verbs transport (or a fork of it, such as GCP's gIB), which reports no latency"},
      {"efa", "aws-ofi-nccl", true,
       "AWS Elastic Fabric Adapter (SRD) through the aws-ofi-nccl plugin, which reports its platform's latency "
       "(src/platform-aws.cpp: 75 us on p4d, p4de, p5 and p5e, 35 us on p5en), a figure chosen to steer NCCL's tuner: "
       "nccl.plugin_latency must give it"},
      {"tcpx", "GPUDirect-TCPX", false,
       "GCP A3 High's GPUDirect-TCPX plugin (TCP with device-memory receive); its reported latency is not "
       "published"},
      {"tcpxo", "GPUDirect-TCPXO", false,
       "GCP A3 Mega's GPUDirect-TCPXO plugin (NIC offload); its reported latency is not published"}};
  return k;
}

}  // namespace parmsim

namespace parmsim {

std::optional<NodeShift> Topology::node_shift(int nodes) const {
  const int N = num_nodes(), P = num_gpus(), V = num_devices(), L = num_links();
  if (nodes <= 0 || nodes >= N || N % nodes != 0 || P != N * gpus_per_node_) return std::nullopt;
  NodeShift sh;
  sh.nodes = nodes;
  sh.gpus = nodes * gpus_per_node_;
  sh.order = N / nodes;
  // Servers' devices: by their place among their server's devices.
  std::vector<std::vector<int>> of_node(N);
  for (int v = 0; v < V; ++v) {
    const int n = graph_[v].node;
    if (n >= N) return std::nullopt;
    if (n >= 0) of_node[n].push_back(v);
  }
  sh.vertex.assign(V, -1);
  std::vector<char> used(V, 0);
  for (int n = 0; n < N; ++n) {
    const auto& a = of_node[n];
    const auto& b = of_node[(n + nodes) % N];
    if (a.size() != b.size()) return std::nullopt;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (graph_[a[i]].kind != graph_[b[i]].kind) return std::nullopt;
      if (graph_[a[i]].kind == DeviceKind::gpu && graph_[b[i]].gpu != sh.shift_gpu(graph_[a[i]].gpu, P))
        return std::nullopt;
      sh.vertex[a[i]] = b[i];
      used[b[i]] = 1;
    }
  }
  auto has_link = [this](int a, int b) {
    const OutLink* e = out_.data() + out_start_[a + 1];
    const OutLink* f = std::lower_bound(out_.data() + out_start_[a], e, b,
                                        [](const OutLink& o, int t) { return o.target < t; });
    return f != e && f->target == b;
  };
  auto degree = [this](int v) { return out_start_[v + 1] - out_start_[v]; };
  // Switches outside the servers: each to a free switch of its kind and
  // degree linked to the images of its neighbours mapped so far (itself
  // first, then the lowest id), until none is left. A wrong guess is caught
  // by the check below, which makes the shift no symmetry.
  for (bool progress = true; progress;) {
    progress = false;
    for (int v = 0; v < V; ++v) {
      if (sh.vertex[v] >= 0) continue;
      std::vector<int> images;
      for (int i = out_start_[v]; i < out_start_[v + 1]; ++i)
        if (sh.vertex[out_[i].target] >= 0) images.push_back(sh.vertex[out_[i].target]);
      if (images.empty()) continue;
      auto fits = [&](int w) {
        if (used[w] || graph_[w].node >= 0 || graph_[w].kind != graph_[v].kind || degree(w) != degree(v)) return false;
        for (int t : images)
          if (!has_link(w, t)) return false;
        return true;
      };
      int pick = -1;
      if (fits(v)) {
        pick = v;
      } else {
        for (int i = out_start_[images[0]]; i < out_start_[images[0] + 1]; ++i)
          if (fits(out_[i].target) && (pick < 0 || out_[i].target < pick)) pick = out_[i].target;
      }
      if (pick < 0) return std::nullopt;
      sh.vertex[v] = pick;
      used[pick] = 1;
      progress = true;
    }
  }
  for (int v = 0; v < V; ++v)
    if (sh.vertex[v] < 0) return std::nullopt;
  // Every link to a link of the same kind between the images of its ends
  // (parallel links in their order).
  sh.link.assign(L, -1);
  for (int v = 0; v < V; ++v) {
    const int w = sh.vertex[v];
    if (degree(v) != degree(w)) return std::nullopt;
    for (int i = out_start_[v]; i < out_start_[v + 1];) {
      const int t = out_[i].target;
      int j = out_start_[w];
      while (j < out_start_[w + 1] && out_[j].target != sh.vertex[t]) ++j;
      for (; i < out_start_[v + 1] && out_[i].target == t; ++i, ++j) {
        if (j >= out_start_[w + 1] || out_[j].target != sh.vertex[t]) return std::nullopt;
        const Link &a = links_[out_[i].link], &b = links_[out_[j].link];
        if (a.bandwidth != b.bandwidth || a.latency != b.latency || link_class_[a.id] != link_class_[b.id])
          return std::nullopt;
        sh.link[a.id] = b.id;
      }
    }
  }
  if (!local_hb_.empty())
    for (int g = 0; g < P; ++g)
      if ((local_hb_[g] < 0) != (local_hb_[sh.shift_gpu(g, P)] < 0) ||
          (local_hb_[g] >= 0 && sh.vertex[local_hb_[g]] != local_hb_[sh.shift_gpu(g, P)]))
        return std::nullopt;
  // Orbits of links: each cycle of the map once.
  sh.rep.assign(L, -1);
  sh.weight.assign(L, 0);
  std::vector<int> cycle;
  for (int l = 0; l < L; ++l) {
    if (sh.rep[l] >= 0) continue;
    cycle.clear();
    for (int m = l; sh.rep[m] < 0; m = sh.link[m]) {
      sh.rep[m] = l;
      cycle.push_back(m);
    }
    if (sh.order % static_cast<int>(cycle.size()) != 0) return std::nullopt;
    for (int m : cycle) sh.weight[m] = sh.order / static_cast<int>(cycle.size());
  }
  // With a route table, every route at once: one shift maps each route onto
  // its image's, so every power of it does.
  if (!table_.empty()) {
    for (int a = 0; a < P; ++a)
      for (int b = 0; b < P; ++b) {
        const Route& r = table_[static_cast<std::size_t>(a) * P + b];
        const Route& s = table_[static_cast<std::size_t>(sh.shift_gpu(a, P)) * P + sh.shift_gpu(b, P)];
        if (r.links.size() != s.links.size() || r.latency != s.latency) return std::nullopt;
        for (std::size_t i = 0; i < r.links.size(); ++i)
          if (sh.link[r.links[i]] != s.links[i]) return std::nullopt;
      }
    sh.all_routes_ok = true;
  }
  return sh;
}

bool Topology::shift_keeps_order(const std::vector<int>& c, const NodeShift& shift) const {
  std::vector<int> img(c);
  for (int j = 1; j < shift.order; ++j) {
    for (int& l : img) l = shift.link[l];
    for (std::size_t i = 0; i + 1 < img.size(); ++i) {
      const int t0 = link_ends_[img[i]].second, t1 = link_ends_[img[i + 1]].second;
      if (t0 > t1 || (t0 == t1 && img[i] > img[i + 1])) return false;
    }
  }
  return true;
}

bool Topology::shift_route_ok(int src_gpu, int dst_gpu, NodeShift& shift, Workspace& ws) const {
  if (shift.all_routes_ok) return true;
  const int P = num_gpus();
  RouteCache& c = ws.get<RouteCache>();
  std::vector<int> rec;
  Route r;
  c.record = &rec;
  try {
    compute_route(src_gpu, dst_gpu, r, ws);
  } catch (...) {
    c.record = nullptr;
    throw;
  }
  c.record = nullptr;
  for (std::size_t i = 0; i < rec.size();) {
    const int n = rec[i];
    std::vector<int> cand(rec.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                          rec.begin() + static_cast<std::ptrdiff_t>(i) + 1 + n);
    i += 1 + static_cast<std::size_t>(n);
    // The pick is src + dst: a shift adds 2 x gpus, less P for each end that wraps.
    if ((2 * shift.gpus) % n != 0 || P % n != 0) return false;
    auto it = std::lower_bound(shift.cand_ok.begin(), shift.cand_ok.end(), cand);
    if (it != shift.cand_ok.end() && *it == cand) continue;
    if (!shift_keeps_order(cand, shift)) return false;
    shift.cand_ok.insert(it, std::move(cand));
  }
  return true;
}

}  // namespace parmsim
