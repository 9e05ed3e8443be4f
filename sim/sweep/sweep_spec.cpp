#include "sim/sweep/sweep_spec.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/net/network_model.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::sweep {
namespace {

const Section kSweep{
    "sweep",
    "A sweep spec: every combination of `grid` values on every topology variant.",
    {{"name", "string", "required", "sweep name"},
     {"description", "string", "\"\"", "what the sweep shows; how its grid multiplies out"},
     {"network", "string", "flow", network_model_names(" | ", " | ")},
     {"schedules", "list", "[" + moe::schedule_choices({}, ", ", ", ") + "]", "schedules to run (baseline always runs: speedups need it)"},
     {"topologies", "list", "required", "sweep.topologies[]"},
     {"grid", "map", "required",
      "layer key -> list of values: " + moe::layer_key_names(moe::KeyScope::layer) +
          ", experts_per_gpu (E = value * GPUs); schedule options " + moe::layer_key_names(moe::KeyScope::schedule) +
          " (they refine s1 and s2, whose rows are then named like s1[chunks=2])"},
     {"cases", "list", "[]",
      "named layers, each crossed with the grid and every topology (sweep.cases[]); the results gain a `case` "
      "column; the grid's keys apply over a case's"},
     {"skip_invalid", "bool", "false", "leave out impossible combinations instead of failing"},
     {"skip_oom", "bool", "false",
      "leave out rows whose schedule's peak memory per GPU does not fit the GPU (its profile, or the topology's "
      "gpu_memory); counted in run.json as skipped_oom"}}};
const Section kTopo{"sweep.topologies[]",
                    "A topology file, with fixed overrides and a grid of overrides crossed with the layer grid.",
                    {{"file", "string", "required", "topology YAML, relative to the spec file"},
                     {"label", "string", "topology name", "name in the results"},
                     {"overlay", "string", "-",
                      "topology overlay YAML (parmsim calibrate --fit-machine), relative to the spec file; merged "
                      "before `set`"},
                     {"set", "map", "{}", "fixed overrides, key.path -> value"},
                     {"grid", "map", "{}", "key.path -> list of values; one variant per combination"}}};
const Section kCase{"sweep.cases[]",
                    "A named layer: a layer file's keys, then `set` over them (e.g. a model's MoE layer, "
                    "experiments/models/).",
                    {{"label", "string", "required", "the case's name in the results (unique)"},
                     {"layer", "string", "-", "a layer YAML file (parmsim layer --layer), relative to the spec file"},
                     {"set", "map", "{}", "layer keys -> values, over the file's"}}};
SectionRegistrar r1(kSweep), r2(kTopo), r3(kCase);

// Two values of a grid list mean the same when their keys are equal: equal
// text, or equal numbers ("4" and "4.0"): a number's key is its shortest
// decimal form, anything else's its text.
std::string value_key(const std::string& s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && !std::isnan(v)) return fmt::format("#{}", v == 0 ? 0.0 : v);
  } catch (const std::logic_error&) {
  }
  return "$" + s;
}

// A value of the grid's experts_per_gpu: a whole number of experts per GPU,
// written as an integer ("1.5" and "2abc" are refused, not read as 1 and 2).
std::int64_t experts_per_gpu(const YamlReader& list, const std::string& val) {
  std::int64_t per_gpu = 0;
  try {
    std::size_t used = 0;
    per_gpu = std::stoll(val, &used);
    if (used != val.size()) per_gpu = 0;
  } catch (const std::logic_error&) {
  }
  if (per_gpu < 1 || per_gpu > moe::kMaxExperts)
    list.fail(fmt::format("integers in [1, {}], got '{}'", moe::kMaxExperts, val));
  return per_gpu;
}

// Each key's list of values; a value twice in one list (the same configurations twice) is an error at its line.
std::vector<std::pair<std::string, std::vector<std::string>>> axes_of(const YamlReader& m) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const std::string& k : m.keys()) {
    const YamlReader v = m.at(k);
    std::vector<std::string> vals;
    if (v.node().IsSequence()) {
      if (v.size() == 0) v.fail("a non-empty list of values");
      // Each value by its key (value_key), so a list of
      // n values is checked in n log n, not n^2 comparisons.
      std::map<std::string, std::size_t> seen;
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string x = v[i].as_string();
        if (const auto [it, fresh] = seen.emplace(value_key(x), i); !fresh)
          v[i].fail(fmt::format("each value once (a repeat runs the same configurations twice); '{}' is already "
                                "at {}",
                                vals[it->second], v[it->second].where()));
        vals.push_back(x);
      }
    } else {
      vals.push_back(v.as_string());
    }
    axes.emplace_back(k, vals);
  }
  return axes;
}

// The product of the axes' lengths (times `n`), or 0 past 2^62.
std::uint64_t grid_size(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes, std::uint64_t n) {
  for (const auto& [k, v] : axes) {
    if (n > (std::uint64_t{1} << 62) / v.size()) return 0;
    n *= v.size();
  }
  return n;
}

// "2 topology variant(s) x B(3) x L(3)": how a grid multiplies out.
std::string grid_shape(std::uint64_t variants,
                       const std::vector<std::pair<std::string, std::vector<std::string>>>& axes,
                       std::size_t cases = 0) {
  std::string out = fmt::format("{} topology variant(s)", variants);
  if (cases > 0) out += fmt::format(" x {} case(s)", cases);
  for (const auto& [k, v] : axes) out += fmt::format(" x {}({})", k, v.size());
  return out;
}

// Visits every combination of the axes ("key=value" each), first key slowest, one at a time.
template <class Fn>
void for_each_combination(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes, Fn fn) {
  std::vector<std::size_t> at(axes.size(), 0);
  std::vector<std::string> row(axes.size());
  while (true) {
    for (std::size_t i = 0; i < axes.size(); ++i) row[i] = axes[i].first + "=" + axes[i].second[at[i]];
    fn(row);
    std::size_t i = axes.size();
    while (i > 0 && ++at[i - 1] == axes[i - 1].second.size()) at[--i] = 0;
    if (i == 0) return;
  }
}

}  // namespace

std::uint64_t fnv1a(const std::string& data, std::uint64_t h) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

namespace {

// `text` is what `r` was parsed from (hashed into input_hash); topology files
// are relative to the directory of r.file().
Spec build_spec(const YamlReader& r, const std::string& text, const std::string& calibration_file,
                const LoadOptions& opt) {
  const std::string& file = r.file();
  r.check_keys(kSweep);
  Spec s;
  s.file = file;
  if (!calibration_file.empty()) {
    s.calibration = std::make_shared<const Calibration>(load_calibration(calibration_file));
    s.calibration_file = calibration_file;
  }
  s.name = r.at("name").as_string();
  s.description = r.get_string("description", "");
  s.network = r.get_string("network", "flow");
  if (!is_network_model(s.network)) r.at("network").fail(network_model_names(", ", " or "));
  s.input_hash = fnv1a(text);
  if (!calibration_file.empty()) s.input_hash = fnv1a(read_file(calibration_file), s.input_hash);
  s.schedules = {"baseline"};
  if (auto sc = r.opt("schedules")) {
    sc->expect_seq();
    for (std::size_t i = 0; i < sc->size(); ++i) {
      const std::string n = (*sc)[i].as_string();
      if (!moe::is_preset(n)) (*sc)[i].fail(moe::schedule_choices({}, ", ", " or "));
      for (std::size_t j = 0; j < i; ++j)
        if ((*sc)[j].as_string() == n)
          (*sc)[i].fail(fmt::format("each schedule once; '{}' is already at {}", n, (*sc)[j].where()));
      if (n != "baseline") s.schedules.push_back(n);
    }
  } else {
    s.schedules = moe::preset_names();
  }
  const bool skip = r.has("skip_invalid") && r.at("skip_invalid").as_bool();
  s.skip_oom = r.has("skip_oom") && r.at("skip_oom").as_bool();
  const std::filesystem::path base = std::filesystem::path(file).parent_path();

  const YamlReader tops = r.at("topologies");
  tops.expect_seq();
  if (tops.size() == 0) tops.fail("at least one topology");
  const YamlReader grid = r.at("grid");
  grid.expect_map();
  auto axes = axes_of(grid);
  // A histogram file named by `load` is relative to the spec's folder, as its topologies and
  // layer files are (moe::file_relative_load).
  for (auto& [key, vals] : axes)
    for (std::string& v : vals) v = moe::key_value_in_file(key, v, r.file());
  for (const moe::LayerKey& k : moe::layer_keys())
    if (k.scope == moe::KeyScope::layer && !k.column && grid.has(std::string(k.name)))
      s.extra_columns.emplace_back(k.name);
  if (grid.has("E") && grid.has("experts_per_gpu"))
    grid.at("experts_per_gpu").fail("no `experts_per_gpu` beside `E` in the grid: give one of the two (E would be ignored)");
  if (auto cs = r.opt("cases")) {
    cs->expect_seq();
    std::map<std::string, std::string> seen;  // label -> where
    for (std::size_t i = 0; i < cs->size(); ++i) {
      const YamlReader c = (*cs)[i];
      c.check_keys(kCase);
      Case k;
      k.label = c.at("label").as_string();
      if (k.label.empty()) c.at("label").fail("a non-empty label");
      if (auto [it, fresh] = seen.emplace(k.label, c.at("label").where()); !fresh)
        c.at("label").fail(fmt::format("a label of its own; '{}' is already the label at {}", k.label, it->second));
      if (auto f = c.opt("layer")) {
        k.file = (base / f->as_string()).lexically_normal().string();
        const YamlReader lf = [&] {
          try {
            return YamlReader::load_file(k.file);
          } catch (const UserError& e) {
            throw UserError(fmt::format("{}: {}", f->where(), e.what()));
          }
        }();
        for (auto& kv : moe::layer_file_keys(lf)) k.keys.push_back(std::move(kv));
        s.input_hash = fnv1a(read_file(k.file), s.input_hash);
      }
      if (auto set = c.opt("set"))
        for (const std::string& key : set->keys())
          k.keys.emplace_back(key + "=" + moe::key_value_in_file(key, set->at(key).as_string(), r.file()),
                              set->at(key).where());
      // Every key once on its own: a typo is an error at its line, counting or not.
      for (const auto& [kv, where] : k.keys) {
        moe::LayerSpec spec;
        moe::ScheduleKeys keys;
        moe::apply_keys(&spec, &keys, {kv}, where);
      }
      s.cases.push_back(std::move(k));
    }
    if (s.cases.empty()) cs->fail("at least one case (or no `cases` key)");
  }
  // The cases as an axis of their own: one pass with none.
  const std::size_t n_cases = std::max<std::size_t>(1, s.cases.size());

  // Each topology entry: its file, overrides and grid of overrides, read and checked before anything is expanded.
  struct Entry {
    std::string path, label, overlay_path;
    std::vector<std::string> fixed, overlay;
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    std::uint64_t variants = 1;
    std::uint64_t bytes = 0;  // one variant's, as the first one measures
  };
  std::vector<Entry> entries;
  std::uint64_t variants = 0;
  std::map<std::string, std::string> labels;  // a variant's label -> where its entry is
  for (std::size_t i = 0; i < tops.size(); ++i) {
    const YamlReader t = tops[i];
    t.check_keys(kTopo);
    Entry en;
    en.path = (base / t.at("file").as_string()).lexically_normal().string();
    if (t.has("overlay")) {
      const std::string ov = (base / t.at("overlay").as_string()).lexically_normal().string();
      try {
        en.overlay = load_topology_overlay(ov);
      } catch (const UserError& e) {
        throw UserError(fmt::format("{}: {}", t.at("overlay").where(), e.what()));
      }
      en.overlay_path = ov;
    }
    if (auto set = t.opt("set"))
      for (const std::string& k : set->keys()) en.fixed.push_back(k + "=" + set->at(k).as_string());
    if (auto g = t.opt("grid")) en.axes = axes_of(*g);
    en.variants = grid_size(en.axes, 1);
    if (en.variants == 0 || variants + en.variants > (std::uint64_t{1} << 62))
      t.fail("a grid of overrides below 2^62 variants");
    variants += en.variants;
    // The first variant is loaded here: the file and every override key are checked even when counting.
    std::vector<std::string> first = en.fixed;
    for (const auto& [k, v] : en.axes) first.push_back(k + "=" + v[0]);
    std::shared_ptr<const Topology> topo;
    try {
      topo = std::make_shared<const Topology>(load_topology(en.path, first, en.overlay));
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}: {}", t.at("file").where(), e.what()));
    }
    // The topology, and the closed form's model the runner makes of it
    // (AlphaBeta and its cost forms: 40 KiB on parm-32gpu, measured as the
    // peak RSS of a 2000-variant sweep, 133 KiB per variant, less the
    // topology's 93 KiB footprint).
    constexpr std::uint64_t kModelBytes = 40 << 10;
    en.bytes = topo->footprint_bytes() + kModelBytes;
    en.label = t.has("label") ? t.at("label").as_string() : topo->name();
    // Rows name their topology by its label (and grid values): two variants with the same label would be told
    // apart by nothing.
    const YamlReader named = t.has("label") ? t.at("label") : t.at("file");
    if (variants <= (1u << 20))
      for_each_combination(en.axes, [&](const std::vector<std::string>& var) {
        std::string l = en.label, p;
        for (const auto& x : var) p += (p.empty() ? "" : ",") + x;
        if (!var.empty()) l += "[" + p + "]";
        if (const auto [it, fresh] = labels.emplace(l, named.where()); !fresh)
          named.fail(fmt::format("a topology label no other entry has (rows name their topology by it); '{}' is "
                                 "already the label of the entry at {} (give each entry its own `label`)",
                                 l, it->second));
      });
    entries.push_back(std::move(en));
  }

  const std::uint64_t total = grid_size(axes, variants * n_cases);
  if (total == 0 || total > (std::uint64_t{1} << 62))
    throw UserError(fmt::format("{}: the grid expands past 2^62 configurations ({})", file, grid_shape(variants, axes, s.cases.size())));
  const bool count_only = opt.count_only;
  if (count_only && !skip) {
    // Each value on its own (a key or value no layer takes is an error here as in a run), then every
    // combination, as the product of the axes' lengths: nothing is expanded.
    for (const auto& [key, vals] : axes)
      for (const std::string& val : vals) {
        if (key == "experts_per_gpu") {
          experts_per_gpu(grid.at(key), val);
          continue;
        }
        moe::LayerSpec spec;
        moe::ScheduleKeys keys;
        try {
          moe::apply_keys(&spec, &keys, {key + "=" + val}, grid.at(key).where());
        } catch (const UserError& e) {
          throw UserError(fmt::format("{} (grid keys are the layer keys, the schedule options and experts_per_gpu)", e.what()));
        }
      }
    s.count = total;
    s.variants = variants;
    return s;
  }
  if (!count_only && opt.max_configs > 0 && total > opt.max_configs)
    throw UserError(fmt::format("{}: the grid expands to {} configurations ({}); {} fit in the memory a run may use "
                                "({}); shard it into smaller specs, or raise --max-memory",
                                file, total, grid_shape(variants, axes, s.cases.size()), opt.max_configs, opt.max_configs_why));

  // Counting under skip_invalid: only the axes whose values change what
  // decides validity (the layer's shape, its dtype, experts_per_gpu) are
  // expanded; each valid combination of them stands for `factor` rows of the
  // others (schedule options, ds_moe, dispatch, saa, host_op). The work is the
  // product of the deciding axes' lengths and the variants, bounded up front.
  std::vector<std::pair<std::string, std::vector<std::string>>> count_axes = axes;
  std::uint64_t factor = 1;
  if (count_only && skip) {
    auto shape = [](const moe::LayerSpec& l) {
      return fmt::format("{},{},{},{},{},{},{},{},{}", l.B, l.L, l.M, l.H, l.E, l.k, l.f, l.mp, static_cast<int>(l.dtype));
    };
    count_axes.clear();
    for (const auto& [key, vals] : axes) {
      bool decides = key == "experts_per_gpu";
      for (std::size_t i = 0; i < vals.size() && !decides; ++i) {
        moe::LayerSpec a, b;
        moe::ScheduleKeys ka, kb;
        try {
          moe::apply_keys(&a, &ka, {key + "=" + vals[0]}, grid.at(key).where());
          moe::apply_keys(&b, &kb, {key + "=" + vals[i]}, grid.at(key).where());
        } catch (const UserError& e) {
          throw UserError(
              fmt::format("{} (grid keys are the layer keys, the schedule options and experts_per_gpu)", e.what()));
        }
        decides = shape(a) != shape(b);
      }
      if (decides)
        count_axes.emplace_back(key, vals);
      else
        factor *= vals.size();
    }
    constexpr std::uint64_t kMaxChecks = 10'000'000;  // about 10 s at 1 us a check
    const std::uint64_t checks = grid_size(count_axes, variants * n_cases);
    if (checks == 0 || checks > kMaxChecks) {
      std::string keys;
      for (const auto& [k, v] : count_axes) keys += fmt::format("{}{} ({})", keys.empty() ? "" : ", ", k, v.size());
      throw UserError(fmt::format(
          "{}: counting under skip_invalid checks every combination of the keys that decide validity ({}) on each of "
          "{} topology variant(s): {} checks, more than {}; without skip_invalid, --count gives the product of the "
          "axes at once ({}), or narrow those keys",
          file, keys, variants, checks == 0 ? std::string("past 2^62") : std::to_string(checks), kMaxChecks,
          grid_shape(variants, axes, s.cases.size())));
    }
  }

  if (!count_only && opt.max_bytes > 0) {
    // Checked with 128-bit sums: the grid may be near 2^62 configurations.
    unsigned __int128 need = static_cast<unsigned __int128>(total) * opt.bytes_per_config, topo_bytes = 0;
    for (const Entry& en : entries) topo_bytes += static_cast<unsigned __int128>(en.variants) * en.bytes;
    need += topo_bytes;
    if (need > opt.max_bytes) {
      const auto gib = [](unsigned __int128 b) { return static_cast<double>(b) / (1u << 30); };
      throw UserError(fmt::format("{}: the run needs an estimated {:.2f} GiB: {} topology variant(s) ({:.2f} GiB: "
                                  "each topology and its closed-form costs) and {} configurations ({:.2f} GiB); "
                                  "above the {:.2f} GiB it may use ({}); shard it into smaller specs, or raise "
                                  "--max-memory",
                                  file, gib(need), variants, gib(topo_bytes), total, gib(need - topo_bytes),
                                  gib(opt.max_bytes), opt.max_bytes_why));
    }
  }

  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& en = entries[i];
    const YamlReader t = tops[i];
    if (!en.overlay_path.empty()) s.input_hash = fnv1a(read_file(en.overlay_path), s.input_hash);
    for_each_combination(en.axes, [&](const std::vector<std::string>& var) {
      TopologyVariant v;
      v.file = en.path;
      v.overlay_file = en.overlay_path;
      v.overrides = en.fixed;
      v.overrides.insert(v.overrides.end(), var.begin(), var.end());
      try {
        v.topo = std::make_shared<const Topology>(load_topology(en.path, v.overrides, en.overlay));
      } catch (const UserError& e) {
        throw UserError(fmt::format("{}: {}", t.at("file").where(), e.what()));
      }
      s.input_hash = fnv1a(read_file(en.path), s.input_hash);
      v.label = t.has("label") ? t.at("label").as_string() : v.topo->name();
      if (!var.empty()) {
        std::string p;
        for (const auto& x : var) p += (p.empty() ? "" : ",") + x;
        v.label += "[" + p + "]";
      }
      const std::size_t ti = s.topologies.size();
      const Topology& topo = *v.topo;
      if (!count_only) s.topologies.push_back(v);
      // Counting under skip_invalid: each variant's layers are checked as they come, one variant at a time.
      for (std::size_t ci = 0; ci < n_cases; ++ci)
      for_each_combination(count_only ? count_axes : axes, [&](const std::vector<std::string>& row) {
        moe::LayerSpec spec;
        moe::ScheduleKeys keys;
        std::int64_t per_gpu = 0;
        std::string desc;
        if (!s.cases.empty()) {
          // The case's keys first (checked one by one when the spec was read), the grid's over them.
          for (const auto& [kv, where] : s.cases[ci].keys) moe::apply_keys(&spec, &keys, {kv}, where);
          desc = "case " + s.cases[ci].label;
        }
        for (const std::string& kv : row) {
          desc += (desc.empty() ? "" : ",") + kv;
          const auto eq = kv.find('=');
          const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
          if (key == "experts_per_gpu") {
            per_gpu = experts_per_gpu(grid.at(key), val);
            continue;
          }
          try {
            moe::apply_keys(&spec, &keys, {kv}, grid.at(key).where());
          } catch (const UserError& e) {
            throw UserError(fmt::format("{} (grid keys are the layer keys, the schedule options and experts_per_gpu)", e.what()));
          }
        }
        if (per_gpu > 0) spec.E = per_gpu * topo.num_gpus();
        try {
          moe::make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
          topo.gpu().peak(spec.dtype);
        } catch (const UserError& e) {
          if (skip) {
            s.skipped += factor;
            return;
          }
          throw UserError(
              fmt::format("{}: configuration {} on {} is impossible: {} (set skip_invalid: true to leave "
                          "such combinations out)",
                          file, desc, v.label, e.what()));
        }
        s.count += factor;
        if (count_only) return;
        Config c;
        c.index = static_cast<int>(s.configs.size());
        c.topology = static_cast<int>(ti);
        c.case_index = s.cases.empty() ? -1 : static_cast<int>(ci);
        c.layer = spec;
        c.keys = std::move(keys);
        s.configs.push_back(c);
      });
    });
  }
  s.variants = variants;
  if (count_only) return s;
  if (s.configs.empty()) throw UserError(fmt::format("{}: the grid expands to no valid configuration", file));
  return s;
}

}  // namespace

Spec load_spec(const std::string& file, const std::string& calibration_file, const LoadOptions& opt) {
  const YamlReader r = YamlReader::load_file(file);
  return build_spec(r, read_file(file), calibration_file, opt);
}

Spec parse_spec_text(const std::string& text, const std::string& name, const std::string& calibration_file,
                     const LoadOptions& opt) {
  return build_spec(YamlReader::load_string(text, name), text, calibration_file, opt);
}

}  // namespace parmsim::sweep
