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
  const std::string dir = std::filesystem::temp_directory_path().string() + "/parmsim_calib_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/bad_all_reduce_perf.txt", unknown = dir + "/unknown.txt";
  {
    std::ofstream os(path);
    os << "# Collective test starting: all_reduce_perf\n"
          "        1024           256     float     sum      -1    10.00    0.10    0.18      0    10.10    0.10    0.18      0\n"
          "        2048           512     float     sum      -1    oops\n";
  }
  CHECK_THROWS_WITH(read_nccl_tests_text(path), Catch::Contains(path + ":3: expected an nccl-tests data line"));
  {
    std::ofstream os(unknown);
    os << "        1024           256     float     sum      -1    10.00    0.10    0.18      0    10.10    0.10    0.18      0\n";
  }
  CHECK_THROWS_WITH(read_nccl_tests_text(unknown), Catch::Contains("give --op"));
  CHECK(read_nccl_tests_text(unknown, "alltoall").op == "alltoall");
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH(read_nccl_tests_text("/nonexistent/x.txt"), Catch::Contains("cannot open"));
}
