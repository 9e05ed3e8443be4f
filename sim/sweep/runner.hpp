#pragma once
// Runs a sweep: configurations in parallel on threads (and across MPI ranks
// when launched by mpirun), rows written in configuration order so the file
// does not depend on the thread count or the rank count.
//
// While running, rows go to OUT.partial, a whole configuration at a time and
// flushed; at the end it is renamed to OUT and OUT-stem.run.json (input hash,
// version, settings) is written beside it.
// --resume keeps the complete configurations of OUT.partial (checking that
// they belong to the same spec), drops any half-written tail, and runs the rest.
#include <string>

#include "sim/sweep/sweep_spec.hpp"

namespace parmsim::sweep {

struct RunOptions {
  std::string out;
  int threads = 0;  // 0 = all cores; capped at 4 per core, and at one per configuration
  bool resume = false;
  bool progress = true;
  int mpi_rank = 0, mpi_size = 1;
};

std::string csv_header();
// The CSV rows of one configuration (one per schedule), each ending in '\n'.
std::string run_config(const Spec& spec, const Config& c);

struct RunSummary {
  std::size_t configs_run = 0, configs_resumed = 0, rows = 0;
  double seconds = 0;
};
RunSummary run_sweep(const Spec& spec, const RunOptions& opt);

}  // namespace parmsim::sweep
