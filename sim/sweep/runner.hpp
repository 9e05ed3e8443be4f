#pragma once
// Runs a sweep: configurations in parallel on threads (and across MPI ranks
// when launched by mpirun), rows written in configuration order so the file
// does not depend on the thread count or the rank count.
//
// While running, rows go to OUT.partial, a whole configuration at a time;
// its first line records the parmsim version and the FNV-1a hash of every
// input file (spec, topologies, calibration). At the end OUT (the partial
// file without that line) and OUT-stem.run.json (input hashes, version,
// settings) appear together, and OUT.partial goes.
// --resume keeps the complete configurations of OUT.partial (refusing it if
// an input file changed, naming it, or a row does not belong to the spec),
// drops any half-written tail, and runs the rest.
// OUT.partial is flock()ed while a sweep writes it: a second sweep on the
// same output is refused at start (a killed sweep's lock goes with it).
// Outputs that are inputs, links, directories or devices are refused before
// anything runs; a failed sweep leaves OUT.partial only when it holds
// complete configurations (to resume from), and never OUT without its run.json.
#include <string>

#include "sim/sweep/sweep_spec.hpp"

namespace parmsim::moe {
struct SimCost;
}

namespace parmsim::sweep {

struct RunOptions {
  std::string out;
  int threads = 0;  // 0 = all cores; capped at 4 per core, and at one per configuration
  bool resume = false;
  bool progress = true;
  int mpi_rank = 0, mpi_size = 1;
};

// The CSV's header: the layer keys' columns, then the columns of the keys
// without one (LayerKey::column) that the spec's grid sets (Spec::extra_columns).
std::string csv_header();  // a spec whose grid sets none of them
std::string csv_header(const Spec& spec);
// The CSV rows of one configuration (one per schedule), each ending in '\n'.
// `model`: the closed form's costs on the configuration's topology (with the
// spec's calibration), shared by every configuration on it; null: made here.
// `ws`: the calling thread's workspace, kept for its next configuration; null: a fresh one.
std::string run_config(const Spec& spec, const Config& c, const moe::AlphaBeta* model = nullptr,
                       Workspace* ws = nullptr);

struct RunSummary {
  std::size_t configs_run = 0, configs_resumed = 0, rows = 0, skipped_oom = 0;
  double seconds = 0;
};
RunSummary run_sweep(const Spec& spec, const RunOptions& opt);

// Each topology variant's symmetry order as the run simulates it (moe::symmetry_order: the
// spec's network, Spec::symmetry), by topology index.
std::vector<int> symmetry_orders(const Spec& spec);
// What simulating configuration `c`'s schedules takes (moe::estimate_schedule under
// its topology's symmetry, `orders` from symmetry_orders): the up-front memory check
// and the run's balance and ETA weigh configurations by it.
moe::SimCost config_cost(const Spec& spec, const Config& c, const std::vector<int>& orders);

// The threads a run uses for RunOptions::threads = `asked` (before the cap
// at one per configuration): all cores for 0, else at most 4 per core.
int sweep_threads(int asked);

}  // namespace parmsim::sweep
