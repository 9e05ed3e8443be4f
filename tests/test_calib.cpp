#include <catch2/catch.hpp>
#include <random>

#include "sim/calib/fit.hpp"
#include "sim/core/error.hpp"

using namespace parmsim::calib;

TEST_CASE("the fit recovers alpha and beta from noisy synthetic measurements", "[calib]") {
  // t = 8 us + n / 40 GB/s, sizes 1 KiB .. 1 GiB doubling, 0.5% multiplicative noise.
  const double alpha = 8e-6, beta = 1.0 / 40e9;
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 0.005);
  std::vector<Point> pts;
  for (double n = 1024; n <= 1073741824.0; n *= 2) pts.push_back({n, (alpha + beta * n) * (1 + noise(rng))});
  const AlphaBeta f = fit_alpha_beta(pts);
  CHECK(f.alpha == Approx(alpha).epsilon(0.01));
  CHECK(f.beta == Approx(beta).epsilon(0.01));
  // Held out: fitted on half the sizes, the other half is predicted within a few noise widths.
  const HeldOut h = fit_held_out(pts);
  CHECK(h.test.size() == pts.size() / 2);
  CHECK(h.mape < 0.01);
  CHECK(h.worst < 0.03);
}

TEST_CASE("an exact line is fitted exactly, with or without relative weights", "[calib]") {
  // t = 2 + 3x at x = 1, 2, 4: alpha 2, beta 3 whatever the weights.
  const std::vector<Point> pts = {{1, 5}, {2, 8}, {4, 14}};
  for (bool rel : {true, false}) {
    const AlphaBeta f = fit_alpha_beta(pts, rel);
    CHECK(f.alpha == Approx(2.0));
    CHECK(f.beta == Approx(3.0));
  }
}

TEST_CASE("a fit needs two distinct sizes", "[calib]") {
  CHECK_THROWS_AS(fit_alpha_beta({{1, 5}}), parmsim::ParmError);
  CHECK_THROWS_WITH(fit_alpha_beta({{4, 5}, {4, 6}}), Catch::Contains("two points with different sizes"));
}

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "sim/calib/nccl_tests.hpp"

namespace {
std::string sample(const std::string& name) {
  return std::string(PARMSIM_SOURCE_DIR) + "/tests/data/nccl-tests/" + name;
}
}  // namespace

TEST_CASE("nccl-tests text output is read: collective, ranks, hosts, sizes and times", "[calib][nccl]") {
  const NcclTable a = read_nccl_tests_text(sample("all_reduce_perf.8gpu.txt"));
  CHECK(a.op == "allreduce");
  CHECK(a.ranks == 8);
  CHECK(a.hosts == 1);
  REQUIRE(a.points.size() == 21);  // 1 KiB .. 1 GiB, doubling
  CHECK(a.points.front().x == 1024);
  CHECK(a.points.back().x == 1073741824.0);
  const NcclTable b = read_nccl_tests_text(sample("alltoall_perf.16gpu-2node.txt"));
  CHECK(b.op == "alltoall");
  CHECK(b.ranks == 16);
  CHECK(b.hosts == 2);
}

TEST_CASE("fits of the samples recover the figures they were made from", "[calib][nccl]") {
  // Made with alpha 15 us and 240 GB/s (AllReduce), 25 us and 40 GB/s (AlltoAll), +-1.5% ripple.
  const AlphaBeta a = fit_alpha_beta(read_nccl_tests_text(sample("all_reduce_perf.8gpu.txt")).points);
  CHECK(a.alpha == Approx(15e-6).epsilon(0.02));
  CHECK(1 / a.beta == Approx(240e9).epsilon(0.01));
  const NcclTable b = read_nccl_tests_text(sample("alltoall_perf.16gpu-2node.txt"));
  // Held-out sizes of 1 MiB and above are predicted within 10% (the target), here within 2%.
  const HeldOut h = fit_held_out(b.points);
  for (const Point& p : h.test)
    if (p.x >= 1048576) CHECK(std::abs(h.fit.at(p.x) - p.t) / p.t < 0.02);
}

TEST_CASE("malformed nccl-tests output is an error naming the line", "[calib][nccl]") {
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/parmsim_calib_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/bad_all_reduce_perf.txt", unknown = dir + "/unknown.txt";
  {
    std::ofstream os(path);
    os << "# Collective test starting: all_reduce_perf\n"
          "        1024           256     float     sum      -1    10.00    0.10    0.18      0    10.10    0.10    "
          "0.18      0\n"
          "        2048           512     float     sum      -1    oops\n";
  }
  CHECK_THROWS_WITH(read_nccl_tests_text(path), Catch::Contains(path + ":3: expected an nccl-tests data line"));
  {
    std::ofstream os(unknown);
    os << "        1024           256     float     sum      -1    10.00    0.10    0.18      0    10.10    0.10    "
          "0.18      0\n";
  }
  CHECK_THROWS_WITH(read_nccl_tests_text(unknown), Catch::Contains("give --op"));
  CHECK(read_nccl_tests_text(unknown, "alltoall").op == "alltoall");
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH(read_nccl_tests_text("/nonexistent/x.txt"), Catch::Contains("cannot open"));
}

#include "sim/calib/calibration.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/topo/topology_io.hpp"

namespace {
std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path =
      std::filesystem::temp_directory_path().string() + "/parmsim_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST_CASE("a calibrated collective takes its measured time in the simulator", "[calib]") {
  using namespace parmsim;
  const std::string cal_path = write_temp("cal.yaml", R"(collectives:
  - {op: allreduce, ranks: 8, link: intra, alpha: 15us, bandwidth: 240GBps}
)");
  const Calibration cal = load_calibration(cal_path);
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  TaskGraphBuilder b(8);
  b.add_stream_all("comm");
  Collective c;
  c.name = "ar";
  c.op = CollOp::allreduce;
  c.bytes = 240'000'000;  // 240 MB at 240 GB/s = 1 ms
  for (int r = 0; r < 8; ++r) c.group.push_back(r);
  b.add_collective_tasks(c, "comm", "ar");
  const TaskGraph g = std::move(b).build();
  for (const char* net : {"flow", "analytical"}) {
    SimOptions o{net, &cal};
    CHECK(simulate(g, t, o).makespan == Time::us(1015));  // 15 us + 1 ms, whatever the network model
    o.calibration = nullptr;
    CHECK(simulate(g, t, o).makespan != Time::us(1015));  // without it: the modelled ring
  }
  // An AllGather has no entry: still modelled.
  CHECK(cal.find(CollOp::allgather, 8, false) == nullptr);
  // Bad files are named.
  CHECK_THROWS_WITH(load_calibration(write_temp("bad.yaml",
                                                "collectives:\n  - {op: allreduce, ranks: 8, link: "
                                                "sideways, alpha: 1us, bandwidth: 1GBps}\n")),
                    Catch::Contains("bad.yaml:2:") && Catch::Contains("intra or inter"));
  std::filesystem::remove(cal_path);
}

TEST_CASE("with a calibration, the closed form still equals the simulation under analytical", "[calib][moe]") {
  using namespace parmsim;
  // 4 DGX H100 nodes, mp = 8: EP AlltoAlls over 4 ranks across nodes, ESP collectives over 8 in a node.
  const Calibration cal = load_calibration(write_temp("cal2.yaml", R"(collectives:
  - {op: alltoall, ranks: 4, link: inter, alpha: 30us, bandwidth: 20GBps}
  - {op: allgather, ranks: 8, link: intra, alpha: 12us, bandwidth: 300GBps}
  - {op: reducescatter, ranks: 8, link: intra, alpha: 12us, bandwidth: 280GBps}
)"));
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=4"});
  moe::LayerSpec s;
  s.mp = 8;
  const moe::LayerRun with{t, s, "analytical", &cal}, without{t, s, "analytical", nullptr};
  const moe::ScheduleResult r = moe::run_schedule(with, moe::preset("s1"));
  CHECK(std::abs(r.forward.to_seconds() - r.model_forward_s) < 1e-9);
  CHECK(std::abs(r.backward.to_seconds() - r.model_backward_s) < 1e-9);
  // The measured AlltoAll is slower than the modelled one here: the layer gets slower.
  CHECK(r.total() > moe::run_schedule(without, moe::preset("s1")).total());
}

TEST_CASE("nccl-tests -J JSON output is read like the text table", "[calib][nccl]") {
  const NcclTable j = read_nccl_tests(sample("alltoall_perf.16gpu-2node.json"));
  const NcclTable t = read_nccl_tests(sample("alltoall_perf.16gpu-2node.txt"));
  CHECK(j.op == "alltoall");  // from args[0]
  CHECK(j.ranks == 16);
  CHECK(j.hosts == 2);
  REQUIRE(j.points.size() == t.points.size());
  for (std::size_t i = 0; i < j.points.size(); ++i) {
    CHECK(j.points[i].x == t.points[i].x);
    CHECK(j.points[i].t == Approx(t.points[i].t).epsilon(1e-3));  // the text rounds to 0.01 us
  }
  const std::string bad = write_temp("bad.json", "{\n  \"results\": [\n    {\"size\": 1024,, }\n  ]\n}\n");
  CHECK_THROWS_WITH(read_nccl_tests(bad, "alltoall"), Catch::Contains("bad.json:3: malformed JSON"));
  const std::string no_time = write_temp("nt.json", R"({"results": [{"size": 1024, "out_of_place": {"alg_bw": 1}}]})");
  CHECK_THROWS_WITH(read_nccl_tests(no_time, "alltoall"), Catch::Contains("results[0]: expected a positive \"time\""));
  std::filesystem::remove(bad);
  std::filesystem::remove(no_time);
}
