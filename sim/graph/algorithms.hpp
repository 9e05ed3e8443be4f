#pragma once
// The registry of collective algorithms: the names a collective's `algo` may
// take, what each is, and which operations it implements. The task-graph
// loader, the CLI's help and the "unknown algorithm" errors come from it;
// sim/coll builds each one's plan (collective_plan.hpp describes them), and
// tests/test_registries.cpp runs every algorithm on every operation, checking
// that a plan is made exactly where `ops` says.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/graph/task_graph.hpp"

namespace parmsim {

enum class AlgoFamily { nccl, textbook, saa };

struct CollAlgorithm {
  std::string_view name;
  AlgoFamily family;
  std::string_view help;
  std::uint32_t ops;  // bit 1 << CollOp for each operation it implements
  bool implements(CollOp op) const { return (ops >> static_cast<int>(op)) & 1u; }
};

std::span<const CollAlgorithm> collective_algorithms();
// The algorithm called `name`, or null.
const CollAlgorithm* find_algorithm(std::string_view name);
// Every name, in registry order.
std::vector<std::string> algorithm_names();
// The names for help texts, each family closed by its label:
// "auto | ring | ... | p2p (NCCL's; auto: its choice) | flat_ring | ... (textbook) | released | pipelined (saa)".
std::string algorithm_help();

}  // namespace parmsim
