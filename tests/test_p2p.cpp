// Topologies without GPU peer-to-peer (p2p: false) or GPUDirect RDMA (gdr:
// false): routes through the host bridge, NCCL's ring search charging the
// shared PCIe links, and the SHM path's bandwidth derived by hand.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <sstream>

#include "sim/coll/collective_plan.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/nccl_validation.hpp"

using namespace parmsim;

namespace {

// Two RTX 2080 Ti under one PCIe switch, the switch on the CPU's root port:
// GPU links 13 GB/s, the switch's uplink 12 GB/s (numbers for the arithmetic,
// not a machine), link_efficiency 1.
std::string two_under_switch(bool p2p) {
  return std::string("name: sw2\ngpu: rtx2080ti\nnodes: 1\np2p: ") + (p2p ? "true" : "false") +
         "\nlink_efficiency: {nvlink: 1.0, pcie: 1.0, network: 1.0}\n"
         "node:\n  gpus: 2\n  devices:\n    - {name: sw, kind: pcie_switch}\n    - {name: cpu0, kind: host_bridge}\n"
         "  links:\n    - {a: [gpu0, gpu1], b: sw, bandwidth: 13GBps, latency: 500ns}\n"
         "    - {a: sw, b: cpu0, bandwidth: 12GBps, latency: 500ns}\n";
}

std::string route_names(const Topology& t, int a, int b) {
  std::string s;
  for (int l : t.route(a, b).links) s += t.link_name(l) + " ";
  return s;
}

double allreduce_us(const Topology& t, int p, std::uint64_t bytes) {
  Collective c;
  c.name = "ar";
  c.op = CollOp::allreduce;
  c.bytes = bytes;
  for (int r = 0; r < p; ++r) c.group.push_back(r);
  TaskGraphBuilder b(p);
  b.add_stream_all("comm");
  b.add_collective_tasks(c, "comm", "ar");
  const TaskGraph g = std::move(b).build();
  return simulate(g, t, {}).makespan.to_us();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("p2p: false routes GPU-GPU traffic up to the host bridge and down again", "[p2p][topology]") {
  const Topology on = parse_topology_text(two_under_switch(true), "on.yaml");
  const Topology off = parse_topology_text(two_under_switch(false), "off.yaml");
  CHECK(route_names(on, 0, 1) == "n0.gpu0->n0.sw n0.sw->n0.gpu1 ");
  CHECK(route_names(off, 0, 1) == "n0.gpu0->n0.sw n0.sw->n0.cpu0 n0.cpu0->n0.sw n0.sw->n0.gpu1 ");
  CHECK(route_names(off, 1, 0) == "n0.gpu1->n0.sw n0.sw->n0.cpu0 n0.cpu0->n0.sw n0.sw->n0.gpu0 ");
  CHECK(off.local_host_bridge(0) >= 0);
  CHECK(off.device(off.local_host_bridge(0)).name == "n0.cpu0");
  // The Parm cluster as shipped: every intra-node pair through its node's CPU.
  const Topology parm = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  CHECK_THAT(route_names(parm, 4, 7), Catch::Contains("n1.pcie0->n1.cpu0 n1.cpu0->n1.pcie0"));
  const Topology old = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu-p2p.yaml");
  CHECK(route_names(old, 4, 7) == "n1.gpu0->n1.pcie0 n1.pcie0->n1.gpu3 ");
}

TEST_CASE("gdr: false stages NIC traffic through the GPU's host bridge", "[p2p][topology]") {
  // The NIC under the GPUs' PCIe switch: with GPUDirect RDMA the route skips the CPU.
  auto text = [](bool gdr) {
    return std::string("name: g\ngpu: rtx2080ti\nnodes: 2\ngdr: ") + (gdr ? "true" : "false") +
           "\nnode:\n  gpus: 1\n  devices:\n    - {name: sw, kind: pcie_switch}\n    - {name: cpu0, kind: host_bridge}\n"
           "    - {name: nic0, kind: nic}\n  links:\n    - {a: [gpu0, nic0], b: sw, bandwidth: 13GBps, latency: 500ns}\n"
           "    - {a: sw, b: cpu0, bandwidth: 13GBps, latency: 500ns}\n"
           "fabric: {kind: switch, bandwidth: 100Gbps, latency: 1us}\n";
  };
  const Topology on = parse_topology_text(text(true), "on.yaml");
  const Topology off = parse_topology_text(text(false), "off.yaml");
  CHECK(route_names(on, 0, 1).find("cpu0") == std::string::npos);
  CHECK(route_names(off, 0, 1) ==
        "n0.gpu0->n0.sw n0.sw->n0.cpu0 n0.cpu0->n0.sw n0.sw->n0.nic0 n0.nic0->switch switch->n1.nic0 n1.nic0->n1.sw "
        "n1.sw->n1.cpu0 n1.cpu0->n1.sw n1.sw->n1.gpu0 ");
}

TEST_CASE("SHM path bandwidth of a 2-GPU AllReduce, by hand", "[p2p][nccl]") {
  const Topology on = parse_topology_text(two_under_switch(true), "on.yaml");
  const Topology off = parse_topology_text(two_under_switch(false), "off.yaml");
  const std::vector<int> g = {0, 1};
  // P2P: each ring edge GPU -> switch -> GPU, no link shared: 13 GB/s. The
  // Turing ladder (search.cc, speedArrayIntra 40 30 20 18 15 12 ...) gives 12
  // GB/s x 1 channel (6 x 2 is no more); kept (below 25 GB/s, no duplication).
  const NcclSystem son = nccl_system(g, on);
  CHECK(son.intra_bw == Approx(13.0));
  CHECK(son.ring_graph.channels == 1);
  CHECK(son.ring_graph.bw_intra == Approx(12.0));
  // SHM: both ring edges (0->1 and 1->0) climb the switch's uplink sw->cpu0
  // and come down cpu0->sw, each a path through the CPU on an Intel host,
  // charged 6/5 on PCIe links (INTEL_P2P_OVERHEAD): uplink 12 / (2 x 1.2) =
  // 5 GB/s; the GPU links 13 / 1.2 = 10.8. Ladder: 5 GB/s x 1 channel
  // (4 x 1, 3 x 1 are less; 10 or more does not fit).
  const NcclSystem soff = nccl_system(g, off);
  CHECK(soff.intra_bw == Approx(5.0));
  CHECK(soff.ring_graph.channels == 1);
  CHECK(soff.ring_graph.bw_intra == Approx(5.0));
  // NCCL's choice at 1 GiB: ring Simple, algorithm bandwidth = 1 channel x
  // 5 GB/s x n / (2 (n - 1)) = 5 x 2/2 = 5 GB/s (LL: 5 x 0.5 = 2.5; tree:
  // 5 x 0.92 x 0.5 = 2.3), bus bandwidth the same at n = 2.
  const double bytes = 1 << 30;
  const NcclEstimate e = nccl_choose(CollOp::allreduce, soff, bytes);
  CHECK(e.algo == NcclAlgo::ring);
  CHECK(e.proto == NcclProto::simple);
  CHECK(e.bw_GBps == Approx(5.0));
  // The simulator: the two flows share the 12 GB/s uplink. Each carries S
  // (2 steps of S/2) plus the SHM ring's extra step (program order: send,
  // receive-reduce-send, receive), 1.5 S: 2 x 1.5 x 2^30 B / 12 GB/s =
  // 268435 us, above the model's 2^30 / 5 GB/s = 214748 us, plus
  // microseconds of latency. (Without the extra step the flows would run at
  // 6 GB/s each, and the model's 5 GB/s would set the pace.)
  const double t_off = allreduce_us(off, 2, 1 << 30);
  CHECK(t_off == Approx(3 * bytes / 12e3).epsilon(0.002));
  CHECK(t_off > bytes / 5e3 * 1.2);
  // With P2P the same AllReduce runs at 12 GB/s: 89478 us.
  CHECK(allreduce_us(on, 2, 1 << 30) == Approx(bytes / 12e3).epsilon(0.002));
}

TEST_CASE("p2p: false is refused on a server with NVLink", "[p2p][topology]") {
  std::ifstream in(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  std::stringstream text;
  text << in.rdbuf() << "p2p: false\n";
  const std::string err = error_of([&] { parse_topology_text(text.str(), "dgx-nop2p.yaml"); });
  CHECK_THAT(err, Catch::StartsWith("dgx-nop2p.yaml:") && Catch::Contains("p2p") && Catch::Contains("NVLink"));
  // A PCIe server without a host bridge cannot route through one.
  std::string t = two_under_switch(false);
  for (const std::string cut : {"    - {name: cpu0, kind: host_bridge}\n", "    - {a: sw, b: cpu0, bandwidth: 12GBps, latency: 500ns}\n"})
    t.erase(t.find(cut), cut.size());
  CHECK_THAT(error_of([&] { parse_topology_text(t, "nohb.yaml"); }),
             Catch::StartsWith("nohb.yaml:") && Catch::Contains("host_bridge"));
}

TEST_CASE("Validation rows of GeForce servers: a PCIe-only node, p2p from the row", "[p2p][validation]") {
  NcclMeasurement m;
  m.system = "two-2080ti";
  m.gpu = "rtx2080ti";
  m.nodes = 1;
  m.gpus_per_node = 2;
  m.p2p = false;
  const Topology t = parse_topology_text(nccl_validation_topology(m), "gen.yaml");
  CHECK_FALSE(t.hints().p2p);
  CHECK(route_names(t, 0, 1) == "n0.gpu0->n0.cpu0 n0.cpu0->n0.gpu1 ");
  // PCIe 3.0 x16 15.75 GB/s x 0.75 = 11.8125 GB/s; charged 6/5 through the
  // CPU: 9.84 GB/s; ladder 9 GB/s x 1 channel (4 x 2 = 8 is less).
  const NcclSystem s = nccl_system({0, 1}, t);
  CHECK(s.intra_bw == Approx(11.8125 / 1.2));
  CHECK(s.ring_graph.bw_intra == Approx(9.0));
}

TEST_CASE("PXN only through an NVLink-connected GPU with GPUDirect RDMA, as NCCL relays", "[p2p][nccl]") {
  // NCCL relays a send through the GPU on the receiver's rail only when that GPU reaches the
  // sender over NVLink and has GPUDirect RDMA (src/graph/paths.cc@5067397c lines 817-840).
  auto plan_of = [](const Topology& t, const std::string& algo) {
    Collective c;
    c.op = CollOp::alltoall;
    c.bytes = 64 << 20;
    c.algo = algo;
    for (int r = 0; r < t.num_gpus(); ++r) c.group.push_back(r);
    return make_plan(c, t);
  };
  auto relayed = [](const CollPlan& p) {
    int n = 0;
    for (const CollXfer& x : p.xfers) n += x.via >= 0;
    return n;
  };
  const std::string dir = std::string(PARMSIM_SOURCE_DIR) + "/topologies/";
  // PCIe-only servers, with and without P2P: no relay.
  CHECK(relayed(plan_of(load_topology(dir + "parm-32gpu.yaml"), "p2p")) == 0);
  CHECK(relayed(plan_of(load_topology(dir + "parm-32gpu-p2p.yaml"), "p2p")) == 0);
  // Two DGX H100 nodes: every inter-node pair across rails relays: 16 senders x 8 remote
  // GPUs, of which 7 on another rail = 112.
  const Topology dgx = load_topology(dir + "dgx-h100.yaml", {"nodes=2"});
  CHECK(relayed(plan_of(dgx, "p2p")) == 16 * 7);
  // Two servers of two NVSwitch GPUs, a NIC per GPU on rails: with GPUDirect RDMA the two
  // cross-rail pairs of each sender relay (4 senders x 1 = 4); without it none does.
  auto small = [](bool gdr) {
    return parse_topology_text(
        std::string("name: s\ngpu: h100\nnodes: 2\ngdr: ") + (gdr ? "true" : "false") +
            "\nnode:\n  gpus: 2\n  devices:\n    - {name: sw, kind: nvswitch}\n    - {name: p, kind: pcie_switch}\n"
            "    - {name: c, kind: host_bridge}\n    - {name: nic0, kind: nic}\n    - {name: nic1, kind: nic}\n"
            "  links:\n    - {a: [gpu0, gpu1], b: sw, bandwidth: 450GBps, latency: 1us}\n"
            "    - {a: [gpu0, gpu1, nic0, nic1], b: p, bandwidth: 50GBps, latency: 1us}\n"
            "    - {a: p, b: c, bandwidth: 50GBps, latency: 1us}\n"
            "fabric: {kind: rail, bandwidth: 400Gbps, latency: 1us}\n",
        "small.yaml");
  };
  CHECK(relayed(plan_of(small(true), "p2p")) == 4);
  CHECK(relayed(plan_of(small(false), "p2p")) == 0);
  CHECK(dgx.nvlinked(0, 1));
  CHECK_FALSE(load_topology(dir + "parm-32gpu-p2p.yaml").nvlinked(0, 1));

  // parm-32gpu's AlltoAll of 64 MiB then runs at its PCIe uplink: each GPU sends 31/32 of its
  // buffer through host memory (SHM in the node, staged for the NIC), and the four GPUs of a
  // node share the 13 GB/s switch-to-CPU link: 4 x 31/32 x 64 MiB / 13 GB/s = 20.003 ms, plus
  // microseconds of latency (the NIC's 12.5 GB/s carries only 4 x 28/32 of it: 18.8 ms).
  const double want = 4.0 * 31 / 32 * (64 << 20) / 13e9;
  Collective c;
  c.op = CollOp::alltoall;
  c.bytes = 64 << 20;
  for (int r = 0; r < 32; ++r) c.group.push_back(r);
  TaskGraphBuilder b(32);
  b.add_stream_all("comm");
  b.add_collective_tasks(c, "comm", "a2a");
  const SimResult r = simulate(std::move(b).build(), load_topology(dir + "parm-32gpu.yaml"));
  CHECK(r.makespan.to_seconds() >= want);
  CHECK(r.makespan.to_seconds() < want * 1.005);
}

TEST_CASE("parm-32gpu's AlltoAll against the Parm authors' fitted alpha-beta, from 64 MiB", "[p2p][validation]") {
  // Fragile-azalea/PipeMoE@2341c389 solver.py lines 7-16: t = alpha + beta * bytes per GPU, over
  // 100 Gb/s InfiniBand on RTX 2080 Ti nodes of 4 (docs/collectives.md, section 5). Within 25%
  // at 64 and 256 MiB for 16, 32 and 64 GPUs (parmsim: -3% to -23%).
  struct Fit {
    int nodes;
    double alpha, beta;
  };
  for (const Fit f : {Fit{4, 5.70e-4, 2.96e-10}, Fit{8, 2.09e-4, 3.55e-10}, Fit{16, 7.83e-4, 3.84e-10}}) {
    const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml",
                                     {"nodes=" + std::to_string(f.nodes)});
    for (const std::uint64_t bytes : {std::uint64_t{64} << 20, std::uint64_t{256} << 20}) {
      Collective c;
      c.op = CollOp::alltoall;
      c.bytes = bytes;
      for (int r = 0; r < t.num_gpus(); ++r) c.group.push_back(r);
      TaskGraphBuilder b(t.num_gpus());
      b.add_stream_all("comm");
      b.add_collective_tasks(c, "comm", "a2a");
      const double got = simulate(std::move(b).build(), t).makespan.to_seconds();
      const double fit = f.alpha + f.beta * static_cast<double>(bytes);
      INFO(t.num_gpus() << " GPUs, " << bytes << " B: " << got << " s against the fit's " << fit);
      CHECK(std::abs(got - fit) / fit < 0.25);
    }
  }
}

TEST_CASE("A topology override adds p2p, gdr and nccl keys a file leaves at their default", "[p2p][topology]") {
  const std::string dir = std::string(PARMSIM_SOURCE_DIR) + "/topologies/";
  // parm-32gpu-p2p.yaml is parm-32gpu.yaml without its `p2p: false` and `gdr: false` lines (and
  // its name): set back by override, every route and so every collective time is the same.
  const Topology without = load_topology(dir + "parm-32gpu.yaml");
  const Topology set = load_topology(dir + "parm-32gpu-p2p.yaml", {"p2p=false", "gdr=false"});
  CHECK_FALSE(set.hints().p2p);
  CHECK_FALSE(set.hints().gdr);
  for (std::uint64_t bytes : {1ULL << 10, 64ULL << 20}) CHECK(allreduce_us(set, 32, bytes) == allreduce_us(without, 32, bytes));
  CHECK(allreduce_us(load_topology(dir + "parm-32gpu-p2p.yaml"), 32, 64ULL << 20) != allreduce_us(without, 32, 64ULL << 20));
  // nccl.launch on a file without an nccl map: added once to the collective, 5 us.
  const Topology dgx = load_topology(dir + "dgx-h100.yaml"), late = load_topology(dir + "dgx-h100.yaml", {"nccl.launch=5us"});
  CHECK(late.hints().launch_us == 5.0);
  CHECK(allreduce_us(late, 8, 1 << 20) == Approx(allreduce_us(dgx, 8, 1 << 20) + 5.0).margin(1e-6));
  // A key no registry knows is still refused, never added.
  CHECK_THAT(error_of([&] { load_topology(dir + "dgx-h100.yaml", {"p2q=false"}); }), Catch::Contains("unknown key 'p2q'"));
  CHECK_THAT(error_of([&] { load_topology(dir + "dgx-h100.yaml", {"nccl.lunch=5us"}); }), Catch::Contains("nccl.lunch"));
  // And p2p=false on NVLink is refused as in a file.
  CHECK_THAT(error_of([&] { load_topology(dir + "dgx-h100.yaml", {"p2p=false"}); }), Catch::Contains("NVLink"));
}
