// layer --sensitivity: each input's ends run as the layer would run with that
// value given by hand, the flips follow from the picks, and bad ranges are refused.
#include <catch2/catch.hpp>
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
  *pick = auto_choice(spec, make_dims(spec, t.num_gpus(), t.gpus_per_node()), ab, gpu_profile(t.gpu_model()));
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
  // 8 nodes: the network range is 1 - 15.3% = 0.847 to line rate; one server has none.
  CHECK(row(s, "link_efficiency.network").input.low == "0.847");
  for (const SensitivityInput& in : default_sensitivity_inputs(load_topology(kTopo, {"nodes=1"})))
    CHECK(in.parameter != "link_efficiency.network");
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
