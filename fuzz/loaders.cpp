#include "fuzz/loaders.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>

#include "cli/measured_trace.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/model.hpp"
#include "sim/sweep/sweep_spec.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/dispatch_validation.hpp"
#include "sim/validation/gemm_validation.hpp"
#include "sim/validation/measured_csv.hpp"
#include "sim/validation/moe_validation.hpp"
#include "sim/validation/nccl_validation.hpp"

// Where a fuzzed spec pretends to live: sweep and model specs name topology
// files relative to their own directory (experiments/ -> ../topologies/...).
#ifndef PARMSIM_SOURCE_DIR
#define PARMSIM_SOURCE_DIR "."
#endif

namespace parmsim::fuzz {

namespace {

// The executors' default layer (backend/verify.cpp's small_layer; fuzz/ links
// only the simulator library).
moe::LayerSpec small_layer() {
  moe::LayerSpec s;
  s.B = 2, s.L = 8, s.M = 16, s.H = 32, s.E = 8, s.k = 2, s.f = 2.0, s.mp = 2;
  return s;
}

void topology(const std::string& t) { parse_topology_text(t, "fuzz.yaml"); }
void graph_yaml(const std::string& t) { parse_task_graph_text(t, "fuzz.yaml"); }
// A .json name adds the strict JSON check (no repeated key, no YAML-only syntax).
void graph_json(const std::string& t) { parse_task_graph_text(t, "fuzz.json"); }

// `parmsim layer --layer FILE`: a map of layer keys, read as cli/cmd_layer.cpp
// reads it, then sized on the 32-GPU cluster (4 per node) and turned into op lists.
void layer(const std::string& t) {
  const YamlReader r = YamlReader::load_string(t, "fuzz.yaml");
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  for (const std::string& k : r.keys()) moe::apply_keys(&spec, &keys, {k + "=" + r.at(k).as_string()}, r.at(k).where());
  const moe::Dims d = moe::make_dims(spec, 32, 4);
  const moe::ScheduleOptions o = moe::schedule_options("s2", keys);
  const auto f = moe::forward_ops(spec, d, o);
  moe::backward_ops(f, spec, d, o);
}

void overlay(const std::string& t) { parse_topology_overlay_text(t, "fuzz.yaml"); }

// The three validation tables (validate nccl, gemm, moe), through the one CSV
// reader; the text goes through a file, as their loaders read paths. Then
// compare --measured's CSV (its rows, not the topologies they name).
void validation_csv(const std::string& t) {
  static const std::string path = fmt::format("/tmp/parmsim-fuzz-{}.csv", ::getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << t;
  }
  for (const auto& load : std::initializer_list<void (*)(const std::string&)>{
           [](const std::string& p) { load_nccl_measurements(p); }, [](const std::string& p) { load_gemm_measurements(p); },
           [](const std::string& p) { load_moe_measurements(p); },
           [](const std::string& p) { load_dispatch_measurements(p); },
           // moe-dispatch --load FILE: a per-expert histogram (one count per expert).
           [](const std::string& p) { moe::parse_load_model(p, "--load"); }}) {
    try {
      load(path);
    } catch (const UserError&) {
    }
  }
  try {
    parse_measured_csv(t, "fuzz.csv", "", "topologies/dgx-h100.yaml");
  } catch (const UserError&) {
  }
}

void sweep(const std::string& t) { sweep::parse_spec_text(t, PARMSIM_SOURCE_DIR "/experiments/fuzz.yaml"); }
void model(const std::string& t) { moe::parse_model_spec_text(t, PARMSIM_SOURCE_DIR "/experiments/fuzz.yaml"); }
void calibration(const std::string& t) { parse_calibration_text(t, "fuzz.yaml"); }
// The names say nothing of the collective: the op must come from the contents.
// Every table of the file (calibrate imports each).
void nccl_text(const std::string& t) { calib::parse_nccl_tests_text_all(t, "fuzz.txt"); }
void nccl_json(const std::string& t) { calib::parse_nccl_tests_json(t, "fuzz.json"); }
// Bounded as `parmsim compare` bounds it (below libFuzzer's 2 GiB RSS limit).
void trace_sidecar(const std::string& t) {
  cli::graph_from_sidecar(t, "fuzz.csv.json", small_layer(), std::uint64_t{1} << 30, "the fuzz target's bound");
}

// A trace CSV against the graph of `parmsim execute --schedule s2` with its defaults.
void trace_csv(const std::string& t) {
  static const TaskGraph g =
      cli::graph_from_sidecar(R"({"schedule": "s2", "gpus": 8, "node_gpus": 8})", "fuzz.csv.json", small_layer());
  cli::read_trace_rows(t, "fuzz.csv", g);
}

}  // namespace

const std::vector<std::pair<std::string, Loader>>& loaders() {
  static const std::vector<std::pair<std::string, Loader>> all{
      {"topology", topology},       {"graph_yaml", graph_yaml},       {"graph_json", graph_json},
      {"layer", layer},             {"sweep", sweep},                 {"model", model},
      {"calibration", calibration}, {"nccl_text", nccl_text},         {"nccl_json", nccl_json},
      {"trace_csv", trace_csv},     {"trace_sidecar", trace_sidecar}, {"overlay", overlay},
      {"validation_csv", validation_csv},
  };
  return all;
}

Loader loader(const std::string& name) {
  for (const auto& [n, f] : loaders())
    if (n == name) return f;
  throw std::out_of_range("no fuzz target " + name);
}

}  // namespace parmsim::fuzz
