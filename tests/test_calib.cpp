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
  CHECK_THROWS_AS(fit_alpha_beta({{1, 5}}), parmsim::UserError);
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

// ---- measured curves (issue 15, part 1) ----

TEST_CASE("log-log interpolation between measured points, by hand", "[calib]") {
  // (1, 10 s) and (100, 1000 s): x = 10 is halfway in log x, so t = exp((ln 10 + ln 1000) / 2) = 100.
  const std::vector<std::pair<double, double>> p = {{1, 10}, {100, 1000}};
  REQUIRE(interpolate_log_log(p, 10).has_value());
  CHECK(*interpolate_log_log(p, 10) == Approx(100));
  CHECK(*interpolate_log_log(p, 100) == 1000);         // a measured point: itself
  CHECK_FALSE(interpolate_log_log(p, 0.5).has_value());  // outside the range: none
  CHECK_FALSE(interpolate_log_log(p, 101).has_value());
}

TEST_CASE("leave-one-out: a power law is predicted exactly by the curve, not by the line", "[calib]") {
  // t = sqrt(x) at x = 1, 4, 16, 64 (t = 1, 2, 4, 8): a straight line in log-log, so the curve
  // through the others predicts an inner point exactly (16: halfway between 4 and 64 in log x,
  // exp((ln 2 + ln 8) / 2) = 4). The line t = a + b x through the others cannot follow sqrt.
  const std::vector<Point> pts = {{1, 1}, {4, 2}, {16, 4}, {64, 8}};
  const auto h = hold_out(pts, 16);
  REQUIRE(h.size() == 1);
  CHECK(h[0].curve == Approx(0).margin(1e-12));
  CHECK(std::abs(h[0].line) > 0.05);
  const auto loo = leave_one_out(pts);
  REQUIRE(loo.size() == 4);
  CHECK(loo[1].curve == Approx(0).margin(1e-12));  // x = 4: between 1 and 16, exp((0 + ln 4) / 2) = 2
  CHECK(loo[2].curve == Approx(0).margin(1e-12));
  // The end points fall outside the others' range: the curve uses its line there.
  CHECK(loo[0].curve == Approx(loo[0].line));
  CHECK(hold_out(pts, 5).empty());  // no measurement of that size
  // Zero-byte rows are dropped; a repeated size is refused, not averaged (it used to give 2 -> (3 + 5) / 2 = 4).
  const Curve c = fit_curve({{0, 1}, {2, 3}, {8, 10}});
  REQUIRE(c.points.size() == 2);
  CHECK(c.points[0].second == 3);
  CHECK_THROWS_WITH(fit_curve({{0, 1}, {2, 3}, {2, 5}, {8, 10}}),
                    Catch::Contains("size 2 appears twice (3 and 5 s)") && Catch::Contains("not averaged"));
}

TEST_CASE("8 x H100 AllReduce, 16 MiB held out: every imported size reproduced, the held-out one within 10%",
          "[calib][nccl]") {
  using namespace parmsim;
  // The published DGX H100 table (tests/data/nccl-tests/all_reduce_perf.dgx-h100-8gpu.txt, 8 B - 16 GiB).
  const NcclTable t = read_nccl_tests(sample("all_reduce_perf.dgx-h100-8gpu.txt"));
  REQUIRE(t.points.size() == 32);
  std::vector<Point> train;
  for (const Point& p : t.points)
    if (p.x != 16777216) train.push_back(p);
  const Curve curve = fit_curve(train);
  CalibratedCollective e;
  e.op = CollOp::allreduce;
  e.ranks = 8;
  e.alpha = Time::us(curve.line.alpha * 1e6);
  e.bandwidth = static_cast<std::uint64_t>(1 / curve.line.beta);
  e.points = curve.points;
  Calibration cal;
  cal.collectives.push_back(e);
  const Topology topo = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  auto simulated_us = [&](double bytes) {
    TaskGraphBuilder b(8);
    b.add_stream_all("comm");
    Collective c;
    c.name = "ar";
    c.op = CollOp::allreduce;
    c.bytes = static_cast<std::uint64_t>(bytes);
    for (int r = 0; r < 8; ++r) c.group.push_back(r);
    b.add_collective_tasks(c, "comm", "ar");
    return simulate(std::move(b).build(), topo, SimOptions{"flow", &cal}).makespan.to_us();
  };
  for (const Point& p : train) CHECK(std::abs(simulated_us(p.x) - p.t * 1e6) / (p.t * 1e6) < 0.03);
  // Held out: between 8 MiB (83.04 us) and 32 MiB (199.3 us), halfway in log size:
  // sqrt(83.04 x 199.3) = 128.65 us against 123.8 measured, +3.9%.
  CHECK(simulated_us(16777216) == Approx(std::sqrt(83.04 * 199.3)).epsilon(1e-4));
  CHECK(std::abs(simulated_us(16777216) - 123.8) / 123.8 < 0.10);
  // The alpha-beta line alone misses it by more than 25% (NCCL changes algorithm around it).
  CHECK(std::abs(curve.line.at(16777216) - 123.8e-6) / 123.8e-6 > 0.25);
}

TEST_CASE("calibration files: points_us is optional (older files load), checked when given", "[calib]") {
  using namespace parmsim;
  const Calibration old = load_calibration(write_temp("old.yaml", R"(collectives:
  - {op: allreduce, ranks: 8, link: intra, alpha: 10us, bandwidth: 100GBps}
)"));
  // No points: the line. 1 MB at 100 GB/s = 10 us, + 10 us.
  CHECK(old.collectives[0].time(1'000'000) == Time::us(20));
  const Calibration with = load_calibration(write_temp("new.yaml", R"(collectives:
  - {op: allreduce, ranks: 8, link: intra, alpha: 10us, bandwidth: 100GBps, points_us: [[1048576, 100], [1024, 10]]}
)"));
  // 32 KiB is halfway between 1 KiB and 1 MiB in log size: sqrt(10 x 100) = 31.62 us.
  CHECK(with.collectives[0].time(32768).to_us() == Approx(std::sqrt(1000.0)).epsilon(1e-6));
  // Beyond the points: the line. 2 MB: 10 us + 20 us.
  CHECK(with.collectives[0].time(2'000'000) == Time::us(30));
  CHECK_THROWS_WITH(load_calibration(write_temp("dup.yaml", R"(collectives:
  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, bandwidth: 1GBps, points_us: [[1024, 10], [1024, 11]]}
)")),
                    Catch::Contains("dup.yaml:2:") && Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(load_calibration(write_temp("neg.yaml", R"(collectives:
  - {op: allreduce, ranks: 8, link: intra, alpha: 1us, bandwidth: 1GBps, points_us: [[1024, -1], [2048, 11]]}
)")),
                    Catch::Contains("a positive size and a positive time"));
}

TEST_CASE("calibration files: an unknown key in a collective or kernel entry is refused, naming it", "[calib]") {
  using namespace parmsim;
  CHECK_THROWS_WITH(load_calibration(write_temp("typo-coll.yaml", R"(collectives:
  - {op: allreduce, ranks: 8, link: intra, alpha: 10us, bandwith: 100GBps}
)")),
                    Catch::Contains("typo-coll.yaml:2:") && Catch::Contains("bandwith"));
  CHECK_THROWS_WITH(load_calibration(write_temp("typo-kern.yaml", R"(kernels:
  - {name: expert_fc1, op: gemm, dtype: fp32, points_us: [[1, 1], [2, 2]], pionts: [[3, 3]]}
)")),
                    Catch::Contains("typo-kern.yaml:2:") && Catch::Contains("pionts"));
}

// ---- fitted machine parameters (issue 15, part 2) ----

#include "sim/fit/machine_fit.hpp"

TEST_CASE("topology overlays: nested or dotted keys, maps the file lacks are created", "[calib][topology]") {
  using namespace parmsim;
  const std::string topo = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  const auto ov = load_topology_overlay(
      write_temp("ov.yaml", "link_efficiency: {nvlink: 0.5}\nnccl.launch: 14us\n"));
  REQUIRE(ov.size() == 2);
  CHECK(ov[0] == "link_efficiency.nvlink=0.5");
  CHECK(ov[1] == "nccl.launch=14us");
  // dgx-h100.yaml has no `nccl` map: the overlay adds it.
  const Topology t = load_topology(topo, {}, ov);
  CHECK(t.hints().launch_us == Approx(14));
  // --topo-set comes after the overlay and wins.
  CHECK(load_topology(topo, {"link_efficiency.nvlink=0.9"}, ov).hints().launch_us == Approx(14));
  CHECK_THROWS_WITH(load_topology_overlay(write_temp("ovl.yaml", "nccl: {launch: [1, 2]}\n")),
                    Catch::Contains("ovl.yaml:1:") && Catch::Contains("an overlay sets values, not lists"));
  CHECK_THROWS_WITH(load_topology(topo, {}, {"link_efficiency.nvlnk=0.5"}), Catch::Contains("nvlnk"));
}

TEST_CASE("the machine fit recovers the parameters that made the measurements", "[calib]") {
  using namespace parmsim;
  // Measurements made by the model itself on a DGX H100 with NVLink at 0.70 of line rate and a
  // 10 us launch; fitted starting from the file's 0.824 and 0 us.
  const std::string file = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  auto load = [&](const std::vector<std::string>& o) { return load_topology(file, {}, o); };
  const Topology truth = load({"link_efficiency.nvlink=0.70", "nccl.launch=10us"});
  auto made = [&](CollOp op, int ranks) {
    std::vector<MeasuredCollective> ms;
    for (double b = 1024; b <= 8.0 * (1ULL << 30); b *= 4) {
      MeasuredCollective m{op, ranks, 1, b, 0, "made"};
      m.seconds = model_seconds(m, truth);
      ms.push_back(m);
    }
    return ms;
  };
  const auto ar = made(CollOp::allreduce, 4);
  const MachineFit f = fit_machine(load, ar);
  REQUIRE(f.params.size() == 2);  // nvlink and the launch; no PCIe or network on the path of one node
  CHECK(f.params[0].key == "link_efficiency.nvlink");
  CHECK(f.params[1].key == "nccl.launch");
  // The launch adds 10 us to every small size, which the model (at the fitted efficiency) otherwise matches:
  // the weighted mean of the residuals is 10 us.
  CHECK(f.params[1].value == Approx(10).margin(0.01));
  const Topology fitted = load(f.assignments());
  CHECK(model_error(ar, fitted).worst < 0.001);
  // Held out: AllGather and ReduceScatter over 8 ranks, made the same way, are now predicted too.
  for (CollOp op : {CollOp::allgather, CollOp::reducescatter}) {
    const auto held = made(op, 8);
    CHECK(model_error(held, load({})).mape > 0.05);
    CHECK(model_error(held, fitted).worst < 0.001);
  }
}

TEST_CASE("the machine fit's latencies when every small size crosses the network equally often", "[calib][nccl]") {
  using namespace parmsim;
  // Two DGX H100 and the published 2 x p5 AllReduce table (examples/, 16 ranks): at 8 B - 64 KiB NCCL's
  // choice is the tree LL, which crosses the network twice (2 log2(2) hops), so nccl.net_latency adds
  // exactly 2 us per us to each of those sizes and nccl.launch 1 us per us: the least squares' two
  // columns are proportional and its determinant is 0 up to rounding. Dividing by that rounding gave
  // a launch of 0 and a net latency of 64 us, 153 us at 8 B against 69 measured: the fit made the
  // table worse (MAPE 43% -> 56%). The singular case keeps one of the two exact directions instead.
  const std::string file = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  auto load = [&](const std::vector<std::string>& o) { return load_topology(file, {"nodes=2"}, o); };
  NcclTable t = read_nccl_tests(std::string(PARMSIM_SOURCE_DIR) + "/examples/all_reduce_perf.aws-p5-2node.txt");
  apply_given_group(t, 16, 2);
  const auto ms = measured_from(t);
  const Topology t0 = load({"nccl.net_latency=0us"}), t1 = load({"nccl.net_latency=1us"});
  for (const MeasuredCollective& m : ms)
    if (m.bytes <= 65536) CHECK((model_seconds(m, t1) - model_seconds(m, t0)) * 1e6 == Approx(2.0).margin(1e-9));
  const MachineFit f = fit_machine(load, ms);
  double launch = -1, net = -1;
  for (const FittedParam& p : f.params) {
    if (p.key == "nccl.launch") launch = p.value;
    if (p.key == "nccl.net_latency") net = p.value;
  }
  REQUIRE(launch >= 0);
  REQUIRE(net >= 0);
  // The measured 8 B - 64 KiB sit 40-105 us above the model; the weighted mean of (measured - model) / 2
  // is about 25 us, which the fit takes as the net latency (its launch 0).
  CHECK(net > 15);
  CHECK(net < 35);
  const Topology fitted = load(f.assignments());
  CHECK(model_error(ms, fitted).mape < model_error(ms, load({})).mape);
}

TEST_CASE("fitted from a 4 x H100 AllReduce table, AllGather and ReduceScatter on that machine improve",
          "[calib][nccl]") {
  using namespace parmsim;
  // Published tables of one machine (tests/data/nccl-tests/*.h100-4gpu.txt); the fit sees only the AllReduce.
  const std::string file = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  auto load = [&](const std::vector<std::string>& o) { return load_topology(file, {}, o); };
  const auto ar = measured_from(read_nccl_tests(sample("all_reduce_perf.h100-4gpu.txt")));
  const auto ag = measured_from(read_nccl_tests(sample("all_gather_perf.h100-4gpu.txt")));
  const auto rs = measured_from(read_nccl_tests(sample("reduce_scatter_perf.h100-4gpu.txt")));
  CHECK(ar.size() == 31);
  CHECK(ag.size() == 28);  // three 0-byte rows dropped
  const MachineFit f = fit_machine(load, ar);
  const Topology before = load({}), after = load(f.assignments());
  // The measured floors are 21-23 us where NCCL's model says 8.4 us: a launch of about 13 us.
  REQUIRE(f.params.back().key == "nccl.launch");
  CHECK(f.params.back().value > 8);
  CHECK(f.params.back().value < 18);
  for (const auto* held : {&ag, &rs}) {
    const ModelError b = model_error(*held, before), a = model_error(*held, after);
    CHECK(a.mape < 0.5 * b.mape);  // 41% -> 9% (AllGather), 38% -> 6% (ReduceScatter) when written
  }
}
