// Comparing with measurements and what a calibration covers (issue 31): the
// measured CSV's checks, tables without rank lines, a layer's collectives as
// the coverage report and `calibrate --plan` see them, the per-size table.
// The whole-command side is tests/cli/measured.sh.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "cli/coverage.hpp"
#include "cli/measured.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/core/error.hpp"
#include "sim/fit/machine_fit.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/measured_csv.hpp"

using namespace parmsim;

namespace {

std::string topo_path(const std::string& name) {
  return std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml";
}

const std::string kHead = "name,kind,topology,layer,schedule,what,op,ranks,nodes,bytes,measured_us\n";

// Both directions of a layer's graphs under one schedule, as --plan builds them.
void add_layer(cli::CollectiveUses& u, const Topology& t, const moe::LayerSpec& s, const std::string& sched) {
  const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
  const moe::ScheduleOptions o = moe::preset(sched);
  const auto f = moe::forward_ops(s, d, o);
  const auto b = moe::backward_ops(f, s, d, o);
  u.add(moe::build_graph(f, s, d, o, moe::GraphData::timing_only), t, nullptr, sched);
  u.add(moe::build_backward_graph(f, b, s, d, o, moe::GraphData::timing_only), t, nullptr, sched);
}

}  // namespace

TEST_CASE("a measured CSV's rows: kinds, defaults, paths relative to the CSV", "[measured]") {
  const auto rows = parse_measured_csv(kHead +
                                           "a,layer,t.yaml,\"B=4,E=32\",s1,,,,,,1500\n"
                                           "# a comment\n"
                                           ",collective,,,,,allreduce,16,2,1MiB,120.5\n",
                                       "m.csv", "data", "default.yaml");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].name == "a");
  CHECK(rows[0].topology == "data/t.yaml");
  CHECK(rows[0].layer == "B=4,E=32");
  CHECK(rows[0].what == "total");
  CHECK(rows[1].name == "m.csv:4");  // no name: the row's place
  CHECK(rows[1].topology == "default.yaml");
  CHECK(rows[1].ranks == 16);
  CHECK(rows[1].nodes == 2);
  CHECK(rows[1].bytes == 1048576);
  CHECK(rows[1].measured_us == 120.5);
}

TEST_CASE("a measured CSV's bad rows are one error naming the row and the column", "[measured]") {
  auto refused = [](const std::string& body) {
    try {
      parse_measured_csv(kHead + body, "m.csv", "", "t.yaml");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused("a,layer,,B=4,s1,,,,,,-5\n") ==
        "m.csv:2: column 'measured_us': expected a measured time in microseconds, got -5: not above 0");
  CHECK_THAT(refused("a,layer,,B=4,s1,,,,,,nan\n"), Catch::StartsWith("m.csv:2: column 'measured_us'"));
  CHECK_THAT(refused("a,layer,,B=4,s1,,allreduce,,,,5\n"),
             Catch::StartsWith("m.csv:2: column 'op': a layer row does not read it"));
  CHECK_THAT(refused("a,collective,,B=4,,,allreduce,8,1,1MiB,5\n"),
             Catch::StartsWith("m.csv:2: column 'layer': a collective row does not read it"));
  CHECK_THAT(refused("a,layer,,B=4,,,,,,,5\n"), Catch::StartsWith("m.csv:2: column 'schedule' is empty"));
  CHECK_THAT(refused("a,kernel,,,,,,,,,5\n"),
             Catch::StartsWith("m.csv:2: column 'kind': expected layer or collective"));
  CHECK_THAT(refused("a,collective,,,,,allreduce,12,5,1MiB,5\n"),
             Catch::StartsWith("m.csv:2: column 'nodes': 12 ranks do not spread evenly over 5 nodes"));
  CHECK_THAT(refused("a,layer,,B=4,s1,sideways,,,,,5\n"), Catch::StartsWith("m.csv:2: column 'what'"));
  CHECK_THAT(refused("a,layer,,B=4,E=32,s1,,,,,,5\n"), Catch::Contains("m.csv:2: 12 fields, the header has 11"));
  // An unknown column: the header line and the column's name.
  CHECK_THROWS_WITH(parse_measured_csv("kind,measured_us,colour\nlayer,5,red\n", "m.csv", "", "t.yaml"),
                    Catch::StartsWith("m.csv:1: column 'colour': unknown column"));
  CHECK_THROWS_WITH(parse_measured_csv(kHead, "m.csv", "", "t.yaml"), Catch::Contains("no data rows"));
  CHECK_THROWS_WITH(parse_measured_csv(kHead + "a,layer,,B=4,s1,,,,,,5\n", "m.csv", "", ""),
                    Catch::Contains("m.csv:2: column 'topology' is empty and compare has no -t"));
}

TEST_CASE("a table without rank lines takes its group from --ranks/--nodes, and only such a table", "[measured][nccl]") {
  const std::string rows =
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
      "#wrong\n"
      "        1024           256     float     sum      -1    25.00    0.04    0.04      0    25.00    0.04    0.04   "
      "   0\n"
      "        2048           512     float     sum      -1    26.00    0.08    0.08      0    26.00    0.08    0.08   "
      "   0\n"
      "        4096          1024     float     sum      -1    27.00    0.15    0.15      0    27.00    0.15    0.15   "
      "   0\n";
  calib::NcclTable t = calib::parse_nccl_tests_text(rows, "all_reduce_perf.txt");
  REQUIRE(t.ranks == 0);
  CHECK(calib::apply_given_group(t, 0, 0).empty());  // nothing given, nothing assumed
  CHECK(t.ranks == 0);
  const std::string said = calib::apply_given_group(t, 16, 2);
  CHECK(said == "all_reduce_perf.txt: no rank lines; assumed 16 ranks on 2 node(s), 8 per node (--ranks 16 --nodes 2)");
  CHECK(t.ranks == 16);
  CHECK(t.hosts == 2);
  // srun --label's "0: " before every line reads the same table.
  std::string labelled;
  for (std::size_t s = 0, e; s < rows.size(); s = e + 1)
    e = rows.find('\n', s), labelled += "0: " + rows.substr(s, e - s + 1);
  const calib::NcclTable l = calib::parse_nccl_tests_text(labelled, "all_reduce_perf.txt");
  REQUIRE(l.points.size() == 3);
  CHECK(l.points[2].x == 4096);
  CHECK(l.points[2].t == 27e-6);
  CHECK(l.rows[0] == 2);
  // A table whose rank lines say otherwise is refused, naming both.
  const std::string ranked =
      "#  Rank  0 Group  0 Pid 1 on h0 device  0 [0x00] NVIDIA H100\n"
      "#  Rank  1 Group  0 Pid 2 on h0 device  1 [0x01] NVIDIA H100\n" +
      rows;
  calib::NcclTable r = calib::parse_nccl_tests_text(ranked, "all_reduce_perf.txt");
  CHECK_THROWS_WITH(calib::apply_given_group(r, 16, 2),
                    Catch::StartsWith("all_reduce_perf.txt: --ranks 16: the table lists 2 ranks"));
  CHECK(calib::apply_given_group(r, 2, 0).empty());  // the same group: nothing assumed
  calib::NcclTable u = calib::parse_nccl_tests_text(rows, "all_reduce_perf.txt");
  CHECK_THROWS_WITH(calib::apply_given_group(u, 16, 3), Catch::Contains("do not spread evenly over the nodes"));
}

// The default layer (B=4, L=512, M=1024, E=32, k=2, f=1.2, mp=4, fp32) on two DGX H100:
// P = 16, G = 4, N_EP = 16 / 4 = 4. An EP group is the ranks with one MP index, {0, 4, 8, 12}:
// two on each server. The baseline's AlltoAll moves E x T x M x 4 B with T = ceil(k f S / E)
// = ceil(2 x 1.2 x 2048 / 32) = 154: 32 x 154 x 1024 x 4 = 20,185,088 B; Parm's per S/G
// capacity T = 39 (S/G = 512 tokens): 32 x 39 x 1024 x 4 = 5,111,808 B.
TEST_CASE("a layer's collectives: the EP AlltoAll over N_EP ranks, two on each server", "[measured][coverage]") {
  const Topology t = load_topology(topo_path("dgx-h100"), {"nodes=2"});
  cli::CollectiveUses u;
  moe::LayerSpec s;
  for (const char* sched : {"baseline", "s1", "s2"}) add_layer(u, t, s, sched);
  const cli::CollectivePlacement a2a{CollOp::alltoall, 4, {2, 2}};
  REQUIRE(u.collectives.count(a2a) == 1);
  const cli::CollectiveUse& use = u.collectives.at(a2a);
  CHECK(use.min == 5'111'808);
  CHECK(use.max == 20'185'088);
  CHECK(use.labels == std::set<std::string>{"baseline", "s1", "s2"});
  CHECK(a2a.where() == "2 nodes x 2");
  // No collective spans all 16 GPUs but S2's fused AlltoAll + AllGather.
  for (const auto& [k, v] : u.collectives)
    if (k.ranks == 16) CHECK(k.op == CollOp::saa);
  // The plan: -b the largest power of two at most 5,111,808 (4 MiB), -e the smallest at least
  // 20,185,088 (32 MiB); one process per GPU, two on each of two hosts.
  const std::string plan = cli::nccl_tests_plan(u, DType::fp32);
  CHECK_THAT(plan,
             Catch::Contains("mpirun -np 4 -H HOST0:2,HOST1:2 ./build/alltoall_perf -b 4M -e 32M -f 2 -d float -g 1"));
  CHECK_THAT(plan, Catch::Contains("no nccl-tests program runs saa"));
  // A calibration of all 16 ranks times none of them, and the report says so.
  const Calibration cal = parse_calibration_text(
      "collectives:\n  - {op: allreduce, ranks: 16, link: inter, alpha: 20us, bandwidth: 200GBps}\n", "c.yaml");
  const std::string report = cli::coverage_report(u, cal);
  CHECK_THAT(report, Catch::Contains("0 of the 5 collective kinds"));
  CHECK_THAT(report, Catch::Contains("unused entry c.yaml:2 (collectives[0]: allreduce over 16 ranks, inter)"));
  // One for the AlltoAll over 4 ranks across nodes: 1 of 5, measured, every size within 1 MiB..64 MiB.
  const Calibration a2a_cal = parse_calibration_text(
      "collectives:\n  - {op: alltoall, ranks: 4, link: inter, alpha: 20us, bandwidth: 40GBps, "
      "points_us: [[1048576, 50], [67108864, 1700]]}\n",
      "a.yaml");
  cli::CollectiveUses v;
  for (const char* sched : {"baseline", "s1", "s2"}) {
    moe::LayerSpec l;
    const moe::Dims d = moe::make_dims(l, t.num_gpus(), t.gpus_per_node());
    const moe::ScheduleOptions o = moe::preset(sched);
    v.add(moe::build_graph(moe::forward_ops(l, d, o), l, d, o, moe::GraphData::timing_only), t, &a2a_cal, sched);
  }
  const std::string covered = cli::coverage_report(v, a2a_cal);
  CHECK_THAT(covered, Catch::Contains("1 of the 5 collective kinds"));
  CHECK_THAT(covered, Catch::Contains("every size within its measured 1MiB..64MiB"));
}

TEST_CASE("the per-size table's worst row is the worst row of the model's error", "[measured][nccl]") {
  const Topology t = load_topology(topo_path("dgx-h100"));
  const calib::NcclTable tab =
      calib::read_nccl_tests(std::string(PARMSIM_SOURCE_DIR) + "/tests/data/nccl-tests/all_reduce_perf.h100-4gpu.txt");
  const auto ms = calib::measured_from(tab);
  const calib::ModelError e = calib::model_error(ms, t);  // an independent pass over the same rows
  const std::string s = cli::nccl_size_table({{tab.name(), "fitted", ms}}, {{"simulated", &t}});
  CHECK_THAT(s,
             Catch::Contains(fmt::format("simulated: MAPE {:.1f}%, worst {:.1f}% at ", 100 * e.mape, 100 * e.worst)));
  // One line per size, and the table's header.
  CHECK_THAT(s, Catch::StartsWith(tab.name() + " (fitted): allreduce over 4 ranks on 1 host(s), 31 sizes"));
}
