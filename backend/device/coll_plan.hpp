#pragma once
// Collectives as per-member programs of NCCL-shaped phases, for the device
// executors. Every member of a collective gets the same sequence of phases;
// phase j of all members together is one NCCL call (AllReduce, AllGather,
// ReduceScatter on one communicator), one grouped Send/Recv set, or local
// copies. The CUDA executor runs a member's phases on its rank (NCCL calls on
// two streams for the fused SAA, as the simulator models it); the loopback
// mode and the host interpreter run phase j of every member at once, as
// device-to-device copies and sums (run_phases).
//
// Column windows (a collective over columns [c0, c0 + cw) of rows of `row`)
// become a pack into a contiguous stage buffer before and an unpack after.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/graph/task_graph.hpp"

namespace parmsim::exec::dev {

// The stage buffers a member packs windows into (per rank, sized by the executor).
inline constexpr const char* kStageSend = "__stage_send";
inline constexpr const char* kStageRecv = "__stage_recv";

struct Ref {
  std::string buf;
  std::uint64_t off = 0;  // elements
};

// Communicators of a collective, as seen by member m: the whole group, and for
// SAA the inner group (members m / G * G ..., size G) and the outer group
// (members m % G, m % G + G, ...).
enum class CommKind { group, inner, outer };

enum class StepKind { copy, copy2d, send, recv };
struct Step {
  StepKind kind = StepKind::copy;
  Ref src, dst;
  std::uint64_t count = 0;                         // elements (copy2d: width of a row)
  std::uint64_t rows = 1, spitch = 0, dpitch = 0;  // copy2d
  int peer = -1;                                   // send/recv: the peer's rank in the phase's communicator
};

enum class PhaseKind { local, allreduce, allgather, reducescatter, p2p };
struct Phase {
  PhaseKind kind = PhaseKind::local;
  int lane = 0;  // 0: the task's stream; 1: the second stream (SAA's inner group)
  CommKind comm = CommKind::group;
  int after = -1;  // a phase on the other lane this one waits for (-1: none)
  // allreduce / allgather / reducescatter: src -> dst, count = elements each
  // member sends (allreduce, allgather) or receives (reducescatter).
  Ref src, dst;
  std::uint64_t count = 0;
  std::vector<Step> steps;  // local and p2p
};

struct MemberPlan {
  int rank = 0;
  std::vector<Phase> phases;
  std::uint64_t stage_send = 0, stage_recv = 0;  // elements of the stage buffers it uses
};

// Plans collective `c` for all its members. Checks the buffers as the host
// communicator does and throws UserError naming the collective when they do
// not fit; alltoallv is refused.
std::vector<MemberPlan> plan_collective(const TaskGraph& g, const Collective& c);

// Members (positions in the group) of member `m`'s communicator `k`, in
// communicator-rank order.
std::vector<int> comm_members(const Collective& c, CommKind k, int m);
// Global ranks of member `m`'s communicator `k`, in communicator-rank order
// (so comm rank = position in this list).
std::vector<int> comm_ranks(const Collective& c, CommKind k, int m);
// Position of member m in its communicator k.
int comm_rank(const Collective& c, CommKind k, int m);

// Moves data for run_phases: host memory in the tests, device memory in loopback.
class Mover {
 public:
  virtual ~Mover() = default;
  virtual void copy(int dst_rank, const Ref& dst, int src_rank, const Ref& src, std::uint64_t n) = 0;
  virtual void copy2d(int dst_rank, const Ref& dst, std::uint64_t dpitch, int src_rank, const Ref& src,
                      std::uint64_t spitch, std::uint64_t width, std::uint64_t rows) = 0;
  // The accumulator: acc = 0; acc += src; dst = acc (n elements; sums in call order).
  virtual void acc_zero(std::uint64_t n) = 0;
  virtual void acc_add(int rank, const Ref& src, std::uint64_t n) = 0;
  virtual void acc_store(int rank, const Ref& dst, std::uint64_t n) = 0;
};

// Runs every member's phases together, phase by phase, on `mv`: what all the
// NCCL calls of the collective would do together. Sums run in member order,
// as the host communicator's.
void run_phases(const Collective& c, const std::vector<MemberPlan>& plans, Mover& mv);

}  // namespace parmsim::exec::dev
