#pragma once
// What a calibration covered, and what would cover the rest (issue 31).
//
// A calibration entry times a collective only where its op, group size and
// link (intra-node, or spanning nodes) match (sim/calib/calibration.hpp); a
// layer's collectives run over N_EP or G ranks, so a table of the whole
// cluster's ranks may time none of them. Every command run with
// --calibration therefore reports, when it ends, which collectives of its
// simulations (op, ranks, placement, sizes) were timed from the calibration
// and which fell back to the model, which entries no collective used, and
// which kernel tables timed which task kinds. `calibrate --plan` lists a
// layer's collectives and prints the nccl-tests command lines that would
// measure them.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {
struct Calibration;
}

namespace parmsim::cli {

// One kind of collective as a run uses it: the op, the group size and how
// the members sit on the servers (members per server, in server order).
struct CollectivePlacement {
  CollOp op = CollOp::allreduce;
  int ranks = 0;
  std::vector<int> per_node;
  bool inter() const { return per_node.size() > 1; }
  auto operator<=>(const CollectivePlacement&) const = default;
  std::string where() const;  // "1 node", "2 nodes x 8", "3 nodes: 8+8+4"
};

struct CollectiveUse {
  std::uint64_t calls = 0;        // collectives, over every graph recorded
  std::set<std::uint64_t> sizes;  // distinct sizes (nccl-tests' convention), at most kMaxSizes kept
  std::uint64_t min = UINT64_MAX, max = 0;
  std::uint64_t beyond = 0;      // calls whose size lies outside the matching entry's measured points
  std::set<std::string> labels;  // schedules, rows: what ran it
  static constexpr std::size_t kMaxSizes = 256;
};

// The collectives (of 2 or more ranks) and compute kernels of task graphs.
struct CollectiveUses {
  std::map<CollectivePlacement, CollectiveUse> collectives;
  // Task kinds (the name before '#') with their dtype: tasks timed from a
  // kernel table of the calibration, and tasks modelled.
  std::map<std::string, std::uint64_t> kernels_measured, kernels_modelled;
  std::uint64_t graphs = 0;
  // `cal`: counts the sizes beyond its entries' points and the kernel tables used (may be null).
  void add(const TaskGraph& g, const Topology& topo, const Calibration* cal, const std::string& label);
};

// Starts recording every later simulation that uses `cal` (installs the
// simulator's observer); the report is printed when the command ends
// (coverage_finish). Thread-safe recording.
void coverage_watch(std::shared_ptr<const Calibration> cal);
// Stops: nothing is printed (a sweep's MPI ranks other than 0, a run that simulates nothing).
void coverage_cancel();
// While alive, the simulations of this thread are recorded as used by `label` (a schedule, a row).
class CoverageLabel {
 public:
  explicit CoverageLabel(std::string label);
  ~CoverageLabel();
  CoverageLabel(const CoverageLabel&) = delete;
  CoverageLabel& operator=(const CoverageLabel&) = delete;

 private:
  std::string previous_;
};
// Called by main when a command succeeded: prints the report (stdout, or
// stderr when the command printed JSON or is a sweep); nothing when no
// calibration was watched or no simulation used it.
void coverage_finish(const CLI::App& app);

// The report on `uses` against `cal` (named `file`): one line per
// collective kind, the unused entries, the kernel tables.
std::string coverage_report(const CollectiveUses& uses, const Calibration& cal);

// The table of `uses` and the nccl-tests command lines that would measure
// each collective kind (binary, -b/-e/-f sizes bracketing the used ones, -g
// or mpirun -np with the host layout, -d for `dtype`).
std::string nccl_tests_plan(const CollectiveUses& uses, DType dtype);

}  // namespace parmsim::cli
