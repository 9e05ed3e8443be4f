#pragma once
// NCCL's own cost model and algorithm choice, derived from the topology.
//
// NCCL (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime,
// v2.28-v2.30) estimates every (algorithm, protocol) pair of a collective as
//   time = latency + bytes / (1000 * bandwidth)       [us, GB/s]
// and runs the cheapest. The bandwidth comes from the channel graphs its
// topology search built (channels x GB/s per channel); the latency from
// per-algorithm base latencies plus per-hop latencies of the link type (at
// least the topology's own latency of that hop: NcclSystem::intra_hop_us).
// This file rebuilds those graphs from a parmsim topology by NCCL's search
// rules (src/graph/search.cc: speed ladders, one ring per NIC rail, channel
// duplication), evaluates NCCL's formulas with NCCL's constants, and picks as
// NCCL picks. docs/collectives.md lists every constant with its source line.
//
// The simulator uses the chosen pair: the collective's flows get the model's
// latency, and no flow runs faster than the model's bandwidth allows (a floor
// of bytes / bandwidth on every flow), so one collective alone takes what
// NCCL's model says, and collectives that share links slow each other down
// by max-min sharing.
#include <optional>
#include <string>
#include <vector>

#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {

enum class NcclAlgo { ring, tree, nvls, nvls_tree };
enum class NcclProto { ll, ll128, simple };
const char* to_string(NcclAlgo a);
const char* to_string(NcclProto p);
bool parse_nccl_algo(const std::string& s, NcclAlgo* out);
bool parse_nccl_proto(const std::string& s, NcclProto* out);  // ll, ll128, simple (any case)

// What NCCL's tuner sees of one communicator on a topology.
struct NcclSystem {
  int ranks = 0, nodes = 0;
  int ppn = 0;             // ranks per node (the most on any node)
  bool uniform = true;     // every node holds ppn ranks
  int arch = 0;            // 0 Volta and older/other, 1 Ampere, 2 Hopper, 3 Blackwell (NCCL's compCapIndex)
  bool nvlink = false;     // ranks of a node talk over NVLink (else PCIe)
  double intra_bw = 0;     // GB/s: slowest path between ranks of one node (sustained)
  double nic_bw = 0;       // GB/s: slowest GPU -> NIC -> network path between nodes (sustained)
  int nics = 0;            // NICs per node
  bool nvls = false;       // NVSwitch with NVLink SHARP and Hopper or newer
  bool amd_cpu = false;
  double launch_us = 0;       // topology nccl.launch
  double net_latency_us = 0;  // topology nccl.net_latency (NCCL's latencyInter, paid by what runs)
  double plugin_latency_us = 0;  // topology nccl.plugin_latency (latencyInter as the tuner sees it, not paid)
  // The platform's NCCL settings (topology keys nccl.protocols, nvls_chunksize,
  // nvlstree_max_chunksize, buffsize; CollectiveHints): NCCL_PROTO as a bit
  // per protocol (1 LL, 2 LL128, 4 Simple), the others in bytes, 0 for NCCL's default.
  unsigned protocols = 7;
  double nvls_chunksize = 0, nvlstree_max_chunksize = 0, buffsize = 0;
  // The modelled machine's own latency of one hop, us (the sum of its links'
  // latencies along the route): intra_hop_us the slowest route between ring
  // neighbours of a node (rank i to i + 1 of the node, the last to the
  // first), over every node; inter_hop_us the slowest route between the
  // same local GPU of consecutive nodes (node i to i + 1, the last to the
  // first), over every local GPU both hold: the pairs the ring and tree
  // cross between nodes. Every per-hop latency NCCL's model uses is at
  // least these (nccl_estimate, nccl_p2p_latency_us): NCCL's per-hop
  // constants were measured on its reference hardware, and a hop of this
  // machine cannot be faster than its wires. 0 (a system filled in by
  // hand): NCCL's constants alone.
  double intra_hop_us = 0;
  double inter_hop_us = 0;
  // The tree graph's pattern is NCCL_TOPO_PATTERN_TREE (all of a channel's
  // NIC traffic through one GPU) rather than the balanced tree NCCL searches
  // first (NVIDIA/nccl@5067397c src/init.cc line 1183). The balanced tree
  // sends a channel's NIC traffic through two GPUs and takes the same NIC for
  // the second (src/graph/search.cc lines 614-617, 658-675); where no two of
  // a node's GPUs share a NIC's PCIe switch, the first searches (at the
  // closest GPU-NIC path type, minTypeInter) find nothing, and on Hopper and
  // newer the search then tries the plain tree before a longer path type
  // ("Try a simpler tree", search.cc lines 1215-1219), which finds every
  // channel. NCCL's tuner then costs the tree at 0.85 of its bandwidth
  // (comm->maxTreePattern, init.cc line 1447; tuning.cc line 336).
  bool tree_pattern_simple = false;
  // The channel graphs, searched once by nccl_system() (they depend on the
  // fields above only): nccl_ring_graph(), nccl_tree_graph() and
  // nccl_nvls_graph() of this system.
  struct Graph {
    int channels = 0;
    double bw_intra = 0, bw_inter = 0;
  };
  Graph ring_graph, tree_graph, nvls_graph;
  bool graphs = false;  // false: a system filled in by hand; the graphs are searched per estimate
};
NcclSystem nccl_system(const std::vector<int>& group, const Topology& topo, Workspace& ws);
// The most one NCCL channel (one CTA on one SM) moves with LL128, bytes/s: NCCL's
// perChMaxRingLL128Bws for the GPU's architecture (Volta/Ampere 20.0, Hopper 36.7,
// Blackwell 40.0 GB/s; src/graph/tuning.cc@5067397c lines 184-190, applied at line 329).
double nccl_channel_ll128_rate(int compute_capability);
// The same with a fresh workspace (a caller that asks once).
NcclSystem nccl_system(const std::vector<int>& group, const Topology& topo);

// A channel graph: `channels` rings (or trees), each `bw_intra` GB/s inside a
// node and `bw_inter` GB/s between nodes.
using NcclGraph = NcclSystem::Graph;
NcclGraph nccl_ring_graph(const NcclSystem& s);
// The tree graph: the ring's channels (NCCL forces them: src/init.cc@5067397c
// lines 1181-1187) and speeds, then, across nodes on NVLink servers, the
// search's second pass, which raises the tree's intra-node speed up the
// network ladder while it stays below twice the network speed and every
// GPU's NVLink carries the channels at it (src/graph/search.cc lines
// 1267-1284, "increase bwIntra for trees (2 nodes or collnet)"). NCCL's tuner
// uses that speed on up to 2 nodes (tuning.cc, bwIntra when nNodes <= 2).
NcclGraph nccl_tree_graph(const NcclSystem& s);
NcclGraph nccl_nvls_graph(const NcclSystem& s);

// The loop an NVLS or NVLS-Tree AllReduce kernel runs, as NCCL's runtime
// sets it up (NVIDIA/nccl@5067397c): `channels` CTAs (comm->nvlsChannels,
// src/transport/nvls.cc lines 155-157 and 204-236: 16 on Hopper, 24 on one
// Blackwell node, 32 across nodes, and the Blackwell NVLS-Tree tuning of
// lines 163-198), `heads` NVLS heads (one per GPU on one node, one per NIC
// across nodes), and a chunk per head that NCCL halves for smaller
// collectives (calcCollChunking, src/enqueue.cc lines 2258-2286: from
// nvlsChunkSize 128 KiB, or min(nvlsChunkSize, nvlsTreeMaxChunkSize) for
// NVLS-Tree, down to 16 or 32 KiB). One loop moves channels x heads x chunk
// bytes (loopSize, enqueue.cc line 2358).
struct NcclPipeline {
  int stages = 0;  // loop-sized stages a loop passes through one after another; 0: no pipeline fill modelled
  int channels = 0, heads = 0;
  double chunk = 0;       // bytes: the chunk before NCCL's size ladder
  bool tree = false;      // NVLS-Tree's ladder (else NVLS's)
  // The chunk NCCL runs at `bytes` (its ladder), and the loop's bytes.
  double chunk_at(double bytes) const;
  double loop_bytes(double bytes) const { return channels * static_cast<double>(heads) * chunk_at(bytes); }
};

// The pipeline fill of a loop-granular pipeline: with `stages` stages, each
// taking a whole loop before the next stage may take it, the last loop leaves
// the last stage (stages - 1) loop times after a pipeline without stages
// would have finished: (stages - 1) x min(loop, bytes) / bandwidth, us
// (bytes / (1000 x GB/s)). The stage time is the loop at the algorithm's
// steady rate `bw_GBps`.
double nccl_pipeline_fill_us(const NcclPipeline& p, double bytes, double bw_GBps);

// One (algorithm, protocol) as NCCL's model costs it.
struct NcclEstimate {
  NcclAlgo algo = NcclAlgo::ring;
  NcclProto proto = NcclProto::simple;
  int channels = 0;      // the graph's channels (NCCL_DEBUG prints them as "nChannels")
  double lat_us = 0;     // latency, with the ring's plateau factor where it applies
  double bw_GBps = 0;    // algorithm bandwidth, with the tree correction factor at this size
  // The runtime's pipeline fill at this size, us: what the kernel's pipeline
  // adds before its steady rate (nccl_pipeline_fill_us). NCCL's tuner does not
  // see it (time_us leaves it out, so the choice is NCCL's); what runs pays
  // it (run_lat_us: the simulator's and the closed form's latency).
  double fill_us = 0;
  // The net plugin's reported latency over the pair's network hops
  // (nccl.plugin_latency): NCCL's tuner sees it (time_us), what runs does not.
  double tune_extra_us = 0;
  // The algorithm bandwidth of what runs, GB/s: bw_GBps with the channels
  // the runtime launches at this size (nccl_runtime_channels), which NCCL's
  // tuner does not see either.
  double run_bw_GBps = 0;
  int run_channels = 0;  // the runtime's channels at this size (2 x the graph's, or fewer); 0 for NVLS
  double time_us(double bytes) const { return lat_us + tune_extra_us + bytes / (1000.0 * bw_GBps); }
  double run_lat_us() const { return lat_us + fill_us; }
  double run_bw() const { return run_bw_GBps > 0 ? run_bw_GBps : bw_GBps; }
  std::string label() const;  // "ring/simple/8"
};

// The estimate for one pair at `bytes` (nccl-tests' size convention, which is
// NCCL's nBytes: the whole buffer for AllGather/ReduceScatter); nullopt when
// NCCL would not run it here (`why` says why). `channels` > 0 replaces the
// graph's channel count (NCCL_MIN/MAX_NCHANNELS).
std::optional<NcclEstimate> nccl_estimate(CollOp op, const NcclSystem& s, NcclAlgo a, NcclProto p, int channels,
                                          double bytes, std::string* why = nullptr);

// NCCL's choice: the least estimated time over the enabled pairs, limited to
// `algo`/`proto` when given. Throws UserError when nothing is left (e.g. NVLS
// forced on a topology without NVLS switches).
NcclEstimate nccl_choose(CollOp op, const NcclSystem& s, double bytes, std::optional<NcclAlgo> algo = {},
                         std::optional<NcclProto> proto = {}, int channels = 0);

// What the bus bandwidth of a ring or tree pair depends on besides its
// channel count (nccl_model.cpp, bus_at): the bandwidth of any number of
// channels, for the runtime's channel tuning (NcclTuner::Pair).
struct NcclBusTerms {
  NcclAlgo algo = NcclAlgo::ring;
  int p = 0;
  bool ar = false;
  int N = 1, n = 1, nsteps = 1, arch = 0, i1 = 0, i2 = 0;
  double bw = 0;  // per graph channel, GB/s
  bool tree_pattern_simple = false;  // NcclSystem::tree_pattern_simple: tree bandwidth x 0.85
};

// NCCL's tuner for one collective on one system, resolved once: the pairs
// nccl_choose would consider, each with its size-independent latency and
// bandwidth, so that choose(bytes) gives nccl_choose's answer at any size
// with a few multiply-adds per pair (the closed form asks for thousands).
class NcclTuner {
 public:
  // Throws UserError as nccl_choose does when nothing is left.
  NcclTuner(CollOp op, const NcclSystem& s, std::optional<NcclAlgo> algo = {}, std::optional<NcclProto> proto = {},
            int channels = 0);
  // nccl_choose(op, s, bytes, algo, proto, channels); `index` receives the
  // chosen pair's position (0 .. size() - 1).
  NcclEstimate choose(double bytes, int* index = nullptr) const;
  int size() const { return size_; }
  // One (algorithm, protocol) before the size-dependent refinements.
  struct Pair {
    NcclAlgo algo = NcclAlgo::ring;
    NcclProto proto = NcclProto::simple;
    int p = 0, channels = 0;
    double lat_us = 0;  // before the ring's plateau factor and the launch
    double tune_extra_us = 0;  // the plugin's reported latency over the pair's hops, before the plateau factor
    double bus = 0;     // GB/s, before the tree correction
    bool tree_ar = false, plateau = false;
    double plateau_den = 0, plateau_factor = 1, launch_us = 0;
    NcclPipeline pipe;  // the runtime's loop (NVLS, NVLS-Tree AllReduce); pipe.stages 0: no fill
    // The runtime's channel tuning (ring and tree; nccl_runtime_channels):
    // run_channels 0 leaves what runs at the tuner's bandwidth.
    int run_channels = 0, threads = 0;
    double thread_threshold = 0;
    NcclBusTerms bus_terms;
  };
  static constexpr int kMaxPairs = 12;  // 4 algorithms x 3 protocols

 private:
  Pair pairs_[kMaxPairs];
  int size_ = 0;
};

// The channels NCCL's runtime launches a ring or tree collective of `bytes`
// on (topoGetAlgoInfo, src/enqueue.cc@5067397c lines 2070-2096): from
// comm->nChannels (2 x the graph's, at most MAXCHANNELS 64; connect.cc line
// 460), one fewer while bytes < channels x threads x threshold, down to 1.
// threads is the pair's maxThreads (LL 512, LL128 640, Simple 512, or 256 for
// a ring whose channels x speed is at most PCI_BW, 12 GB/s; tuning.cc lines
// 244-257, PCI_BW topo.h line 25; device.h lines 93-114), threshold its threadThresholds (LL 8,
// LL128 8, Simple 64 bytes per thread, ring LL x ranks; comm.h lines 49-51,
// tuning.cc lines 587-593).
int nccl_runtime_channels(int run_channels, int threads, double thread_threshold, double bytes);

// Does NCCL's tuner cost this op (allreduce, allgather, reducescatter)?
bool nccl_tuned(CollOp op);

// Point-to-point (send/recv, AlltoAll) latency in us as parmsim models it:
// NCCL has no tuner entry for send/recv, so this takes the ring's Simple
// base latency plus one Simple hop of the path's kind (NVLink or PCIe inside
// a node, network across nodes) from the same tables, at least the
// machine's hop of that kind (NcclSystem::intra_hop_us, inter_hop_us).
double nccl_p2p_latency_us(const NcclSystem& s, bool inter_node);

// What one more network peer adds to a grouped send/recv batch, in us.
// Every network send and receive of a batch is a proxy operation, and one
// proxy thread per GPU launches them one after another (src/proxy.cc@5067397c
// ncclProxyProgress line 954, progressOps line 801: one loop over the active
// operations). NCCL's tuner charges that launch, per network step of a ring,
// as its "net overhead": 1 us on Intel and other CPUs, 2 us on AMD, three
// times that for Simple (src/graph/tuning.cc@5067397c lines 228-233 and
// 403-410). Network send/recv runs Simple: NCCL allocates no LL buffers for
// p2p network connections unless NCCL_ALLOC_P2P_NET_LL_BUFFERS=1 (init.cc
// line 859, transport/net.cc lines 913-936). So a batch whose busiest proxy
// launches k network sends (or receives) has its last peer start (k - 1) x
// this after its first (collective_plan.cpp, as_p2p): a batch with k network
// peers per GPU pays nccl_p2p_latency_us(s, true) + (k - 1) x this.
double nccl_p2p_net_overhead_us(const NcclSystem& s);

}  // namespace parmsim
