#include "sim/coll/nccl_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <type_traits>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"

namespace parmsim {
namespace {

// ---- NCCL's constants (NVIDIA/nccl src/graph/tuning.cc, v2.30.7, lines 138-212) ----
// Index order: algorithms ring, tree, nvls, nvls_tree; protocols ll, ll128, simple.
constexpr int kRing = 0, kTree = 1, kNvls = 2, kNvlsTree = 3;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;

int ai(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::ring:
      return kRing;
    case NcclAlgo::tree:
      return kTree;
    case NcclAlgo::nvls:
      return kNvls;
    case NcclAlgo::nvls_tree:
      return kNvlsTree;
  }
  return kRing;
}
int pi(NcclProto p) {
  return p == NcclProto::ll ? kLL : p == NcclProto::ll128 ? kLL128 : kSimple;
}

// baseLatencies (us).
constexpr double kBaseLat[4][3] = {{6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}};
// hwLatencies (us per hop): [NVLink, PCI, NET][algorithm][protocol].
constexpr double kHwLat[3][4][3] = {
    {{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}, {0, 0, 25}, {0, 0, 25}},
    {{1.0, 2.5, 5.7}, {1.0, 1.9, 4.0}, {0, 0, 0}, {0, 0, 0}},
    {{2.7, 4.0, 14.0}, {5.0, 8.5, 14}, {0, 0, 18}, {0, 0, 20.9}},
};
constexpr int kNvlinkHw = 0, kPciHw = 1, kNetHw = 2;
// Bandwidth caps (GB/s), [arch][1 node, 2 nodes, >= 3 nodes]. llMaxBws' row
// is the GPU generation on one node and the CPU vendor across nodes
// (row 0: Intel and others, row 1: AMD).
constexpr double kLLMaxBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282, 90, 70}};
constexpr double kPerChMaxRingLL128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
constexpr double kPerChMaxTreeLL128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChMaxTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
constexpr double kPerChMaxNvlsTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
constexpr double kNvlsEfficiency[4] = {0, 0, 0.85, 0.74};
// A tree of NCCL_TOPO_PATTERN_TREE (NcclSystem::tree_pattern_simple) runs at
// this fraction of its bandwidth (tuning.cc line 336).
constexpr double kTreePatternFactor = 0.85;
// The runtime's channel tuning (nccl_runtime_channels), NVIDIA/nccl@5067397c:
// MAXCHANNELS (src/include/device.h line 91), NCCL_LL_MAX_NTHREADS,
// NCCL_LL128_MAX_NTHREADS, NCCL_SIMPLE_MAX_NTHREADS (device.h lines 95-114),
// NCCL_LL/LL128/SIMPLE_THREAD_THRESHOLD (src/include/comm.h lines 49-51),
// PCI_BW (src/graph/topo.h line 25: a ring of at most this many GB/s runs
// 256 Simple threads, tuning.cc lines 244-247).
constexpr int kMaxChannels = 64;
constexpr int kLLMaxThreads = 512, kLL128MaxThreads = 640, kSimpleMaxThreads = 512;
constexpr double kLLThreadThreshold = 8, kSimpleThreadThreshold = 64;  // LL128's is LL's, 8
constexpr double kPciBw = 12.0;
// treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B .. 256 MiB (ncclTopoGetAlgoTime).
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

// Speed ladders of the channel search (src/graph/search.cc lines 1051-1067).
const std::vector<double>& ladder(int arch, bool inter) {
  static const std::vector<double> intra_old = {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
  static const std::vector<double> inter_old = {48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12};
  static const std::vector<double> intra_90 = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};
  static const std::vector<double> inter_90 = {48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
  static const std::vector<double> intra_100 = {90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18};
  static const std::vector<double> inter_100 = {96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22,
                                                20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
  if (arch >= 3) return inter ? inter_100 : intra_100;
  if (arch == 2) return inter ? inter_90 : intra_90;
  return inter ? inter_old : intra_old;
}

// The ring search's MAXCHANNELS/2 (src/init.cc).
constexpr int kMaxSearchChannels = 32;

// The first ladder speed at or below `bw` (the slowest rung if none).
double rung_at_most(const std::vector<double>& l, double bw) {
  for (double s : l)
    if (s <= bw * (1 + 1e-9)) return s;
  return l.back();
}

// NCCL's compCapIndex (src/graph/tuning.cc): 3 from compute capability 10.0
// (Blackwell), 2 from 9.0 (Hopper), 1 from 8.0 (Ampere), 0 below.
int nccl_arch(int compute_capability) {
  return compute_capability >= 100 ? 3 : compute_capability >= 90 ? 2 : compute_capability >= 80 ? 1 : 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int log2i(double x) {
  int r = -1;
  auto v = static_cast<std::uint64_t>(x);
  while (v) v >>= 1, ++r;
  return r;
}

}  // namespace

double nccl_channel_ll128_rate(int compute_capability) {
  return kPerChMaxRingLL128[nccl_arch(compute_capability)][0] * 1e9;  // the same in every column
}

const char* to_string(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::ring:
      return "ring";
    case NcclAlgo::tree:
      return "tree";
    case NcclAlgo::nvls:
      return "nvls";
    case NcclAlgo::nvls_tree:
      return "nvls_tree";
  }
  return "?";
}
const char* to_string(NcclProto p) {
  switch (p) {
    case NcclProto::ll:
      return "ll";
    case NcclProto::ll128:
      return "ll128";
    case NcclProto::simple:
      return "simple";
  }
  return "?";
}
bool parse_nccl_algo(const std::string& s0, NcclAlgo* out) {
  const std::string s = lower(s0);
  for (NcclAlgo a : {NcclAlgo::ring, NcclAlgo::tree, NcclAlgo::nvls, NcclAlgo::nvls_tree})
    if (s == to_string(a)) return *out = a, true;
  if (s == "nvlstree") return *out = NcclAlgo::nvls_tree, true;
  return false;
}
bool parse_nccl_proto(const std::string& s0, NcclProto* out) {
  const std::string s = lower(s0);
  for (NcclProto p : {NcclProto::ll, NcclProto::ll128, NcclProto::simple})
    if (s == to_string(p)) return *out = p, true;
  return false;
}

std::string NcclEstimate::label() const {
  return fmt::format("{}/{}/{}", to_string(algo), to_string(proto), channels);
}

bool nccl_tuned(CollOp op) {
  return op == CollOp::allreduce || op == CollOp::allgather || op == CollOp::reducescatter;
}

NcclSystem nccl_system(const std::vector<int>& group, const Topology& topo, Workspace& ws) {
  NcclSystem s;
  s.ranks = static_cast<int>(group.size());
  std::map<int, std::vector<int>> by_node;
  for (int r : group) by_node[topo.node_of(r)].push_back(r);
  s.nodes = static_cast<int>(by_node.size());
  for (const auto& [n, v] : by_node) s.ppn = std::max(s.ppn, static_cast<int>(v.size()));
  for (const auto& [n, v] : by_node) s.uniform = s.uniform && static_cast<int>(v.size()) == s.ppn;
  s.arch = nccl_arch(topo.gpu().compute_capability);
  s.nics = topo.nics_per_node();
  s.amd_cpu = topo.hints().amd_cpu;
  s.launch_us = topo.hints().launch_us;
  s.net_latency_us = topo.hints().net_latency_us;
  s.plugin_latency_us = topo.hints().plugin_latency_us;
  s.protocols = topo.hints().protocols;
  s.nvls_chunksize = topo.hints().nvls_chunksize;
  s.nvlstree_max_chunksize = topo.hints().nvlstree_max_chunksize;
  s.buffsize = topo.hints().buffsize;
  // Inside a node: NCCL's ring search charges each ring edge's speed to every
  // link of its path (src/graph/search.cc@5067397c followPath, lines 81-125),
  // so a link that k edges share gives each 1/k; the ring's speed is the
  // least link bandwidth over its charge. A path through a CPU (PATH_PHB, one
  // host bridge, no CPU-CPU link) from a GPU on an Intel host is charged 6/5
  // on its PCIe links (INTEL_P2P_OVERHEAD, src/graph/topo.h@5067397c line 39;
  // search.cc lines 86-91). With p2p off every edge of a server takes such a
  // path (Topology::route).
  s.nvlink = true;
  s.intra_bw = 0;
  bool any_intra = false;
  const bool intel = !topo.hints().amd_cpu;
  // Charges of one route (`from_gpu`: the path starts at a GPU, so NCCL's
  // overhead applies), into `charge` by link id; `keep` filters the links.
  std::map<int, double> charge;
  auto add_route = [&](const Route& r, bool from_gpu, auto&& keep) {
    int hbs = 0;
    bool sys = false;
    for (int l : r.links) {
      const int to = topo.link_to(l), from = topo.link_from(l);
      hbs += topo.device(to).kind == DeviceKind::host_bridge;
      sys = sys || (topo.device(to).kind == DeviceKind::host_bridge &&
                    topo.device(from).kind == DeviceKind::host_bridge);
    }
    const bool phb = hbs > 0 && !sys && from_gpu && intel;
    for (int l : r.links)
      if (keep(l)) charge[l] += (phb && topo.link_class(l) == LinkClass::pcie) ? 6.0 / 5.0 : 1.0;
  };
  auto all = [](int) { return true; };
  auto least = [&](const std::map<int, double>& c) {
    double bw = -1;
    for (const auto& [l, k] : c) {
      const double x = static_cast<double>(topo.link(l).bandwidth) / 1e9 / k;
      bw = bw < 0 ? x : std::min(bw, x);
    }
    return bw;
  };
  for (const auto& [n, v] : by_node) {
    if (v.size() < 2) continue;
    charge.clear();
    for (std::size_t i = 0; i < v.size(); ++i) {
      const Route& r = topo.route(v[i], v[(i + 1) % v.size()], ws);
      s.intra_hop_us = std::max(s.intra_hop_us, r.latency.to_us());
      bool nv = true;
      for (int l : r.links) nv = nv && topo.link_class(l) == LinkClass::nvlink;
      s.nvlink = s.nvlink && nv;
      add_route(r, true, all);
    }
    const double bw = least(charge);
    s.intra_bw = any_intra ? std::min(s.intra_bw, bw) : bw;
    any_intra = true;
  }
  if (!any_intra) s.nvlink = false;
  // Across nodes: the route between the same local GPU of two nodes (its rail).
  if (s.nodes > 1) {
    auto it = by_node.begin();
    const auto& v0 = it->second;
    const auto& v1 = std::next(it)->second;
    const auto& vl = by_node.rbegin()->second;
    s.nic_bw = 0;
    bool first = true;
    // The first device each GPU's route to the network leaves it for: two GPUs
    // whose routes start at one PCIe switch (or one CPU root complex) share
    // their NICs' closest path type, so NCCL's balanced tree finds its second
    // GPU (tree_pattern_simple).
    std::vector<int> first_hop;
    bool shared_switch = false;
    for (std::size_t i = 0; i < std::min(v0.size(), v1.size()); ++i) {
      const Route& r = topo.route(v0[i], v1[i], ws);
      const double bw = static_cast<double>(r.bottleneck) / 1e9;
      s.nic_bw = first ? bw : std::min(s.nic_bw, bw);
      first = false;
      if (!r.links.empty()) {
        const int d = topo.link_to(r.links.front());
        const DeviceKind k = topo.device(d).kind;
        if (k == DeviceKind::pcie_switch || k == DeviceKind::host_bridge) {
          shared_switch = shared_switch || std::find(first_hop.begin(), first_hop.end(), d) != first_hop.end();
          first_hop.push_back(d);
        }
      }
    }
    // Hopper and newer fall back to the plain tree when the balanced one finds
    // no second GPU on the NIC's switch (search.cc lines 1215-1219); older
    // GPUs widen the path type instead and keep the balanced tree.
    s.tree_pattern_simple = s.arch >= 2 && !shared_switch;
    // One ring's charges on the first node's links: its edges inside the
    // node, the last GPU's path out to the next node and the path in to the
    // first GPU. With gdr off both pass through the CPU (paths.cc lines
    // 844-855) and the outgoing one, a PATH_PHB path from a GPU, is charged
    // the overhead (search.cc line 88); with gdr on the key says NCCL reaches
    // the NIC directly, uncharged.
    const int n0 = it->first;
    charge.clear();
    auto mine = [&](int l) {
      return topo.device(topo.link_from(l)).node == n0 || topo.device(topo.link_to(l)).node == n0;
    };
    for (std::size_t i = 0; i + 1 < v0.size(); ++i) add_route(topo.route(v0[i], v0[i + 1], ws), true, mine);
    add_route(topo.route(v0.back(), v1.front(), ws), !topo.hints().gdr, mine);
    add_route(topo.route(vl.back(), v0.front(), ws), false, mine);
    const double bw = least(charge);
    if (bw > 0) s.nic_bw = std::min(s.nic_bw, bw);
    // The machine's network hop: the slowest route from a GPU to the same
    // local GPU of the next node (the ring's and the tree's inter-node
    // edges run between such GPUs, on their rail), over every node and
    // every local GPU both nodes hold.
    for (auto a = by_node.begin(); a != by_node.end(); ++a) {
      const auto b = std::next(a) == by_node.end() ? by_node.begin() : std::next(a);
      for (std::size_t i = 0; i < std::min(a->second.size(), b->second.size()); ++i)
        s.inter_hop_us = std::max(s.inter_hop_us, topo.route(a->second[i], b->second[i], ws).latency.to_us());
    }
  }
  s.nvls = topo.hints().nvls && s.arch >= 2 && s.nvlink;
  s.ring_graph = nccl_ring_graph(s);
  s.tree_graph = nccl_tree_graph(s);
  s.nvls_graph = nccl_nvls_graph(s);
  s.graphs = true;
  return s;
}

NcclSystem nccl_system(const std::vector<int>& group, const Topology& topo) {
  Workspace ws;
  return nccl_system(group, topo, ws);
}

NcclGraph nccl_ring_graph(const NcclSystem& s) {
  NcclGraph g;
  if (s.nodes <= 1) {
    // Each channel's ring consumes its speed on every GPU's NVLink (or PCIe)
    // path: the search keeps the most channels x speed that fits.
    double best = 0, speed = 0;
    for (double sp : ladder(s.arch, false)) {
      const int ch = std::min(kMaxSearchChannels, static_cast<int>(std::floor(s.intra_bw / sp + 1e-9)));
      if (ch >= 1 && ch * sp > best + 1e-9) best = ch * sp, speed = sp, g.channels = ch;
    }
    if (g.channels == 0) g.channels = 1, speed = ladder(s.arch, false).back();
    g.bw_intra = g.bw_inter = speed;
  } else {
    // One ring per NIC (rail), at the ladder speed the GPU -> NIC path allows.
    const double sp = rung_at_most(ladder(s.arch, true), s.nic_bw);
    const int per_nic = std::max(1, static_cast<int>(std::floor(s.nic_bw / sp + 1e-9)));
    g.channels = std::min(kMaxSearchChannels, std::max(1, s.nics) * per_nic);
    g.bw_intra = g.bw_inter = sp;
  }
  // ncclTopoDupChannels: doubled (halving the speed) unless the speed is
  // below 25 GB/s, or (Hopper and newer) below 50 with more than 4 channels.
  const bool keep = g.bw_intra < 25.0 || (s.arch >= 2 && g.bw_intra < 50.0 && g.channels > 4);
  if (!keep) {
    const int dup = std::min(2 * g.channels, kMaxSearchChannels);
    const int div = (dup + g.channels - 1) / g.channels;
    g.bw_intra /= div;
    g.bw_inter /= div;
    g.channels = dup;
  }
  return g;
}

NcclGraph nccl_tree_graph(const NcclSystem& s) {
  NcclGraph g = nccl_ring_graph(s);
  // One node, and PCIe servers (whose intra-node charges, shared uplinks and
  // the CPU overhead, nccl_system folds into the ring's speed only): the
  // ring's graph, as before.
  if (s.nodes < 2 || !s.nvlink) return g;
  // Pass 2 of ncclTopoCompute (src/graph/search.cc@5067397c lines 1256-1284;
  // the same in v2.18.5, lines 956-975): from the rung of the found graph's
  // network speed, while the intra speed is below twice the network speed,
  // try the next faster rung for the intra speed alone, with the channels
  // found (tmpGraph.minChannels); keep it if the search finds them. Each
  // channel's chain charges its intra speed on every GPU's path to the next
  // (ncclTopoFollowPath, bwIntra on GPU-NVSwitch-GPU), so it fits while
  // channels x speed <= a GPU's intra-node bandwidth. No duplication follows
  // (it runs before pass 2 in v2.30; in v2.18 after it, capped by
  // maxChannels = the ring's channels, so the same).
  const auto& lad = ladder(s.arch, true);
  std::size_t i = 0;
  while (i + 1 < lad.size() && lad[i] > g.bw_inter + 1e-9) ++i;
  while (i > 0 && g.bw_intra < 2 * g.bw_inter - 1e-9) {
    const double next = lad[i - 1];
    if (g.channels * next > s.intra_bw + 1e-9) break;
    g.bw_intra = next;
    --i;
  }
  return g;
}

NcclGraph nccl_nvls_graph(const NcclSystem& s) {
  NcclGraph g;
  // One head per GPU on one node, one per NIC across nodes (src/graph/search.cc
  // lines 410-443, 1124-1138): every GPU's NVLink carries channels + 1 times the speed.
  g.channels = s.nodes <= 1 ? std::min(kMaxSearchChannels, s.ppn) : std::max(1, std::min(s.nics, s.ppn));
  const auto& intra = ladder(s.arch, false);
  g.bw_intra = rung_at_most(intra, s.intra_bw / (g.channels + 1));
  if (s.nodes <= 1) {
    // Pass 2 raises the inter speed to the ladder's top below twice the intra speed.
    g.bw_inter = g.bw_intra;
    for (double sp : intra)
      if (sp < 2 * g.bw_intra) {
        g.bw_inter = sp;
        break;
      }
  } else {
    g.bw_inter = rung_at_most(ladder(s.arch, true), s.nic_bw);
  }
  return g;
}

namespace {

// The loop of an NVLS or NVLS-Tree AllReduce (NcclPipeline), as
// ncclNvlsTuning sets up the communicator (src/transport/nvls.cc@5067397c).
NcclPipeline nvls_pipeline(const NcclSystem& s, const NcclGraph& g, NcclAlgo algo) {
  NcclPipeline p;
  // The AllReduce kernels (src/device/all_reduce.h@5067397c lines 390-525,
  // NVLS; 527-635, NVLS-Tree) split each CTA's warps into scatter, reduce,
  // broadcast and gather groups. The scatter warps copy a whole loop (every
  // head's chunk) into the NVLS buffers and post it to every head at once,
  // after the last copy (ScatterGatherOp, src/device/prims_simple.h lines
  // 406-480: one postPeer after the loop over the peers); the heads then
  // reduce their chunks (multimem.ld_reduce, and across nodes the network
  // tree) and broadcast them (multimem.st), each head at once; the gather
  // warps wait for every head's chunk of the loop before copying it out. So a
  // loop passes three loop-sized stages one after another: scatter, the
  // heads' work, gather. (The heads' work is itself pipelined per chunk
  // through the network tree's levels; that finer fill is not added.)
  p.stages = 3;
  p.heads = g.channels;  // the NVLS graph's channels: one head per GPU on one node, per NIC across nodes
  p.tree = algo == NcclAlgo::nvls_tree;
  // NVLS_NCHANNELS_SM90 16; SM100 24 on one node (NVL), 32 across nodes (lines 155-157, 209-214).
  p.channels = s.arch >= 3 ? (s.nodes > 1 ? 32 : 24) : 16;
  double chunk = 128 * 1024;  // NCCL_NVLS_CHUNKSIZE (line 160)
  double tree_max = 0;
  // The platform's NCCL_NVLS_CHUNKSIZE replaces the tuning's chunk, its
  // NCCL_NVLSTREE_MAX_CHUNKSIZE the tuning's and the fallback's maximum
  // (ncclNvlsTuning, lines 213-231: "User overrides take priority").
  const bool user_chunk = s.nvls_chunksize > 0;
  const bool user_tree_max = s.nvlstree_max_chunksize > 0;
  if (s.arch >= 3 && s.nodes > 1) {
    // ncclNvlsTreeSm100Tuning (lines 163-198), with the GPU's NIC behind its
    // PCIe switch (PATH_PXB), as on every bundled topology with NICs.
    const double nic = s.nic_bw;
    if (s.nodes == 2 && nic >= 48.0) {
      p.channels = 32;
      tree_max = 128 * 1024;
      if (s.ppn <= 4)
        chunk = tree_max = 256 * 1024;
      else if (s.ppn >= 16 || (s.ppn <= 8 && nic < 96.0))
        tree_max = 64 * 1024;
    } else if (nic >= 96.0) {
      if (s.ppn <= 8) {
        p.channels = 24;
        chunk = tree_max = 256 * 1024;
      } else {
        p.channels = 32;
        tree_max = s.ppn < 32 ? 128 * 1024 : 64 * 1024;
      }
    } else if (nic >= 48.0) {
      p.channels = 24;
      tree_max = 64 * 1024;
    }
  }
  if (user_chunk) chunk = s.nvls_chunksize;
  // NVLSTREE_MAX_CHUNKSIZE unset and no tuning: 64 KiB from 4 nodes, else the chunk (lines 226-231).
  if (user_tree_max)
    tree_max = s.nvlstree_max_chunksize;
  else if (tree_max == 0)
    tree_max = s.nodes >= 4 ? 64 * 1024 : chunk;
  // NVLS: the chunk is at most a Simple step (buffSizes[SIMPLE] / NCCL_STEPS,
  // NCCL_BUFFSIZE 4 MiB / 8 by default; enqueue.cc lines 2222-2225, 2263-2267).
  // NVLS-Tree: min(nvlsChunkSize, nvlsTreeMaxChunkSize), no step cap (line 2281).
  const double buff = s.buffsize > 0 ? s.buffsize : 4.0 * 1024 * 1024;
  p.chunk = p.tree ? std::min(chunk, tree_max) : std::min(chunk, buff / 8);
  return p;
}

// Bandwidth (tuning.cc lines 288-383) of `c` graph channels, algorithm
// bandwidth before the tree correction factor.
double bus_at(const NcclBusTerms& t, double c) {
  const NcclAlgo algo = t.algo;
  const int p = t.p;
  double bus = c * t.bw;
  if (algo == NcclAlgo::ring && p == kLL) bus = std::min(kLLMaxBw[t.i1][t.i2], bus * 0.5);
  if (algo == NcclAlgo::ring && p == kLL128) bus = std::min(bus * 0.92, c * kPerChMaxRingLL128[t.arch][t.i2]);
  if (algo == NcclAlgo::tree && t.ar) bus = std::min(bus * 0.92, c * kPerChMaxTree[t.arch][t.i2]);
  if (algo == NcclAlgo::tree && p == kLL) bus = std::min(bus / 3.8, kLLMaxBw[t.i1][t.i2]);
  if (algo == NcclAlgo::tree && p == kLL128)
    bus = std::min(bus * (t.N == 1 ? 7.0 / 9.0 : 120.0 / 128.0), c * kPerChMaxTreeLL128[t.arch][t.i2]);
  // The plain tree pattern's penalty (tuning.cc line 336; NcclSystem::tree_pattern_simple).
  if (algo == NcclAlgo::tree && t.tree_pattern_simple) bus *= kTreePatternFactor;
  // Bus bandwidth to algorithm bandwidth: ring and NVLS by ranks / steps,
  // tree AllReduce by 1/2; non-ring AllGather/ReduceScatter unconverted.
  if (!(algo != NcclAlgo::ring && !t.ar)) {
    if (algo == NcclAlgo::ring || algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree)
      bus *= static_cast<double>(t.n) / t.nsteps;
    else
      bus *= 0.5;
  }
  return bus;
}

std::optional<NcclTuner::Pair> nccl_terms(CollOp op, const NcclSystem& s, NcclAlgo algo, NcclProto proto,
                                          int channels, std::string* why) {
  // The reason is formatted only when asked for (nccl_choose asks only when
  // a forced choice may leave nothing).
  auto no = [why](auto&& w) -> std::optional<NcclTuner::Pair> {
    if (why) {
      if constexpr (std::is_invocable_v<decltype(w)>)
        *why = w();
      else
        *why = w;
    }
    return std::nullopt;
  };
  if (!nccl_tuned(op)) return no([&] { return fmt::format("NCCL's tuner does not cost {}", to_string(op)); });
  const int a = ai(algo), p = pi(proto);
  const bool ar = op == CollOp::allreduce;
  if (algo == NcclAlgo::tree && !ar) return no("tree runs AllReduce only");
  if (algo == NcclAlgo::nvls_tree && !ar) return no("nvls_tree runs AllReduce only");
  if ((algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree) && proto != NcclProto::simple)
    return no([&] { return fmt::format("{} runs the simple protocol only", to_string(algo)); });
  if (algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree) {
    if (!s.nvls)
      return no([&] { return fmt::format("{} needs NVSwitches with NVLink SHARP (nvls: true on the topology's nvswitch) and a "
                            "Hopper or newer GPU",
                            to_string(algo)); });
    if (algo == NcclAlgo::nvls && s.nodes > 1) return no("nvls spans one node (across nodes it needs CollNet)");
    if (algo == NcclAlgo::nvls_tree && s.nodes == 1) return no("nvls_tree needs two or more nodes");
    if (!s.uniform) return no([&] { return fmt::format("{} needs the same number of ranks on every node", to_string(algo)); });
  }
  if (algo == NcclAlgo::tree && !s.uniform) return no("tree needs the same number of ranks on every node");
  if (proto == NcclProto::ll128 && !(s.nvlink && s.arch >= 0 && (s.nodes == 1 || s.nics > 0)))
    return no("LL128 is enabled only when a node's GPUs talk over NVLink");

  const bool nvls_graph = algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree;
  NcclGraph g = s.graphs ? (nvls_graph ? s.nvls_graph : algo == NcclAlgo::tree ? s.tree_graph : s.ring_graph)
                         : (nvls_graph ? nccl_nvls_graph(s) : algo == NcclAlgo::tree ? nccl_tree_graph(s) : nccl_ring_graph(s));
  if (channels > 0) g.channels = channels;
  const int n = s.ranks, N = s.nodes;
  const int i2 = N <= 2 ? N - 1 : 2;
  const int i1 = N == 1 ? s.arch : (s.amd_cpu ? 1 : 0);
  const double ppn = static_cast<double>(n) / N;
  const int nsteps = ar ? 2 * (n - 1) : n - 1;

  // Bandwidth (tuning.cc lines 288-383).
  double bw = N <= 2 ? g.bw_intra : g.bw_inter;
  if (algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree) {
    if (g.channels < 2) return no([&] { return fmt::format("{} needs at least 2 channels", to_string(algo)); });
    double intra = g.bw_intra * kNvlsEfficiency[s.arch] * (g.channels - 1) / g.channels;
    intra *= ar ? 2.0 : (ppn - 1) / ppn;
    const double inter = g.bw_inter * ((N <= 2 && algo == NcclAlgo::nvls_tree) ? 2 : 1);
    bw = std::min(intra, inter);
    if (algo == NcclAlgo::nvls_tree) bw = std::min(bw, kPerChMaxNvlsTree[s.arch][i2]);
  }
  // The bus bandwidth of `c` graph channels (fractional when the runtime
  // runs fewer than its 2 x graph channels, nccl_finish).
  const NcclBusTerms bt{algo, p, ar, N, n, nsteps, s.arch, i1, i2, bw, s.tree_pattern_simple};
  double bus = bus_at(bt, g.channels);
  if (!(bus > 0)) return no("zero bandwidth");

  // Latency (tuning.cc lines 384-435). Each hop takes NCCL's constant for
  // its link type, algorithm and protocol, or the machine's own hop latency
  // where that is longer (NcclSystem::intra_hop_us, inter_hop_us).
  const int intra_hw = s.nvlink ? kNvlinkHw : kPciHw;
  // The latency with `reported` us of latencyInter per network hop: the NIC's
  // reported latency is added once per hop, twice for Simple (its flush).
  auto latency = [&](double reported) {
  double lat = kBaseLat[a][p];
  double intra_lat = std::max(kHwLat[intra_hw][a][p], s.intra_hop_us);
  const double inter_lat =
      std::max(ppn == 1 ? kHwLat[kNetHw][kTree][p] : kHwLat[kNetHw][a][p], s.inter_hop_us) +
      reported * (p == kSimple ? 2 : 1);
  if (algo == NcclAlgo::ring) {
    double net_overhead = 0;
    if (N > 1) {
      net_overhead = s.amd_cpu ? 2.0 : 1.0;
      if (p == kSimple) net_overhead *= 3;
    }
    // A one-node ring's hops are intra-node; a multi-node ring's hops are
    // costed with the network table (hw[a] = NET), its intra steps at least the overhead.
    if (N > 1) intra_lat = std::max(intra_lat, net_overhead);
    const int inter_steps = N == 1 ? 0 : ar ? 2 * (N - 1) : N - 1;
    lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
  } else if (algo == NcclAlgo::tree) {
    lat += 2 * ((n / N - 1) * intra_lat + log2i(N) * inter_lat);
  } else if (algo == NcclAlgo::nvls) {
    lat = intra_lat + (N > 1 ? inter_lat : 0);
  } else {
    lat += intra_lat + 2 * log2i(N) * inter_lat;
  }
  return lat;
  };
  // What runs pays the machine's latencyInter (nccl.net_latency); NCCL's
  // tuner also sees the net plugin's reported latency (nccl.plugin_latency).
  const double lat = latency(s.net_latency_us);
  const double tune_extra = s.plugin_latency_us > 0 ? latency(s.net_latency_us + s.plugin_latency_us) - lat : 0.0;

  // What ncclTopoGetAlgoTime refines at the actual size (nccl_finish).
  NcclTuner::Pair t;
  t.algo = algo;
  t.proto = proto;
  t.p = p;
  t.channels = g.channels;
  t.lat_us = lat;
  t.tune_extra_us = tune_extra;
  t.bus = bus;
  t.tree_ar = algo == NcclAlgo::tree && ar;
  // The runtime runs the graph's channels twice over (src/graph/connect.cc).
  const double runtime_channels = 2.0 * g.channels;
  t.plateau = algo == NcclAlgo::ring && p == kSimple && N > 1 && ar;
  t.plateau_den = runtime_channels * n;
  t.plateau_factor = s.arch >= 1 ? 1.4 : 1.9;  // "plateau effect of ring"
  t.launch_us = s.launch_us;
  if (ar && (algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree)) t.pipe = nvls_pipeline(s, g, algo);
  if (algo == NcclAlgo::ring || algo == NcclAlgo::tree) {
    // The runtime's channel tuning (nccl_runtime_channels): comm->nChannels,
    // maxThreads and threadThresholds as ncclTopoTuneModel sets them.
    t.run_channels = std::min(kMaxChannels, 2 * g.channels);
    t.threads = p == kLL128 ? kLL128MaxThreads
                : p == kLL  ? kLLMaxThreads
                : (algo == NcclAlgo::ring && g.bw_intra * g.channels <= kPciBw) ? 256
                                                                                : kSimpleMaxThreads;
    t.thread_threshold = p == kSimple ? kSimpleThreadThreshold : kLLThreadThreshold;
    if (algo == NcclAlgo::ring && p == kLL) t.thread_threshold *= n;
    t.bus_terms = bt;
  }
  return t;
}

// The estimate of a pair at `bytes`: its size-independent terms and the
// size-dependent refinements (ncclTopoGetAlgoTime).
NcclEstimate nccl_finish(const NcclTuner::Pair& t, double bytes) {
  double bus = t.bus, lat = t.lat_us, extra = t.tune_extra_us;
  if (t.tree_ar) {
    const int log_size = bytes >= 64 ? log2i(bytes / 64) : -1;
    if (log_size >= 0 && log_size < 23) bus *= kTreeCorrection[t.p][log_size];
  }
  if (t.plateau && bytes / t.plateau_den >= 64) lat *= t.plateau_factor, extra *= t.plateau_factor;
  lat += t.launch_us;
  NcclEstimate e;
  e.algo = t.algo;
  e.proto = t.proto;
  e.channels = t.channels;
  e.lat_us = lat;
  e.bw_GBps = bus;
  e.run_bw_GBps = bus;
  if (t.run_channels > 0) {
    // What runs: the runtime's channels at this size, each at the tuner's
    // per-channel rate (the graph's channel is two runtime channels).
    e.run_channels = nccl_runtime_channels(t.run_channels, t.threads, t.thread_threshold, bytes);
    if (e.run_channels < t.run_channels) {
      double run = bus_at(t.bus_terms, e.run_channels / 2.0);
      if (t.tree_ar) run *= bus / t.bus;  // the same tree correction factor
      e.run_bw_GBps = run;
    }
  }
  e.fill_us = nccl_pipeline_fill_us(t.pipe, bytes, bus);
  e.tune_extra_us = extra;
  return e;
}

}  // namespace

double NcclPipeline::chunk_at(double bytes) const {
  // calcCollChunking (src/enqueue.cc@5067397c lines 2258-2286); each test
  // sees the chunk the previous one left. concurrentOps = channels x heads.
  const double ops = channels * static_cast<double>(heads);
  double c = chunk;
  if (tree) {
    if (bytes < 32 * ops * c && c > 262144) c = 262144;
    if (bytes < 16 * ops * c && c > 131072) c = 131072;
    if (bytes < 4 * ops * c && c > 65536) c = 65536;
    if (bytes < 1 * ops * c && c > 32768) c = 32768;
  } else {
    if (bytes < 64 * ops * c && c > 65536) c = 65536;
    if (bytes < 8 * ops * c && c > 32768) c = 32768;
    if (bytes < 2 * ops * c && c > 16384) c = 16384;
  }
  return c;
}

int nccl_runtime_channels(int run_channels, int threads, double thread_threshold, double bytes) {
  // One fewer while bytes < nc x threads x threshold and nc >= 2: the largest
  // nc <= run_channels with nc x threads x threshold <= bytes, else 1.
  const double per = threads * thread_threshold;
  if (!(per > 0) || bytes >= run_channels * per) return run_channels;
  return std::max(1, static_cast<int>(std::floor(bytes / per)));
}

double nccl_pipeline_fill_us(const NcclPipeline& p, double bytes, double bw_GBps) {
  if (p.stages <= 1 || !(bytes > 0) || !(bw_GBps > 0)) return 0.0;
  return (p.stages - 1) * std::min(p.loop_bytes(bytes), bytes) / (1000.0 * bw_GBps);
}

std::optional<NcclEstimate> nccl_estimate(CollOp op, const NcclSystem& s, NcclAlgo algo, NcclProto proto,
                                          int channels, double bytes, std::string* why) {
  const auto t = nccl_terms(op, s, algo, proto, channels, why);
  if (!t) return std::nullopt;
  return nccl_finish(*t, bytes);
}

NcclTuner::NcclTuner(CollOp op, const NcclSystem& s, std::optional<NcclAlgo> algo, std::optional<NcclProto> proto,
                     int channels) {
  std::string reasons;
  for (NcclAlgo a : {NcclAlgo::ring, NcclAlgo::tree, NcclAlgo::nvls, NcclAlgo::nvls_tree}) {
    if (algo && *algo != a) continue;
    const bool simple_only = a == NcclAlgo::nvls || a == NcclAlgo::nvls_tree;
    for (NcclProto p : {NcclProto::ll, NcclProto::ll128, NcclProto::simple}) {
      if (proto && *proto != p) continue;
      if (!proto && simple_only && p != NcclProto::simple) continue;
      // The platform's NCCL_PROTO (nccl.protocols) disables the others for
      // NCCL's choice (protoEnable, src/graph/tuning.cc@5067397c lines
      // 453-457); a forced protocol replaces it, as NCCL_PROTO set by hand would.
      if (!proto && !(s.protocols >> pi(p) & 1u)) continue;
      // The reasons are only reported when a forced choice leaves nothing.
      std::string why;
      auto t = nccl_terms(op, s, a, p, channels, (algo || proto) ? &why : nullptr);
      if (!t) {
        // One line per distinct reason (a forced algorithm fails the same way under every protocol).
        if ((algo || proto) && reasons.find(why) == std::string::npos)
          reasons += fmt::format("{}{}", reasons.empty() ? "" : "; ", why);
        continue;
      }
      pairs_[size_++] = *t;
    }
  }
  if (size_ == 0 && !proto && s.protocols != 7u)
    reasons += fmt::format("{}the topology's nccl.protocols leaves no protocol NCCL runs here", reasons.empty() ? "" : "; ");
  if (size_ == 0)
    throw UserError(fmt::format("no NCCL algorithm runs {} here{}{}", to_string(op), reasons.empty() ? "" : ": ",
                                reasons));
}

NcclEstimate NcclTuner::choose(double bytes, int* index) const {
  // The least estimated time, the first pair on ties (nccl_choose's order).
  NcclEstimate best = nccl_finish(pairs_[0], bytes);
  double best_t = best.time_us(bytes);
  int at = 0;
  for (int i = 1; i < size_; ++i) {
    const NcclEstimate e = nccl_finish(pairs_[i], bytes);
    const double t = e.time_us(bytes);
    if (t < best_t) best = e, best_t = t, at = i;
  }
  if (index) *index = at;
  return best;
}

NcclEstimate nccl_choose(CollOp op, const NcclSystem& s, double bytes, std::optional<NcclAlgo> algo,
                         std::optional<NcclProto> proto, int channels) {
  return NcclTuner(op, s, algo, proto, channels).choose(bytes);
}

double nccl_p2p_latency_us(const NcclSystem& s, bool inter_node) {
  const int hw = inter_node ? kNetHw : (s.nvlink ? kNvlinkHw : kPciHw);
  return s.launch_us + kBaseLat[kRing][kSimple] +
         std::max(kHwLat[hw][kRing][kSimple], inter_node ? s.inter_hop_us : s.intra_hop_us) +
         (inter_node ? 2 * s.net_latency_us : 0.0);
}

double nccl_p2p_net_overhead_us(const NcclSystem& s) {
  // getNetOverhead (tuning.cc lines 228-233) x 3 for Simple (line 408).
  return (s.amd_cpu ? 2.0 : 1.0) * 3;
}

}  // namespace parmsim
