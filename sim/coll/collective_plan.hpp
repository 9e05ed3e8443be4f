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
// Algorithms (by name, `algorithm_names()`):
//   ring          allreduce (2(p-1) steps), allgather, reducescatter (p-1 steps)
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
//                 its own block.
//   pipelined     saa, rail-wise variant (parmsim's earlier reading of the
//                 paper, kept for what-ifs): W = p/G rounds of S/W; round i
//                 sends the AlltoAll chunk to the member with the same index
//                 in block +i on one chain while the chunk of round i is sent
//                 to the inner peers on a second chain (gather i waits for
//                 AlltoAll round i and gather i-1).
#include <array>
#include <cstdint>
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
};

struct CollPlan {
  std::vector<CollStep> steps;
  std::vector<CollXfer> xfers;
};

const std::vector<std::string>& algorithm_names();
std::string default_algorithm(CollOp op);

// Throws ParmError if the algorithm does not apply to the op or the group
// (hierarchical needs the same number of members on every node it touches).
CollPlan make_plan(const Collective& c, const Topology& topo);

// nccl-tests' bus bandwidth factor: busbw = algbw * factor.
double busbw_factor(CollOp op, int p);

}  // namespace parmsim
