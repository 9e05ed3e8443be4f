// parmsim validate moe: the loader's checks, the generated cluster, how each
// system is run, and the statistics.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "sim/core/error.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/moe_validation.hpp"

using namespace parmsim;

namespace {

const char* const kHeader =
    "source_id,system,parmsim_system,system_version,gpu,gpus,gpus_per_node,node,B,L,M,H,E,k,f,mp,ep,dtype,what,"
    "measured_ms,source,quality\n";

// A CSV of `rows` under the header, in a temporary file removed on destruction. Each row
// gets quality `ok` appended unless `quality_given` (the row then ends with its own).
struct Csv {
  std::string path;
  explicit Csv(const std::string& rows, bool quality_given = false) {
    path = (std::filesystem::temp_directory_path() /
            ("parmsim-moe-validation-" + std::to_string(std::hash<std::string>{}(rows)) + ".csv"))
               .string();
    std::string text;
    std::size_t at = 0;
    for (std::size_t nl; (nl = rows.find('\n', at)) != std::string::npos; at = nl + 1)
      text += rows.substr(at, nl - at) + (quality_given ? "" : ",ok") + "\n";
    std::ofstream(path) << kHeader << text;
  }
  ~Csv() { std::remove(path.c_str()); }
};

// The message load_moe_measurements throws for `rows`, or "" when it loads.
std::string load_error(const std::string& rows, bool quality_given = false) {
  const Csv c(rows, quality_given);
  try {
    load_moe_measurements(c.path);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

const std::string kH100Row = "s,Megatron,megatron-alltoall,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,1,8,bf16,";

}  // namespace

TEST_CASE("validate moe refuses a bad row with its file, line and column", "[moe][validation]") {
  using Catch::Matchers::Contains;
  // Line 2 is the first row (line 1 is the header).
  CHECK_THAT(load_error(kH100Row + "layer_fwd,4.3,src\n"), Catch::Matchers::Equals(std::string()));
  CHECK_THAT(load_error("s,X,no-such-system,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,1,8,bf16,layer_fwd,4.3,src\n"),
             Contains(":2: column 'parmsim_system': unknown system 'no-such-system'") && Contains("tutel"));
  CHECK_THAT(load_error("s,X,tutel,v,tpu9,1,1,single,1,4096,4096,14336,8,2,,1,1,bf16,layer_fwd,4.3,src\n"),
             Contains(":2: column 'gpu': unknown GPU 'tpu9'"));
  CHECK_THAT(load_error(kH100Row + "layer_all,4.3,src\n"), Contains(":2: column 'what'"));
  CHECK_THAT(load_error(kH100Row + "layer_fwd,,src\n"), Contains(":2: column 'measured_ms'"));
  CHECK_THAT(load_error(kH100Row + "layer_fwd,4.3,\n"), Contains(":2: column 'source' is empty"));
  // quality is ok or suspect, and nothing else (an empty one included).
  CHECK_THAT(load_error(kH100Row + "layer_fwd,4.3,src,suspect\n", true), Catch::Matchers::Equals(std::string()));
  CHECK_THAT(load_error(kH100Row + "layer_fwd,4.3,src,good\n", true),
             Contains(":2: column 'quality': expected ok or suspect, got 'good'"));
  CHECK_THAT(load_error(kH100Row + "layer_fwd,4.3,src,\n", true), Contains(":2: column 'quality'"));
  // mp x ep must be the row's GPUs: 2 x 8 = 16 on 8.
  CHECK_THAT(load_error("s,X,megatron-alltoall,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,2,8,bf16,layer_fwd,4.3,s\n"),
             Contains(":2: columns 'mp' x 'ep' = 2 x 8"));
  CHECK_THAT(load_error("s,X,megatron-alltoall,v,h100,8,8,single,1,4096,4096,14336,8,2,,1,8,bf16,layer_fwd,4.3,s\n"),
             Contains(":2: column 'node'"));
  // A layer key the registry refuses (k = 0) names the row.
  CHECK_THAT(load_error("s,X,megatron-alltoall,v,h100,8,8,nvswitch,1,4096,4096,14336,8,0,,1,8,bf16,layer_fwd,4.3,s\n"),
             Contains(":2") && Contains("k"));
  // A missing column names the file.
  {
    const std::string path = (std::filesystem::temp_directory_path() / "parmsim-moe-validation-short.csv").string();
    std::ofstream(path) << "source_id,system\na,b\n";
    CHECK_THROWS_WITH(load_moe_measurements(path), Contains("parmsim_system"));
    std::remove(path.c_str());
  }
}

TEST_CASE("validate moe runs a row on the cluster its columns describe", "[moe][validation]") {
  // One HGX H100 node written by hand: 8 GPUs on an NVSwitch at 900 / 2 = 450 GB/s
  // per direction (NVIDIA H100 datasheet: 900 GB/s bidirectional), PCIe Gen5 x16
  // (63 GB/s per direction) to the host. The generated topology must time the
  // layer the same; the system megatron-alltoall runs parmsim's baseline as
  // Megatron-Core's MoELayer (ds_moe=mcore) with index dispatch and an eager
  // host at 7 us per call, dropless (f empty) as f = 1.0.
  const std::string yaml =
      "name: hand\ngpu: h100\nnodes: 1\nnode:\n  gpus: 8\n  devices:\n"
      "    - {name: sw, kind: nvswitch}\n    - {name: p, kind: pcie_switch}\n    - {name: c, kind: host_bridge}\n"
      "  links:\n    - {a: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7], b: sw, bandwidth: 450GBps, latency: "
      "700ns}\n    - {a: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7], b: p, bandwidth: 63GBps, latency: 500ns}\n"
      "    - {a: p, b: c, bandwidth: 63GBps, latency: 500ns}\n";
  const Topology topo = parse_topology_text(yaml, "hand.yaml");
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  moe::apply_keys(&spec, &keys,
                  {"B=1", "L=4096", "M=4096", "H=14336", "E=8", "k=2", "f=1.0", "mp=1", "dtype=bf16", "ds_moe=mcore",
                   "dispatch=index", "host_op=7us"},
                  "test");
  const moe::ScheduleResult want = moe::run_schedule({topo, spec}, moe::schedule_options("baseline", keys));

  const Csv c(kH100Row + "layer_fwd,4.0,src\n" + kH100Row + "layer_bwd,8.0,src\n" + kH100Row +
              "layer_fwd_bwd,12.0,src\n");
  const MoeValidation v = validate_moe(load_moe_measurements(c.path));
  REQUIRE(v.rows.size() == 3);
  CHECK(v.rows[0].status == "modelled");
  CHECK(v.rows[0].predicted_ms == Approx(want.forward.to_seconds() * 1e3).epsilon(1e-12));
  CHECK(v.rows[1].predicted_ms == Approx(want.backward.to_seconds() * 1e3).epsilon(1e-12));
  CHECK(v.rows[2].predicted_ms == Approx(want.total().to_seconds() * 1e3).epsilon(1e-12));
  // The error and the MAPE from the predictions: 100 (p - m) / m, then the mean of |e|.
  double sum = 0;
  const double measured[] = {4.0, 8.0, 12.0};
  for (int i = 0; i < 3; ++i) {
    const double e = 100 * (v.rows[i].predicted_ms - measured[i]) / measured[i];
    CHECK(v.rows[i].error_pct == Approx(e));
    sum += std::abs(e);
  }
  CHECK(v.counted == 3);
  CHECK(v.mape == Approx(sum / 3));
  CHECK(v.mape_source_modelled.at("s") == Approx(sum / 3));
}

TEST_CASE("validate moe reports unmodelled systems and dtypes apart", "[moe][validation]") {
  const Csv c(kH100Row + "layer_fwd,4.0,src\n" +
              "s,DeepEP,megatron-deepep,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,1,8,bf16,layer_fwd,2.0,src\n" +
              "s,Comet,flux-comet,v,h100,8,8,nvswitch,1,1024,8192,8192,8,2,,8,1,bf16,layer_fwd,2.0,src\n" +
              "s,Megatron,megatron-alltoall,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,1,8,fp8,layer_fwd,2.0,src\n" +
              "s,Megatron,megatron-alltoall,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,1,8,fp4,layer_fwd,2.0,src\n");
  const MoeValidation v = validate_moe(load_moe_measurements(c.path));
  REQUIRE(v.rows.size() == 5);
  CHECK(v.rows[0].status == "modelled");
  // DeepEP runs as its nearest, the AlltoAll dispatcher: the same prediction, reported apart.
  CHECK(v.rows[1].status == "nearest");
  CHECK(v.rows[1].predicted_ms == v.rows[0].predicted_ms);
  // Comet's fused kernels run as the AllGather token dispatcher (no overlap), reported apart:
  // another layout (mp = 8, ep = 1), so another prediction.
  CHECK(v.rows[2].status == "nearest");
  CHECK(v.rows[2].predicted_ms > 0);
  CHECK(v.rows[2].ran.find("token_dispatcher=allgather") != std::string::npos);
  // An fp8 row runs as dtype=fp8 (docs/moe-costs.md, "FP8 layers"): the same layer as row 0 in
  // bf16, its expert GEMMs at the fp8 rate, so faster.
  CHECK(v.rows[3].status == "modelled");
  CHECK(v.rows[3].ran.find("dtype=fp8") != std::string::npos);
  CHECK(v.rows[3].predicted_ms > 0);
  CHECK(v.rows[3].predicted_ms < v.rows[0].predicted_ms);
  // A dtype parmsim has no model of is reported, not predicted.
  CHECK(v.rows[4].status == "not predicted");
  CHECK(v.rows[4].why == "dtype fp4 not modelled");
  CHECK(v.counted == 2);
  CHECK(v.mape == Approx((std::abs(v.rows[0].error_pct) + std::abs(v.rows[3].error_pct)) / 2));
  CHECK(v.counted_nearest == 2);
  CHECK(v.mape_nearest == Approx((std::abs(v.rows[1].error_pct) + std::abs(v.rows[2].error_pct)) / 2));
}

TEST_CASE("validation/moe.csv: at least 30 rows from 4 sources, every system known", "[moe][validation]") {
  const std::vector<MoeMeasurement> rows =
      load_moe_measurements(std::string(PARMSIM_SOURCE_DIR) + "/validation/moe.csv");
  std::set<std::string> sources;
  for (const MoeMeasurement& m : rows) sources.insert(m.source_id);
  CHECK(rows.size() >= 30);
  CHECK(sources.size() >= 4);
}

TEST_CASE("validate moe names a source whose time does not follow the work; suspect rows stay out of the headline",
          "[moe][validation]") {
  // Source "h" (a host-bound harness): B=1 then B=4, 4x the tokens, 10.0 and 12.0 ms (1.2x < 1.25x).
  // Source "w": B=1 then B=4 at 10.0 and 30.0 ms (3x: the time follows the work). Source "n":
  // B=1 and B=2 at 10 and 10.5 ms (2x the tokens is under the 4x the check needs).
  const std::string h = "h,Megatron,megatron-alltoall,v,h100,8,8,nvswitch,";
  const std::string w = "w,Megatron,megatron-alltoall,v,h100,8,8,nvswitch,";
  const std::string n = "n,Megatron,megatron-alltoall,v,h100,8,8,nvswitch,";
  const std::string keys = ",4096,4096,14336,8,2,,1,8,bf16,layer_fwd,";
  const std::string others = w + "1" + keys + "10.0,src,ok\n" + w + "4" + keys + "30.0,src,ok\n" + n + "1" + keys +
                             "10.0,src,ok\n" + n + "2" + keys + "10.5,src,ok\n";
  // h's rows marked ok: named, counted, and flagged as counted.
  {
    const Csv c(h + "1" + keys + "10.0,src,ok\n" + h + "4" + keys + "12.0,src,ok\n" + others, true);
    const MoeValidation v = validate_moe(load_moe_measurements(c.path));
    REQUIRE(v.flat_sources.size() == 1);
    const FlatSource& f = v.flat_sources.at("h");
    CHECK(f.line_small == 2);
    CHECK(f.line_large == 3);
    CHECK(f.tokens_ratio == 4.0);
    CHECK(f.time_ratio == Approx(1.2));
    CHECK(v.flat_ok_sources == std::vector<std::string>{"h"});
    CHECK(v.counted == 6);
    CHECK(v.counted_with_suspect == 6);
    CHECK(v.mape_with_suspect == v.mape);
  }
  // h's rows marked suspect: still found flat (the check reads every row), no longer flagged;
  // the headline over w's and n's four rows, the MAPE with suspect rows over all six, h apart.
  {
    const Csv c(h + "1" + keys + "10.0,src,suspect\n" + h + "4" + keys + "12.0,src,suspect\n" + others, true);
    const MoeValidation v = validate_moe(load_moe_measurements(c.path));
    CHECK(v.flat_sources.count("h") == 1);
    CHECK(v.flat_ok_sources.empty());
    CHECK(v.suspect_rows == 2);
    REQUIRE(v.rows.size() == 6);
    CHECK(v.rows[0].status == "modelled");  // predicted all the same, for --all
    CHECK(v.rows[0].predicted_ms > 0);
    double ok = 0, bad = 0;
    for (int i = 0; i < 2; ++i) bad += std::abs(v.rows[i].error_pct);
    for (int i = 2; i < 6; ++i) ok += std::abs(v.rows[i].error_pct);
    CHECK(v.counted == 4);
    CHECK(v.mape == Approx(ok / 4));
    CHECK(v.counted_with_suspect == 6);
    CHECK(v.mape_with_suspect == Approx((ok + bad) / 6));
    CHECK(v.mape_source_modelled.count("h") == 0);
    CHECK(v.mape_source.count("h") == 0);
    CHECK(v.mape_source_suspect.at("h") == Approx(bad / 2));
    CHECK(v.count_system.at("megatron-alltoall") == 4);
  }
}

TEST_CASE("validation/moe.csv: every source whose time does not follow the work is marked suspect",
          "[moe][validation]") {
  const MoeValidation v =
      validate_moe(load_moe_measurements(std::string(PARMSIM_SOURCE_DIR) + "/validation/moe.csv"));
  CHECK(!v.flat_sources.empty());  // the check finds the marin harness's rows
  CHECK(v.flat_ok_sources.empty());
}

TEST_CASE("validate moe: the nearest systems' MAPE, with and without their suspect rows", "[moe][validation]") {
  // Two DeepEP rows run as their nearest (the AlltoAll dispatcher), one ok and one suspect:
  // the nearest MAPE counts the ok one, the second figure both.
  const std::string row = "s,DeepEP,megatron-deepep,v,h100,8,8,nvswitch,1,4096,4096,14336,8,2,,1,8,bf16,layer_fwd,";
  const Csv c(row + "2.0,src,ok\n" + row + "8.0,src,suspect\n", true);
  const MoeValidation v = validate_moe(load_moe_measurements(c.path));
  REQUIRE(v.rows.size() == 2);
  const double e0 = std::abs(v.rows[0].error_pct), e1 = std::abs(v.rows[1].error_pct);
  CHECK(e0 != e1);
  CHECK(v.counted_nearest == 1);
  CHECK(v.mape_nearest == Approx(e0));
  CHECK(v.counted_nearest_with_suspect == 2);
  CHECK(v.mape_nearest_with_suspect == Approx((e0 + e1) / 2));
  CHECK(v.counted == 0);
}
