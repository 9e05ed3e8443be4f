#include "sim/graph/algorithms.hpp"

#include <array>

#include "sim/core/registry.hpp"

namespace parmsim {

namespace {

constexpr std::uint32_t bit(CollOp op) { return 1u << static_cast<int>(op); }
constexpr std::uint32_t kA2a = bit(CollOp::alltoall), kA2av = bit(CollOp::alltoallv), kAg = bit(CollOp::allgather),
                        kRs = bit(CollOp::reducescatter), kAr = bit(CollOp::allreduce),
                        kSr = bit(CollOp::sendrecv), kSaa = bit(CollOp::saa);
constexpr std::uint32_t kAll = kA2a | kA2av | kAg | kRs | kAr | kSr | kSaa;

// The operations follow sim/coll's plan builders: NCCL's tuner costs AllReduce,
// AllGather and ReduceScatter (tree and nvls_tree run AllReduce only, as in
// NCCL's tuning.cc); the rest are collective_plan.cpp's step plans.
constexpr std::array<CollAlgorithm, 12> kAlgorithms = {{
    {"auto", AlgoFamily::nccl,
     "the default: NCCL's tuner for allreduce, allgather and reducescatter; p2p for AlltoAll(v) and send/recv; "
     "released for saa",
     kAll},
    {"ring", AlgoFamily::nccl, "NCCL's ring, one per channel, on the NIC rails", kAg | kRs | kAr},
    {"tree", AlgoFamily::nccl, "NCCL's double binary tree over the nodes, chains inside them", kAr},
    {"nvls", AlgoFamily::nccl, "NVLink SHARP: reduction and multicast in the NVSwitch", kAg | kRs | kAr},
    {"nvls_tree", AlgoFamily::nccl, "nvls inside each node, tree between nodes", kAr},
    {"p2p", AlgoFamily::nccl, "grouped send/recv to every peer at once, as NCCL runs AlltoAll (PXN)",
     kA2a | kA2av | kSr},
    {"flat_ring", AlgoFamily::textbook, "one ring, 2(p-1) or p-1 steps of 1/p of the data", kAg | kRs | kAr},
    {"direct", AlgoFamily::textbook, "every peer at once (or `window` per step); allreduce as RS then AG",
     kA2a | kA2av | kAg | kRs | kAr | kSr},
    {"pairwise", AlgoFamily::textbook, "p-1 steps, step i to member+i", kA2a | kA2av | kAg | kRs},
    {"hierarchical", AlgoFamily::textbook, "intra-node, then inter-node among same-local-index members, then intra",
     kA2a | kAg | kRs | kAr},
    {"released", AlgoFamily::saa, "the fused AlltoAll+AllGather as the Parm authors released it", kSaa},
    {"pipelined", AlgoFamily::saa, "the fused AlltoAll+AllGather in rail-wise rounds", kSaa},
}};

}  // namespace

std::span<const CollAlgorithm> collective_algorithms() { return kAlgorithms; }

const CollAlgorithm* find_algorithm(std::string_view name) { return find_named(collective_algorithms(), name); }

std::vector<std::string> algorithm_names() {
  std::vector<std::string> v;
  for (std::string_view n : names_of(collective_algorithms())) v.emplace_back(n);
  return v;
}

std::string algorithm_help() {
  std::string out;
  for (std::size_t i = 0; i < kAlgorithms.size(); ++i) {
    const CollAlgorithm& a = kAlgorithms[i];
    out += (i == 0 ? "" : " | ") + std::string(a.name);
    if (i + 1 == kAlgorithms.size() || kAlgorithms[i + 1].family != a.family)
      out += a.family == AlgoFamily::nccl       ? " (NCCL's algorithms; auto: NCCL's choice)"
             : a.family == AlgoFamily::textbook ? " (textbook)"
                                                : " (saa)";
  }
  return out;
}

}  // namespace parmsim
