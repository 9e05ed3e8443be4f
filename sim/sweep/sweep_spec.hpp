#pragma once
// A sweep: a cartesian grid of layer parameters over a list of topologies
// (each optionally crossed with a grid of topology overrides), a set of
// schedules and a network model. Format: experiments/README.md and
// `parmsim --help-config` (sections sweep, sweep.topologies[]).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/calib/calibration.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim::sweep {

struct TopologyVariant {
  std::string label;  // e.g. "parm-32gpu" or "h200-cluster[fabric.bandwidth=200Gbps]"
  std::string file;
  std::string overlay_file;  // the entry's `overlay:` file, or empty
  std::vector<std::string> overrides;
  std::shared_ptr<const Topology> topo;
};

// A named layer of the spec's `cases`: its keys (a layer file's, then its `set`), crossed with
// the grid; the grid's keys apply over them.
struct Case {
  std::string label;
  std::string file;                                     // the `layer:` file, or empty
  std::vector<std::pair<std::string, std::string>> keys;  // (key=value, where it was given)
};

struct Config {
  int index = 0;
  int topology = 0;  // into Spec::topologies
  int case_index = -1;  // into Spec::cases; -1 without cases
  moe::LayerSpec layer;
  moe::ScheduleKeys keys;  // schedule options from the grid (none: the presets as they are)
};

struct Spec {
  std::string name, description, file;
  std::string network = "flow";
  bool symmetry = true;  // SimOptions::symmetry (sweep --no-symmetry turns it off; not a spec key)
  std::vector<std::string> schedules;  // always starts with "baseline"
  std::vector<TopologyVariant> topologies;
  std::vector<Config> configs;                     // empty when only counted
  std::uint64_t count = 0;                         // valid configurations (configs.size() when expanded)
  std::uint64_t variants = 0;                      // topology variants
  std::size_t skipped = 0;                         // invalid combinations left out (skip_invalid: true)
  bool skip_oom = false;                           // leave out rows whose peak memory does not fit (skip_oom: true)
  std::uint64_t input_hash = 0;                    // FNV-1a over the spec, every topology file and the calibration
  std::shared_ptr<const Calibration> calibration;  // measured collectives, or null
  std::string calibration_file;
  // Layer keys without a CSV column of their own (moe::LayerKey::column) that
  // the grid sets, in the registry's order: the CSV gains a column for each.
  std::vector<std::string> extra_columns;
  std::vector<Case> cases;  // named layers crossed with the grid (a `case` column); empty: none
};

struct LoadOptions {
  // Only count: without skip_invalid the count is the product of the axes'
  // lengths (nothing is expanded or checked past the first topology variant of
  // each entry); with it, every combination is checked, one at a time, and
  // none is kept. `configs` and `topologies` stay empty.
  bool count_only = false;
  // More configurations than this (0: no limit) are refused before any is
  // expanded; `max_configs_why` says where the limit comes from.
  std::uint64_t max_configs = 0;
  std::string max_configs_why;
  // The memory a run may use (0: no limit): the configurations at
  // `bytes_per_config` each plus every topology variant (its footprint, as the
  // first variant of its entry measures, and its closed-form costs) must fit,
  // checked before any variant past the first is loaded.
  std::uint64_t max_bytes = 0, bytes_per_config = 0;
  std::string max_bytes_why;
};

// Loads, validates and expands a spec. Every configuration is checked
// against its topology (make_dims); an impossible one is an error naming it,
// or is skipped and counted when the spec says skip_invalid: true. A value
// twice in one grid list, and two topology variants with the same label, are
// errors naming file:line:column and the key.
Spec load_spec(const std::string& file, const std::string& calibration_file = "", const LoadOptions& opt = {});
// The same from text (the fuzz targets); `name` stands for the file in messages
// and its directory is where topology files are looked up.
Spec parse_spec_text(const std::string& text, const std::string& name, const std::string& calibration_file = "",
                     const LoadOptions& opt = {});

std::uint64_t fnv1a(const std::string& data, std::uint64_t h = 1469598103934665603ULL);

}  // namespace parmsim::sweep
