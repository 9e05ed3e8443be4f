#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/compute/gemm_model.hpp"
#include "sim/validation/gemm_validation.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"

using namespace parmsim;

// Figures used below (sim/compute/gpu_profile.cpp): h100 has 132 SMs and sustains 797.51 TFLOP/s
// bf16, so one SM runs 797.51e12 / 132 = 6.041742e12 FLOP/s; HBM 3.35e12 B/s at 1355/1555 =
// 2.919132e12 B/s; the fixed floor is 3 us.

TEST_CASE("tiles and waves of a square GEMM on a 132-SM H100", "[gemm]") {
  const GpuProfile& h100 = gpu_profile("h100");
  // 4096^3 bf16. 256x128 tiles: 16 * 32 = 512 tiles -> ceil(512/132) = 4 waves of
  // 2*256*128*4096 = 268.4 MFLOP, i.e. 1073.741824 MFLOP per SM. 128x128 (1024 tiles, 8 waves),
  // 64x128 (2048, 16) and 64x64 (4096, 32) give the same 1073.74 MFLOP; the tie goes to the
  // larger tile. 1073741824 / 6.041742e12 = 177.7206 us, plus 3 us = 180.7206 us.
  const GemmPlan p = plan_gemm(h100, DType::bf16, {4096, 4096, 4096, 1});
  CHECK(p.tile.m == 256);
  CHECK(p.tile.n == 128);
  CHECK(p.tiles == 512);
  CHECK(p.waves == 4);
  CHECK(p.total.to_us() == Approx(180.7206).epsilon(1e-5));
  CHECK(compute_time(h100, OpKind::gemm, 2ULL * 4096 * 4096 * 4096, 0, DType::bf16, nullptr, {},
                     std::vector<std::int64_t>{4096, 4096, 4096}) == p.total);
}

TEST_CASE("wave quantization: 133 tiles need one more wave than 132", "[gemm]") {
  const GpuProfile& h100 = gpu_profile("h100");
  // 1536 x 1408 x 4096 bf16: 128x128 tiles give 12 * 11 = 132 tiles, one wave of
  // 2*128*128*4096 = 134217728 FLOPs per SM -> 22.21507 us (64x64: 528 tiles, 4 waves, the same
  // FLOPs; the tie goes to 128x128). Memory: 28.4 MB, 9.74 us, so compute decides.
  const GemmPlan a = plan_gemm(h100, DType::bf16, {1536, 1408, 4096, 1});
  CHECK(a.tile.m == 128);
  CHECK(a.tile.n == 128);
  CHECK(a.tiles == 132);
  CHECK(a.waves == 1);
  CHECK(a.compute.to_us() == Approx(22.21507).epsilon(1e-5));
  CHECK(a.total == Time::us(3) + a.compute);
  // 896 x 2432 x 4096: 128x128 tiles give 7 * 19 = 133 tiles, so 2 waves (268.4 MFLOP per SM,
  // 44.43 us). The selector does better with 64x64: 14 * 38 = 532 tiles, 5 waves of
  // 2*64*64*4096 -> 167772160 FLOPs per SM = 27.76884 us (64x128 and 128x64: 266 tiles, 3 waves of
  // 67.1 MFLOP = 201.3 MFLOP). Memory 10.83 us.
  const GemmPlan b = plan_gemm(h100, DType::bf16, {896, 2432, 4096, 1});
  CHECK(b.tile.m == 64);
  CHECK(b.tile.n == 64);
  CHECK(b.tiles == 532);
  CHECK(b.waves == 5);
  CHECK(b.compute.to_us() == Approx(27.76884).epsilon(1e-5));
  CHECK(b.total == Time::us(3) + b.compute);
}

TEST_CASE("a thin GEMM is bound by moving its operands through HBM", "[gemm]") {
  const GpuProfile& h100 = gpu_profile("h100");
  // 16 x 8192 x 8192 bf16: A 16*8192 + B 8192*8192 + C 16*8192 elements, 2 bytes each =
  // 134742016 B / 2.919132e12 B/s = 46.1582 us, plus 3 us = 49.1582 us. The math (64x64: 128
  // tiles, one wave of 2*64*64*8192 FLOPs) would take only 11.1075 us.
  const GemmPlan p = plan_gemm(h100, DType::bf16, {16, 8192, 8192, 1});
  CHECK(p.compute.to_us() == Approx(11.10753).epsilon(1e-5));
  CHECK(p.memory.to_us() == Approx(46.15825).epsilon(1e-5));
  CHECK(p.total.to_us() == Approx(49.15825).epsilon(1e-5));
}

TEST_CASE("a tiny GEMM costs the fixed floor", "[gemm]") {
  // 1x1x1: every tile shape gives one tile in one wave; the smallest, 64x64 of k = 1 (8192 FLOPs,
  // 0.001356 us), wins, on top of the 3 us floor.
  const Time t = gemm_time(gpu_profile("h100"), DType::bf16, {1, 1, 1, 1});
  CHECK(t.to_us() == Approx(3.001356).epsilon(1e-5));
  CHECK(t > Time::ns(3000));
}

TEST_CASE("a 1-20 MFLOP GEMM costs 2-15 us on every GPU profile", "[gemm]") {
  for (const GpuProfile& g : gpu_profiles()) {
    if (g.sm_count == 0) continue;  // the CPU profile has no tile model
    for (const DType d : {DType::fp32, DType::fp16, DType::bf16}) {
      if ((d == DType::fp32 ? g.peak_fp32 : d == DType::fp16 ? g.peak_fp16 : g.peak_bf16) <= 0) continue;
      for (const std::uint64_t f : {1'000'000ULL, 2'000'000ULL, 5'000'000ULL, 10'000'000ULL, 20'000'000ULL}) {
        INFO(g.name << " " << to_string(d) << " " << f << " FLOPs");
        const double cube = compute_time(g, OpKind::gemm, f, 0, d).to_us();  // no shape: a cube
        CHECK(cube >= 2.0);
        CHECK(cube <= 15.0);
        // The same FLOPs as 256 x 256 x k (16 tiles of 64x64). A single output tile with a long k
        // (128 x 128 x 610) would run on one SM: cuBLAS splits k there, which the model does not.
        const std::int64_t k = std::max<std::int64_t>(1, static_cast<std::int64_t>(f / (2 * 256 * 256)));
        const double flat = compute_time(g, OpKind::gemm, f, 0, d, nullptr, {}, std::vector<std::int64_t>{256, 256, k})
                                .to_us();
        CHECK(flat >= 2.0);
        CHECK(flat <= 15.0);
      }
    }
  }
}

TEST_CASE("a GEMM without a shape is costed as the cube of its FLOPs", "[gemm]") {
  // 2e6 FLOPs = 2 * 100^3.
  const GemmShape s = gemm_shape_or_cube({}, 2'000'000);
  CHECK(s.m == 100);
  CHECK(s.n == 100);
  CHECK(s.k == 100);
  CHECK(s.batch == 1);
  const std::vector<std::int64_t> four{8, 16, 32, 4};
  CHECK(gemm_shape_or_cube(four, 0).batch == 4);
  CHECK_THROWS_WITH(gemm_shape_or_cube(std::vector<std::int64_t>{8, 0, 32}, 0), Catch::Contains(">= 1"));
  CHECK_THROWS_WITH(gemm_shape_or_cube(std::vector<std::int64_t>{8, 16}, 0), Catch::Contains("3 entries"));
}

TEST_CASE("the CPU profile keeps its flat roofline", "[gemm]") {
  // 2e9 FLOPs at 2 GFLOP/s = 1 s, plus 1 us.
  const Time t = compute_time(gpu_profile("cpu"), OpKind::gemm, 2'000'000'000ULL, 0, DType::fp32);
  CHECK(t == Time::ms(1000) + Time::us(1));
}

TEST_CASE("the GEMM model reaches its accuracy target on the published measurements", "[gemm][validation]") {
  const auto rows = load_gemm_measurements(std::string(PARMSIM_SOURCE_DIR) + "/validation/gemm.csv");
  CHECK(rows.size() >= 25);
  const GemmValidation v = validate_gemms(rows);
  INFO("MAPE " << v.mape << "%");
  CHECK(v.mape <= 15.0);
  CHECK(v.mape_gpu.size() >= 5);
}

namespace {
std::string write_csv(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST_CASE("bad validation files are rejected with file and line", "[gemm][validation][errors]") {
  const std::string head = "gpu,dtype,m,n,k,batch,measured_us,measured_tflops,timing,notes,source\n";
  const std::string missing = write_csv("gemm-missing.csv", "gpu,dtype,m,n,k,measured_us,timing,source\n");
  CHECK_THROWS_WITH(load_gemm_measurements(missing), Catch::Contains("gemm-missing.csv:1: missing column 'batch'"));
  const std::string nan = write_csv("gemm-nan.csv", head + "h100,bf16,12x,64,64,1,5,,t,,s\n");
  CHECK_THROWS_WITH(load_gemm_measurements(nan),
                    Catch::Contains("gemm-nan.csv:2: column 'm': '12x' is not a positive integer"));
  const std::string gpu = write_csv("gemm-gpu.csv", head + "# comment\np100,fp16,64,64,64,1,5,,t,,s\n");
  CHECK_THROWS_WITH(load_gemm_measurements(gpu), Catch::Contains("gemm-gpu.csv:3: unknown GPU profile 'p100'"));
  const std::string both = write_csv("gemm-both.csv", head + "h100,bf16,64,64,64,1,5,700,t,,s\n");
  CHECK_THROWS_WITH(load_gemm_measurements(both), Catch::Contains("gemm-both.csv:2: give exactly one"));
  const std::string bf = write_csv("gemm-bf16.csv", head + "rtx2080ti,bf16,64,64,64,1,5,,t,,s\n");
  CHECK_THROWS_WITH(load_gemm_measurements(bf), Catch::Contains("gemm-bf16.csv:2: GPU profile 'rtx2080ti' does not support bf16"));
  // A quoted field may hold commas; TFLOP/s become microseconds: 2*1024^3 / 100e12 = 21.47 us.
  const std::string ok =
      write_csv("gemm-ok.csv", head + "h100,bf16,1024,1024,1024,,,100,\"a, b\",\"x, \"\"y\"\"\",s\n");
  const auto r = load_gemm_measurements(ok);
  REQUIRE(r.size() == 1);
  CHECK(r[0].timing == "a, b");
  CHECK(r[0].notes == "x, \"y\"");
  CHECK(r[0].shape.batch == 1);
  CHECK(r[0].measured_us == Approx(21.474836).epsilon(1e-6));
}

TEST_CASE("a GEMM of 2^62 or more 64 x 64 tiles is refused, not counted past 64 bits", "[gemm]") {
  // m = 2^37 and n = 2^36 rows and columns are 2^31 and 2^30 tiles of 64: 2^61
  // tiles, one batch, are counted, and the GEMM fails later, on its time (2^61
  // tiles / 132 SMs x 2 x 64^3 FLOPs at under 10^13 FLOP/s per SM is past 2^63
  // ps); two batches, or n = 2^37, make 2^62, which the tile model refuses
  // with the shape in the message (the counts would overflow).
  const GpuProfile& h100 = gpu_profile("h100");
  const std::int64_t m = 1LL << 37, n = 1LL << 36;
  CHECK_THROWS_WITH(plan_gemm(h100, DType::bf16, {m, n, 64, 1}), Catch::Contains("time overflow"));
  CHECK_THROWS_WITH(plan_gemm(h100, DType::bf16, {m, n, 64, 2}),
                    Catch::Contains("GEMM shape m=137438953472 n=68719476736 k=64 batch=2: 2^62 or more tiles"));
  CHECK_THROWS_WITH(plan_gemm(h100, DType::bf16, {m, 2 * n, 64, 1}), Catch::Contains("2^62 or more tiles"));
  const std::int64_t shape[4] = {m, 2 * n, 64, 1};
  CHECK_THROWS_WITH(model_compute_time(h100, OpKind::gemm, 1, 1, DType::bf16, shape),
                    Catch::Contains("2^62 or more tiles"));
}
