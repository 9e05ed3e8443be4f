// Dropless routing in the MoE layer under a load model (layer keys `load`, `seed`; docs/moe-costs.md).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/dispatch.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {
Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}
// A histogram file of `counts` in the temporary folder.
std::string histogram(const std::string& name, const std::string& counts) {
  const std::string path = (std::filesystem::temp_directory_path() / ("parmsim-test-" + name)).string();
  std::ofstream(path) << counts;
  return path;
}
}  // namespace

TEST_CASE("dropless: drawn counts", "[moe][dropless]") {
  LoadModel uni = parse_load_model("uniform", "load");
  // 3 sources of 64 tokens in 2 parts, E=8, k=2: every part's 32 tokens make 64 selections.
  const auto c = draw_expert_counts(uni, 7, 3, 64, 2, 8, 2);
  REQUIRE(c.size() == 3u * 2 * 8);
  for (int sp = 0; sp < 6; ++sp) CHECK(std::accumulate(c.begin() + sp * 8, c.begin() + sp * 8 + 8, 0ull) == 64);
  for (std::uint64_t v : c) CHECK(v <= 32);  // k distinct experts per token: at most one selection per token
  CHECK(draw_expert_counts(uni, 7, 3, 64, 2, 8, 2) == c);  // same seed, same draws
  CHECK(draw_expert_counts(uni, 8, 3, 64, 2, 8, 2) != c);
  // Two experts of weight, top-2: every token takes both.
  LoadModel two;
  two.kind = LoadModel::Kind::histogram;
  two.weights = {0, 5, 0, 1};
  two.text = "two";
  const auto t = draw_expert_counts(two, 1, 2, 10, 1, 4, 2);
  CHECK(t == std::vector<std::uint64_t>{0, 10, 0, 10, 0, 10, 0, 10});
  CHECK_THROWS_WITH(draw_expert_counts(two, 1, 2, 10, 1, 4, 3), Catch::Contains("fewer than top-k k=3"));
}

TEST_CASE("dropless: AlltoAllv sizes and imbalance from the drawn counts", "[moe][dropless]") {
  // 8 GPUs (h200-cluster, one node), mp=1, E=8, k=2, all weight on experts 0 and 1:
  // every token goes to both. Per block (the 8 ranks) each of the two experts takes
  // 8 * S = 8 * 2048 = 16384 rows, the others none: mean 2 * 16384 / 8 = 4096,
  // max/mean 4 per expert and per rank (one expert per rank).
  LayerSpec s;
  s.E = 8;
  s.mp = 1;
  s.dtype = DType::bf16;
  ScheduleKeys keys;
  apply_keys(&s, &keys, {"load=" + histogram("two-experts.txt", "1 1 0 0 0 0 0 0\n")}, "test");
  const Dims d = make_dims(s, 8, 8);
  const auto l = draw_layer_load(s, d);
  CHECK(l->max_expert_rows == 16384);
  CHECK(l->mean_expert_rows == 4096.0);
  CHECK(l->expert_imbalance == 4.0);
  CHECK(l->rank_imbalance == 4.0);
  // The forward graph: the dispatch AlltoAllv sends each peer's S = 2048 rows of M = 1024
  // bf16 elements (4 MiB) to ranks 0 and 1, nothing elsewhere; the combine sends them back.
  const ScheduleOptions o = preset("baseline");
  const auto fwd = forward_ops(s, d, o);
  const TaskGraph g = build_graph(fwd, s, d, o, GraphData::timing_only);
  std::vector<const Collective*> v;
  for (const Collective& c : g.collectives())
    if (c.op == CollOp::alltoallv) v.push_back(&c);
  REQUIRE(v.size() == 2);
  const std::uint64_t rows = 2048ull * 1024 * 2;
  for (int m = 0; m < 8; ++m) {
    CHECK(v[0]->matrix[m][0] == rows);
    CHECK(v[0]->matrix[m][1] == rows);
    CHECK(v[0]->matrix[m][2] == 0);
    CHECK(v[1]->matrix[0][m] == rows);  // the combine: the transpose
    CHECK(v[1]->matrix[5][m] == 0);
  }
  // Executors run the capacity layer only.
  CHECK_THROWS_WITH(build_graph(fwd, s, d, o, GraphData::bound), Catch::Contains("key 'load'"));
}

TEST_CASE("dropless: a Zipf load is slower than a uniform one; same seed, same times", "[moe][dropless]") {
  const Topology t = topo("h200-cluster", {"nodes=2"});
  LayerSpec s;
  s.E = 16;
  s.mp = 1;
  s.dtype = DType::bf16;
  ScheduleKeys keys;
  apply_keys(&s, &keys, {"load=uniform"}, "test");
  const ScheduleResult uni = run_schedule(LayerRun{t, s}, preset("s1"));
  apply_keys(&s, &keys, {"load=zipf:1.2"}, "test");
  const ScheduleResult zipf = run_schedule(LayerRun{t, s}, preset("s1"));
  const ScheduleResult again = run_schedule(LayerRun{t, s}, preset("s1"));
  CHECK(zipf.total() > uni.total());
  CHECK(again.forward == zipf.forward);
  CHECK(again.backward == zipf.backward);
  // The hottest rank's expert rows bound the layer: its experts' time grows at
  // least by the ratio of the rank imbalances less the GEMMs' fixed costs; here
  // the zipf draw's hottest rank takes about 4.8x the uniform one's rows.
  const Dims d = make_dims(s, 16, 8);
  const double zr = draw_layer_load(s, d)->rank_imbalance;
  CHECK(zr > 3.0);
  // Other parallel shapes run: Parm S1 and S2 with mp=2, and ep below P/mp.
  s.mp = 2;
  s.ep = 4;
  for (const char* name : {"baseline", "s1", "s2"}) {
    INFO(name);
    CHECK(run_schedule(LayerRun{t, s}, preset(name)).total() > Time::zero());
  }
}

TEST_CASE("dropless: bad load input names the key", "[moe][dropless]") {
  LayerSpec s;
  ScheduleKeys keys;
  CHECK_THROWS_WITH(apply_keys(&s, &keys, {"load=zipf:0"}, "--set"),
                    "--set: key 'load': zipf:0: the Zipf exponent must be a number above 0, got '0'");
  CHECK_THROWS_WITH(apply_keys(&s, &keys, {"load=zipf:-2"}, "--set"), Catch::Contains("key 'load'"));
  CHECK_THROWS_WITH(apply_keys(&s, &keys, {"seed=x"}, "--set"), Catch::Contains("key 'seed'"));
  apply_keys(&s, &keys, {"load=" + histogram("three.txt", "1,2,3\n")}, "--set");
  s.E = 32;
  CHECK_THROWS_WITH(make_dims(s, 32, 4), Catch::Contains("key 'load': histogram") &&
                                             Catch::Contains("has 3 counts, expected one per expert, E=32"));
  s.E = 3;
  s.k = 4;
  s.mp = 1;
  CHECK_THROWS_WITH(make_dims(s, 3, 3), "top-k k=4 exceeds the number of experts E=3");
  apply_keys(&s, &keys, {"load=capacity"}, "--set");
  CHECK(!s.load);
  CHECK(spec_string(s).find("load=") == std::string::npos);
}

TEST_CASE("dropless: a histogram named in a layer file or a model spec is relative to that file", "[moe][dropless]") {
  // A folder with a histogram and, beside it, a layer file and a model spec that name it by its
  // bare name; the working directory (the build folder under ctest) holds no such file.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "parmsim-test-relative-load";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "hist.txt") << "8 0 0 0 0 0 0 0\n";
  std::ofstream(dir / "layer.yaml") << "E: 8\nk: 1\nload: hist.txt\n";
  const std::string want = (dir / "hist.txt").lexically_normal().string();
  REQUIRE(!std::filesystem::exists("hist.txt"));

  const auto kv = layer_file_keys(YamlReader::load_file((dir / "layer.yaml").string()));
  REQUIRE(kv.size() == 3);
  CHECK(kv[2].first == "load=" + want);
  LayerSpec s;
  ScheduleKeys keys;
  for (const auto& [k, where] : kv) apply_keys(&s, &keys, {k}, where);
  REQUIRE(s.load);
  CHECK(s.load->weights == std::vector<double>{8, 0, 0, 0, 0, 0, 0, 0});

  // The model spec: the same rule as its topology (an absolute topology path, so only load is relative).
  std::ofstream(dir / "model.yaml") << "name: m\ntopology: " << PARMSIM_SOURCE_DIR
                                    << "/topologies/dgx-h100.yaml\nlayers: 2\nheads: 8\nvocab: 1000\nhidden: 256\n"
                                       "ffn: 128\nseq: 128\nbatch: 1\nmp: 1\nE: 8\nk: 1\nload: hist.txt\n";
  const ModelSpec m = load_model_spec((dir / "model.yaml").string());
  REQUIRE(m.layer.load);
  CHECK(m.layer.load->text == want);
  CHECK(m.layer.load->weights.size() == 8);

  // What is not a relative path stays as given.
  CHECK(file_relative_load("zipf:1.2", "/a/b.yaml") == "zipf:1.2");
  CHECK(file_relative_load("uniform", "/a/b.yaml") == "uniform");
  CHECK(file_relative_load("capacity", "/a/b.yaml") == "capacity");
  CHECK(file_relative_load("/x/h.txt", "/a/b.yaml") == "/x/h.txt");
  CHECK(file_relative_load("h.txt", "/a/b.yaml") == "/a/h.txt");
  std::filesystem::remove_all(dir);
}
