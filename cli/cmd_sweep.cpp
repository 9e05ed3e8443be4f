// parmsim sweep
#include <fmt/format.h>

#include <memory>

#include "cli/common.hpp"
#include "sim/core/error.hpp"
#include "sim/mpi/mpi_shim.hpp"
#include "sim/sweep/runner.hpp"

namespace parmsim::cli {

void add_sweep(CLI::App& app) {
  auto* c = app.add_subcommand("sweep",
                               "run a sweep spec (a grid of MoE layers on topologies) and write one CSV row per "
                               "(configuration, schedule); shard with `mpirun -np N parmsim sweep ...`");
  struct Args {
    std::string spec, out, calibration, max_memory;
    int jobs = 0;
    bool resume = false, quiet = false, list = false;
  };
  auto a = std::make_shared<Args>();
  c->add_option("spec", a->spec, "sweep YAML (see experiments/)")->required()->check(CLI::ExistingFile);
  auto* out_opt = c->add_option("-o,--output", a->out,
                "results CSV; FILE.run.json (input hash, version, settings) is written beside it");
  auto* jobs_opt = c->add_option("-j,--jobs", a->jobs,
                "threads (default, 0: all cores; at most 4 per core and one per configuration are started)")
      ->check(int_in(0, 2147483647));
  auto* resume_opt = c->add_flag("--resume", a->resume, "keep the complete rows of an interrupted run (OUTPUT.partial) and run the rest; refused if an "
              "input file changed since");
  c->add_flag("-q,--quiet", a->quiet, "no progress output");
  add_calibration_option(c, a->calibration);
  // --count runs nothing: an output, a resume or a thread count beside it would be ignored.
  c->add_flag("--count", a->list,
              "only print how many configurations the spec holds (the product of its grids' lengths; with "
              "skip_invalid, each combination is checked in turn, none is kept)")
      ->excludes(out_opt)
      ->excludes(resume_opt)
      ->excludes(jobs_opt);
  add_max_memory_option(c, a->max_memory);
  c->callback([a] {
    sweep::LoadOptions lo;
    lo.count_only = a->list;
    if (!a->list) {
      // A configuration held in memory, its rows waiting to be written in order: about 1 KiB with its Config.
      const MemoryLimit m = memory_limit(a->max_memory);
      constexpr std::uint64_t per_config = sizeof(sweep::Config) + 1024;
      lo.max_configs = m.bytes / per_config;
      lo.max_configs_why = fmt::format("{} B each, {}", per_config, m.why);
      lo.max_bytes = m.bytes;
      lo.bytes_per_config = per_config;
      lo.max_bytes_why = m.why;
    }
    const sweep::Spec spec = sweep::load_spec(a->spec, a->calibration, lo);
    if (a->list) {
      fmt::print("{}: {} configurations x {} schedules on {} topology variant(s); {} invalid skipped\n", spec.name,
                 spec.count, spec.schedules.size(), spec.variants, spec.skipped);
      return;
    }
    if (a->out.empty()) throw UserError("sweep: --output FILE is required");
    sweep::RunOptions o;
    o.out = a->out;
    o.threads = a->jobs;
    o.resume = a->resume;
    o.progress = !a->quiet;
    refuse_mpirun_without_mpi("sweep");
    mpi::init(&o.mpi_rank, &o.mpi_size);
    if (o.mpi_size > 1 && o.threads == 0) o.threads = 1;
    sweep::RunSummary s;
    try {
      s = sweep::run_sweep(spec, o);
    } catch (...) {
      mpi::finalize();
      throw;
    }
    mpi::finalize();
    if (o.mpi_rank == 0 && !a->quiet)
      fmt::print(stderr, "sweep: {} rows ({} configurations run, {} resumed) in {:.2f} s -> {}\n", s.rows,
                 s.configs_run, s.configs_resumed, s.seconds, a->out);
  });
}

}  // namespace parmsim::cli
