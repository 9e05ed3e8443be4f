// Calibration inputs that lie, runs that cannot fit, sweep grids counted without
// being expanded (issue 13). The whole-command side is tests/cli/hardening.sh.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "backend/verify.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/fit.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/fit/machine_fit.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/moe/layer.hpp"
#include "sim/sweep/sweep_spec.hpp"

using namespace parmsim;

namespace {
std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/parmsim_ch_" +
                           std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}
const std::string kSrc = PARMSIM_SOURCE_DIR;

// One nccl-tests run as text: the start line, the header, `ranks` rank lines, the column header, one data
// line per (size, time) and the three closing lines: 4 + ranks + 2 + rows + 3 lines.
std::string nccl_run(const std::string& program, int ranks, const std::vector<std::pair<long, std::string>>& rows) {
  std::string s = "# Collective test starting: " + program +
                  "\n# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20\n#\n"
                  "# Using devices\n";
  for (int r = 0; r < ranks; ++r)
    s += fmt::format("#  Rank {:2} Group  0 Pid {:6} on     node00 device {:2} [0x00] GPU\n", r, 1000 + r, r);
  s += "#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
       "busbw #wrong\n";
  for (const auto& [size, us] : rows)
    s += fmt::format("{:>12} {:>12}     float     sum      -1 {:>8}    0.10    0.18      0 {:>8}    0.10    0.18      0\n",
                     size, size / 4, us, us);
  return s + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.1\n#\n";
}
const std::vector<std::pair<long, std::string>> kRows = {{1024, "10.00"}, {2048, "11.00"}, {4096, "12.00"}};

// A 1-rank graph of one collective over ranks 0..n-1 (as `parmsim collective` builds it).
TaskGraph one_collective(CollOp op, int n, std::uint64_t bytes) {
  TaskGraphBuilder b(n);
  b.add_stream_all("comm");
  Collective c;
  c.name = "c";
  c.op = op;
  c.bytes = bytes;
  for (int r = 0; r < n; ++r) c.group.push_back(r);
  b.add_collective_tasks(c, "comm", "c");
  return std::move(b).build();
}
}  // namespace

TEST_CASE("nccl-tests program names map to parmsim's collectives, and only those", "[calib][hardening]") {
  CHECK(calib::nccl_op("allreduce") == "allreduce");
  CHECK(calib::nccl_op("all_reduce") == "allreduce");
  CHECK(calib::nccl_op("./build/all_gather_perf") == "allgather");
  CHECK(calib::nccl_op("reduce_scatter_perf_mpi") == "reducescatter");
  CHECK(calib::nccl_op("alltoall_perf") == "alltoall");
  CHECK(calib::nccl_op("sendrecv") == "sendrecv");
  for (const char* no : {"broadcast", "broadcast_perf", "reduce_perf", "gather_perf", "hypercube_perf", "", "saa"})
    CHECK(calib::nccl_op(no).empty());
}

TEST_CASE("nccl-tests -J output lists one device per process: ranks are processes x nthreads x ngpus", "[calib][hardening]") {
  // Two processes (two hosts) of 4 GPUs each: 2 x 1 x 4 = 8 ranks.
  const std::string j = temp_file("two_procs.json", R"({"args": ["./all_reduce_perf", "-g", "4"],
 "config": {"nthreads": 1, "ngpus": 4, "devices": [{"rank": 0, "hostname": "a"}, {"rank": 4, "hostname": "b"}]},
 "results": [{"size": 1024, "out_of_place": {"time": 10.0, "nwrong": 0.0}, "in_place": {"time": 10.0, "nwrong": null}}]})");
  const calib::NcclTable t = calib::read_nccl_tests(j);
  CHECK(t.op == "allreduce");
  CHECK(t.per_process == 4);
  CHECK(t.ranks == 8);
  CHECK(t.hosts == 2);
  // nwrong null is validation off (-c 0), accepted; 1 is refused naming the row.
  const std::string w = temp_file("wrong.json", R"({"args": ["all_reduce_perf"], "results": [
 {"size": 1024, "out_of_place": {"time": 10.0, "nwrong": 0}},
 {"size": 2048, "out_of_place": {"time": 11.0}, "in_place": {"time": 11.0, "nwrong": 1}}]})");
  CHECK_THROWS_WITH(calib::read_nccl_tests(w), Catch::Contains("results[1].in_place.nwrong is 1 at size 2048"));
  std::filesystem::remove(j);
  std::filesystem::remove(w);
}

TEST_CASE("a text table whose rank list nccl-tests cut short still counts whole processes", "[calib][hardening]") {
  // nccl-tests prints a process's rank lines into 2048 characters: 32 GPUs in one process show ranks 0-21 and "...".
  std::string text = "# Collective test starting: all_gather_perf\n# nThread 1 nGpus 32 minBytes 8 maxBytes 64\n";
  for (int r = 0; r < 22; ++r) text += "#  Rank " + std::to_string(r) + " Group  0 Pid 7 on hostA device  0 [0x00] GPU\n";
  text += "#  Rank 22 Group  0 Pid...\n";  // the cut line
  for (int s = 8; s <= 64; s *= 2)
    text += std::to_string(s) + " 2 float none -1 10.0 0.0 0.0 0 10.0 0.0 0.0 N/A\n";
  const calib::NcclTable t = calib::read_nccl_tests_text(temp_file("cut.txt", text));
  CHECK(t.per_process == 32);
  CHECK(t.ranks == 32);  // ceil(22 / 32) processes x 32
  CHECK(t.hosts == 1);
  CHECK(t.points.size() == 4);
}

TEST_CASE("the calibration loader names file:line:key for what calibrate never writes", "[calib][hardening]") {
  const std::string ok = "collectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: 15us, bandwidth: 240GBps}\n";
  CHECK(parse_calibration_text(ok, "c.yaml").collectives.size() == 1);
  CHECK_THROWS_WITH(parse_calibration_text(ok + "  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, bandwidth: 1GBps}\n",
                                      "c.yaml"),
                    Catch::Contains("c.yaml:3:5: key 'collectives[1]'") && Catch::Contains("first at line 2"));
  CHECK_THROWS_WITH(parse_calibration_text("collectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, "
                                      "bandwidth: 1GBps, hosts: 0}\n",
                                      "c.yaml"),
                    Catch::Contains("key 'collectives[0].hosts'"));
  CHECK_THROWS_WITH(parse_calibration_text("collectives:\n  - {op: broadcast, ranks: 8, link: intra, alpha: 1us, "
                                      "bandwidth: 1GBps}\n",
                                      "c.yaml"),
                    Catch::Contains("key 'collectives[0].op'"));
}

TEST_CASE("sweep counts: the product of the axes, and under skip_invalid the same as expanding", "[sweep][hardening]") {
  const std::string dir = kSrc + "/topologies/";
  // 2 topologies x B(2) x E(3) x mp(2) = 24 combinations; E=12 is impossible on both (8 and 32 GPUs).
  auto spec = [&](bool skip) {
    return temp_file(skip ? "skip.yaml" : "noskip.yaml",
                     "name: c\ntopologies:\n  - {file: " + dir + "pcie-8gpu.yaml}\n  - {file: " + dir +
                         "parm-32gpu.yaml}\ngrid: {B: [2, 4], L: [256], M: [512], H: [1024], E: [8, 12, 32], mp: [2, 4]}\n" +
                         (skip ? "skip_invalid: true\n" : ""));
  };
  sweep::LoadOptions count;
  count.count_only = true;
  const sweep::Spec c = sweep::load_spec(spec(false), "", count);
  CHECK(c.count == 24);  // 2 x 2 x 1 x 1 x 1 x 3 x 2
  CHECK(c.variants == 2);
  CHECK(c.configs.empty());
  const std::string skip_file = spec(true);
  const sweep::Spec cs = sweep::load_spec(skip_file, "", count);
  const sweep::Spec full = sweep::load_spec(skip_file);
  CHECK(cs.configs.empty());
  CHECK(cs.count == full.configs.size());
  CHECK(cs.skipped == full.skipped);
  CHECK(cs.count + cs.skipped == 24);
  CHECK(full.count == full.configs.size());
  // A run past the limit is refused before anything is expanded.
  sweep::LoadOptions tight;
  tight.max_configs = 10;
  tight.max_configs_why = "a test";
  CHECK_THROWS_WITH(sweep::load_spec(skip_file, "", tight),
                    Catch::Contains("the grid expands to 24 configurations") && Catch::Contains("10 fit"));
}

TEST_CASE("the memory estimate of a layer counts its inputs and weights by hand", "[executor][hardening]") {
  // The small layer B=2, L=8, M=16, H=32, E=8, mp=2 on 8 ranks: 4 EP groups of S = 16 tokens, 64 tokens in all.
  // x and dout 2 x 64 x 16, Wg 16 x 8, W1 and W2 2 x 8 x 16 x 32: (2048 + 128 + 8192) x 4 B = 41472 B.
  const exec::MemoryEstimate m = exec::estimate_memory(exec::small_layer(), {8, 8}, moe::preset("s1"));
  CHECK(m.data == 41472);
  CHECK(m.buffers > 0);
  CHECK(m.scratch > 0);
  CHECK(m.reference == 0);
  const exec::MemoryEstimate v = exec::estimate_memory(exec::small_layer(), {8, 8}, moe::preset("s1"), true);
  // The reference adds the gradients (as much as the data) and 2 activations of H per token: 41472 + 64 x 2 x 32 x 4.
  CHECK(v.reference == 41472 + 64 * 2 * 32 * 4 * 2);
}

TEST_CASE("the column header says where the time and #wrong are", "[calib][hardening]") {
  // Older nccl-tests: no root column, an "error" column (a largest deviation, not a count): time is column 4.
  const std::string old = temp_file("old_all_reduce_perf.txt",
                                    "#  Rank  0 Pid 1 on h device 0 [0x00] GPU\n#  Rank  1 Pid 1 on h device 1 [0x00] GPU\n"
                                    "#       size    count   type   redop    time   algbw   busbw  error     time   algbw   busbw  error\n"
                                    "        1024      256  float     sum   11.00    0.09    0.09  1e-06   11.50    0.09    0.09  2e-06\n"
                                    "        2048      512  float     sum   12.00    0.17    0.17  1e-06   12.50    0.16    0.16  2e-06\n");
  const calib::NcclTable o = calib::read_nccl_tests_text(old);
  REQUIRE(o.points.size() == 2);
  CHECK(o.points[0].t == Approx(11.00e-6));
  CHECK(o.points[1].t == Approx(12.00e-6));
  // -B (bitwise repeatability) adds a #bitdiff column after each #wrong: 15 columns, the time still column 5,
  // the #wrong counts columns 8 and 13 (a "time" 8 from the end would be busbw).
  const std::string bw = temp_file("bw_all_reduce_perf.txt",
                                   "#  size  count  type  redop  root  time  algbw  busbw  #wrong  #bitdiff  time  algbw  busbw  #wrong  #bitdiff\n"
                                   "   1024    256 float    sum    -1 20.00   0.05   0.09       0         7 21.00   0.05   0.09       0         7\n"
                                   "   2048    512 float    sum    -1 21.00   0.10   0.18       4         0 22.00   0.09   0.17       0         0\n");
  CHECK_THROWS_WITH(calib::read_nccl_tests_text(bw), Catch::Contains("bw_all_reduce_perf.txt:3: #wrong is 4 (out-of-place)"));
  std::filesystem::remove(old);
  std::filesystem::remove(bw);
}

// ---- issue 30, class J: calibration data that lie ---------------------------

TEST_CASE("several nccl-tests tables in one text file are read as several tables", "[calib][hardening]") {
  // Three runs one after another: 8-rank AllReduce (4 + 8 + 2 + 3 + 3 = 20 lines), 4-rank AllGather
  // (16 lines, from line 21), 2-rank AlltoAll (from line 37). Before, they were one 9-row allreduce table.
  const std::string text = nccl_run("./build/all_reduce_perf", 8, kRows) + nccl_run("all_gather_perf", 4, kRows) +
                           nccl_run("alltoall_perf", 2, kRows);
  const auto ts = calib::parse_nccl_tests_text_all(text, "runs.txt");
  REQUIRE(ts.size() == 3);
  CHECK(ts[0].op == "allreduce");
  CHECK(ts[1].op == "allgather");
  CHECK(ts[2].op == "alltoall");
  CHECK(ts[0].ranks == 8);
  CHECK(ts[1].ranks == 4);
  CHECK(ts[2].ranks == 2);
  CHECK(ts[0].line == 1);
  CHECK(ts[1].line == 21);
  CHECK(ts[2].line == 37);
  for (const auto& t : ts) {
    CHECK(t.points.size() == 3);
    CHECK(t.tables == 3);
    CHECK(t.hosts == 1);
  }
  CHECK(ts[1].name() == "runs.txt:21");
  // Table 2's first data line: 21 + 4 + 4 + 2 = line 31.
  CHECK(ts[1].row(0) == "runs.txt:31");
  // The single-table reader refuses it at the second table's first line.
  CHECK_THROWS_WITH(calib::parse_nccl_tests_text(text, "runs.txt"),
                    Catch::Contains("runs.txt:21: a second table starts here (3 tables in one file)"));
  // One table alone is still one table named by its file.
  const auto one = calib::parse_nccl_tests_text_all(nccl_run("all_reduce_perf", 2, kRows), "one.txt");
  REQUIRE(one.size() == 1);
  CHECK(one[0].name() == "one.txt");
  // A run that printed its header and no data, followed by another: refused at its first line.
  CHECK_THROWS_WITH(calib::parse_nccl_tests_text_all(nccl_run("all_reduce_perf", 2, {}) + nccl_run("alltoall_perf", 2, kRows),
                                                     "empty.txt"),
                    Catch::Contains("empty.txt:1: the table starting here has no data lines"));
  // An older output without start lines: the second "# nThread" header starts the second table; the op of
  // both comes from the file name.
  std::string old = nccl_run("x", 2, kRows) + nccl_run("x", 4, kRows);
  const std::string start = "# Collective test starting: x\n";
  for (std::size_t at; (at = old.find(start)) != std::string::npos;) old.erase(at, start.size());
  const auto o = calib::parse_nccl_tests_text_all(old, "all_reduce_perf.txt");
  REQUIRE(o.size() == 2);
  CHECK(o[0].op == "allreduce");
  CHECK(o[1].op == "allreduce");
  CHECK(o[0].ranks == 2);
  CHECK(o[1].ranks == 4);
  CHECK(o[1].line == 14);  // the first run without its start line: 3 + 2 + 2 + 3 + 3 = 13 lines
}

TEST_CASE("a size measured twice in one table is refused, not averaged", "[calib][hardening]") {
  // The 8-GPU table's 8192 B row (14.86 us) again at 99 us: it was averaged to 56.93 us.
  const std::string text = nccl_run("all_reduce_perf", 2, {{4096, "14.90"}, {8192, "14.86"}, {8192, "99.00"}});
  // Data lines start at line 4 + 2 + 2 + 1 = 9: the repeat is line 11, the first line 10.
  CHECK_THROWS_WITH(calib::parse_nccl_tests_text_all(text, "rep.txt"),
                    Catch::Contains("rep.txt:11: size 8192 appears twice in one table (first at line 10)") &&
                        Catch::Contains("not averaged"));
  // The same size in two tables is two measurements, not a repeat.
  CHECK(calib::parse_nccl_tests_text_all(nccl_run("all_reduce_perf", 2, kRows) + nccl_run("all_reduce_perf", 4, kRows),
                                         "two.txt")
            .size() == 2);
  // JSON: results[2] repeats results[0]'s size.
  const std::string j = R"({"args": ["all_reduce_perf"], "results": [
 {"size": 1024, "out_of_place": {"time": 10.0}}, {"size": 2048, "out_of_place": {"time": 11.0}},
 {"size": 1024, "out_of_place": {"time": 12.0}}]})";
  CHECK_THROWS_WITH(calib::parse_nccl_tests_json(j, "rep.json"),
                    Catch::Contains("rep.json: results[2]: size 1024 appears twice in one table (first at results[0])"));
  // Calibration files: a kernel table's x twice (collectives' sizes were refused already), naming both.
  CHECK_THROWS_WITH(parse_calibration_text("kernels:\n  - {name: k, op: gemm, points_us: [[1, 1], [2, 2], [1, 3]]}\n",
                                           "k.yaml"),
                    Catch::Contains("k.yaml:2:") && Catch::Contains("key 'kernels[0].points_us[2]'") &&
                        Catch::Contains("x 1 appears twice (first at points_us[0])"));
  CHECK_THROWS_WITH(parse_calibration_text("collectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, "
                                           "bandwidth: 1GBps, points_us: [[1024, 10], [2048, 11], [1024, 12]]}\n",
                                           "c.yaml"),
                    Catch::Contains("key 'collectives[0].points_us[2]'") &&
                        Catch::Contains("size 1024 appears twice (first at points_us[0])"));
}

TEST_CASE("a measured time that is not finite, not above 0 or above an hour is refused, naming the row",
          "[calib][hardening]") {
  // The bound is 3.6e9 us (an hour): exactly that is a measurement, one microsecond more is not.
  CHECK(calib::measured_time_error(3.6e9).empty());
  CHECK_FALSE(calib::measured_time_error(3.6e9 + 1).empty());
  CHECK(calib::parse_nccl_tests_text_all(nccl_run("all_reduce_perf", 2, {{1024, "10"}, {2048, "3600000000"}}), "h.txt")
            .at(0)
            .points.back()
            .t == 3600.0);
  // Data lines from line 9; the bad time is on line 10 (size 2048).
  for (const auto& [us, why] : std::vector<std::pair<std::string, std::string>>{{"1e300", "above 3.6e+09 us (an hour)"},
                                                                                {"3600000001", "above 3.6e+09 us"},
                                                                                {"nan", "not finite"},
                                                                                {"inf", "not finite"},
                                                                                {"-5", "not above 0"},
                                                                                {"0", "not above 0"}}) {
    CAPTURE(us);
    CHECK_THROWS_WITH(
        calib::parse_nccl_tests_text_all(nccl_run("all_reduce_perf", 2, {{1024, "10"}, {2048, us}}), "t.txt"),
        Catch::Contains("t.txt:10: expected an nccl-tests data line") && Catch::Contains("at size 2048: " + why));
  }
  CHECK_THROWS_WITH(calib::parse_nccl_tests_json(R"({"args": ["all_reduce_perf"], "results": [
 {"size": 1024, "out_of_place": {"time": 10.0}}, {"size": 2048, "out_of_place": {"time": 1e300}}]})",
                                                 "t.json"),
                    Catch::Contains("t.json: results[1]: expected a positive \"time\"") &&
                        Catch::Contains("at size 2048: above 3.6e+09 us"));
  CHECK_THROWS_WITH(calib::parse_nccl_tests_json(R"({"args": ["all_reduce_perf"], "results": [
 {"size": 1024, "out_of_place": {"time": -1.0}}]})",
                                                 "t.json"),
                    Catch::Contains("t.json: results[0]: expected a positive \"time\""));
  // Calibration files: points_us times and alpha.
  CHECK_THROWS_WITH(parse_calibration_text("collectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, "
                                           "bandwidth: 1GBps, points_us: [[1024, 10], [2048, 1e300]]}\n",
                                           "c.yaml"),
                    Catch::Contains("key 'collectives[0].points_us[1][1]'") && Catch::Contains("above 3.6e+09 us"));
  CHECK_THROWS_WITH(parse_calibration_text("kernels:\n  - {name: k, op: gemm, points_us: [[1, 1], [2, 4e9]]}\n", "k.yaml"),
                    Catch::Contains("key 'kernels[0].points_us[1][1]'") && Catch::Contains("above 3.6e+09 us"));
  CHECK_THROWS_WITH(parse_calibration_text("collectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: 7200000000us, "
                                           "bandwidth: 1GBps}\n",
                                           "c.yaml"),
                    Catch::Contains("key 'collectives[0].alpha'") && Catch::Contains("at most 3.6e+09 us (an hour)"));
}

TEST_CASE("a machine fit that ends at a bound of its search range says which", "[calib][hardening]") {
  const std::string file = kSrc + "/topologies/dgx-h100.yaml";
  auto load = [&](const std::vector<std::string>& o) { return load_topology(file, {}, o); };
  // Made by the model with NVLink at 0.10 of line rate, below the search range [0.30, 1.00], and a 10 us launch.
  const Topology truth = load({"link_efficiency.nvlink=0.10", "nccl.launch=10us"});
  std::vector<calib::MeasuredCollective> ms;
  for (double b = 1024; b <= 8.0 * (1ULL << 30); b *= 4) {
    calib::MeasuredCollective m{CollOp::allreduce, 4, 1, b, 0, "made", "made"};
    m.seconds = calib::model_seconds(m, truth);
    ms.push_back(m);
  }
  const calib::MachineFit f = calib::fit_machine(load, ms);
  REQUIRE(f.params.size() == 2);
  CHECK(f.params[0].key == "link_efficiency.nvlink");
  CHECK(f.params[0].value == Approx(0.30));
  CHECK(f.params[0].at_bound() == "lower");
  CHECK(f.params[0].range() == "[0.30, 1.00]");
  // The ends and the inside, by hand.
  calib::FittedParam eff{"link_efficiency.pcie", 1.0, false, 3, 0.30, 1.00};
  CHECK(eff.at_bound() == "upper");
  eff.value = 0.999;
  CHECK(eff.at_bound().empty());  // 0.001 inside: a step of the fine grid
  calib::FittedParam launch{"nccl.launch", 0.0, true, 3, 0.0, std::numeric_limits<double>::infinity()};
  CHECK(launch.at_bound() == "lower");
  launch.value = 0.001;
  CHECK(launch.at_bound().empty());
  CHECK(launch.range() == "[0 us, no upper bound)");
}

// ---- issue 30, class K: an overflow names what caused it ---------------------

TEST_CASE("a time overflow from a calibration entry blames the entry, not the graph", "[calib][hardening]") {
  // alpha 1 us + 16 GiB at 1 B/s = 1.7e10 s = 1.7e22 ps, past 2^63 ps (9.2e18).
  const Calibration cal = parse_calibration_text(
      "source: x\ncollectives:\n  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, bandwidth: 1Bps}\n", "slow.yaml");
  REQUIRE(cal.collectives.size() == 1);
  CHECK(cal.collectives[0].where == "slow.yaml:3 (collectives[0]: allreduce over 8 ranks, intra)");
  CHECK(cal.collectives[0].time(1000) == Time::us(1) + Time::ms(1000 * 1000));  // 1000 B at 1 B/s = 1000 s
  const Topology topo = load_topology(kSrc + "/topologies/dgx-h100.yaml");
  const TaskGraph g = one_collective(CollOp::allreduce, 8, 16ULL << 30);
  try {
    simulate(g, topo, SimOptions{"flow", &cal});
    FAIL("no overflow");
  } catch (const TimeOverflow& e) {
    const std::string m = e.what();
    CHECK(e.cause() == "calibration slow.yaml:3 (collectives[0]: allreduce over 8 ranks, intra)");
    CHECK_THAT(m, Catch::StartsWith("simulate: at t = 0.000 us, calibration slow.yaml:3 (collectives[0]: allreduce "
                                    "over 8 ranks, intra): 17179869184 B takes past 2^63 ps"));
    CHECK_THAT(m, !Catch::Contains("graph's bytes"));
  }
  // Without the calibration the same graph is modelled (tens of milliseconds): no overflow at all.
  CHECK(simulate(g, topo, SimOptions{"flow"}).makespan > Time::zero());
  // An overflow the engine cannot attribute keeps its type, so that a command can add its option or row.
  const TaskGraph huge = one_collective(CollOp::allreduce, 8, 1ULL << 62);
  CHECK_THROWS_AS(simulate(huge, topo, SimOptions{"flow"}), TimeOverflow);
}
