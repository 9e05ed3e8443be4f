#pragma once
// The layer keys: one registry of every key that shapes an MoE layer (B, L, M,
// ..., saa) or refines the Parm schedule builder (split, gather, ...). `--set`,
// `--layer` files, sweep grids, `--help-config`, the CLI's help and every
// "unknown key" message are generated from it, so a key added here is accepted
// everywhere at once (tests/test_registries.cpp checks this).
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/moe/layer.hpp"

namespace parmsim {
struct Section;
class YamlReader;
}

namespace parmsim::moe {

// What a key configures: the layer itself (LayerSpec), or the Parm schedules
// built from it (ScheduleOptions; the baseline ignores them, a2a_algo aside).
enum class KeyScope { layer, schedule };

struct LayerKey {
  std::string_view name;
  std::string_view type;      // int, number, string, bool (as --help-config shows it)
  std::string_view fallback;  // the default, as --help-config shows it
  std::string_view help;
  KeyScope scope;
  // The accepted values of an enumerated key, in the order help and errors list them; empty otherwise.
  std::span<const std::string_view> choices;
  // Parses `value` into `spec` or `opts`; a bad value is a UserError that names `where` and the key.
  void (*set)(const LayerKey& key, LayerSpec& spec, ScheduleOptions& opts, const std::string& value,
              const std::string& where);
  // The value as text, as set() reads it (layer keys: the spec's; schedule keys: the options').
  std::string (*get)(const LayerSpec& spec, const ScheduleOptions& opts);
  // Layer keys: whether spec_string() and the sweep CSV's columns show it (the keys a
  // layer has always been named by show always; later ones only when not at their default).
  bool named_always = false;
  // Schedule keys only: whether setting the key makes the Parm schedules custom ("s1*", "s2*").
  // a2a_algo does not: it applies to every schedule, the baseline too.
  bool shapes_parm = false;
  // Layer keys: whether the sweep CSV has a column for it. Keys added after the
  // CSV's columns were fixed have none (their value shows in the `layer` column's
  // spec string when not at the default), so existing sweeps keep their columns.
  bool column = true;
};

// Every key, layer keys first, in the order help and errors list them.
std::span<const LayerKey> layer_keys();
// The key called `name`, or null.
const LayerKey* find_layer_key(std::string_view name);
// "B, L, M, ..." of one scope.
std::string layer_key_names(KeyScope scope);
// The layer keys joined by `sep`, and their values in `spec` joined the same way:
// the sweep CSV's layer columns ("B,L,...,saa") and one row's values.
std::string layer_key_columns(std::string_view sep);
std::string layer_key_values(const LayerSpec& spec, std::string_view sep);
// The keys of a `--layer` file, for --help-config (every key of the registry).
Section layer_file_section();
// A `--layer` file's keys (checked against layer_file_section()) as "KEY=VALUE", each with
// where it is. A histogram file named by `load` is read relative to the layer file's
// folder, as a model spec's topology is (file_relative_load).
std::vector<std::pair<std::string, std::string>> layer_file_keys(const YamlReader& r);
// The value of key `load` given in `file`: a relative histogram path joined to the file's
// folder; capacity, uniform, zipf:S and absolute paths as they are.
std::string file_relative_load(const std::string& value, const std::string& file);
// Layer key `key`'s value as given in `file` (a layer file, a model spec, a sweep spec): the
// keys that name a file (load) relative to that file's folder, the others as they are.
std::string key_value_in_file(std::string_view key, const std::string& value, const std::string& file);
// Every key with its type, default and meaning, a line each, for a command's --help.
std::string layer_keys_help();

// Schedule keys given with --set, a --layer file or a sweep grid refine each
// Parm preset (split, gather, fuse_*, chunks: s1 and s2 alike), and a2a_algo
// applies to every schedule. `parm` is s1's preset with the keys applied (it
// checks their values as they come), `shaped` says whether one of Parm's was given.
struct ScheduleKeys {
  ScheduleOptions parm = preset("s1");
  bool shaped = false;
  // The key=value assignments given, in order (for labels).
  std::vector<std::string> given;
};
// Applies "key=value" assignments: layer keys to `spec`, schedule keys to
// `keys` (recorded in keys->given; keys->shaped when one shapes the Parm
// schedules). Errors name `where`.
void apply_keys(LayerSpec* spec, ScheduleKeys* keys, const std::vector<std::string>& kv, const std::string& where);
// The keys that shape the Parm schedules, as a message lists them: "split, gather, ... and chunks".
std::string parm_shaping_key_names();
// The options schedule `name` (a preset) runs with under `keys`: the preset
// with `keys.given` applied in order, named "NAME*" when a key shaped a Parm
// preset; the baseline takes a2a_algo only.
ScheduleOptions schedule_options(const std::string& name, const ScheduleKeys& keys);

}  // namespace parmsim::moe
