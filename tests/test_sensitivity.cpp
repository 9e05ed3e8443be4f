// layer --sensitivity: each input's ends run as the layer would run with that
// value given by hand, the flips follow from the picks, and bad ranges are refused.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "sim/core/error.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/sensitivity.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

const std::string kTopo = std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml";

Topology load(const std::vector<std::string>& extra) { return load_topology(kTopo, {}, extra); }

// baseline / the schedule auto picks, both simulated, with `kv` given as --set would.
double speedup_by_hand(const Topology& t, const std::vector<std::string>& kv, std::string* pick) {
  LayerSpec spec;
  ScheduleKeys keys;
  apply_keys(&spec, &keys, kv, "test");
  const AlphaBeta ab = alpha_beta_from_topology(t);
  *pick = auto_choice(spec, make_dims(spec, t.num_gpus(), t.gpus_per_node()), ab, t.gpu());
  const LayerRun run{t, spec, "flow", nullptr, &ab};
  return run_schedule(run, schedule_options("baseline", keys)).total().to_seconds() /
         run_schedule(run, schedule_options(*pick, keys)).total().to_seconds();
}

const SensitivityRow& row(const Sensitivity& s, const std::string& p) {
  for (const SensitivityRow& r : s.rows)
    if (r.input.parameter == p) return r;
  FAIL("no row " << p);
  throw;
}

}  // namespace

TEST_CASE("sensitivity: each end is the layer run with that value given by hand", "[moe][sensitivity]") {
  const Topology t = load({});
  const std::vector<SensitivityInput> inputs = default_sensitivity_inputs(t);
  const Sensitivity s = layer_sensitivity(load, LayerSpec{}, ScheduleKeys{}, inputs, "flow");
  std::string pick;
  CHECK(s.nominal.speedup == Approx(speedup_by_hand(t, {}, &pick)).epsilon(1e-12));
  CHECK(s.nominal.choice == pick);
  // A layer key: the low end is the layer as given, the high end saa=pipelined.
  const SensitivityRow& saa = row(s, "saa");
  CHECK(saa.low.speedup == s.nominal.speedup);
  CHECK(saa.high.speedup == Approx(speedup_by_hand(t, {"saa=pipelined"}, &pick)).epsilon(1e-12));
  CHECK(saa.high.choice == pick);
  CHECK(saa.flips == (saa.low.choice != s.nominal.choice || saa.high.choice != s.nominal.choice));
  // A topology key: the ends load the topology with the key set.
  const SensitivityRow& pcie = row(s, "link_efficiency.pcie");
  // parm-32gpu gives measured figures at efficiency 1.0: the range is NCCL's 0.75 to 1.
  CHECK(pcie.input.low == "0.75");
  CHECK(pcie.input.high == "1");
  CHECK(pcie.low.speedup ==
        Approx(speedup_by_hand(load({"link_efficiency.pcie=0.75"}), {}, &pick)).epsilon(1e-12));
  CHECK(pcie.low.choice == pick);
  // GeForce cards without NVLink: peer-to-peer varied (off as shipped, on at the high end).
  const SensitivityRow& p2p = row(s, "p2p");
  CHECK(p2p.high.speedup == Approx(speedup_by_hand(load({"p2p=true"}), {}, &pick)).epsilon(1e-12));
  CHECK(p2p.low.speedup == s.nominal.speedup);
  // 8 nodes: the network range is 1 - 12.2% = 0.878 to line rate; one server has none.
  CHECK(row(s, "link_efficiency.network").input.low == "0.878");
  for (const SensitivityInput& in : default_sensitivity_inputs(load_topology(kTopo, {"nodes=1"})))
    CHECK(in.parameter != "link_efficiency.network");
  // The GPU's compute: validate gemm's 13.6% below the profile; above it at most 1 on the
  // RTX 2080 Ti, whose fp16 maximum (58.58 TFLOP/s) is already above its derived peak (53.8).
  const SensitivityRow& gemm = row(s, "compute.gemm_efficiency");
  CHECK(gemm.input.low == "0.864");
  CHECK(gemm.input.high == "1");
  CHECK(gemm.low.speedup ==
        Approx(speedup_by_hand(load({"compute.gemm_efficiency=0.864"}), {}, &pick)).epsilon(1e-12));
  const SensitivityRow& floor = row(s, "compute.launch");
  CHECK(floor.high.speedup == Approx(speedup_by_hand(load({"compute.launch=4.2us"}), {}, &pick)).epsilon(1e-12));
  // On H100 the bound is bf16's 989 / 797.51 = 1.24 > 1.136: the range is 13.6% either side.
  const std::string dgx = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  for (const SensitivityInput& in : default_sensitivity_inputs(load_topology(dgx)))
    if (in.parameter == "compute.gemm_efficiency") CHECK(in.high == "1.136");
}

TEST_CASE("a topology's compute keys scale the GEMM throughput and replace the kernel floor", "[moe][sensitivity]") {
  const std::string dgx = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  const Topology plain = load_topology(dgx), half = load_topology(dgx, {"compute.gemm_efficiency=0.5"}),
                 slow = load_topology(dgx, {"compute.launch=10us"});
  // An 8192^3 bf16 GEMM is compute-bound on H100 (2 * 8192^3 = 1.1e12 FLOP against 3 * 8192^2
  // * 2 B = 403 MB of HBM traffic: ~1.4 ms of math, ~0.14 ms of memory), so halving the per-SM
  // rate doubles the part above the 3 us floor (to a picosecond of rounding each way).
  const std::int64_t shape[3] = {8192, 8192, 8192};
  const std::uint64_t flops = 2ull * 8192 * 8192 * 8192;
  const Time full = compute_time(plain.gpu(), OpKind::gemm, flops, 0, DType::bf16, nullptr, {}, shape);
  const Time halved = compute_time(half.gpu(), OpKind::gemm, flops, 0, DType::bf16, nullptr, {}, shape);
  const std::int64_t above_full = (full - Time::us(3)).count_ps(), above_half = (halved - Time::us(3)).count_ps();
  CHECK(std::abs(above_half - 2 * above_full) <= 2);
  CHECK(half.gpu().sustained(DType::bf16) == 0.5 * plain.gpu().sustained(DType::bf16));
  // A memory kernel of no bytes costs the floor alone: 3 us, then the 10 us given.
  CHECK(compute_time(plain.gpu(), OpKind::elementwise, 0, 0, DType::bf16) == Time::us(3));
  CHECK(compute_time(slow.gpu(), OpKind::elementwise, 0, 0, DType::bf16) == Time::us(10));
  CHECK(slow.gpu().sustained(DType::bf16) == plain.gpu().sustained(DType::bf16));
  // Out of range, one line naming the key: 0, above the peak (989 / 797.51 = 1.24), 2 ms.
  CHECK_THROWS_WITH(load_topology(dgx, {"compute.gemm_efficiency=0"}),
                    Catch::Contains("compute.gemm_efficiency") && Catch::Contains("at most 1.24"));
  CHECK_THROWS_WITH(load_topology(dgx, {"compute.gemm_efficiency=1.25"}), Catch::Contains("at most 1.24"));
  CHECK_NOTHROW(load_topology(dgx, {"compute.gemm_efficiency=1.24"}));
  CHECK_THROWS_WITH(load_topology(dgx, {"compute.launch=2ms"}),
                    Catch::Contains("compute.launch") && Catch::Contains("[0, 1ms]"));
  // Any other key under compute is a typo, not a what-if.
  CHECK_THROWS(load_topology(dgx, {"compute.lanuch=5us"}));
}

TEST_CASE("sensitivity: --vary ranges are numbers or times, LOW < HIGH", "[moe][sensitivity]") {
  using Catch::Matchers::Contains;
  const SensitivityInput in = parse_vary("nccl.launch=0us:50us", "--vary");
  CHECK(in.parameter == "nccl.launch");
  CHECK(in.low == "0us");
  CHECK(in.high == "50us");
  CHECK_THROWS_WITH(parse_vary("link_efficiency.network=0.9:0.9", "--vary"),
                    Contains("--vary: link_efficiency.network: the range 0.9:0.9 is empty"));
  CHECK_THROWS_WITH(parse_vary("link_efficiency.network=1.0:0.5", "--vary"), Contains("is inverted"));
  CHECK_THROWS_WITH(parse_vary("nccl.launch=2us:1us", "--vary"), Contains("is inverted"));
  CHECK_THROWS_WITH(parse_vary("nccl.launch=fast:1us", "--vary"), Contains("the low end 'fast'"));
  CHECK_THROWS_WITH(parse_vary("link_efficiency.network", "--vary"), Contains("expected KEY=LOW:HIGH"));
  CHECK_THROWS_WITH(parse_vary("link_efficiency.network=0.5", "--vary"), Contains("expected KEY=LOW:HIGH"));
}
