#pragma once
// A calibration file (written by `parmsim calibrate`, read with --calibration):
// measured costs of collectives by operation, group size and link class. Where
// an entry matches a collective of a task graph (same op, same number of
// ranks, intra-node when all members share a node, else inter), the simulator
// times that collective from the entry instead of expanding it into modelled
// transfers: within the measured sizes by interpolating the measured points
// (`points_us`) in log(size)-log(time), beyond them (or when the entry has no
// points, as files written before points were kept) as alpha + size /
// bandwidth, with size in nccl-tests' convention. The closed-form model uses
// the same entry. Collectives without an entry are modelled as before.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
  std::vector<std::pair<double, double>> points;  // measured (bytes, seconds), sorted; may be empty
  std::string source;
  // The entry in messages: "FILE:LINE (collectives[i]: allreduce over 8 ranks, intra)"; "" when built in code.
  std::string where;
  // A time past 2^63 ps is a TimeOverflow naming the entry (its cause).
  Time time(std::uint64_t bytes) const;
};

// Measured times of one kernel, by the name compute tasks carry
// (ComputeTask::kernel: "expert_fc1" or "bwd_order", the name up to '#' of
// the tasks that run it), against FLOPs (gemm) or bytes moved (the
// memory-bound kinds). Within the measured range the time is
// interpolated linearly in log(x)-log(t) between the two nearest points;
// outside it, the alpha-beta line fitted to all points is used.
struct KernelTable {
  std::string name;
  OpKind op = OpKind::gemm;
  DType dtype = DType::fp32;
  std::vector<std::pair<double, double>> points;  // (x, seconds), sorted by x
  double alpha = 0, beta = 0;                     // the fitted line, seconds and seconds per unit
  std::string where;  // "FILE:LINE (kernels[i]: NAME, DTYPE)"; "" when built in code
  Time time(double x) const;
};

struct Calibration {
  std::string file;
  std::vector<CalibratedCollective> collectives;
  std::vector<KernelTable> kernels;
  const CalibratedCollective* find(CollOp op, int ranks, bool inter) const;
  const KernelTable* kernel(std::string_view name, DType dtype) const;
};

// Every entry is checked: values with their units, finite and positive where
// a time or bandwidth is meant; one entry per (op, ranks, link) and one kernel
// table per (name, dtype). Errors name file:line:column and the key.
Calibration load_calibration(const std::string& file);
// The same from text (`name` stands for the file in errors): what `calibrate`
// checks before it writes a file, and what the fuzz targets feed.
Calibration parse_calibration_text(const std::string& text, const std::string& name);

}  // namespace parmsim
