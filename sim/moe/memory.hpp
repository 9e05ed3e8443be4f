#pragma once
// Peak device memory of one MoE layer's forward + backward on one GPU
// (docs/memory.md): the persistent weights and gradients plus the largest set
// of tensors alive at once, found by walking the schedule's own forward op list
// and then the same list in reverse (the backward pass). No allocation: the
// sweep calls it for every row.
#include <cstdint>
#include <span>

#include "sim/moe/layer.hpp"

namespace parmsim::moe {

struct MemoryPeak {
  std::uint64_t weights = 0;   // this GPU's expert shards and the gate weight
  std::uint64_t grads = 0;     // their gradients (alive in the backward pass)
  std::uint64_t input = 0;     // the layer's input [S, M], held by the caller throughout
  std::uint64_t forward = 0;   // the most alive at once in the forward pass, everything included
  std::uint64_t backward = 0;  // the same in the backward pass
  std::uint64_t peak() const { return forward > backward ? forward : backward; }
};

// `fwd` is forward_ops(s, d, o) (schedule_ops.cpp); sizes saturate at 2^64 - 1.
MemoryPeak peak_memory(std::span<const MoeOp> fwd, const LayerSpec& s, const Dims& d);

}  // namespace parmsim::moe
