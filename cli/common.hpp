#pragma once
// Helpers shared by the subcommands.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/moe/resources.hpp"

namespace parmsim {
struct Calibration;
}

namespace parmsim::cli {

// "1MiB,64MiB" or "1KiB:1GiB" (doubling from the first to the last, as nccl-tests -b/-e/-f 2);
// errors name `option`.
std::vector<std::uint64_t> parse_sizes(const std::string& s, const std::string& option);
// "all", "0-7", "0,2,4-6"; every id below `limit`.
std::vector<int> parse_ranks(const std::string& s, int limit);
// Adds the --calibration FILE option (same text on every simulating command).
void add_calibration_option(CLI::App* c, std::string& file);
// --calibration FILE: loaded once per command; null when not given.
std::shared_ptr<const Calibration> load_calibration_arg(const std::string& file);
// --overlay FILE, on every command that takes a topology: a topology overlay
// (a YAML map of topology keys; `calibrate --fit-machine` writes one), merged
// over the topology before --topo-set.
void add_overlay_option(CLI::App* c, std::string& file);
// --topo-set KEY=VALUE,...: topology overrides (same text on every command that takes a topology
// and nothing else to say about them).
void add_topo_set_option(CLI::App* c, std::string& set);
// Its assignments, for load_topology's `overlay`; none when `file` is empty.
std::vector<std::string> load_overlay_arg(const std::string& file);
// "k=v,k2=v2" as assignments (empty parts dropped); a key given twice is a
// UserError naming `option` and both assignments.
std::vector<std::string> split_assignments(const std::string& s, const std::string& option);

// Option checks (->check(...)): CLI11 reports a failure as one line naming the
// option, e.g. "--gpus: expected an integer in [1, 1024], got '0'", and exits 105.
// An integer in [lo, hi] (checked on the text, so values beyond the type are caught too).
CLI::Validator int_in(long long lo, long long hi);
// An unsigned 64-bit integer (no sign: "-1" would wrap).
CLI::Validator uint64_any();
// A finite number >= lo (no nan, no inf).
CLI::Validator finite_at_least(double lo);

// --max-memory SIZE (e.g. 4GiB): what a run may need before it is refused,
// on the commands that estimate it first (execute, verify, sweep).
void add_max_memory_option(CLI::App* c, std::string& value);
// --no-symmetry: simulate every rank, never one class of symmetric ranks for
// all (SimOptions::symmetry), for checks.
void add_no_symmetry_option(CLI::App* c, bool& value);
struct MemoryLimit {
  std::uint64_t bytes = 0;
  std::string why;  // "--max-memory 4GiB", or where the default came from
};
// The option's value, or by default half of the machine's physical memory
// (sysconf), or of the cgroup's limit when that is lower.
MemoryLimit memory_limit(const std::string& value);
// Refuses a simulation estimated (sim/moe/resources.hpp) above --max-memory:
// "WHAT needs an estimated ..., above the LIMIT a run may use (WHY); LOWER".
// One estimated past a minute is announced on stderr.
void check_estimate(const std::string& what, const moe::SimCost& e, const std::string& max_memory,
                    const std::string& lower);

// --network NAME: one of network_models(), else a UserError naming the option.
void check_network_option(const std::string& name);

// Makes MPI the transport of sim/mpi/mpi_shim (nothing in a build without MPI).
void install_mpi();
// Under mpirun, in a parmsim built without MPI (-DPARMSIM_MPI=OFF): a UserError
// that says so, naming `what` (the command), instead of a run in one process.
void refuse_mpirun_without_mpi(const std::string& what);

void add_subcommands(CLI::App& app);
void add_collective(CLI::App& app);
void add_simulate(CLI::App& app);
void add_topology(CLI::App& app);
void add_layer(CLI::App& app);
void add_sweep(CLI::App& app);
void add_model(CLI::App& app);
void add_exec(CLI::App& app);
void add_calibrate(CLI::App& app);
void add_compare(CLI::App& app);
void add_validate(CLI::App& app);
void add_moe_dispatch(CLI::App& app);

}  // namespace parmsim::cli
