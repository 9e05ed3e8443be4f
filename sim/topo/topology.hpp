#pragma once
// A cluster as a Boost.Graph: GPUs, NVSwitches, PCIe switches, host bridges,
// NICs and network switches as vertices; every physical link is two directed
// edges, each with its own bandwidth and latency.
//
// Routing: shortest paths by hop count, computed by breadth-first search from
// each destination GPU (cached). GPUs never forward traffic for others, with
// one exception, NCCL's PXN: a GPU with no path to a GPU of another server
// (a rail-only fabric, whose rails no spine joins) sends over NVLink to the
// GPU of its own server with the receiver's local index (on the receiver's
// rail), which sends through its NIC (Topology::pxn_route). Where
// several next hops are equally short, the fastest links win (two GPUs on
// one NVSwitch and one PCIe switch talk over NVLink); among equally fast
// ones, the one at index (src + dst) mod count (in the order links were declared) is taken: deterministic ECMP, which for
// fat-trees spreads an all-to-all evenly over the uplinks (d-mod-k style).
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <optional>
#include <unordered_set>
#include <span>
#include <string>
#include <vector>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/time.hpp"
#include "sim/core/workspace.hpp"

namespace parmsim {

enum class DeviceKind { gpu, nvswitch, pcie_switch, host_bridge, nic, network_switch };
const char* to_string(DeviceKind k);

struct Device {
  std::string name;  // "n3.gpu1", "leaf2"
  DeviceKind kind = DeviceKind::gpu;
  int node = -1;  // server index; -1 for fabric switches
  int gpu = -1;   // global GPU index (= rank) for GPUs
};

struct Link {
  int id = 0;
  std::uint64_t bandwidth = 0;  // bytes per second, this direction
  Time latency;
};

// What a link is, for the sustained-bandwidth fractions (LinkEfficiency):
// NVLink (GPU-GPU or GPU-NVSwitch), PCIe (anything through a PCIe switch or a
// host bridge, including GPU-NIC paths), network (NIC-switch, switch-switch).
enum class LinkClass : std::uint8_t { nvlink, pcie, network };
const char* to_string(LinkClass c);

// The fraction of each link class's line rate that collective traffic
// sustains; the topology's links carry line rate x fraction. Defaults
// (topology_io.cpp, `link_efficiency`): NCCL's own per-link figures over the
// line rate.
struct LinkEfficiency {
  double nvlink = 1.0, pcie = 1.0, network = 1.0;
  double of(LinkClass c) const { return c == LinkClass::nvlink ? nvlink : c == LinkClass::pcie ? pcie : network; }
};

// What NCCL's algorithm choice needs to know beyond links (topology keys).
struct CollectiveHints {
  bool nvls = false;      // the servers' NVSwitches reduce and multicast (NVLink SHARP)
  bool amd_cpu = false;   // host CPU vendor: NCCL's per-step network overhead is 2 us on AMD, 1 us otherwise
  double launch_us = 0;       // added to every NCCL collective and send/recv batch (topology key nccl.launch)
  double net_latency_us = 0;  // NIC-reported latency, added per network hop as NCCL adds latencyInter (nccl.net_latency)
  // The latency the fabric's net plugin reports to NCCL (nccl.plugin_latency):
  // NCCL's tuner adds it per network hop when it chooses; what runs does not
  // pay it (0: none reported, as NCCL's own IB transport).
  double plugin_latency_us = 0;
  // GPU peer-to-peer over PCIe (topology key p2p). Off (GeForce cards: the
  // driver refuses peer access), NCCL diverts GPU-GPU traffic of a server
  // through the CPU local to the receiving GPU (NVIDIA/nccl
  // src/graph/paths.cc@5067397c lines 763-773) and moves it with the SHM
  // transport: the sender's kernel writes into host memory, the receiver's
  // reads it back (src/transport/shm.cc@5067397c lines 56, 134-135, 163, 188).
  bool p2p = true;
  // GPUDirect RDMA (topology key gdr). Off, NCCL stages NIC traffic in host
  // memory local to the GPU: GPU -> CPU -> NIC and NIC -> CPU -> GPU
  // (src/graph/paths.cc@5067397c lines 844-855).
  bool gdr = true;
  // The fabric's transport (topology key fabric.transport, one of
  // fabric_transports()): ib (NCCL's own IB verbs transport), roce, efa
  // (AWS, through the aws-ofi-nccl plugin), tcpx, tcpxo (Google's GPUDirect-TCPX(O) plugins).
  std::string transport = "ib";
  // NCCL settings the platform's own setup exports to NCCL (topology keys
  // under nccl; docs/collectives.md, section 8): a net plugin's environment
  // (aws-ofi-nccl's platform table) or the cloud's documented profile.
  // protocols: NCCL_PROTO, the protocols NCCL's tuner may choose, a bit per
  // protocol (1 LL, 2 LL128, 4 Simple; 7 all, NCCL's default).
  unsigned protocols = 7;
  // NCCL_NVLS_CHUNKSIZE, NCCL_NVLSTREE_MAX_CHUNKSIZE and NCCL_BUFFSIZE in
  // bytes; 0: NCCL's defaults (128 KiB, unset, 4 MiB).
  double nvls_chunksize = 0;
  double nvlstree_max_chunksize = 0;
  double buffsize = 0;
};

// The fabric transports a topology may name: NCCL's own and the net plugins
// of the rented clouds. `plugin` names the net plugin that serves it (empty:
// NCCL's internal IB transport); `reports_latency`: the plugin reports the
// fabric's latency to NCCL (ncclNetProperties::latency, NCCL's latencyInter),
// so a topology of this transport must give it as nccl.plugin_latency > 0.
struct FabricTransport {
  const char* name;
  const char* plugin;
  bool reports_latency;
  const char* help;
};
const std::vector<FabricTransport>& fabric_transports();

struct Route {
  std::vector<int> links;        // link ids from source to destination
  Time latency;                  // sum of link latencies
  std::uint64_t bottleneck = 0;  // min bandwidth along the route, bytes/s
};

// What a network model reads of a route: its links (a view of a Route's, or
// of a plan's), latency and bottleneck. A Route converts to it.
struct RouteView {
  std::span<const int> links;
  Time latency;
  std::uint64_t bottleneck = 0;
  RouteView() = default;
  RouteView(std::span<const int> l, Time t, std::uint64_t b) : links(l), latency(t), bottleneck(b) {}
  RouteView(const Route& r) : links(r.links), latency(r.latency), bottleneck(r.bottleneck) {}  // NOLINT: implicit
};

// A symmetry of a topology: shifting every server by `nodes` places (server n
// to server n + nodes, modulo the servers; each device to the one with the
// same place in its new server, GPU g to g + gpus, modulo the GPUs), with the
// network switches mapped to match. Topology::node_shift finds it and checks
// that it is an automorphism: every link maps to a link of the same
// bandwidth, latency and class. Repeated, it generates a cyclic group of
// `order` elements; the links fall into orbits, each named by its smallest
// link id (`rep`), and a link stands for order / (its orbit's size) links'
// worth of flows of the orbit (`weight`). Routes are checked to follow it
// (Topology::shift_routes_ok) before a simulation relies on it
// (docs/performance.md, "Symmetry").
struct NodeShift {
  int nodes = 0;  // servers per shift
  int gpus = 0;   // GPUs per shift (nodes x GPUs per server)
  int order = 1;  // shifts until every device is back: servers / nodes
  std::vector<int> vertex;  // vertex -> its image
  std::vector<int> link;    // link id -> its image
  std::vector<int> rep;     // link id -> the smallest link id of its orbit
  std::vector<int> weight;  // link id -> order / orbit size
  bool all_routes_ok = false;  // every route checked at once (topologies with a route table)
  std::vector<std::vector<int>> cand_ok;  // ECMP candidate lists already checked (sorted for search)
  std::unordered_set<std::uint64_t> pairs_ok;  // (src << 32 | dst) whose routes were checked (the engine's)
  bool broken = false;  // a route did not follow it (the engine's: not tried again)
  int shift_gpu(int g, int total) const { return (g + gpus) % total; }
};

class Topology {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Device, Link>;

  Topology(std::string name, std::string gpu_model, int gpus_per_node);

  int add_device(Device d);
  // Adds the two directions of a physical link.
  void add_link(int a, int b, std::uint64_t bw_ab, std::uint64_t bw_ba, Time latency);
  // Multiplies every link's bandwidth by its class's fraction (before finalize).
  void apply_efficiency(const LinkEfficiency& e);
  const LinkEfficiency& efficiency() const { return eff_; }
  LinkClass link_class(int id) const { return link_class_[id]; }
  CollectiveHints& hints() { return hints_; }
  const CollectiveHints& hints() const { return hints_; }
  // NICs in server 0 (every server is alike).
  int nics_per_node() const { return nics_per_node_; }
  // Validates (every GPU reaches every other) and precomputes routing tables.
  // Throws UserError naming two GPUs that cannot reach each other.
  void finalize();

  const std::string& name() const { return name_; }
  const std::string& gpu_model() const { return gpu_model_; }
  // The GPU profile the simulation uses: the registry's profile of gpu_model(), with the
  // topology's compute keys applied (set_compute). Everything that times a kernel reads it.
  const GpuProfile& gpu() const { return gpu_; }
  // The topology's `compute` keys: every GEMM dtype's sustained throughput times
  // gemm_efficiency, and the per-kernel floor replaced by `launch` when given.
  void set_compute(double gemm_efficiency, std::optional<Time> launch);
  // Device memory per GPU, bytes: the topology's gpu_memory key, or its GPU profile's capacity.
  std::uint64_t gpu_memory() const;
  void set_gpu_memory(std::uint64_t bytes) { gpu_memory_ = bytes; }
  int num_gpus() const { return static_cast<int>(gpu_vertex_.size()); }
  int gpus_per_node() const { return gpus_per_node_; }
  int num_nodes() const { return num_gpus() / gpus_per_node_; }
  // Distinct for every finalize() in this process (copies share it): keys caches.
  std::uint64_t id() const { return id_; }
  int node_of(int gpu) const { return gpu / gpus_per_node_; }
  bool same_node(int a, int b) const { return node_of(a) == node_of(b); }
  const Device& device(int v) const { return graph_[v]; }
  int num_devices() const { return static_cast<int>(boost::num_vertices(graph_)); }
  int num_links() const { return static_cast<int>(links_.size()); }
  // The bytes this topology holds (its graph, links and route table), for the
  // commands that check what a run needs before it starts. Approximate: the
  // containers' capacities, and 3 pointers per graph edge and vertex entry.
  std::size_t footprint_bytes() const;
  const Link& link(int id) const { return links_[id]; }
  std::string link_name(int id) const;
  // The devices (vertices) a directed link leaves and enters.
  int link_from(int id) const { return link_ends_[id].first; }
  int link_to(int id) const { return link_ends_[id].second; }
  const Graph& graph() const { return graph_; }

  // Precomputed for clusters of up to kRouteTableGpus GPUs (the common
  // case, and read-only so threads may share it); computed on demand above,
  // into ws's cache of recent routes, which any later call with the same
  // workspace may overwrite (copy what you keep).
  const Route& route(int src_gpu, int dst_gpu, Workspace& ws) const;
  // The same, copied, for a caller that asks once (above kRouteTableGpus it
  // costs a search: loops pass a Workspace).
  Route route(int src_gpu, int dst_gpu) const;
  static constexpr int kRouteTableGpus = 256;
  // Hops from every vertex to dst_gpu (-1: unreachable), by breadth-first
  // search; routes keep them in the workspace (bounded), so a route above
  // kRouteTableGpus costs at most one search per destination, not GPUs x
  // devices of memory.
  std::vector<int> bfs_to(int dst_gpu) const;
  // The same distances as routes read them: above kRouteTableGpus, on a
  // topology with a server shift, the search of dst_gpu's representative
  // (dst_gpu mod distance_shift_gpus()) moved by the shift.
  std::vector<int> hop_distances(int dst_gpu, Workspace& ws) const;
  // GPUs per server shift whose searches stand for every destination's (the
  // smallest shift node_shift proves); 0 where every destination is searched.
  int distance_shift_gpus() const { return dist_shift_gpus_; }
  // The symmetry of shifting servers by `nodes` places, when it is one (see
  // NodeShift); nullopt when it is not, or when nodes does not divide the
  // servers into at least two groups.
  std::optional<NodeShift> node_shift(int nodes) const;
  // Whether the routes from GPU src to dst and from each of its images
  // (src + j x shift.gpus to dst + j x shift.gpus) are images of each other
  // link by link, so that flows of one orbit take routes of one orbit. With a
  // route table this was checked for every pair by node_shift; above it, the
  // route is walked again and each ECMP choice on it checked: the pick
  // (src + dst) moves by a multiple of the candidates' count under every
  // shift, and every shift keeps the candidates in their order.
  bool shift_route_ok(int src_gpu, int dst_gpu, NodeShift& shift, Workspace& ws) const;
  // The host bridge (CPU) local to a GPU: the nearest host_bridge of its
  // server (fewest hops, then the first declared); -1 when its server has
  // none. Routes of a topology with p2p or gdr off pass through it.
  int local_host_bridge(int gpu) const { return local_hb_.empty() ? -1 : local_hb_[gpu]; }
  // Whether GPUs a and b of one server (any server: they are alike) reach each other
  // over NVLink links alone (NVLink or an NVSwitch), as NCCL's PATH_NVL.
  bool nvlinked(int a, int b) const {
    const int g = gpus_per_node_;
    return same_node(a, b) && a != b && nvlinked_[static_cast<std::size_t>(a % g) * g + b % g];
  }

 private:
  std::string name_, gpu_model_;
  int gpus_per_node_;
  std::uint64_t gpu_memory_ = 0;  // 0: the profile's
  GpuProfile gpu_;                // gpu_profile(gpu_model_) with set_compute applied
  std::vector<char> nvlinked_;    // [a * gpus_per_node + b], local indices (finalize)
  Graph graph_;
  std::vector<int> gpu_vertex_;  // rank -> vertex
  std::vector<Link> links_;      // by id
  std::vector<std::pair<int, int>> link_ends_;
  std::vector<LinkClass> link_class_;  // by id
  LinkEfficiency eff_;
  CollectiveHints hints_;
  int nics_per_node_ = 0;
  std::uint64_t id_ = 0;  // set by finalize: keys the workspace's distance and route caches
  struct OutLink {
    int target, link;
  };
  std::vector<int> out_start_;  // CSR by vertex into out_ (built by finalize)
  std::vector<OutLink> out_;    // each vertex's outgoing links, sorted by (target, link id)
  std::vector<int> in_start_;   // CSR by vertex into in_ (finalize)
  std::vector<int> in_;         // each vertex's links' sources (bfs_to_vertex)
  std::vector<char> is_gpu_;    // by vertex
  // Hop distances to one destination: a representative's vector read through
  // the inverse of a power of the distance shift (dist_shift_), or a vector
  // as it is (j == 0). Valid until the next dist_to on the same workspace may
  // drop the cache.
  struct DistView {
    const int* d = nullptr;
    const Topology* t = nullptr;
    int j = 0;  // the destination is the representative's image under the shift^j
    DistView(const std::vector<int>& v) : d(v.data()) {}  // NOLINT: implicit
    DistView(const std::vector<int>& v, const Topology* topo, int power) : d(v.data()), t(topo), j(power) {}
    int operator[](int v) const { return j == 0 ? d[v] : d[t->shift_back(v, j)]; }
  };
  DistView dist_to(int dst_gpu, Workspace& ws) const;
  // Above kRouteTableGpus, when a server shift is an automorphism of the
  // graph (node_shift), its vertex map as cycles: dist_shift_[0, V) lists the
  // vertices cycle by cycle, each as v, s(v), s^2(v), ...; [V, 2V) each
  // vertex's index in that list, [2V, 3V) its cycle's first index and [3V,
  // 4V) its cycle's length. Destination d = d0 + j x dist_shift_gpus_ (d0 a
  // representative) has dist_d(v) = dist_d0(s^-j(v)): an automorphism keeps
  // hop counts and which vertices are GPUs. Empty: every destination searched.
  std::vector<int> dist_shift_;
  int dist_shift_gpus_ = 0;
  int shift_back(int v, int j) const {
    const int V = num_devices();
    const int len = dist_shift_[3 * V + v];
    if (len == 1) return v;  // fixed by the shift (a rail or spine switch)
    const int start = dist_shift_[2 * V + v];
    int k = dist_shift_[V + v] - start - (j < len ? j : j % len);  // no division for a full orbit
    if (k < 0) k += len;
    return dist_shift_[start + k];
  }
  void set_dist_shift();
  std::vector<Route> table_;  // src * n + dst, when n <= kRouteTableGpus
  // Into r, reusing its storage.
  void compute_route(int src_gpu, int dst_gpu, Route& r, Workspace& ws) const;
  // Hops from every vertex to vertex `to` along links that transit no GPU.
  std::vector<int> bfs_to_vertex(int to) const;
  // Appends to r the shortest path from vertex `from` to vertex `to`
  // (dist: bfs_to_vertex(to)), fastest links first, then ECMP by `pick`.
  void walk(int from, int to, DistView dist, unsigned pick, Route& r, Workspace& ws) const;
  // Whether every shift keeps ECMP candidate list c (link ids, in out-link order) in order.
  bool shift_keeps_order(const std::vector<int>& c, const NodeShift& shift) const;
  // PXN (NVIDIA/nccl src/graph/search.cc@5067397c lines 1397-1470,
  // ncclTopoGetNetDev with P2P_PXN_LEVEL 2, its default): when GPU src has no
  // path to GPU dst of another server that transits no GPU, the route goes to
  // pxn_gpu(src, dst) over NVLink links only, then on to dst from there; into
  // r (cleared first). False, r empty, when there is a direct path, or when
  // that GPU is src, is not reached over NVLink alone, does not reach dst, or
  // reaches its NIC only through a host bridge. Used only where no direct
  // path exists: no other route changes.
  bool pxn_route(int src_gpu, int dst_gpu, unsigned pick, Route& r, Workspace& ws) const;
  // The GPU of src's server with dst's local index: the GPU on dst's rail.
  int pxn_gpu(int src_gpu, int dst_gpu) const { return node_of(src_gpu) * gpus_per_node_ + dst_gpu % gpus_per_node_; }
  // Why src cannot reach dst of another server through PXN either, for the
  // finalize error ("" when it can).
  std::string pxn_unreachable(int src_gpu, int dst_gpu, Workspace& ws) const;
  // With p2p or gdr off: every GPU's local host bridge and, per host
  // bridge, the hop distances to it (by host-bridge vertex).
  std::vector<int> local_hb_;
  std::vector<std::vector<int>> hb_dist_;  // by vertex; empty unless a host bridge
};

}  // namespace parmsim
