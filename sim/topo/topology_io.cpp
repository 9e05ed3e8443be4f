#include "sim/topo/topology_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <utility>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"

namespace parmsim {
namespace {

const Section kTop{"topology",
                   "A cluster: `nodes` identical servers described by `node`, joined by `fabric`.",
                   {{"name", "string", "required", "topology name"},
                    {"description", "string", "\"\"", "where the figures come from"},
                    {"gpu", "string", "required", "GPU profile (" + gpu_profile_names() + ")"},
                    {"gpu_memory", "size", "the profile's",
                     "device memory per GPU, e.g. 11GiB (a what-if card; layer and sweep report whether each "
                     "schedule's peak memory fits)"},
                    {"nodes", "int", "required", "number of servers"},
                    {"node", "map", "required", "one server (topology.node)"},
                    {"fabric", "map", "kind: none", "network between servers (topology.fabric)"},
                    {"link_efficiency", "map", "per GPU (below)",
                     "sustained fraction of line rate per link class (topology.link_efficiency)"},
                    {"cpu", "string", "intel", "host CPU vendor, intel | amd (NCCL's per-step network overhead)"},
                    {"p2p", "bool", "true",
                     "GPU peer-to-peer over PCIe. false (GeForce cards): GPU-GPU traffic of a server goes up to the "
                     "receiver's host_bridge and down again (NCCL's SHM transport through host memory); refused with "
                     "NVLink links"},
                    {"gdr", "bool", "true",
                     "GPUDirect RDMA. false: NIC traffic is staged in host memory, GPU -> its host_bridge -> NIC and "
                     "back"},
                    {"nccl", "map", "{}",
                     "latencies NCCL's model leaves to the machine, and the one its net plugin reports "
                     "(topology.nccl)"},
                    {"compute", "map", "{}",
                     "the GPU profile's GEMM throughput and kernel floor, scaled or replaced (topology.compute)"}}};
const Section kCompute{
    "topology.compute",
    "What-ifs and ranges on the GPU profile's compute figures (layer --sensitivity varies both; "
    "docs/results.md). Every kernel the simulator and the closed form time sees them.",
    {{"gemm_efficiency", "number", "1",
      "factor on the profile's sustained GEMM throughput, every dtype (the most cuBLAS reached, "
      "sim/compute/gpu_profile.cpp); above 0, and at most what keeps every dtype at or below its peak"},
     {"launch", "time", "the profile's",
      "the fixed floor of every kernel (3us in every profile: a null kernel's launch), in [0, 1ms]"}}};
const Section kNccl{
    "topology.nccl",
    "Latencies NCCL's cost model (docs/collectives.md) takes from the machine rather than its tables. "
    "launch and net_latency default to 0, NCCL's own defaults; plugin_latency is absent unless the fabric's "
    "net plugin reports one.",
    {{"launch", "time", "0us",
      "added once to every collective and every send/recv batch (e.g. host launch cost NCCL's base latencies "
      "leave out)"},
     {"net_latency", "time", "0us",
      "a latency the machine adds per network hop, in NCCL's model's place of latencyInter: added per network "
      "hop, twice for the Simple protocol, to what NCCL's tuner sees and to what runs (calibrate --fit-machine "
      "fits it)"},
     {"plugin_latency", "time", "none",
      "the latency the fabric's net plugin reports to NCCL (ncclNetProperties::latency, NCCL's latencyInter): "
      "NCCL's tuner adds it per network hop, twice for Simple, when it chooses an algorithm; the time of what "
      "runs does not include it (the plugin's figure steers the choice; aws-ofi-nccl chose 75 us for that). "
      "Above 0 when given; fabric.transport efa requires it"},
     {"protocols", "list", "[ll, ll128, simple]",
      "NCCL_PROTO as the platform's own setup exports it: the protocols NCCL's tuner may choose (ll, ll128, "
      "simple); --proto forces one regardless, as NCCL_PROTO set by hand would (Google's TCPXO profile exports "
      "Simple,LL128)"},
     {"nvls_chunksize", "size", "128KiB",
      "NCCL_NVLS_CHUNKSIZE as the platform's setup exports it: the NVLS and NVLS-Tree chunk before NCCL's size "
      "ladder (aws-ofi-nccl sets 512KiB on p5, p5e, p5en)"},
     {"nvlstree_max_chunksize", "size", "NCCL's",
      "NCCL_NVLSTREE_MAX_CHUNKSIZE as the platform's setup exports it: NVLS-Tree's chunk at most this "
      "(NCCL: 64KiB from 4 nodes, else the NVLS chunk; aws-ofi-nccl sets 512KiB on p5, p5e, p5en)"},
     {"buffsize", "size", "4MiB",
      "NCCL_BUFFSIZE as the platform's setup exports it: the Simple protocol's buffer per connection; one NVLS "
      "chunk is at most an eighth of it (aws-ofi-nccl and Google's TCPXO profile set 8MiB)"}}};
const Section kEff{
    "topology.link_efficiency",
    "Every link's bandwidth is its line rate times its class's fraction; collectives, transfers and the "
    "NCCL model all see the sustained figure. Defaults are NCCL's own per-link bandwidths over the line rate "
    "(NVIDIA/nccl src/graph/topo.h): NVLink 20.0/25 GB/s per link on A100 (0.80), 20.6/25 on H100/H200 "
    "(0.824), 40.1/50 on B200 (0.802), 1.0 for other GPUs; PCIe 48/64 GB/s on Gen5 x16 and 24/32 on Gen4 "
    "(0.75); network 1.0 (NCCL counts a NIC at its line rate). Set 1.0 where the topology already gives "
    "measured, achievable figures.",
    {{"nvlink", "number", "per GPU", "GPU-GPU and GPU-NVSwitch links"},
     {"pcie", "number", "0.75", "links through PCIe switches and host bridges, GPU-NIC paths"},
     {"network", "number", "1.0", "NIC-switch and switch-switch links"}}};
const Section kNode{"topology.node",
                    "One server. GPUs are named gpu0..gpu{N-1}; other devices are declared in `devices`.",
                    {{"gpus", "int", "required", "GPUs per server"},
                     {"devices", "list", "[]", "non-GPU devices: {name, kind} (topology.node.devices[])"},
                     {"links", "list", "required", "links inside the server (topology.node.links[])"}}};
const Section kDevice{"topology.node.devices[]",
                      "A device inside a server.",
                      {{"name", "string", "required", "unique within the server; nics are used by the fabric"},
                       {"kind", "string", "required", "nvswitch | pcie_switch | host_bridge | nic"},
                       {"nvls", "bool", "false",
                        "nvswitch: reduces and multicasts in the switch (NVLink SHARP, third-generation "
                        "NVSwitch: H100/H200, B200); enables NCCL's NVLS and NVLS-Tree algorithms"}}};
const Section kLink{"topology.node.links[]",
                    "A full-duplex link. `a` may be a list: one link per element.",
                    {{"a", "string|list", "required",
                      "device name(s); `gpus`: every GPU of the server (gpu0..gpu{N-1}), so that node.gpus can be "
                      "overridden (--topo-set node.gpus=32)"},
                     {"b", "string", "required", "device name"},
                     {"bandwidth", "bandwidth", "required", "per direction (a->b, and b->a unless bandwidth_ba)"},
                     {"bandwidth_ba", "bandwidth", "bandwidth", "b->a direction if different"},
                     {"latency", "time", "required", "one-way latency"}}};
std::string transport_names() {
  std::string out;
  for (const FabricTransport& t : fabric_transports()) out += fmt::format("{}{}", out.empty() ? "" : " | ", t.name);
  return out;
}
std::string transport_help() {
  std::string out = "the transport NCCL reaches the fabric through: " + transport_names() + ".";
  for (const FabricTransport& t : fabric_transports()) out += fmt::format(" {}: {}.", t.name, t.help);
  return out;
}

const Section kFabric{
    "topology.fabric",
    "How the servers' NICs connect. none: a single server. switch: every NIC to one switch. "
    "rail: NIC i of every server to rail switch i; with `spines` > 0, rails joined by spine switches, their "
    "uplinks sized by `oversubscription`; with none (rail-only), a GPU reaches another server's GPU on another "
    "rail as NCCL's PXN does: over NVLink to the GPU of its own server on that rail, then through its NIC. "
    "fat_tree: servers grouped under leaf switches, leaves joined by `spines` spine switches, "
    "uplinks sized by `oversubscription`.",
    {{"kind", "string", "none", "none | switch | rail | fat_tree"},
     {"bandwidth", "bandwidth", "required*", "NIC <-> switch, per direction (*unless kind none)"},
     {"latency", "time", "required*", "NIC <-> switch one-way latency, also used for switch <-> switch"},
     {"nodes_per_leaf", "int", "required for fat_tree", "servers under one leaf switch"},
     {"spines", "int", "0", "spine switches (fat_tree: at least 1; rail: 0 is rail-only)"},
     {"oversubscription", "number", "1",
      "fat_tree: leaf down bandwidth / up bandwidth; rail (with spines): a rail's down bandwidth (nodes x "
      "bandwidth) / its uplinks' total"},
     {"transport", "string", "ib", transport_help()}}};
SectionRegistrar r1(kTop), r2(kNode), r3(kDevice), r4(kLink), r5(kFabric), r6(kEff), r7(kNccl), r8(kCompute);

// Bounds on a topology's size (memory grows with links, about 150 bytes each).
constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;
constexpr std::int64_t kMaxLinks = std::int64_t{1} << 22;

double fraction(const YamlReader& e, const char* key, double def) {
  auto v = e.opt(key);
  if (!v) return def;
  const double x = v->as_double();
  if (!(x > 0 && x <= 1)) v->fail("a fraction in (0, 1]");
  return x;
}

DeviceKind parse_kind(const YamlReader& r) {
  const std::string s = r.as_string();
  if (s == "nvswitch") return DeviceKind::nvswitch;
  if (s == "pcie_switch") return DeviceKind::pcie_switch;
  if (s == "host_bridge") return DeviceKind::host_bridge;
  if (s == "nic") return DeviceKind::nic;
  r.fail("a device kind: nvswitch, pcie_switch, host_bridge or nic");
}

Topology build(const YamlReader& top) {
  top.check_keys(kTop);
  const std::string name = top.at("name").as_string();
  const int nodes = static_cast<int>(top.at("nodes").as_int(1, 1 << 20));
  const YamlReader node = top.at("node");
  node.check_keys(kNode);
  const int gpn = static_cast<int>(node.at("gpus").as_int(1, 1 << 16));
  {
    // An unknown GPU profile is an error of this file, not of a later command.
    const YamlReader g = top.at("gpu");
    bool known = false;
    for (const GpuProfile& p : gpu_profiles()) known = known || p.name == g.as_string();
    if (!known) g.fail("a GPU profile: " + gpu_profile_names());
  }
  // Every GPU, device and link is held in memory (about 150 bytes a link) and
  // numbered with an int: the products of the sizes are bounded first.
  if (std::int64_t{nodes} * gpn > kMaxGpus)
    top.at("nodes").fail(fmt::format("at most {} GPUs in all: nodes * node.gpus = {} * {} = {}", kMaxGpus, nodes, gpn,
                                     std::int64_t{nodes} * gpn));
  Topology t(name, top.at("gpu").as_string(), gpn);

  // Device templates for one server.
  struct Tmpl {
    std::string name;
    DeviceKind kind;
  };
  std::vector<Tmpl> tmpl;
  std::map<std::string, int> local;  // name -> template index
  for (int g = 0; g < gpn; ++g) {
    local[fmt::format("gpu{}", g)] = static_cast<int>(tmpl.size());
    tmpl.push_back({fmt::format("gpu{}", g), DeviceKind::gpu});
  }
  if (auto devs = node.opt("devices")) {
    devs->expect_seq();
    for (std::size_t i = 0; i < devs->size(); ++i) {
      const YamlReader d = (*devs)[i];
      d.check_keys(kDevice);
      const std::string dn = d.at("name").as_string();
      if (local.count(dn)) d.at("name").fail(fmt::format("a device name not used before in the server ('{}' is)", dn));
      if (dn == "gpus") d.at("name").fail("a device name other than 'gpus' (links use it for every GPU of the server)");
      local[dn] = static_cast<int>(tmpl.size());
      tmpl.push_back({dn, parse_kind(d.at("kind"))});
      if (auto nv = d.opt("nvls")) {
        if (tmpl.back().kind != DeviceKind::nvswitch) nv->fail("nvls only on a device of kind nvswitch (only an NVSwitch reduces in the switch)");
        t.hints().nvls = t.hints().nvls || nv->as_bool();
      }
    }
  }
  if (std::int64_t{nodes} * static_cast<std::int64_t>(tmpl.size()) > kMaxLinks)
    top.at("nodes").fail(fmt::format("at most {} devices in all: nodes * (node.gpus + node.devices) = {} * {}",
                                     kMaxLinks, nodes, tmpl.size()));
  std::vector<std::vector<int>> vtx(nodes, std::vector<int>(tmpl.size()));
  // GPUs first, in rank order (rank = node * gpus + local index).
  for (int n = 0; n < nodes; ++n)
    for (int g = 0; g < gpn; ++g)
      vtx[n][g] = t.add_device({fmt::format("n{}.gpu{}", n, g), DeviceKind::gpu, n, n * gpn + g});
  for (int n = 0; n < nodes; ++n)
    for (std::size_t i = gpn; i < tmpl.size(); ++i)
      vtx[n][i] = t.add_device({fmt::format("n{}.{}", n, tmpl[i].name), tmpl[i].kind, n, -1});

  const YamlReader links = node.at("links");
  links.expect_seq();
  auto lookup = [&](const YamlReader& r) {
    const std::string s = r.as_string();
    auto it = local.find(s);
    if (it == local.end()) r.fail("the name of a GPU (gpu0..), `gpus` (every GPU) or a device declared in node.devices");
    return it->second;
  };
  std::int64_t node_links = 0;
  for (std::size_t i = 0; i < links.size(); ++i) {
    const YamlReader l = links[i];
    l.check_keys(kLink);
    std::vector<int> as;
    const YamlReader a = l.at("a");
    if (a.node().IsSequence())
      for (std::size_t j = 0; j < a.size(); ++j) as.push_back(lookup(a[j]));
    else if (a.as_string() == "gpus")
      for (int g = 0; g < gpn; ++g) as.push_back(g);  // the templates' first gpn entries are gpu0..
    else
      as.push_back(lookup(a));
    const int b = lookup(l.at("b"));
    const std::uint64_t bw = l.at("bandwidth").as_bandwidth();
    const std::uint64_t bw_ba = l.has("bandwidth_ba") ? l.at("bandwidth_ba").as_bandwidth() : bw;
    const Time lat = l.at("latency").as_time();
    node_links += static_cast<std::int64_t>(as.size());
    if (node_links * nodes > kMaxLinks)
      l.fail(fmt::format("at most {} links in all: nodes * node.links = {} * {} or more", kMaxLinks, nodes, node_links));
    for (int ai : as) {
      if (ai == b) l.fail("a link between two different devices");
      for (int n = 0; n < nodes; ++n) t.add_link(vtx[n][ai], vtx[n][b], bw, bw_ba, lat);
    }
  }

  // Fabric.
  std::vector<std::vector<int>> nics(nodes);
  for (int n = 0; n < nodes; ++n)
    for (std::size_t i = gpn; i < tmpl.size(); ++i)
      if (tmpl[i].kind == DeviceKind::nic) nics[n].push_back(vtx[n][i]);
  std::string kind = "none";
  std::optional<YamlReader> fab = top.opt("fabric");
  if (fab) {
    fab->check_keys(kFabric);
    kind = fab->get_string("kind", "none");
    // A key the kind does not read would be ignored: refused.
    const std::map<std::string, std::vector<std::string>> takes = {
        {"none", {"kind"}},
        {"switch", {"kind", "bandwidth", "latency", "transport"}},
        {"rail", {"kind", "bandwidth", "latency", "spines", "oversubscription", "transport"}},
        {"fat_tree", {"kind", "bandwidth", "latency", "nodes_per_leaf", "spines", "oversubscription", "transport"}}};
    if (auto it = takes.find(kind); it != takes.end())
      for (const std::string& k : fab->keys())
        if (std::find(it->second.begin(), it->second.end(), k) == it->second.end()) {
          std::string list;
          for (const auto& x : it->second) list += (list.empty() ? "" : ", ") + x;
          fab->at(k).fail(fmt::format("no `{}` on a fabric of kind {} (it takes {})", k, kind, list));
        }
  }
  if (kind == "none") {
    if (nodes > 1) top.at("nodes").fail("1 node when fabric.kind is none (add a fabric to join servers)");
  } else {
    const std::uint64_t bw = fab->at("bandwidth").as_bandwidth();
    const Time lat = fab->at("latency").as_time();
    const std::size_t nic_count = nics[0].size();
    if (nic_count == 0) top.at("node").fail("at least one device of kind nic when the fabric is not none");
    auto sw = [&](const std::string& nm) { return t.add_device({nm, DeviceKind::network_switch, -1, -1}); };
    if (kind == "switch") {
      const int s = sw("switch");
      for (int n = 0; n < nodes; ++n)
        for (int v : nics[n]) t.add_link(v, s, bw, bw, lat);
    } else if (kind == "rail") {
      const int spines = fab->has("spines") ? static_cast<int>(fab->at("spines").as_int(0, 1 << 16)) : 0;
      if ((std::int64_t{nodes} + spines) * static_cast<std::int64_t>(nic_count) > kMaxLinks)
        fab->fail(fmt::format("at most {} links in all: (nodes + spines) * NICs per node = ({} + {}) * {}", kMaxLinks,
                              nodes, spines, nic_count));
      // A spine link's bandwidth, bw * nodes / spines, stays below 2^63 B/s.
      if (spines > 0 && static_cast<double>(bw) * nodes / spines >= 9.2e18)
        fab->at("bandwidth").fail(fmt::format("a bandwidth whose spine links, bandwidth * nodes / spines = {} * {} / {}, "
                                              "stay below 2^63 B/s",
                                              bw, nodes, spines));
      std::vector<int> rails;
      for (std::size_t r = 0; r < nic_count; ++r) rails.push_back(sw(fmt::format("rail{}", r)));
      for (int n = 0; n < nodes; ++n)
        for (std::size_t r = 0; r < nic_count; ++r) t.add_link(nics[n][r], rails[r], bw, bw, lat);
      // Spines carry cross-rail traffic at the rails' down bandwidth over `oversubscription` (1: all of it).
      double over = 1;
      if (auto o = fab->opt("oversubscription")) {
        over = o->as_double();
        if (!(over >= 1)) o->fail("a ratio of at least 1 (a rail's down bandwidth / its uplinks' total)");
        if (spines == 0)
          o->fail(fmt::format("no oversubscription on a rail-only fabric (spines: 0): no uplink carries cross-rail "
                              "traffic; give fabric.spines"));
      }
      if (spines > 0) {
        std::uint64_t up = bw * static_cast<std::uint64_t>(nodes) / static_cast<std::uint64_t>(spines);
        if (over != 1) {
          up = static_cast<std::uint64_t>(static_cast<double>(bw) * nodes / spines / over);
          if (up == 0)
            fab->at("oversubscription")
                .fail(fmt::format("a smaller ratio ({:g}): each spine uplink would get zero bandwidth", over));
        }
        for (int s = 0; s < spines; ++s) {
          const int sv = sw(fmt::format("spine{}", s));
          for (int rv : rails) t.add_link(rv, sv, up, up, lat);
        }
      }
    } else if (kind == "fat_tree") {
      const YamlReader npl_r = fab->at("nodes_per_leaf");
      const int npl = static_cast<int>(npl_r.as_int(1, nodes));
      if (nodes % npl != 0) npl_r.fail(fmt::format("a divisor of nodes ({})", nodes));
      const YamlReader sp_r = fab->at("spines");
      const int spines = static_cast<int>(sp_r.as_int(1, 1 << 16));
      double over = 1;
      if (auto o = fab->opt("oversubscription")) {
        over = o->as_double();
        if (!(over >= 1)) o->fail("a ratio of at least 1 (down bandwidth / up bandwidth)");
      }
      const int leaves = nodes / npl;
      if (std::int64_t{leaves} * spines + std::int64_t{nodes} * static_cast<std::int64_t>(nic_count) > kMaxLinks)
        sp_r.fail(fmt::format("at most {} links in all: leaves * spines + nodes * NICs = {} * {} + {} * {}", kMaxLinks,
                              leaves, spines, nodes, nic_count));
      std::vector<int> leaf;
      for (int l = 0; l < leaves; ++l) leaf.push_back(sw(fmt::format("leaf{}", l)));
      for (int n = 0; n < nodes; ++n)
        for (int v : nics[n]) t.add_link(v, leaf[n / npl], bw, bw, lat);
      if (leaves > 1) {
        // Down bandwidth of a leaf = npl * nics * bw; up = down / over, split over the spines.
        const double up_total = static_cast<double>(bw) * npl * static_cast<double>(nic_count) / over;
        const auto up = static_cast<std::uint64_t>(up_total / spines);
        if (up == 0)
          sp_r.fail(fmt::format("fewer spines (or a smaller oversubscription, {:g}): each uplink would get zero "
                                "bandwidth",
                                over));
        for (int s = 0; s < spines; ++s) {
          const int sv = sw(fmt::format("spine{}", s));
          for (int l = 0; l < leaves; ++l) t.add_link(leaf[l], sv, up, up, lat);
        }
      }
    } else {
      fab->at("kind").fail("none, switch, rail or fat_tree");
    }
  }
  LinkEfficiency eff;
  eff.nvlink = t.gpu().nvlink_efficiency;
  eff.pcie = 0.75;
  if (auto e = top.opt("link_efficiency")) {
    e->check_keys(kEff);
    eff.nvlink = fraction(*e, "nvlink", eff.nvlink);
    eff.pcie = fraction(*e, "pcie", eff.pcie);
    eff.network = fraction(*e, "network", eff.network);
  }
  t.apply_efficiency(eff);
  std::optional<YamlReader> plugin_latency;
  if (auto nc = top.opt("nccl")) {
    nc->check_keys(kNccl);
    if (auto v = nc->opt("launch")) t.hints().launch_us = v->as_time().to_us();
    if (auto v = nc->opt("net_latency")) t.hints().net_latency_us = v->as_time().to_us();
    if (auto v = nc->opt("protocols")) {
      v->expect_seq();
      if (v->size() == 0) v->fail("a non-empty list of NCCL protocols: ll, ll128, simple");
      unsigned mask = 0;
      for (std::size_t i = 0; i < v->size(); ++i) {
        const YamlReader e = (*v)[i];
        std::string name = e.as_string();
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (name == "ll") mask |= 1u;
        else if (name == "ll128") mask |= 2u;
        else if (name == "simple") mask |= 4u;
        else e.fail("an NCCL protocol: ll, ll128 or simple");
      }
      t.hints().protocols = mask;
    }
    // A chunk or buffer size in bytes: at least 4 KiB (NCCL's grain) and at most 1 GiB.
    auto chunk_bytes = [](const YamlReader& v) {
      const std::uint64_t b = v.as_size();
      if (b < 4096 || b > (1ull << 30)) v.fail("a size from 4KiB to 1GiB");
      return static_cast<double>(b);
    };
    if (auto v = nc->opt("nvls_chunksize")) t.hints().nvls_chunksize = chunk_bytes(*v);
    if (auto v = nc->opt("nvlstree_max_chunksize")) t.hints().nvlstree_max_chunksize = chunk_bytes(*v);
    if (auto v = nc->opt("buffsize")) t.hints().buffsize = chunk_bytes(*v);
    if ((plugin_latency = nc->opt("plugin_latency"))) {
      t.hints().plugin_latency_us = plugin_latency->as_time().to_us();
      if (!(t.hints().plugin_latency_us > 0))
        plugin_latency->fail("a latency above 0 (the figure the net plugin reports to NCCL; leave the key out "
                             "when the plugin reports none)");
    }
  }
  if (fab && fab->has("transport")) {
    const YamlReader tr = fab->at("transport");
    const std::string name = tr.as_string();
    const FabricTransport* found = nullptr;
    for (const FabricTransport& x : fabric_transports())
      if (name == x.name) found = &x;
    if (!found) tr.fail(transport_names());
    t.hints().transport = name;
    // A plugin that reports the fabric's latency to NCCL: the topology gives it.
    if (found->reports_latency && !plugin_latency)
      tr.fail(fmt::format("a transport whose plugin reports no latency, or nccl.plugin_latency: the {} plugin reports "
                          "one to NCCL for {} (75us on AWS p4d, p4de and p5, 35us on p5en)",
                          found->plugin, name));
  }
  if (auto c = top.opt("compute")) {
    c->check_keys(kCompute);
    double factor = 1;
    if (auto v = c->opt("gemm_efficiency")) {
      factor = v->as_double();
      const GpuProfile& g = t.gpu();
      const double most = max_gemm_efficiency(g);
      if (!(factor > 0) || !(factor <= most))
        v->fail(fmt::format("a factor above 0 and at most {:.4g} (the {} profile's peak over its sustained GEMM "
                            "throughput, for the dtype nearest its peak)",
                            most, g.name));
    }
    std::optional<Time> launch;
    if (auto v = c->opt("launch")) {
      launch = v->as_time();
      if (*launch < Time{} || *launch > Time::us(1000)) v->fail("a time in [0, 1ms], e.g. 3us");
    }
    t.set_compute(factor, launch);
  }
  if (auto m = top.opt("gpu_memory")) {
    const std::uint64_t v = m->as_size();
    if (v == 0) m->fail("a memory size above 0, e.g. 11GiB");
    t.set_gpu_memory(v);
  }
  if (auto cpu = top.opt("cpu")) {
    const std::string v = cpu->as_string();
    if (v != "intel" && v != "amd") cpu->fail("intel or amd");
    t.hints().amd_cpu = v == "amd";
  }
  for (const char* key : {"p2p", "gdr"})
    if (auto v = top.opt(key)) (std::string(key) == "p2p" ? t.hints().p2p : t.hints().gdr) = v->as_bool();
  if (!t.hints().p2p) {
    // NVLink is peer-to-peer: a server with NVLink links cannot be without it.
    for (int id = 0; id < t.num_links(); ++id)
      if (t.link_class(id) == LinkClass::nvlink) {
        top.at("p2p").fail(fmt::format("true: the server has NVLink links ({}), and NVLink is peer-to-peer "
                                       "(p2p: false describes GPUs on PCIe only)",
                                       t.link_name(id)));
      }
  }
  try {
    t.finalize();
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: {}", top.file(), e.what()));
  }
  return t;
}

// An override may add the optional keys that have a default to a file without them (a what-if
// on any topology: --topo-set gpu_memory=48GiB, compute.gemm_efficiency=0.9, p2p=false,
// nccl.launch=5us, a sweep's set or grid): the top-level scalar keys of the registry that are
// not required, and the keys of its compute and nccl maps. Every other key must exist already
// (a typo is reported, never added).
bool adds_allowed(const std::string& o) {
  for (const KeyDoc& k : kTop.keys)
    if (k.fallback != "required" && k.type != "map" && o.rfind(fmt::format("{}=", k.key), 0) == 0) return true;
  for (const Section* sec : {&kCompute, &kNccl})
    for (const KeyDoc& k : sec->keys)
      if (o.rfind(fmt::format("{}.{}=", sec->name.substr(sec->name.find('.') + 1), k.key), 0) == 0) return true;
  return false;
}

}  // namespace

Topology parse_topology_text(const std::string& text, const std::string& name,
                             const std::vector<std::string>& overrides, const std::vector<std::string>& overlay) {
  YamlReader r = YamlReader::load_string(text, name);
  for (const auto& o : overlay) apply_override(r.node(), o, name + ": overlay", true, true);
  for (const auto& o : overrides) apply_override(r.node(), o, name + ": override", adds_allowed(o), adds_allowed(o));
  return build(r);
}

Topology load_topology(const std::string& file, const std::vector<std::string>& overrides,
                       const std::vector<std::string>& overlay) {
  YamlReader r = YamlReader::load_file(file);
  for (const auto& o : overlay) apply_override(r.node(), o, file + ": overlay", true, true);
  for (const auto& o : overrides) apply_override(r.node(), o, file + ": override", adds_allowed(o), adds_allowed(o));
  return build(r);
}

// An overlay's map as "key.path=value" assignments.
static std::vector<std::string> overlay_assignments(const YamlReader& r) {
  std::vector<std::string> out;
  if (!r.node().IsDefined() || r.node().IsNull()) return out;  // an empty overlay changes nothing
  if (!r.node().IsMap()) r.fail("a map of topology keys, e.g. {link_efficiency: {nvlink: 0.8}, nccl: {launch: 14us}}");
  auto walk = [&](auto&& self, const YamlReader& m, const std::string& prefix) -> void {
    for (const std::string& k : m.keys()) {
      const YamlReader v = m.at(k);
      const std::string key = prefix.empty() ? k : prefix + "." + k;
      if (v.node().IsMap())
        self(self, v, key);
      else if (v.node().IsScalar())
        out.push_back(key + "=" + v.as_string());
      else
        v.fail("a single value or a map (an overlay sets values, not lists)");
    }
  };
  walk(walk, r, "");
  return out;
}

std::vector<std::string> load_topology_overlay(const std::string& file) {
  return overlay_assignments(YamlReader::load_file(file));
}

std::vector<std::string> parse_topology_overlay_text(const std::string& text, const std::string& name) {
  return overlay_assignments(YamlReader::load_string(text, name));
}


}  // namespace parmsim
