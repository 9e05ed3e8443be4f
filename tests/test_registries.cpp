// The registries (layer keys, schedule presets, network models, collective
// algorithms, GPU profiles): every entry is accepted everywhere its list is
// used, and runs.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "sim/coll/collective_plan.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/algorithms.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/dispatch.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/model.hpp"
#include "sim/net/network_model.hpp"
#include "sim/sweep/runner.hpp"
#include "sim/sweep/sweep_spec.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

namespace {

Topology topo(const std::string& name, std::vector<std::string> set = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", set);
}

// A valid value of each key other than its default where the key has one to spare, so that
// accepting it shows: the last choice, "true", or the default of an int or number key.
std::string sample(const moe::LayerKey& k) {
  if (!k.choices.empty()) return std::string(k.choices.back());
  if (k.type == "bool") return "true";
  if (k.fallback == "schedule") return "2";  // chunks
  return std::string(k.fallback);
}

std::string layer_help() {
  const std::string all = help_config();
  const auto at = all.find("\nlayer\n");
  REQUIRE(at != std::string::npos);
  return all.substr(at, all.find("\n\n", at + 1) - at);
}

}  // namespace

TEST_CASE("every layer key is accepted by --set, a --layer file and a sweep grid, and listed by --help-config",
          "[registry]") {
  const std::string help = layer_help();
  const Section section = moe::layer_file_section();
  std::set<std::string> names;
  for (const moe::LayerKey& k : moe::layer_keys()) {
    const std::string key(k.name), v = sample(k);
    CAPTURE(key, v);
    CHECK(names.insert(key).second);  // each name once
    CHECK(moe::find_layer_key(key) == &k);
    // --set
    moe::LayerSpec spec;
    moe::ScheduleKeys keys;
    CHECK_NOTHROW(moe::apply_keys(&spec, &keys, {key + "=" + v}, "--set"));
    CHECK(keys.shaped == k.shapes_parm);
    CHECK(keys.given.size() == (k.scope == moe::KeyScope::schedule ? 1u : 0u));
    // a --layer file: the file's section declares the key
    const YamlReader file = YamlReader::load_string(key + ": " + v + "\n", "layer.yaml");
    CHECK_NOTHROW(file.check_keys(section));
    // --help-config's layer section lists it, with its help
    CHECK(help.find("\n    " + key + " ") != std::string::npos);
    CHECK(help.find(std::string(k.help)) != std::string::npos);
    // and so does the footer of `layer --help`, `verify --help` and `execute --help`
    CHECK(moe::layer_keys_help().find("\n  " + key + " ") != std::string::npos);
    // a sweep grid on the paper's cluster (ds_moe=mcore, Megatron-Core's layer at mp=1, with mp: [1])
    const std::string spec_text = fmt::format(
        "name: t\ntopologies: [{{file: ../topologies/parm-32gpu.yaml}}]\ngrid: {{{}: [{}]{}}}\n", key, v,
        key == "ds_moe" && v == "mcore" ? ", mp: [1]" : "");
    sweep::Spec s;
    CHECK_NOTHROW(s = sweep::parse_spec_text(spec_text, std::string(PARMSIM_SOURCE_DIR) + "/experiments/t.yaml"));
    if (!s.configs.empty()) CHECK(s.configs[0].keys.given.size() == (k.scope == moe::KeyScope::schedule ? 1u : 0u));
    // Layer keys name a layer (spec_string) and are columns of the sweep CSV (keys without a column of their
    // own get one when the grid sets them); the value read back is the one set.
    if (k.scope == moe::KeyScope::layer) {
      CHECK(sweep::csv_header(s).find("," + key + ",") != std::string::npos);
      CHECK(k.get(spec, moe::ScheduleOptions{}) == v);
      const std::string named = moe::spec_string(spec);
      CHECK((named.find(key + "=" + v) != std::string::npos) == (k.named_always || v != k.fallback));
    } else {
      CHECK(k.get(spec, keys.parm) == v);
    }
  }
  // A name no key has is refused everywhere, and the message lists every key.
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  try {
    moe::apply_keys(&spec, &keys, {"Q=1"}, "--set");
    FAIL("an unknown key was accepted");
  } catch (const UserError& e) {
    for (const moe::LayerKey& k : moe::layer_keys())
      CHECK(std::string(e.what()).find(std::string(k.name)) != std::string::npos);
  }
}

TEST_CASE("each layer key's help default is what a spec or s1 holds without it", "[registry]") {
  // Setting a key to the default its help shows changes nothing.
  const moe::LayerSpec plain;
  const moe::ScheduleOptions s1 = moe::preset("s1");
  for (const moe::LayerKey& k : moe::layer_keys()) {
    if (k.fallback == "schedule") continue;  // the preset decides (s1 and s2 differ)
    CAPTURE(k.name);
    moe::LayerSpec spec;
    moe::ScheduleOptions o = moe::preset("s1");
    moe::set_key(&spec, &o, std::string(k.name), std::string(k.fallback), "test");
    CHECK(moe::spec_string(spec) == moe::spec_string(plain));
    CHECK(o.describe() == s1.describe());
  }
}

TEST_CASE("schedule keys in a sweep grid refine s1 and s2 and name their rows", "[registry][sweep]") {
  const std::string text =
      "name: t\nschedules: [s1]\ntopologies: [{file: ../topologies/parm-32gpu.yaml}]\n"
      "grid: {B: [1], L: [256], chunks: [1, 2]}\n";
  const sweep::Spec s = sweep::parse_spec_text(text, std::string(PARMSIM_SOURCE_DIR) + "/experiments/t.yaml");
  REQUIRE(s.configs.size() == 2);
  // The same layer through `parmsim layer`'s path: s1 with chunks=2 is "s1*".
  moe::LayerSpec spec = s.configs[1].layer;
  moe::ScheduleKeys keys;
  moe::apply_keys(&spec, &keys, {"chunks=2"}, "--set");
  const moe::ScheduleOptions o = moe::schedule_options("s1", keys);
  CHECK(o.name == "s1*");
  CHECK(o.chunks == 2);
  // Each Parm preset is refined, not replaced: S2 keeps its fused collectives.
  const moe::ScheduleOptions o2 = moe::schedule_options("s2", keys);
  CHECK(o2.name == "s2*");
  CHECK(o2.chunks == 2);
  CHECK(o2.fuse_dispatch);
  CHECK(o2.fuse_combine);
  CHECK(o2.gather == moe::Gather::before_iorder);
  // The baseline takes a2a_algo only.
  moe::ScheduleKeys more;
  moe::apply_keys(&spec, &more, {"chunks=4", "a2a_algo=direct"}, "--set");
  const moe::ScheduleOptions b = moe::schedule_options("baseline", more);
  CHECK(b.name == "baseline");
  CHECK(b.chunks == 1);
  CHECK(b.a2a_algo == "direct");
  CHECK(moe::schedule_options("s2", more).a2a_algo == "direct");
  const std::string rows = sweep::run_config(s, s.configs[1]);
  CHECK(rows.find(",s1[chunks=2],") != std::string::npos);
  CHECK(rows.find(",baseline[chunks=2],") != std::string::npos);
  // The row's S1 time is the layer's with those options.
  const moe::LayerRun run{*s.topologies[0].topo, spec, s.network, nullptr};
  const moe::ScheduleResult r = moe::run_schedule(run, o);
  CHECK(rows.find(fmt::format(",s1[chunks=2],{},", us_exact(r.forward))) != std::string::npos);
  // chunks=1 is s1 itself: the same time as the preset.
  const std::string plain = sweep::run_config(s, s.configs[0]);
  const moe::ScheduleResult p = moe::run_schedule(moe::LayerRun{*s.topologies[0].topo, s.configs[0].layer, s.network,
                                                                nullptr},
                                                  moe::preset("s1"));
  CHECK(plain.find(fmt::format(",s1[chunks=1],{},", us_exact(p.forward))) != std::string::npos);
}

TEST_CASE("every schedule preset builds and runs a layer; the registry is every list of schedules", "[registry]") {
  const std::vector<std::string> names = moe::preset_names();
  REQUIRE(names.front() == "baseline");  // sweeps and `layer` take the first as the baseline
  CHECK(moe::schedule_choices({"auto"}, ", ", " or ") == "baseline, s1, s2 or auto");
  const Topology t = topo("parm-32gpu");
  moe::LayerSpec spec;
  spec.B = 1;
  spec.L = 256;
  const moe::LayerRun run{t, spec, "analytical", nullptr};
  for (const moe::SchedulePreset& p : moe::schedule_presets()) {
    CAPTURE(p.name);
    CHECK(moe::is_preset(p.name));
    const moe::ScheduleOptions o = moe::preset(std::string(p.name));
    CHECK(o.name == p.name);
    CHECK(o.parm == (p.name != "baseline"));
    CHECK(moe::run_schedule(run, o).total() > Time::zero());
  }
  CHECK_THROWS_WITH(moe::preset("s3"), Catch::Contains("expected baseline, s1, s2, auto or all"));
}

TEST_CASE("every network model runs; a lone transfer takes latency + bytes / bottleneck in each", "[registry][net]") {
  // DGX H100 x 2: GPU 0 to GPU 8 crosses the network. Expected from the route alone:
  // its latency plus ceil(bytes * 1e12 / bottleneck) ps, no other flow to share with.
  const Topology t = topo("dgx-h100", {"nodes=2"});
  const Route& route = t.route(0, 8);
  const std::uint64_t bytes = 100'000'000;
  const unsigned __int128 n = static_cast<unsigned __int128>(bytes) * 1'000'000'000'000ULL;
  const std::int64_t want = route.latency.count_ps() +
                            static_cast<std::int64_t>((n + route.bottleneck - 1) / route.bottleneck);
  std::set<std::string> names;
  for (const NetworkModelInfo& m : network_models()) {
    CAPTURE(m.name);
    CHECK(names.insert(std::string(m.name)).second);
    CHECK(is_network_model(m.name));
    CHECK(network_model_names(", ", " or ").find(std::string(m.name)) != std::string::npos);
    CHECK(make_network(std::string(m.name), t)->name() == m.name);
    TaskGraphBuilder b(9);
    b.add_stream_all("comm");
    Collective c;
    c.name = "c";
    c.op = CollOp::sendrecv;
    c.group = {0, 8};
    c.bytes = bytes;
    c.algo = "direct";
    b.add_collective_tasks(c, "comm", "c");
    const TaskGraph g = std::move(b).build();
    CHECK(simulate(g, t, SimOptions{std::string(m.name)}).makespan.count_ps() == want);
  }
  CHECK_THROWS_WITH(make_network("htsim", t), Catch::Contains("expected analytical or flow"));
}

TEST_CASE("every collective algorithm makes a plan for exactly the operations it declares", "[registry][coll]") {
  // DGX H100, one node and two (NVSwitch with NVLink SHARP): nvls runs inside one
  // node, nvls_tree across nodes, the rest on both.
  const std::vector<Topology> tops = {topo("dgx-h100"), topo("dgx-h100", {"nodes=2"})};
  std::set<std::string> names;
  for (const CollAlgorithm& a : collective_algorithms()) {
    CHECK(names.insert(std::string(a.name)).second);
    CHECK(find_algorithm(a.name) == &a);
    CHECK(algorithm_help().find(std::string(a.name)) != std::string::npos);
    for (CollOp op : {CollOp::alltoall, CollOp::alltoallv, CollOp::allgather, CollOp::reducescatter,
                      CollOp::allreduce, CollOp::sendrecv, CollOp::saa}) {
      CAPTURE(a.name, to_string(op));
      int planned = 0;
      for (const Topology& t : tops) {
        const int p = t.num_gpus();
        Collective c;
        c.name = "c";
        c.op = op;
        c.algo = std::string(a.name);
        c.bytes = 16 << 20;
        if (op == CollOp::sendrecv) {
          c.group = {0, p - 1};
        } else {
          for (int r = 0; r < p; ++r) c.group.push_back(r);
        }
        if (op == CollOp::alltoallv) {
          c.bytes = 0;
          c.matrix.assign(p, std::vector<std::uint64_t>(p, 1 << 16));
        }
        if (op == CollOp::saa) c.inner = 8;
        try {
          make_plan(c, t);
        } catch (const UserError&) {
          continue;
        }
        ++planned;
        // It runs: the collective alone takes time on the flow model.
        TaskGraphBuilder b(p);
        b.add_stream_all("comm");
        b.add_collective_tasks(c, "comm", "c");
        const TaskGraph g = std::move(b).build();
        CHECK(simulate(g, t, SimOptions{"flow"}).makespan > Time::zero());
      }
      CHECK((planned > 0) == a.implements(op));
    }
  }
  const Topology& t = tops[0];
  // The unknown-algorithm message lists every registered name.
  Collective c;
  c.name = "c";
  c.op = CollOp::allreduce;
  c.group = {0, 1};
  c.bytes = 1024;
  c.algo = "butterfly";
  try {
    make_plan(c, t);
    FAIL("an unknown algorithm was accepted");
  } catch (const UserError& e) {
    for (const std::string& n : algorithm_names()) CHECK(std::string(e.what()).find(n) != std::string::npos);
  }
}

TEST_CASE("the layer's a2a_algo choices are registered algorithms that run AlltoAllv", "[registry]") {
  const moe::LayerKey* k = moe::find_layer_key("a2a_algo");
  REQUIRE(k);
  for (std::string_view v : k->choices) {
    CAPTURE(v);
    const CollAlgorithm* a = find_algorithm(v);
    REQUIRE(a);
    CHECK(a->implements(CollOp::alltoallv));
  }
}

TEST_CASE("every GPU profile carries its per-GPU facts; topologies take them from it", "[registry][gpu]") {
  std::set<std::string> names;
  for (const GpuProfile& g : gpu_profiles()) {
    CAPTURE(g.name);
    CHECK(names.insert(g.name).second);
    CHECK(&gpu_profile(g.name) == &g);
    CHECK(gpu_profile_names().find(g.name) != std::string::npos);
    CHECK(!g.source.empty());
    CHECK(g.nvlink_efficiency > 0);
    CHECK(g.nvlink_efficiency <= 1);
    CHECK(g.compute_capability >= 0);
    CHECK((g.name == "cpu") == (g.compute_capability == 0));
    CHECK(g.memory_bytes > 0);
  }
  // NCCL's architecture class follows the compute capability (NCCL's compCapIndex):
  // H100 9.0 -> 2 (Hopper), A100 8.0 -> 1, the 2080 Ti 7.5 -> 0, B200 10.0 -> 3.
  CHECK(nccl_system({0, 1}, topo("dgx-h100")).arch == 2);
  CHECK(nccl_system({0, 1}, topo("dgx-a100")).arch == 1);
  CHECK(nccl_system({0, 1}, topo("pcie-8gpu")).arch == 0);
  CHECK(nccl_system({0, 1}, topo("nvl72")).arch == 3);
  // A topology without link_efficiency takes its GPU's NVLink efficiency: 20.6 / 25 on H100.
  for (const GpuProfile& g : gpu_profiles()) {
    const std::string text = "name: t\ngpu: " + g.name +
                             "\nnodes: 1\nnode:\n  gpus: 2\n  devices: [{name: sw, kind: nvswitch}]\n"
                             "  links: [{a: [gpu0, gpu1], b: sw, bandwidth: 100GBps, latency: 1us}]\n";
    const Topology t = parse_topology_text(text, "t.yaml");
    CHECK(t.efficiency().nvlink == g.nvlink_efficiency);
    // Every profile has a known NCCL architecture class (NVIDIA/nccl@5067397c src/graph/tuning.cc
    // L263-266: >= 100 Blackwell 3, >= 90 Hopper 2, >= 80 Ampere 1, else Volta 0), typed per GPU here
    // from its compute capability (Volta 7.0, Turing 7.5, Ampere 8.0/8.6, Ada 8.9, Hopper 9.0,
    // Blackwell 10.0); a profile missing from this table fails.
    const std::map<std::string, int> arch = {{"v100", 0}, {"rtx2080ti", 0}, {"cpu", 0},  {"a100", 1},
                                             {"rtx_a6000", 1}, {"l20", 1},    {"h100", 2}, {"h200", 2},
                                             {"h800", 2},      {"b200", 3}};
    REQUIRE(arch.count(g.name) == 1);
    CHECK(nccl_system({0, 1}, t).arch == arch.at(g.name));
  }
  // Memory capacities, read as GiB: 11 GiB = 11 * 2^30 = 11'811'160'064 bytes on the 2080 Ti,
  // 80 * 2^30 = 85'899'345'920 on H100 and H800, 32 * 2^30 = 34'359'738'368 on the V100.
  CHECK(gpu_profile("rtx2080ti").memory_bytes == 11'811'160'064ULL);
  CHECK(gpu_profile("h100").memory_bytes == 85'899'345'920ULL);
  CHECK(gpu_profile("h800").memory_bytes == 85'899'345'920ULL);
  CHECK(gpu_profile("v100").memory_bytes == 34'359'738'368ULL);
  // H800 is H100 compute; its NVLink cut lives in topologies, so the profile's NVLink efficiency is H100's.
  CHECK(gpu_profile("h800").sustained(DType::bf16) == gpu_profile("h100").sustained(DType::bf16));
  CHECK(gpu_profile("h800").nvlink_efficiency == gpu_profile("h100").nvlink_efficiency);
  // V100 has no BF16 tensor cores (the profile refuses bf16, as the 2080 Ti's does).
  CHECK_THROWS_AS(gpu_profile("v100").peak(DType::bf16), UserError);
  CHECK(gpu_profile("h100").nvlink_efficiency == 20.6 / 25.0);
  CHECK(gpu_profile("a100").nvlink_efficiency == 20.0 / 25.0);
  CHECK_THROWS_WITH(gpu_profile("tpu"), Catch::Contains("known profiles: h100, h200"));
}

TEST_CASE("every dispatcher runs; the registry is every list of them", "[registry][dispatch]") {
  // 16 ranks on 2 DGX H100, 32 experts, top-4, fp8 (H100 has FP8 tensor cores: peak_fp8 > 0).
  const Topology t = topo("dgx-h100", {"nodes=2"});
  Workspace ws;
  moe::DispatchSpec s;
  s.ranks = 16, s.tokens = 64, s.hidden = 1024, s.experts = 32, s.topk = 4;
  s.dispatch_dtype = moe::WireDtype::fp8;
  std::set<std::string> names;
  for (const moe::Dispatcher& d : moe::dispatchers()) {
    CAPTURE(d.name);
    CHECK(names.insert(std::string(d.name)).second);
    CHECK(&moe::find_dispatcher(d.name) == &d);
    CHECK(!d.help.empty());
    const moe::DispatchResult r = moe::simulate_dispatch(t, s, d, ws);
    CHECK(r.kernel == d.name);
    CHECK(r.dispatch > Time::zero());
    CHECK(r.combine > Time::zero());
    CHECK(r.wire_rdma_bytes > 0);  // 2 nodes: something crosses a NIC
  }
  try {
    moe::find_dispatcher("none");
    FAIL("accepted");
  } catch (const UserError& e) {
    for (const std::string& n : names) CHECK_THAT(e.what(), Catch::Contains(n));
  }
  // fp8 where the profile says so: H100, H200, H800, B200 (sourced peaks), not A100 or older.
  for (const GpuProfile& g : gpu_profiles())
    CHECK((g.peak_fp8 > 0) == (g.name == "h100" || g.name == "h200" || g.name == "h800" || g.name == "b200"));
}

TEST_CASE("every attention kind and pipeline schedule runs a model; --help-config lists them", "[registry][model]") {
  // 4 blocks, pp 2 on 2 nodes of DGX H100 (8 GPUs a stage), 8 sequences: 8 micro-batches (DualPipe
  // needs an even number, at least 2 x pp).
  const std::string base = "name: r\ntopology: topologies/dgx-h100.yaml\ntopology_set: {nodes: 2}\nlayers: 4\n"
                           "moe_every: 1\nheads: 4\nvocab: 500\nhidden: 128\nffn: 256\nseq: 64\nbatch: 1\nE: 8\n"
                           "k: 2\nmp: 1\ndtype: bf16\npp: 2\nglobal_batch: 64\nnetwork: analytical\n";
  const std::string help = help_config();
  for (const moe::AttentionKindEntry& a : moe::attention_kinds())
    for (const moe::PipelineScheduleEntry& p : moe::pipeline_schedules()) {
      CAPTURE(a.name, p.name);
      const moe::ModelSpec m = moe::parse_model_spec_text(
          base + fmt::format("attention: {}\npipeline_schedule: {}\n", a.name, p.name),
          std::string(PARMSIM_SOURCE_DIR) + "/r.yaml");
      CHECK(m.attention == a.kind);
      CHECK(m.pipeline_schedule == p.kind);
      const Topology full = load_topology(m.topology_file, {"nodes=2"});
      const Topology stage = load_topology(m.topology_file, {"nodes=2", moe::stage_nodes_override(m, full, 1)[0]});
      const Topology pair = load_topology(m.topology_file, {"nodes=2", moe::stage_nodes_override(m, full, 2)[0]});
      const auto res = moe::run_model(m, stage, nullptr, &pair);
      REQUIRE(res.size() == moe::preset_names().size());
      CHECK(res.front().pipeline.micro_batches == 8);
      CHECK(res.front().total() > Time::zero());
      CHECK(help.find(std::string(p.name) + ": ") != std::string::npos);
    }
  CHECK(help.find("attention kind: mha | mla") != std::string::npos);
}

TEST_CASE("help_config lists its sections in a fixed order, whatever the link order", "[registry]") {
  // The roots by name (calibration, graph, layer, measured, model, sweep, topology); within a
  // root, the order its translation unit registers them (calibration.cpp, graph_io.cpp,
  // sweep_spec.cpp, topology_io.cpp).
  const std::vector<std::string> expected = {
      "calibration",      "calibration.collectives[]", "calibration.kernels[]", "graph",
      "graph.buffers[]",  "graph.collectives[]",       "graph.tasks[]",         "layer",
      "measured",         "model",                     "sweep",                 "sweep.topologies[]",
      "sweep.cases[]",    "topology",                  "topology.node",         "topology.node.devices[]",
      "topology.node.links[]", "topology.fabric",      "topology.link_efficiency", "topology.nccl",
      "topology.compute"};
  std::vector<std::string> got;
  std::istringstream in(help_config());
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != ' ') got.push_back(line);
  CHECK(got == expected);
}
