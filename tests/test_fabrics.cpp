// The rented fabrics (topologies/aws-*.yaml, gcp-*.yaml, azure-*.yaml): their
// transports, the net plugin's reported latency as NCCL's tuner sees it, and
// the loader's refusals. Expected values derived by hand from NCCL's formulas
// (docs/collectives.md, sections 3 and 8).
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <sstream>

#include "sim/coll/collective_cost.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/core/error.hpp"
#include "sim/topo/topology_io.hpp"
#include "tests/collectives.hpp"

using namespace parmsim;

namespace {

using test::all;
using test::sim_us;
using test::topo;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string text_of(const std::string& name) {
  std::ifstream in(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("The rented fabrics load with their transports and NICs", "[fabric][topology]") {
  struct Want {
    const char* name;
    const char* transport;
    int nics;
    double plugin_us;
  };
  for (const Want& w : {Want{"aws-p4de", "efa", 4, 75}, Want{"aws-p5", "efa", 8, 75}, Want{"aws-p5en", "efa", 8, 35},
                        Want{"gcp-a3-mega", "tcpxo", 8, 0}, Want{"gcp-a3-ultra", "roce", 8, 0},
                        Want{"azure-nd-h100-v5", "ib", 8, 0}}) {
    CAPTURE(w.name);
    const Topology t = topo(w.name);
    CHECK(t.hints().transport == w.transport);
    CHECK(t.nics_per_node() == w.nics);
    CHECK(t.hints().plugin_latency_us == Approx(w.plugin_us));
    CHECK(t.hints().net_latency_us == 0.0);  // the plugin's figure steers the choice; the run does not pay it
  }
  // p4de: 4 x 100 Gb/s EFA for 8 GPUs, two GPUs per PCIe switch: a 2-node ring's inter-node bytes leave
  // through all four NICs (rail r from GPU 2r). AllReduce 1 GiB, ring Simple, 4 channels x 12 GB/s
  // (the inter ladder's rung below 12.5): bus 48, algorithm 48 x 16/30 = 25.6 GB/s, 2^30 / 25.6e3 = 41943 us
  // plus the latency; one NIC per two GPUs would have halved it.
  const Topology p4de = topo("aws-p4de");
  const double us = sim_us(p4de, all(CollOp::allreduce, 16, 1ULL << 30, "ring", "simple"));
  CHECK(us > (1ULL << 30) / (48.0 * 16 / 30 * 1e3));
  CHECK(us < (1ULL << 30) / (48.0 * 16 / 30 * 1e3) + 400);
}

TEST_CASE("p4de runs the Simple protocol only: the plugin's NCCL_PROTO=simple without in-order EFA delivery",
          "[fabric][nccl]") {
  // aws-ofi-nccl sets NCCL_PROTO=simple where EFA cannot deliver 128-byte lines in order (p4d and p4de,
  // src/platform-aws.cpp lines 842-930): topologies/aws-p4de.yaml, nccl.protocols [simple].
  const Topology t = topo("aws-p4de");
  CHECK(t.hints().protocols == 4u);  // Simple's bit alone
  const NcclSystem s = nccl_system(all(CollOp::allreduce, 16, 1).group, t);
  // 8 B: tree Simple, 8.4 + 2 x (7 x max(4.0, 0.4) + 1 x max(14, 17.21)) = 98.82 us, the network hop the
  // file's route: EFA's measured one-way 17.21 us (the tuner adds the plugin's 75 us twice per network hop
  // for Simple: 8.4 + 2 x (28 + 17.21 + 150) = 398.82, and the ring Simple,
  // 8.4 + 28 x max(3.4, 3) + 2 x (17.21 + 150) = 438.02, is costlier still).
  const NcclEstimate e = nccl_choose(CollOp::allreduce, s, 8);
  CHECK(e.algo == NcclAlgo::tree);
  CHECK(e.proto == NcclProto::simple);
  CHECK(e.lat_us == Approx(98.82));
  CHECK(e.time_us(8) == Approx(398.82 + 8 / (e.bw_GBps * 1e3)));
  CHECK(nccl_estimate(CollOp::allreduce, s, NcclAlgo::ring, NcclProto::simple, 0, 8)->time_us(0) ==
        Approx(438.02));
  // No size picks LL or LL128; forcing one still runs it (as NCCL_PROTO set by hand would).
  for (double b : {8.0, 65536.0, 1048576.0, 16777216.0, 1073741824.0})
    CHECK(nccl_choose(CollOp::allreduce, s, b).proto == NcclProto::simple);
  CHECK(nccl_choose(CollOp::allreduce, s, 8, {}, NcclProto::ll).proto == NcclProto::ll);
}

TEST_CASE("The net plugin's reported latency steers NCCL's choice, not the time of what runs", "[fabric][nccl]") {
  const Topology t = topo("aws-p5");
  const NcclSystem s = nccl_system(all(CollOp::allreduce, 16, 1).group, t);
  // The network hop is the file's route, 4 x 0.5 (PCIe) + 2 x 9.925 (NIC to switch) = 21.85 us: EFA's
  // measured one-way latency between two p5 (topologies/aws-p5.yaml), above every NCCL network constant.
  CHECK(s.inter_hop_us == Approx(21.85));
  // Tree LL, 8 B: 6.8 + 2 x (7 x 0.6 + 1 x max(5.0, hop 21.85)) = 58.9 us runs; the tuner adds the plugin's
  // 75 us on each of the tree's 2 x log2(2) = 2 network hops: 150 us more.
  const NcclEstimate e = *nccl_estimate(CollOp::allreduce, s, NcclAlgo::tree, NcclProto::ll, 0, 8);
  CHECK(e.lat_us == Approx(58.9));
  CHECK(e.tune_extra_us == Approx(150.0));
  CHECK(e.time_us(8) == Approx(208.9 + 8 / (e.bw_GBps * 1e3)));
  // NVLS-Tree (Simple: latencyInter counted twice): 2 hops x 2 x 75 = 300 us for the tuner.
  CHECK(nccl_estimate(CollOp::allreduce, s, NcclAlgo::nvls_tree, NcclProto::simple, 0, 8)->tune_extra_us ==
        Approx(300.0));
  // 16 MiB. Tree LL128: 14 + 2 x (7 x 1.25 + 21.85) = 75.2 us; bus min(8 x 48 x 0.92, 8 x 41.4) = 331.2, LL128
  // min(331.2 x 120/128, 8 x 36.7) = 293.6, x 0.85 (the plain tree pattern: one GPU per NIC switch,
  // tuning.cc line 336), x 0.5, x the tree correction 0.9 at log2(16 MiB / 64) = 18: 112.30 GB/s, so 75.2 +
  // 149.39 = 224.6 us. Ring LL128: 14 + 28 x max(1.9, 2.0) + 2 x 21.85 = 113.7 us (p5's AMD hosts: a 2 us
  // net overhead per step, tuning.cc lines 228-233); bus min(8 x 48 x 0.92, 8 x 36.7) =
  // 293.6, x 16/30 = 156.59 GB/s: 113.7 + 107.14 = 220.8 us. NVLS-Tree: 25 + 2 x 21.85 = 68.7 us, + 16 MiB /
  // 246.19 GB/s = 136.8 us. Without the plugin NVLS-Tree wins; with it (ring LL128 + 2 x 75, tree LL128 +
  // 150, NVLS-Tree + 300: 370.8, 374.6, 436.8) ring LL128 does.
  NcclSystem no_plugin = s;
  no_plugin.plugin_latency_us = 0;
  CHECK(nccl_choose(CollOp::allreduce, no_plugin, 16 << 20).algo == NcclAlgo::nvls_tree);
  const NcclEstimate tr = *nccl_estimate(CollOp::allreduce, s, NcclAlgo::tree, NcclProto::ll128, 0, 16 << 20);
  CHECK(tr.bw_GBps == Approx(293.6 * 0.85 * 0.5 * 0.9));
  CHECK(tr.time_us(16 << 20) == Approx(75.2 + 150.0 + 16777216 / (293.6 * 0.85 * 0.5 * 0.9 * 1e3)));
  CHECK(nccl_estimate(CollOp::allreduce, s, NcclAlgo::nvls_tree, NcclProto::simple, 0, 8)->lat_us == Approx(68.7));
  const NcclEstimate p = nccl_choose(CollOp::allreduce, s, 16 << 20);
  CHECK(p.algo == NcclAlgo::ring);
  CHECK(p.proto == NcclProto::ll128);
  CHECK(p.lat_us == Approx(113.7));
  CHECK(p.bw_GBps == Approx(293.6 * 16 / 30));
  CHECK(p.time_us(16 << 20) == Approx(113.7 + 150.0 + 16777216 / (293.6 * 16 / 30 * 1e3)));
  // What runs is the ring LL128 at its own latency, without the plugin's 150 us: the simulator and the
  // closed form agree.
  const Collective c = all(CollOp::allreduce, 16, 16 << 20);
  CHECK(sim_us(t, c) < 113.7 + 16777216 / (293.6 * 16 / 30 * 1e3) + 10.0);
  CHECK(collective_time_s(c, t) * 1e6 == Approx(sim_us(t, c)).epsilon(1e-6));
}

TEST_CASE("The loader refuses an unknown transport, a plugin latency <= 0, p2p: false with NVLink", "[fabric][topology]") {
  const std::string p5 = text_of("aws-p5");
  auto err = [&](const std::string& text) { return error_of([&] { parse_topology_text(text, "cloud.yaml"); }); };
  CHECK_THAT(err(replaced(p5, "transport: efa", "transport: infiniband")),
             Catch::StartsWith("cloud.yaml:") && Catch::Contains("fabric.transport") &&
                 Catch::Contains("ib | roce | efa | tcpx | tcpxo") && Catch::Contains("infiniband"));
  CHECK_THAT(err(replaced(p5, "plugin_latency: 75us", "plugin_latency: 0us")),
             Catch::StartsWith("cloud.yaml:") && Catch::Contains("nccl.plugin_latency") && Catch::Contains("above 0"));
  // EFA without the latency its plugin reports.
  CHECK_THAT(err(replaced(p5, "plugin_latency: 75us, ", "")),
             Catch::StartsWith("cloud.yaml:") && Catch::Contains("fabric.transport") &&
                 Catch::Contains("aws-ofi-nccl"));
  CHECK_THAT(err(p5 + "p2p: false\n"), Catch::StartsWith("cloud.yaml:") && Catch::Contains("p2p") &&
                                           Catch::Contains("NVLink"));
  // A transport on a fabric of kind none is refused like any key the kind does not take.
  CHECK_THAT(err(replaced(replaced(p5, "nodes: 2", "nodes: 1"),
                          "fabric: {kind: switch, bandwidth: 400Gbps, latency: 9925ns, transport: efa}",
                          "fabric: {kind: none, transport: efa}")),
             Catch::Contains("transport"));
  // Every file as shipped loads.
  CHECK(err(p5).empty());
}
