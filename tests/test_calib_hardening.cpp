// Calibration inputs that lie, runs that cannot fit, sweep grids counted without
// being expanded (issue 13). The whole-command side is tests/cli/hardening.sh.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "backend/verify.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/core/error.hpp"
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
