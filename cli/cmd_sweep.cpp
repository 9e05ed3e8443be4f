// parmsim sweep
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "cli/common.hpp"
#include "cli/coverage.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/moe/resources.hpp"
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
    bool resume = false, quiet = false, list = false, no_symmetry = false;
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
  add_no_symmetry_option(c, a->no_symmetry);
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
    sweep::Spec spec = sweep::load_spec(a->spec, a->calibration, lo);
    spec.symmetry = !a->no_symmetry;
    if (!a->list) coverage_watch(spec.calibration);  // reported on stderr when the sweep ends
    if (a->list) {
      fmt::print("{}: {} configurations x {} schedules on {} topology variant(s); {} invalid skipped\n", spec.name,
                 spec.count, spec.schedules.size(), spec.variants, spec.skipped);
      return;
    }
    if (a->out.empty()) throw UserError("sweep: --output FILE is required");
    {
      // What the simulations need, before any runs: each thread holds one
      // configuration's graphs and plans at a time (sim/moe/resources.hpp).
      const std::size_t threads =
          std::min<std::size_t>(spec.configs.size(), static_cast<std::size_t>(sweep::sweep_threads(a->jobs)));
      moe::SimCost worst, all;
      std::size_t worst_at = 0;
      const std::vector<int> orders = sweep::symmetry_orders(spec);
      for (const sweep::Config& c : spec.configs) {
        const moe::SimCost one = sweep::config_cost(spec, c, orders);
        if (one.bytes > worst.bytes) worst = one, worst_at = static_cast<std::size_t>(c.index);
        all += one;
      }
      const MemoryLimit m = memory_limit(a->max_memory);
      const double need = worst.bytes * static_cast<double>(threads);
      if (need > static_cast<double>(m.bytes))
        throw UserError(fmt::format(
            "sweep: {} thread(s) simulating at once need an estimated {:.2f} GiB: configuration {} ({}) alone takes {}; "
            "above the {} a run may use ({}); run fewer threads (-j), shard the spec, or raise --max-memory",
            threads, need / (1u << 30), worst_at, moe::spec_string(spec.configs[worst_at].layer), moe::describe(worst),
            units::format_bytes(m.bytes), m.why));
      if (!a->quiet && all.seconds / static_cast<double>(std::max<std::size_t>(threads, 1)) > 60)
        fmt::print(stderr, "sweep: an estimated {:.0f} s of simulation on {} thread(s) ({:.2g} events)\n",
                   all.seconds / static_cast<double>(threads), threads, all.events);
    }
    sweep::RunOptions o;
    o.out = a->out;
    o.threads = a->jobs;
    o.resume = a->resume;
    o.progress = !a->quiet;
    refuse_mpirun_without_mpi("sweep");
    mpi::init(&o.mpi_rank, &o.mpi_size);
    if (o.mpi_rank != 0) coverage_cancel();  // rank 0 reports its share
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
