#include "sim/sweep/sweep_spec.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::sweep {
namespace {

const Section kSweep{
    "sweep",
    "A sweep spec: every combination of `grid` values on every topology variant.",
    {{"name", "string", "required", "sweep name"},
     {"description", "string", "\"\"", "what the sweep shows; how its grid multiplies out"},
     {"network", "string", "flow", "analytical | flow"},
     {"schedules", "list", "[baseline, s1, s2]", "schedules to run (baseline always runs: speedups need it)"},
     {"topologies", "list", "required", "sweep.topologies[]"},
     {"grid", "map", "required",
      "layer key -> list of values: B, L, M, H, E, k, f, mp, dtype, ds_moe, dispatch, saa, experts_per_gpu (E = value * GPUs)"},
     {"skip_invalid", "bool", "false", "leave out impossible combinations instead of failing"}}};
const Section kTopo{"sweep.topologies[]",
                    "A topology file, with fixed overrides and a grid of overrides crossed with the layer grid.",
                    {{"file", "string", "required", "topology YAML, relative to the spec file"},
                     {"label", "string", "topology name", "name in the results"},
                     {"overlay", "string", "-",
                      "topology overlay YAML (parmsim calibrate --fit-machine), relative to the spec file; merged "
                      "before `set`"},
                     {"set", "map", "{}", "fixed overrides, key.path -> value"},
                     {"grid", "map", "{}", "key.path -> list of values; one variant per combination"}}};
SectionRegistrar r1(kSweep), r2(kTopo);

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ParmError(fmt::format("{}: cannot open file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Cartesian product of (key, values) lists, first key slowest.
std::vector<std::vector<std::string>> product(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& axes) {
  std::vector<std::vector<std::string>> out{{}};
  for (const auto& [key, values] : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& prefix : out)
      for (const auto& v : values) {
        auto row = prefix;
        row.push_back(key + "=" + v);
        next.push_back(std::move(row));
      }
    out = std::move(next);
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<std::string>>> axes_of(const YamlReader& m) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const std::string& k : m.keys()) {
    const YamlReader v = m.at(k);
    std::vector<std::string> vals;
    if (v.node().IsSequence()) {
      if (v.size() == 0) v.fail("a non-empty list of values");
      for (std::size_t i = 0; i < v.size(); ++i) vals.push_back(v[i].as_string());
    } else {
      vals.push_back(v.as_string());
    }
    axes.emplace_back(k, vals);
  }
  return axes;
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
Spec build_spec(const YamlReader& r, const std::string& text, const std::string& calibration_file) {
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
  if (s.network != "flow" && s.network != "analytical") r.at("network").fail("analytical or flow");
  s.input_hash = fnv1a(text);
  if (!calibration_file.empty()) s.input_hash = fnv1a(read_file(calibration_file), s.input_hash);
  s.schedules = {"baseline"};
  if (auto sc = r.opt("schedules")) {
    sc->expect_seq();
    for (std::size_t i = 0; i < sc->size(); ++i) {
      const std::string n = (*sc)[i].as_string();
      if (n != "baseline" && n != "s1" && n != "s2") (*sc)[i].fail("baseline, s1 or s2");
      if (n != "baseline") s.schedules.push_back(n);
    }
  } else {
    s.schedules = {"baseline", "s1", "s2"};
  }
  const bool skip = r.has("skip_invalid") && r.at("skip_invalid").as_bool();
  const std::filesystem::path base = std::filesystem::path(file).parent_path();

  const YamlReader tops = r.at("topologies");
  tops.expect_seq();
  if (tops.size() == 0) tops.fail("at least one topology");
  for (std::size_t i = 0; i < tops.size(); ++i) {
    const YamlReader t = tops[i];
    t.check_keys(kTopo);
    const std::string rel = t.at("file").as_string();
    const std::string path = (base / rel).lexically_normal().string();
    std::vector<std::string> fixed, overlay;
    if (t.has("overlay")) {
      const std::string ov = (base / t.at("overlay").as_string()).lexically_normal().string();
      try {
        overlay = load_topology_overlay(ov);
      } catch (const ParmError& e) {
        throw ParmError(fmt::format("{}: {}", t.at("overlay").where(), e.what()));
      }
      s.input_hash = fnv1a(read_file(ov), s.input_hash);
    }
    if (auto set = t.opt("set"))
      for (const std::string& k : set->keys()) fixed.push_back(k + "=" + set->at(k).as_string());
    std::vector<std::vector<std::string>> variants{{}};
    if (auto g = t.opt("grid")) variants = product(axes_of(*g));
    for (const auto& var : variants) {
      TopologyVariant v;
      v.file = path;
      v.overrides = fixed;
      v.overrides.insert(v.overrides.end(), var.begin(), var.end());
      try {
        v.topo = std::make_shared<const Topology>(load_topology(path, v.overrides, overlay));
      } catch (const ParmError& e) {
        throw ParmError(fmt::format("{}: {}", t.at("file").where(), e.what()));
      }
      s.input_hash = fnv1a(read_file(path), s.input_hash);
      v.label = t.has("label") ? t.at("label").as_string() : v.topo->name();
      if (!var.empty()) {
        std::string p;
        for (const auto& x : var) p += (p.empty() ? "" : ",") + x;
        v.label += "[" + p + "]";
      }
      s.topologies.push_back(std::move(v));
    }
  }

  const YamlReader grid = r.at("grid");
  grid.expect_map();
  const auto axes = axes_of(grid);
  const auto rows = product(axes);
  for (std::size_t ti = 0; ti < s.topologies.size(); ++ti) {
    const Topology& topo = *s.topologies[ti].topo;
    for (const auto& row : rows) {
      moe::LayerSpec spec;
      moe::ScheduleOptions dummy = moe::preset("s1");
      std::int64_t per_gpu = 0;
      std::string desc;
      for (const std::string& kv : row) {
        desc += (desc.empty() ? "" : ",") + kv;
        const auto eq = kv.find('=');
        const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
        if (key == "experts_per_gpu") {
          try {
            per_gpu = std::stoll(val);
          } catch (const std::logic_error&) {
            per_gpu = 0;
          }
          if (per_gpu < 1 || per_gpu > moe::kMaxExperts) grid.at(key).fail(fmt::format("integers in [1, {}]", moe::kMaxExperts));
          continue;
        }
        try {
          moe::set_key(&spec, nullptr, key, val, grid.at(key).where());
        } catch (const ParmError& e) {
          throw ParmError(fmt::format("{} (grid keys are the layer keys and experts_per_gpu)", e.what()));
        }
      }
      if (per_gpu > 0) spec.E = per_gpu * topo.num_gpus();
      try {
        moe::make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
        gpu_profile(topo.gpu_model()).peak(spec.dtype);
      } catch (const ParmError& e) {
        if (skip) {
          ++s.skipped;
          continue;
        }
        throw ParmError(
            fmt::format("{}: configuration {} on {} is impossible: {} (set skip_invalid: true to leave "
                        "such combinations out)",
                        file, desc, s.topologies[ti].label, e.what()));
      }
      Config c;
      c.index = static_cast<int>(s.configs.size());
      c.topology = static_cast<int>(ti);
      c.layer = spec;
      s.configs.push_back(c);
    }
  }
  if (s.configs.empty()) throw ParmError(fmt::format("{}: the grid expands to no valid configuration", file));
  return s;
}

}  // namespace

Spec load_spec(const std::string& file, const std::string& calibration_file) {
  const YamlReader r = YamlReader::load_file(file);
  return build_spec(r, read_file(file), calibration_file);
}

Spec parse_spec_text(const std::string& text, const std::string& name, const std::string& calibration_file) {
  return build_spec(YamlReader::load_string(text, name), text, calibration_file);
}

}  // namespace parmsim::sweep
