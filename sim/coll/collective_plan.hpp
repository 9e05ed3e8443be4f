#pragma once
// Collective algorithms, expanded into point-to-point transfers.
//
// A plan is a set of steps per member and transfers between steps. A step is
// ready when its member has entered the collective (its task started) and
// the steps it depends on are complete; a transfer starts when both its send
// step (on the sender) and its receive step (on the receiver) are ready, as a
// send/recv pair does; a step is complete when all its transfers are. A member
// has finished the collective when all its steps are complete.
//
// Algorithms (by name, registered in sim/graph/algorithms.hpp):
//   auto          the default for every op but saa: NCCL's choice. AllReduce,
//                 AllGather and ReduceScatter: the (algorithm, protocol,
//                 channels) NCCL's tuner picks at this size on this topology
//                 (nccl_model.hpp); AlltoAll, AlltoAllv, SendRecv: p2p.
//   ring, tree, nvls, nvls_tree
//                 NCCL's algorithms as NCCL runs them, forced (the protocol
//                 and channels are still NCCL's unless Collective::proto /
//                 channels force them). Each is a set of pipelined flows that
//                 start together once every member has entered, carry all the
//                 bytes the algorithm moves over each link, and take the
//                 model's latency; no flow runs faster than the model's
//                 bandwidth (see below):
//                   ring: C channels, one ring each; on several nodes channel
//                   i leaves and enters every node through NIC i mod nics
//                   (rail), so a node's inter-node bytes are spread over its
//                   NICs. Flows: per member, one to its ring successor in the
//                   node and, on the members owning a rail, one to the same
//                   member of the next node. tree: a chain inside each node
//                   (up and down) and two complementary binary trees over the
//                   nodes, each carrying half the data, on the rails. nvls:
//                   every GPU sends to and receives from the NVSwitch what
//                   NVLink SHARP moves (AllReduce (p+1)/p of the data each
//                   way). nvls_tree: nvls inside each node, tree between nodes.
//                 The protocol sets the bytes on the wire (LL 2x, LL128
//                 1/0.92 of the data).
//   p2p           grouped send/recv to every peer at once, as NCCL runs
//                 AlltoAll: traffic to a GPU of another node first crosses
//                 NVLink to the local GPU on the destination's rail and leaves
//                 through that GPU's NIC (PXN). Latency: nccl_p2p_latency_us,
//                 and across nodes the proxy's launch of the batch's other
//                 network peers (nccl_p2p_net_overhead_us per place on the
//                 busiest proxy's queue, docs/collectives.md section 4): a
//                 batch with k network peers per GPU takes (k - 1) overheads longer.
//   flat_ring     textbook ring: one ring, 2(p-1) (AllReduce) or p-1
//                 steps, each step a send/recv of 1/p of the data
//   direct        every peer at once (or `window` peers per step): alltoall,
//                 alltoallv, allgather, reducescatter, allreduce (RS then AG), sendrecv
//   pairwise      p-1 steps, step i sends to member+i, receives from member-i:
//                 alltoall, alltoallv, allgather, reducescatter
//   hierarchical  intra-node phase, then inter-node among same-local-index
//                 members, then intra-node: allreduce, allgather,
//                 reducescatter, alltoall
//   released      saa (the default): the fused AlltoAll + AllGather as the
//                 Parm authors released it (Fragile-azalea/Parm @5e0bc314,
//                 test_overlap_alltoall_and_allgather): W = p rounds over ALL
//                 members, chunk S/p. AlltoAll chain (stream 0): round 0 is the
//                 member's own chunk (no transfer); round i sends to member+i
//                 and receives from member-i. Gather chain (stream 1): the
//                 chunk received in round i goes to the other G-1 members of
//                 the member's block of `inner` consecutive members; gather i
//                 waits for AlltoAll round i and for gather i-1, so gather i
//                 overlaps AlltoAll round i+1. The last gather (chunk W-1) is
//                 issued on stream 0 and waits for the last AlltoAll round
//                 only. Across nodes this world AlltoAll moves the same bytes
//                 per node pair as the rail-wise one (pipelined); within a
//                 node it adds the (G-1)/p * S of a member's chunks bound for
//                 its own block. Each round is NCCL send/recv: p2p latency
//                 and PXN routes.
//   pipelined     saa, rail-wise variant (parmsim's earlier reading of the
//                 paper, kept for what-ifs): W = p/G rounds of S/W; round i
//                 sends the AlltoAll chunk to the member with the same index
//                 in block +i on one chain while the chunk of round i is sent
//                 to the inner peers on a second chain (gather i waits for
//                 AlltoAll round i and gather i-1). p2p latency and PXN routes.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {

struct CollStep {
  int member = 0;
  std::array<int, 2> deps{-1, -1};  // at most two: the member's chain and, for SAA, the other chain
  void add_dep(int d) { deps[deps[0] < 0 ? 0 : 1] = d; }
  int num_deps() const { return (deps[0] >= 0) + (deps[1] >= 0); }
};

struct CollXfer {
  int src = 0, dst = 0;  // member indices
  std::uint64_t bytes = 0;
  int send_step = 0, recv_step = 0;
  int route = -1;  // >= 0: these links (CollPlan::routes) instead of the topology's route
  int via = -1;    // >= 0: routed through this GPU (rank), PXN: route(src, via) + route(via, dst)
  int lat = -1;    // >= 0: CollPlan::latencies[lat] instead of the route's latency
  // > 0: the bytes the transfer moves where `bytes`, what it holds its links
  // for, is more (a ring's SHM edges: nccl_plan); traffic counts take this.
  std::uint64_t moved = 0;
};

inline std::uint64_t moved_bytes(const CollXfer& x) {
  return x.moved > 0 ? x.moved : x.bytes;
}

struct CollPlan {
  std::vector<CollStep> steps;
  std::vector<CollXfer> xfers;
  std::vector<std::vector<int>> routes;  // link ids, for CollXfer::route
  std::vector<Time> latencies;           // for CollXfer::lat
  // No step is ready before every member has entered (NCCL's algorithms:
  // a ring or tree moves only once all its members run the kernel).
  bool barrier = false;
  // > 0: no transfer takes less than this from the end of its latency to its
  // last byte (NCCL's model bandwidth: bytes / algorithm bandwidth).
  Time min_duration;
  std::string choice;  // what ran, e.g. "ring/simple/8" (NCCL algorithms) or the algorithm's name
};

// The links and latency transfer `x` of `plan` takes (custom route, PXN or
// the topology's route), and its rate cap in bytes/s (0 = none).
// `scratch` receives the links when they are not the topology's own route;
// routes above Topology::kRouteTableGpus come from ws's cache.
const Route& xfer_route(const CollPlan& plan, const CollXfer& x, const std::vector<int>& group, const Topology& topo,
                        Route& scratch, Workspace& ws);
// The same as a view, without copying links that are the topology's or the
// plan's (a PXN route, two routes joined, is built in `scratch`). Valid until
// the next Topology::route call with ws or use of `scratch`.
RouteView xfer_route_view(const CollPlan& plan, const CollXfer& x, const std::vector<int>& group, const Topology& topo,
                          Route& scratch, Workspace& ws);
double xfer_cap(const CollPlan& plan, const CollXfer& x);

// Whether plan b is plan a under the member map pi (a's member m is b's
// pi[m]) and the server shift sh of a topology of P GPUs: the same steps
// member by member, in order, with the same dependencies (each on a step of
// its own member), and each transfer the same bytes and latency between the
// mapped steps, its custom route mapped link by link and its PXN GPU shifted.
// Routes of the topology itself are not compared (Topology::shift_route_ok).
bool plan_maps_onto(const CollPlan& a, const CollPlan& b, const std::vector<int>& pi, const NodeShift& sh, int P);

// The representatives' part of `full`, a plan that the server shift of R of
// the topology's P GPUs maps onto itself (checked by the caller, e.g. with
// plan_maps_onto): the steps of the members on ranks [0, R), in order, their
// dependencies renumbered (each on a step of its own member), and the
// transfers they send, in order, each received by its receiving step's
// representative: the step at the same place among the steps of the member
// on its rank mod R. Routes, latencies and the rest as in `full`. What the
// engine's symmetry and the cost forms' read of such a plan.
CollPlan compact_plan(const CollPlan& full, const std::vector<int>& group, int R, int P);

// The same part built without the full plan, for a plan make_plan builds as a
// function of (member index, group, sizes) that commutes with the shift by
// construction: AlltoAll, AlltoAllv, AllGather, ReduceScatter and AllReduce
// as direct, pairwise or p2p rounds, and SAA (released, pipelined). The
// symmetry is proved on the inputs: the shift maps the group onto itself as a
// rotation of member indices (by a whole number of SAA blocks), AlltoAllv's
// sizes equal under it, and for p2p's latencies every SAA gather inside a
// server (so each batch of NCCL send/recv is one round, counted per GPU orbit);
// the topology's routes are checked where they are used, as for the full plan.
// nullopt where any of that does not hold (the caller takes the full plan).
// The full plan has sh.order times the part's transfers.
std::optional<CollPlan> make_rep_plan(const Collective& c, const Topology& topo, const NodeShift& sh, Workspace& ws);

std::string default_algorithm(CollOp op);

// The algorithm make_plan runs for c (auto resolved, NCCL's choice at c.bytes
// for the tuned ops), e.g. "ring/simple/8", "p2p", "released".
std::string resolved_choice(const Collective& c, const Topology& topo, Workspace& ws);
std::string resolved_choice(const Collective& c, const Topology& topo);  // with a fresh workspace

// Throws UserError if the algorithm does not apply to the op or the group
// (hierarchical needs the same number of members on every node it touches).
// Routes above Topology::kRouteTableGpus come from ws's cache.
CollPlan make_plan(const Collective& c, const Topology& topo, Workspace& ws);
// The same with a fresh workspace (a caller that plans once).
CollPlan make_plan(const Collective& c, const Topology& topo);

// nccl-tests' bus bandwidth factor: busbw = algbw * factor.
double busbw_factor(CollOp op, int p);

}  // namespace parmsim
