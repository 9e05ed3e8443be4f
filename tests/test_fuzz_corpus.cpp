// The loaders' text entry points (used by fuzz/) and the fuzz corpora.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/measured_trace.hpp"
#include "fuzz/loaders.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/model.hpp"
#include "sim/sweep/sweep_spec.hpp"

using namespace parmsim;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kRoot = PARMSIM_SOURCE_DIR;

}  // namespace

TEST_CASE("text entry points load what the file loaders load") {
  const std::string nccl = kRoot + "/tests/data/nccl-tests/all_reduce_perf.8gpu.txt";
  const auto a = calib::read_nccl_tests_text(nccl), b = calib::parse_nccl_tests_text(slurp(nccl), nccl);
  CHECK(a.op == "allreduce");
  CHECK(b.op == a.op);
  CHECK(b.points.size() == a.points.size());
  CHECK(b.points.back().t == a.points.back().t);
  const std::string js = kRoot + "/tests/data/nccl-tests/alltoall_perf.16gpu-2node.json";
  const auto c = calib::read_nccl_tests_json(js), d = calib::parse_nccl_tests_json(slurp(js), js);
  CHECK(d.points.size() == c.points.size());
  CHECK(d.hosts == c.hosts);

  const std::string spec = kRoot + "/experiments/paper-grid.yaml";
  const auto s1 = sweep::load_spec(spec), s2 = sweep::parse_spec_text(slurp(spec), spec);
  CHECK(s1.configs.size() == 1296);  // the README's grid
  CHECK(s2.configs.size() == s1.configs.size());
  CHECK(s2.input_hash == s1.input_hash);  // the same bytes and topology files hashed

  const std::string model = kRoot + "/experiments/bert-moe.yaml";
  const auto m1 = moe::load_model_spec(model), m2 = moe::parse_model_spec_text(slurp(model), model);
  CHECK(m2.topology_file == m1.topology_file);
  CHECK(m2.layers == m1.layers);

  const std::string cal = kRoot + "/fuzz/corpus/calibration/seed-calibration.yaml";
  const Calibration k1 = load_calibration(cal), k2 = parse_calibration_text(slurp(cal), cal);
  CHECK(k1.collectives.size() == 2);  // the seed's allreduce and alltoall
  CHECK(k2.collectives.size() == 2);
  CHECK(k2.kernels.size() == k1.kernels.size());
}

// Every committed corpus input (fuzz/corpus/TARGET/: seeds, seed-*, which must
// load; minimised libFuzzer runs; the inputs of past findings, regress-*) loads
// or is refused with a UserError: nothing else escapes. The sanitizer build (scripts/test.sh
// --sanitize) checks them for memory errors too.
TEST_CASE("fuzz corpora load or are refused with a UserError") {
  int files = 0;
  for (const auto& [name, load] : fuzz::loaders()) {
    const fs::path dir = fs::path(kRoot) / "fuzz" / "corpus" / name;
    REQUIRE(fs::is_directory(dir));
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string bytes = slurp(e.path());
      INFO(e.path().string());
      if (e.path().filename().string().rfind("seed-", 0) == 0) {
        CHECK_NOTHROW(load(bytes));  // hand-written or parmsim-written seeds are valid inputs
      } else {
        try {
          load(bytes);
        } catch (const UserError&) {
        }
      }
      ++files;
    }
  }
  CHECK(files >= 11);  // at least one input per target
}

// fuzz/corpus/*/regress-yaml-stray-comma-*: yaml-cpp 0.7's LoadAll returned an
// empty document at a ',' that starts no value, again and again, growing
// until the process ran out of memory (the fuzzers' first timeouts).
TEST_CASE("a ',' where a YAML value should start is an error at its line and column") {
  // ',' is the first byte: line 1, column 1.
  CHECK_THROWS_WITH(YamlReader::load_string(", x", "f.yaml"), "f.yaml:1:1: malformed YAML: ',' cannot start a value");
  // "--- ," : the ',' is the 5th character of line 2.
  CHECK_THROWS_WITH(YamlReader::load_string("a: 1\n--- ,\n", "f.yaml"),
                    "f.yaml:2:5: malformed YAML: ',' cannot start a value");
  // Still refused: a second document with a value (line 3), and still accepted: an empty one.
  CHECK_THROWS_WITH(YamlReader::load_string("a: 1\n---\nb: 2\n", "f.yaml"),
                    "f.yaml:3:1: a second YAML document (after '---'); a file holds one");
  CHECK(YamlReader::load_string("a: 1\n---\n", "f.yaml").at("a").as_int() == 1);
}

// compare's readers (cli/measured_trace.hpp): a sidecar key of the wrong type
// escaped as nlohmann::json::type_error; a NaN or negative time was taken as
// measured; a repeated row silently replaced the first.
TEST_CASE("execute trace sidecar and CSV: bad values are errors naming the file, line and key") {
  moe::LayerSpec s;
  s.B = 2, s.L = 8, s.M = 16, s.H = 32, s.E = 8, s.k = 2, s.f = 2.0, s.mp = 2;
  CHECK_THROWS_WITH(cli::graph_from_sidecar(R"({"layer": 5})", "t.csv.json", s),
                    "t.csv.json: key 'layer': expected a string");
  CHECK_THROWS_WITH(cli::graph_from_sidecar(R"({"gpus": "8"})", "t.csv.json", s),
                    "t.csv.json: key 'gpus': expected an integer in [1, 1024], got \"8\"");
  CHECK_THROWS_WITH(cli::graph_from_sidecar(R"({"gpus": 4096})", "t.csv.json", s),
                    "t.csv.json: key 'gpus': expected an integer in [1, 1024], got 4096");
  CHECK_THROWS_WITH(cli::graph_from_sidecar("[1]", "t.csv.json", s),
                    "t.csv.json: expected a JSON object (parmsim execute's sidecar)");
  const TaskGraph g = cli::graph_from_sidecar(R"({"schedule": "s2", "gpus": 8, "node_gpus": 8})", "t.csv.json", s);
  const std::string csv = slurp(kRoot + "/fuzz/corpus/trace_csv/seed-execute-s2-8gpu.csv");
  const cli::MeasuredRows rows = cli::read_trace_rows(csv, "t.csv", g);
  REQUIRE(rows.duration.size() == g.tasks().size());
  // Row 2 of the file (task 0): gate_cast#0@0 from 29461.437 to 29571.887 us, 110.45 us.
  CHECK(rows.start[0] == 29461.437);
  CHECK(rows.duration[0] == 110.45);
  const std::string head = csv.substr(0, csv.find('\n') + 1);
  const std::string row0 = "0,gate_cast#0@0,0,compute,compute,elementwise,29461.437000,29571.887000,110.450000,1024,0\n";
  REQUIRE(csv.find(row0) == head.size());
  const std::string rest = csv.substr(head.size() + row0.size());
  CHECK_THROWS_WITH(cli::read_trace_rows(head + row0 + row0 + rest, "t.csv", g), "t.csv:3: a second row for task 0");
  CHECK_THROWS_WITH(
      cli::read_trace_rows(head + "0,gate_cast#0@0,0,compute,compute,elementwise,5,4,nan,1024,0\n" + rest, "t.csv", g),
      "t.csv:2: start_us, end_us, duration_us: expected finite times with 0 <= start_us <= end_us and duration_us "
      ">= 0, got 5, 4, nan");
}

// fuzz/corpus/{graph_json,nccl_json}/regress-json-number-overflow: a number
// beyond a double escaped as nlohmann's out_of_range, which no loader caught.
TEST_CASE("a JSON number beyond a double is an error at its line") {
  // '1e999' starts at the 2nd character of line 1.
  CHECK_THROWS_WITH(YamlReader::load_string("[1e999]", "f.json"), "f.json:1:2: malformed JSON: number out of range: 1e999");
  // ... and on line 2 here.
  CHECK_THROWS_WITH(calib::parse_nccl_tests_json("{\n \"results\": [1e999]}", "all_reduce_perf.json"),
                    "all_reduce_perf.json:2: malformed JSON: [json.exception.out_of_range.406] number overflow "
                    "parsing '1e999'");
}
