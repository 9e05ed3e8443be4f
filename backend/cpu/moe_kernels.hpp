#pragma once
// CPU kernels for every compute op of the MoE task graphs (fp32), forward and
// backward, keyed by the names the graph builder gives tasks:
//   moe_gate        x rows, Wg -> probs (softmax), route (expert, slot, weight per choice)
//   moe_order       x rows, route -> dispatch buffer [E, C, M] (zeros in empty slots)
//   moe_slot_slice  [E, C, M] -> this MP member's slots [E, ceil(C/G), M]
//   moe_experts     [X, E_local, C, M] -> fc1 column shard, ReLU, fc2 row shard; keeps fc1's output
//   moe_iorder      combine buffer, route -> gate-weighted sum per token
//   and the _bwd of each.
// Capacity: choices are placed choice-major (every token's first choice, then
// every token's second), in token order; a choice finding its expert full is
// dropped. Ties in top-k go to the lower expert index. Gate weights are the
// softmax probabilities, not renormalised over the k choices.
#include "backend/executor.hpp"

namespace parmsim::exec {

KernelTable moe_kernels();

}  // namespace parmsim::exec
