// The topology's link and fabric latencies in NCCL-costed collectives: every
// per-hop latency of NCCL's model is max(NCCL's constant for the hop, the
// machine's route latency for that hop) (nccl_model.hpp, NcclSystem::
// intra_hop_us / inter_hop_us), so a what-if that changes only a latency
// changes the answer. Expected values by hand from NCCL's tables
// (docs/collectives.md section 3) and the topology files.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sim/coll/collective_cost.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/topo/topology_io.hpp"
#include "tests/collectives.hpp"

using namespace parmsim;

namespace {

using test::all;
using test::sim_us;
using test::topo;

std::vector<int> first(int p) { return all(CollOp::allreduce, p, 0).group; }

}  // namespace

TEST_CASE("the machine's hop latencies: routes between ring neighbours and between nodes", "[latency][nccl]") {
  // DGX H100: GPU -> NVSwitch -> GPU, 2 x 0.2 = 0.4 us; between nodes GPU -> PCIe switch -> NIC -> rail
  // switch -> NIC -> PCIe switch -> GPU: 0.5 + 0.5 + 1 + 1 + 0.5 + 0.5 = 4 us.
  const NcclSystem h = nccl_system(first(16), topo("dgx-h100", {"nodes=2"}));
  CHECK(h.intra_hop_us == Approx(0.4));
  CHECK(h.inter_hop_us == Approx(4.0));
  // One node: no network hop.
  CHECK(nccl_system(first(8), topo("dgx-h100")).inter_hop_us == 0.0);
  // pcie-8gpu: gpu3 -> sw1 -> cpu0 -> cpu1 -> sw2 -> gpu4 is 0.5 + 0.5 + 1 + 0.5 + 0.5 = 3 us, the slowest
  // ring neighbours (gpu0 -> gpu1 through sw0 is 1 us).
  CHECK(nccl_system(first(8), topo("pcie-8gpu")).intra_hop_us == Approx(3.0));
  // Fat tree, 8 nodes of 8, 4 nodes per leaf: node 0 -> node 1 stays under one leaf (4 us), node 3 -> node 4
  // crosses a spine: 0.5 + 0.5 + 1 (NIC-leaf) + 1 (leaf-spine) + 1 + 1 + 0.5 + 0.5 = 6 us. Every
  // consecutive pair counts, not only the first.
  CHECK(nccl_system(first(64), topo("fat-tree-1024", {"nodes=8"})).inter_hop_us == Approx(6.0));
}

TEST_CASE("a fabric latency what-if changes a 2-node AllReduce by steps x per-hop delta", "[latency][nccl]") {
  const Topology a = topo("dgx-h100", {"nodes=2"});
  const Topology b = topo("dgx-h100", {"nodes=2", "fabric.latency=1ms"});
  // The network hop: 4 us (above) -> 2 x 1000 + 4 x 0.5 = 2002 us.
  CHECK(nccl_system(first(16), b).inter_hop_us == Approx(2002.0));
  // Ring Simple, 16 ranks on 2 nodes: 2 (N - 1) = 2 of its 2 x 15 steps cross the network, each
  // max(NCCL's 14 us, the hop): 14 -> 2002 us. 1 KiB: 1024 / (2 x 8 channels x 16 ranks) = 4 B per
  // runtime channel and rank, below the plateau's 64: no x1.4. Delta 2 x (2002 - 14) = 3976 us.
  const Collective ring = all(CollOp::allreduce, 16, 1024, "ring", "simple");
  const double da = collective_time_s(ring, a) * 1e6, db = collective_time_s(ring, b) * 1e6;
  CHECK(db - da == Approx(3976.0).epsilon(1e-9));
  // The simulator times the same flows with the same latency.
  CHECK(sim_us(b, ring) - sim_us(a, ring) == Approx(3976.0).epsilon(1e-6));
  // Tree LL: 2 log2(2) = 2 network hops, max(NCCL's 5.0, hop): 2 x (2002 - 5) = 3994 us.
  const Collective tree = all(CollOp::allreduce, 16, 1024, "tree", "ll");
  CHECK((collective_time_s(tree, b) - collective_time_s(tree, a)) * 1e6 == Approx(3994.0).epsilon(1e-9));
  // NCCL's own choice: every algorithm crosses 2 network hops here (ring 2 (N - 1), tree 2 log2 N,
  // NVLS-Tree 2 log2 N) and NCCL's network hop is 2.7 .. 20.9 us, so the choice's latency grows by
  // 2 x (2002 - 20.9) = 3962.2 to 2 x (2002 - 2.7) = 3998.6 us. A changed choice also changes the
  // size term, 1 KiB over the links or the model's bandwidth: well under 1 us on these links.
  const Collective c = all(CollOp::allreduce, 16, 1024);
  const double grow = (collective_time_s(c, b) - collective_time_s(c, a)) * 1e6;
  CHECK(grow >= 3962.2 - 1.0);
  CHECK(grow <= 3998.6 + 1.0);
  // Send/recv across nodes: ring Simple base 8.4 + max(NCCL's network 14, hop 2002) = 2010.4 us.
  CHECK(nccl_p2p_latency_us(nccl_system(first(16), b), true) == Approx(2010.4));
  CHECK(nccl_p2p_latency_us(nccl_system(first(16), a), true) == Approx(22.4));
}

TEST_CASE("an NVLink latency what-if changes a one-node AllReduce by steps x per-hop delta", "[latency][nccl]") {
  const Topology a = topo("dgx-h100");
  const Topology b = topo("dgx-h100", {"node.links.0.latency=1ms"});  // every GPU <-> NVSwitch link
  const NcclSystem sb = nccl_system(first(8), b);
  CHECK(sb.intra_hop_us == Approx(2000.0));  // GPU -> NVSwitch -> GPU: 2 x 1 ms
  // Ring Simple on one node: 2 x 7 = 14 hops, max(NCCL's NVLink 3.4, hop): 3.4 (1.4 < 3.4) -> 2000 us.
  // Delta 14 x (2000 - 3.4) = 27952.4 us.
  const Collective ring = all(CollOp::allreduce, 8, 1024, "ring", "simple");
  CHECK((collective_time_s(ring, b) - collective_time_s(ring, a)) * 1e6 == Approx(27952.4).epsilon(1e-9));
  CHECK(sim_us(b, ring) - sim_us(a, ring) == Approx(27952.4).epsilon(1e-6));
  // NVLS: one hop, max(25, 2000): +1975 us.
  const Collective nvls = all(CollOp::allreduce, 8, 1 << 20, "nvls");
  CHECK((collective_time_s(nvls, b) - collective_time_s(nvls, a)) * 1e6 == Approx(1975.0).epsilon(1e-9));
  // Send/recv inside the node: 8.4 + max(3.4, 2000) = 2008.4 us (11.8 with the bundled 1.4 us hop).
  CHECK(nccl_p2p_latency_us(sb, false) == Approx(2008.4));
  CHECK(nccl_p2p_latency_us(nccl_system(first(8), a), false) == Approx(11.8));
}

TEST_CASE("bundled latencies above NCCL's constants enter the model", "[latency][nccl]") {
  // DGX H100's 0.4 us GPU-GPU hop is below NCCL's NVLink LL hop (0.6): ring LL on one node is NCCL's
  // 6.6 + 14 x 0.6 = 15.0 us.
  const NcclSystem h = nccl_system(first(8), topo("dgx-h100"));
  CHECK(nccl_estimate(CollOp::allreduce, h, NcclAlgo::ring, NcclProto::ll, 0, 8)->lat_us == Approx(15.0));
  // The 8-GPU PCIe server's ring neighbours across the two CPUs are 3.0 us apart (GPU -> PCIe switch ->
  // CPU -> CPU -> PCIe switch -> GPU: 0.5 + 0.5 + 1 + 0.5 + 0.5), above NCCL's PCIe LL hop (1.0): ring LL is
  // 6.6 + 14 x 3.0 = 48.6 us (NCCL's tables alone: 6.6 + 14 x 1.0 = 20.6).
  const NcclSystem s = nccl_system(first(8), topo("pcie-8gpu"));
  CHECK(s.intra_hop_us == Approx(3.0));
  CHECK(nccl_estimate(CollOp::allreduce, s, NcclAlgo::ring, NcclProto::ll, 0, 8)->lat_us == Approx(48.6));
  // A system filled in by hand has no hop latencies: NCCL's constants alone.
  NcclSystem hand = s;
  hand.intra_hop_us = 0;
  CHECK(nccl_estimate(CollOp::allreduce, hand, NcclAlgo::ring, NcclProto::ll, 0, 8)->lat_us == Approx(20.6));
  // Ring Simple keeps NCCL's PCIe 5.7 (above 3.0): 8.4 + 14 x 5.7 = 88.2 us.
  CHECK(nccl_estimate(CollOp::allreduce, s, NcclAlgo::ring, NcclProto::simple, 0, 8)->lat_us == Approx(88.2));
}
