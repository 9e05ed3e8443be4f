#include <catch2/catch.hpp>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "sim/coll/collective_plan.hpp"
#include "sim/core/error.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

static std::string topo_path(const std::string& name) {
  return std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml";
}

TEST_CASE("every shipped topology loads and every GPU reaches every other", "[topology]") {
  for (const char* n : {"parm-32gpu", "pcie-8gpu", "dgx-h100", "dgx-h100-rail-only", "h200-cluster", "nvl72", "fat-tree-1024"}) {
    INFO(n);
    const Topology t = load_topology(topo_path(n));
    CHECK(t.num_gpus() > 0);
    const Route r = t.route(0, t.num_gpus() - 1);
    CHECK_FALSE(r.links.empty());
  }
}

TEST_CASE("the paper's 32-GPU cluster has the shape of the paper", "[topology]") {
  const Topology t = load_topology(topo_path("parm-32gpu-p2p"));
  CHECK(t.num_gpus() == 32);
  CHECK(t.gpus_per_node() == 4);
  CHECK(t.num_nodes() == 8);
  // Intra-node: gpu -> pcie switch -> gpu, 2 hops of 0.5 us, 13 GB/s.
  const Route in = t.route(0, 1);
  CHECK(in.links.size() == 2);
  CHECK(in.latency == Time::ns(1000));
  CHECK(in.bottleneck == 13'000'000'000ULL);
  // Inter-node: gpu, pcie, cpu, nic, switch, nic, cpu, pcie, gpu = 8 hops;
  // latency 6 x 0.5 us + 2 x 1 us = 5 us; bottleneck the 100 Gb/s NIC = 12.5 GB/s.
  const Route out = t.route(0, 4);
  CHECK(out.links.size() == 8);
  CHECK(out.latency == Time::us(5));
  CHECK(out.bottleneck == 12'500'000'000ULL);
}

TEST_CASE("node count and oversubscription are parameters", "[topology]") {
  const Topology t = load_topology(topo_path("h200-cluster"), {"nodes=4"});
  CHECK(t.num_gpus() == 32);
  const Topology ft = load_topology(topo_path("fat-tree-1024"), {"fabric.oversubscription=4"});
  // Leaf down = 4 nodes x 8 NICs x 50 GB/s = 1600 GB/s; up = 400 GB/s over 16 spines = 25 GB/s each.
  const Route r = ft.route(0, 1023);
  CHECK(r.bottleneck == 25'000'000'000ULL);
  CHECK_THROWS_WITH(load_topology(topo_path("fat-tree-1024"), {"fabric.oversubscripton=4"}),
                    Catch::Contains("unknown key 'fabric.oversubscripton'"));
}

TEST_CASE("routing is deterministic and ECMP spreads an all-to-all evenly", "[topology]") {
  const Topology t = load_topology(topo_path("fat-tree-1024"));
  const Topology t2 = load_topology(topo_path("fat-tree-1024"));
  std::map<int, int> uplink_load;  // leaf -> spine links only
  for (int s = 0; s < 64; ++s)
    for (int d = 0; d < t.num_gpus(); ++d) {
      if (t.same_node(s, d)) continue;
      const Route r = t.route(s, d);
      REQUIRE(r.links == t2.route(s, d).links);
      for (int l : r.links)
        if (t.link_name(l).rfind("leaf", 0) == 0 && t.link_name(l).find("spine") != std::string::npos) uplink_load[l]++;
    }
  // GPUs 0..63 sit under leaves 0 and 1 (32 GPUs each). Each sends to 1024 - 32 = 992
  // GPUs under other leaves; (src + dst) mod 16 spreads them evenly: 32 * 992 / 16
  // = 1984 flows on each of the 16 uplinks of each leaf.
  CHECK(uplink_load.size() == 32);
  for (const auto& [l, n] : uplink_load) CHECK(n == 1984);
}

TEST_CASE("a topology where GPUs cannot reach each other is rejected", "[topology]") {
  const std::string text = R"(name: split
gpu: h100
nodes: 1
node:
  gpus: 4
  devices:
    - {name: sw0, kind: nvswitch}
    - {name: sw1, kind: nvswitch}
  links:
    - {a: [gpu0, gpu1], b: sw0, bandwidth: 100GBps, latency: 1us}
    - {a: [gpu2, gpu3], b: sw1, bandwidth: 100GBps, latency: 1us}
)";
  CHECK_THROWS_WITH(parse_topology_text(text, "split.yaml"), Catch::Contains("cannot reach"));
}

TEST_CASE("topology errors name file, line and key", "[topology]") {
  const std::string base = R"(name: t
gpu: h100
nodes: 1
node:
  gpus: 2
  devices: [{name: sw, kind: nvswitch}]
  links:
    - {a: [gpu0, gpu1], b: sw, bandwidth: BW, latency: 1us}
)";
  auto with = [&](const std::string& bw) {
    std::string s = base;
    s.replace(s.find("BW"), 2, bw);
    return s;
  };
  CHECK_THROWS_WITH(parse_topology_text(with("450"), "t.yaml"), Catch::Contains("t.yaml:8:") &&
                                                                    Catch::Contains("node.links[0].bandwidth") &&
                                                                    Catch::Contains("bare number"));
  CHECK_THROWS_WITH(parse_topology_text(with("0GBps"), "t.yaml"), Catch::Contains("positive bandwidth"));
  CHECK_THROWS_WITH(parse_topology_text(with("-1GBps"), "t.yaml"), Catch::Contains("negative"));
  CHECK_THROWS_WITH(parse_topology_text(base + "colour: red\n", "t.yaml"),
                    Catch::Contains("t.yaml:9:1: unknown key 'colour'"));
  CHECK_THROWS_WITH(parse_topology_text("name: [unclosed\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:") && Catch::Contains("malformed YAML"));
  CHECK_THROWS_WITH(load_topology("/nonexistent/topo.yaml"), Catch::Contains("/nonexistent/topo.yaml: cannot open"));
}

TEST_CASE("a 16,384-GPU topology loads without a GPUs x devices table and routes on demand", "[topo]") {
  // 2048 DGX H100 nodes on a rail fabric with 2 spines. n0.gpu0 -> n2047.gpu7
  // changes rail: gpu0 -> pcie0 -> nic0 -> rail0 -> spine -> rail7 -> nic7 -> pcie7 -> gpu7 = 8 links.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2048"});
  REQUIRE(t.num_gpus() == 16384);
  const Route& r = t.route(0, 16383);
  CHECK(r.links.size() == 8);
  // Same rail: gpu3 -> pcie3 -> nic3 -> rail3 -> nic3 -> pcie3 -> gpu3 = 6 links.
  CHECK(t.route(3, 8 * 1000 + 3).links.size() == 6);
  // Inside a node: GPU -> NVSwitch -> GPU.
  CHECK(t.route(16376, 16383).links.size() == 2);
}

// `topology --help` gives "nodes=16,link_efficiency.network=0.9" as its
// --topo-set example: the second key exists on every shipped topology (the
// first on every one with a fabric).
TEST_CASE("the --topo-set example of topology --help names keys every shipped topology has", "[topo]") {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(PARMSIM_SOURCE_DIR) + "/topologies")) {
    if (e.path().extension() != ".yaml") continue;
    CAPTURE(e.path().string());
    CHECK(load_topology(e.path().string(), {"link_efficiency.network=0.9"}).efficiency().network == 0.9);
    ++files;
  }
  CHECK(files >= 9);  // the shipped topologies
}

namespace {
std::string link_names(const Topology& t, const std::vector<int>& links) {
  std::string s;
  for (int l : links) s += t.link_name(l) + " ";
  return s;
}
}  // namespace

// Rail-only (no spine): a GPU reaches a GPU of another server on another rail
// as NCCL's PXN does, over NVLink to the GPU of its own server on the
// receiver's rail, then through that GPU's NIC on the receiver's rail.
TEST_CASE("a rail-only fabric routes across rails through NVLink to the GPU on the receiver's rail (PXN)",
          "[topology][pxn]") {
  const Topology t = load_topology(topo_path("dgx-h100-rail-only"));
  REQUIRE(t.num_gpus() == 32);
  REQUIRE(t.num_nodes() == 4);
  // n0.gpu0 -> n1.gpu3 (rank 11): rail 0 and rail 3 meet nowhere, so through n0.gpu3.
  const Route& r = t.route(0, 11);
  CHECK(link_names(t, r.links) ==
        "n0.gpu0->n0.nvswitch n0.nvswitch->n0.gpu3 n0.gpu3->n0.pcie3 n0.pcie3->n0.nic3 n0.nic3->rail3 "
        "rail3->n1.nic3 n1.nic3->n1.pcie3 n1.pcie3->n1.gpu3 ");
  CHECK(t.link_class(r.links[0]) == LinkClass::nvlink);
  CHECK(t.link_class(r.links[1]) == LinkClass::nvlink);
  // 2 NVLink hops of 0.2 us, 4 PCIe hops of 0.5 us, 2 network hops of 1 us = 4.4 us; the
  // bottleneck is PCIe Gen5 at 64 GB/s x 0.75 = 48 GB/s (NIC 50 GB/s, NVLink 450 x 0.824).
  CHECK(r.latency == Time::ns(4400));
  CHECK(r.bottleneck == 48'000'000'000ULL);
  // On one rail nothing changes: n0.gpu2 -> n3.gpu2 (rank 26) stays on rail 2, no GPU between.
  CHECK(link_names(t, t.route(2, 26).links) ==
        "n0.gpu2->n0.pcie2 n0.pcie2->n0.nic2 n0.nic2->rail2 rail2->n3.nic2 n3.nic2->n3.pcie2 n3.pcie2->n3.gpu2 ");
  // Inside a server: NVSwitch as before.
  CHECK(link_names(t, t.route(0, 3).links) == "n0.gpu0->n0.nvswitch n0.nvswitch->n0.gpu3 ");
  // The same servers with spines route n0.gpu0 -> n1.gpu3 through a spine, no GPU between (unchanged).
  const Topology s = load_topology(topo_path("dgx-h100"), {"nodes=4"});
  CHECK(link_names(s, s.route(0, 11).links).find("spine") != std::string::npos);
  CHECK(link_names(s, s.route(0, 11).links).find("nvswitch") == std::string::npos);
}

TEST_CASE("an AlltoAll on the rail-only fabric sends every cross-rail byte over NVLink first", "[topology][pxn]") {
  const Topology t = load_topology(topo_path("dgx-h100-rail-only"));
  Collective c;
  c.name = "a2a";
  c.op = CollOp::alltoall;
  for (int g = 0; g < 16; ++g) c.group.push_back(g);  // two servers
  c.bytes = 16 << 20;
  const CollPlan plan = make_plan(c, t);
  int cross_rail = 0;
  Route scratch;
  Workspace ws;
  for (const CollXfer& x : plan.xfers) {
    const int a = c.group[x.src], b = c.group[x.dst];
    if (t.same_node(a, b) || a % 8 == b % 8) continue;
    ++cross_rail;
    const Route& r = xfer_route(plan, x, c.group, t, scratch, ws);
    INFO(link_names(t, r.links));
    // GPU -> NVSwitch -> the sender's server's GPU on b's rail -> its PCIe switch -> its NIC -> b's rail.
    REQUIRE(r.links.size() == 8);
    CHECK(t.link_class(r.links[0]) == LinkClass::nvlink);
    CHECK(t.link_class(r.links[1]) == LinkClass::nvlink);
    CHECK(t.device(t.link_to(r.links[1])).gpu == t.node_of(a) * 8 + b % 8);
    CHECK(t.link_name(r.links[4]) == fmt::format("n{}.nic{}->rail{}", t.node_of(a), b % 8, b % 8));
  }
  // 16 ranks, each sending to the 8 of the other server less the one on its own rail: 16 x 7.
  CHECK(cross_rail == 112);
}

TEST_CASE("a rail-only fabric without NVLink between a server's GPUs is refused, naming PXN", "[topology][pxn]") {
  // Two servers of two GPUs on one PCIe switch each, one NIC per GPU, rails unjoined.
  const std::string text = R"(name: pcie-rails
gpu: h100
nodes: 2
node:
  gpus: 2
  devices:
    - {name: sw, kind: pcie_switch}
    - {name: nic0, kind: nic}
    - {name: nic1, kind: nic}
  links:
    - {a: [gpu0, gpu1], b: sw, bandwidth: 64GBps, latency: 500ns}
    - {a: gpu0, b: nic0, bandwidth: 64GBps, latency: 500ns}
    - {a: gpu1, b: nic1, bandwidth: 64GBps, latency: 500ns}
fabric: {kind: rail, bandwidth: 400Gbps, latency: 1us}
)";
  CHECK_THROWS_WITH(parse_topology_text(text, "p.yaml"),
                    Catch::Contains("GPU n1.gpu1 cannot reach GPU n0.gpu0") && Catch::Contains("PXN") &&
                        Catch::Contains("n1.gpu0, its server's GPU on n0.gpu0's rail, is not reached over NVLink "
                                        "alone (link n1.gpu1->n1.sw is pcie)"));
}

TEST_CASE("a rail fabric's spines take an oversubscription; a rail-only one refuses it", "[topology]") {
  // Rail down bandwidth = 4 nodes x 50 GB/s = 200 GB/s; over 2 spines 100 GB/s each; 2:1 halves it.
  const Topology full = load_topology(topo_path("dgx-h100"), {"nodes=4"});
  const Topology half = load_topology(topo_path("dgx-h100"), {"nodes=4", "fabric.oversubscription=2"});
  auto spine_bw = [](const Topology& t) {
    for (int l = 0; l < t.num_links(); ++l)
      if (t.link_name(l) == "rail0->spine0") return t.link(l).bandwidth;
    return std::uint64_t{0};
  };
  CHECK(spine_bw(full) == 100'000'000'000ULL);
  CHECK(spine_bw(half) == 50'000'000'000ULL);
  CHECK_THROWS_WITH(load_topology(topo_path("dgx-h100"), {"nodes=4", "fabric.oversubscription=0.5"}),
                    Catch::Contains("key 'fabric.oversubscription'") && Catch::Contains("at least 1"));
  CHECK_THROWS_WITH(load_topology(topo_path("dgx-h100-rail-only"), {}, {"fabric.oversubscription=2"}),
                    Catch::Contains("key 'fabric.oversubscription'") && Catch::Contains("rail-only") &&
                        Catch::Contains("fabric.spines"));
}

TEST_CASE("a link from `gpus` is one link per GPU of the server, so node.gpus can be overridden", "[topology]") {
  const std::string head = "name: t\ngpu: b200\nnodes: 1\nnode:\n  gpus: 4\n  devices:\n    - {name: sw, kind: nvswitch}\n"
                           "  links:\n";
  const std::string tail = "      b: sw\n      bandwidth: 100GBps\n      latency: 200ns\n";
  const Topology all = parse_topology_text(head + "    - a: gpus\n" + tail, "all.yaml");
  const Topology list = parse_topology_text(head + "    - a: [gpu0, gpu1, gpu2, gpu3]\n" + tail, "list.yaml");
  // The same links in the same order: 4 GPUs x 2 directions.
  REQUIRE(all.num_links() == list.num_links());
  CHECK(all.num_links() == 8);
  for (int i = 0; i < all.num_links(); ++i) CHECK(all.link_name(i) == list.link_name(i));
  // Overriding the GPU count keeps every GPU on the switch: 32 GPUs, 64 links; GPU 0 to GPU 31 is
  // GPU-switch-GPU, 2 x 0.2 us.
  const Topology big = parse_topology_text(head + "    - a: gpus\n" + tail, "all.yaml", {"node.gpus=32"});
  CHECK(big.num_gpus() == 32);
  CHECK(big.num_links() == 64);
  CHECK(big.route(0, 31).latency == Time::ns(400));
  // The shipped NVL72 rack is written this way: a 32-GPU partition of it.
  CHECK(load_topology(topo_path("nvl72"), {"node.gpus=32"}).num_gpus() == 32);
  CHECK(load_topology(topo_path("nvl72")).num_gpus() == 72);
  // `gpus` is not a device name.
  std::string bad = head + "    - a: gpus\n" + tail;
  bad.replace(bad.find("name: sw"), 8, "name: gpus");
  CHECK_THROWS_WITH(parse_topology_text(bad, "bad.yaml"), Catch::Contains("a device name other than 'gpus'"));
}
