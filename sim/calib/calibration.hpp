#pragma once
// A calibration file (written by `parmsim calibrate`, read with --calibration):
// measured alpha-beta costs of collectives by operation, group size and link
// class. Where an entry matches a collective of a task graph (same op, same
// number of ranks, intra-node when all members share a node, else inter), the
// simulator times that collective as alpha + size / bandwidth, with size in
// nccl-tests' convention, instead of expanding it into modelled transfers; the
// closed-form model uses the same entry. Collectives without an entry are
// modelled as before.
#include <optional>
#include <string>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/graph/task_graph.hpp"

namespace parmsim {

struct CalibratedCollective {
  CollOp op = CollOp::allreduce;
  int ranks = 0;
  bool inter = false;
  Time alpha;
  std::uint64_t bandwidth = 0;  // bytes/s
  std::string source;
  Time time(std::uint64_t bytes) const { return alpha + duration_for(bytes, bandwidth); }
};

struct Calibration {
  std::string file;
  std::vector<CalibratedCollective> collectives;
  const CalibratedCollective* find(CollOp op, int ranks, bool inter) const;
};

Calibration load_calibration(const std::string& file);

}  // namespace parmsim
