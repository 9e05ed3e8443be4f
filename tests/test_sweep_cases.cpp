// A sweep's `cases`: named layers (a layer file's keys, then `set`) crossed with the grid,
// the grid's keys over a case's, and a `case` column in the results.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "sim/core/error.hpp"
#include "sim/sweep/runner.hpp"
#include "sim/sweep/sweep_spec.hpp"

using namespace parmsim;
using namespace parmsim::sweep;

namespace {
// A folder holding models/a.yaml (a layer file) for the spec's `layer:` to name.
struct Dir {
  std::filesystem::path p;
  Dir() {
    p = std::filesystem::temp_directory_path() / ("parmsim-cases-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p / "models");
    std::ofstream(p / "models" / "a.yaml") << "M: 2048\nH: 4096\nE: 8\nk: 2\ndtype: fp32\n";
  }
  ~Dir() { std::filesystem::remove_all(p); }
  std::string spec() const { return (p / "spec.yaml").string(); }
};

std::string spec_text(const std::string& cases) {
  return "name: c\ntopologies:\n  - {file: " + std::string(PARMSIM_SOURCE_DIR) +
         "/topologies/dgx-h100.yaml}\n" + cases + "grid:\n  mp: [4, 8]\n  dtype: [bf16]\n  B: [1]\n  L: [512]\n";
}
}  // namespace

TEST_CASE("sweep cases: each named layer crossed with the grid, the grid's keys over the case's", "[sweep]") {
  const Dir d;
  const Spec s = parse_spec_text(spec_text("cases:\n  - {label: from-file, layer: models/a.yaml}\n"
                                           "  - {label: inline, set: {M: 1024, H: 2048, E: 16, k: 4, dtype: fp16}}\n"),
                                 d.spec());
  // 2 cases x mp(2) = 4 configurations, case by case, the grid's rows within each.
  REQUIRE(s.configs.size() == 4);
  REQUIRE(s.cases.size() == 2);
  const int want_case[] = {0, 0, 1, 1}, want_mp[] = {4, 8, 4, 8};
  for (int i = 0; i < 4; ++i) {
    const Config& c = s.configs[i];
    CHECK(c.case_index == want_case[i]);
    CHECK(c.layer.mp == want_mp[i]);
    // The grid's dtype (bf16) over both cases' (fp32 from the file, fp16 inline).
    CHECK(c.layer.dtype == DType::bf16);
    CHECK(c.layer.B == 1);
  }
  CHECK(s.configs[0].layer.M == 2048);
  CHECK(s.configs[0].layer.H == 4096);
  CHECK(s.configs[0].layer.E == 8);
  CHECK(s.configs[2].layer.M == 1024);
  CHECK(s.configs[2].layer.E == 16);
  CHECK(s.configs[2].layer.k == 4);
  // The results name the case after the topology.
  CHECK(csv_header(s).rfind("config,topology,case,gpus,", 0) == 0);
  CHECK(run_config(s, s.configs[2]).rfind("2,dgx-h100,inline,8,", 0) == 0);
  // Without cases: no column, one pass of the grid.
  const Spec plain = parse_spec_text(spec_text(""), d.spec());
  CHECK(plain.configs.size() == 2);
  CHECK(plain.configs[0].case_index == -1);
  CHECK(csv_header(plain).rfind("config,topology,gpus,", 0) == 0);
}

TEST_CASE("sweep cases: a repeated label, an unknown key, a missing file, an empty list", "[sweep]") {
  const Dir d;
  CHECK_THROWS_WITH(parse_spec_text(spec_text("cases:\n  - {label: a, set: {M: 1024}}\n  - {label: a, set: {M: 512}}\n"),
                                    d.spec()),
                    Catch::Contains("cases[1].label") && Catch::Contains("already the label"));
  CHECK_THROWS_WITH(parse_spec_text(spec_text("cases:\n  - {label: a, set: {Mm: 1024}}\n"), d.spec()),
                    Catch::Contains("unknown layer key 'Mm'"));
  CHECK_THROWS_WITH(parse_spec_text(spec_text("cases:\n  - {label: a, layer: models/none.yaml}\n"), d.spec()),
                    Catch::Contains("none.yaml"));
  CHECK_THROWS_WITH(parse_spec_text(spec_text("cases: []\n"), d.spec()), Catch::Contains("at least one case"));
}
