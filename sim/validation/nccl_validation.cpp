#include "sim/validation/nccl_validation.hpp"

#include "sim/validation/mape.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "sim/coll/collective_plan.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/io/csv.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim {

std::vector<NcclMeasurement> load_nccl_measurements(const std::string& path) {
  std::vector<NcclMeasurement> rows;
  read_csv_table(path,
                 {"system", "gpu", "nodes", "gpus_per_node", "nics_per_node", "nic_gbps", "op", "bytes", "time_us",
                  "busbw_GBps", "algo", "proto", "quality", "source"},
                 [&](const CsvRow& row) {
    const std::string& where = row.where;
    auto get = [&](const char* c) { return row.get(c); };
    NcclMeasurement m;
    m.line = row.line;
    m.system = get("system");
    m.gpu = get("gpu");
    if (m.gpu != "a100" && m.gpu != "h100" && m.gpu != "h200" && m.gpu != "b200" && m.gpu != "rtx2080ti")
      throw UserError(
          fmt::format("{}: column 'gpu': expected a100, h100, h200, b200 or rtx2080ti, got '{}'", where, m.gpu));
    for (const char* c : {"p2p", "gdr"}) {
      const std::string v = get(c);
      if (v != "" && v != "true" && v != "false")
        throw UserError(fmt::format("{}: column '{}': expected true, false or empty (true), got '{}'", where, c, v));
      (std::string(c) == "p2p" ? m.p2p : m.gdr) = v != "false";
    }
    m.nodes = static_cast<int>(positive_int(get("nodes"), "nodes", where));
    m.gpus_per_node = static_cast<int>(positive_int(get("gpus_per_node"), "gpus_per_node", where));
    if (m.nodes > 4096 || m.gpus_per_node > 72)
      throw UserError(fmt::format("{}: at most 4096 nodes of 72 GPUs", where));
    if (!get("nics_per_node").empty()) {
      m.nics_per_node = static_cast<int>(positive_int(get("nics_per_node"), "nics_per_node", where));
      m.nic_gbps = positive_number(get("nic_gbps"), "nic_gbps", where);
    } else {
      // Not published: the usual server of this GPU (DGX A100: 8 x 200 Gb/s; DGX/HGX H100, H200, B200: 8 x 400 Gb/s).
      m.nics_per_node = m.gpu == "rtx2080ti" ? 1 : 8;
      m.nic_gbps = m.gpu == "a100" ? 200 : m.gpu == "rtx2080ti" ? 100 : 400;
      m.nics_assumed = true;
    }
    m.fabric = get("fabric");
    if (const std::string h = get("host_us"); !h.empty()) m.host_us = positive_number(h, "host_us", where);
    if (const std::string t = get("topology"); !t.empty()) {
      const std::filesystem::path dir = std::filesystem::path(path).parent_path();
      m.topology = (dir / t).lexically_normal().string();
      if (!std::filesystem::is_regular_file(m.topology))
        throw UserError(fmt::format("{}: column 'topology': expected a topology file (relative to the CSV's folder), "
                                    "got '{}' ({} does not exist)",
                                    where, t, m.topology));
    }
    if (!parse_coll_op(get("op"), &m.op) ||
        (m.op != CollOp::allreduce && m.op != CollOp::allgather && m.op != CollOp::reducescatter &&
         m.op != CollOp::alltoall))
      throw UserError(
          fmt::format("{}: column 'op': expected allreduce, allgather, reducescatter or alltoall, got '{}'", where,
                      get("op")));
    m.bytes = static_cast<std::uint64_t>(positive_int(get("bytes"), "bytes", where));
    const int p = m.nodes * m.gpus_per_node;
    if (!get("time_us").empty()) {
      m.measured_us = positive_number(get("time_us"), "time_us", where);
    } else {
      // busbw = size / time x factor (nccl-tests doc/PERFORMANCE.md).
      const double busbw = positive_number(get("busbw_GBps"), "busbw_GBps", where);
      const double factor = m.op == CollOp::allreduce ? 2.0 * (p - 1) / p : static_cast<double>(p - 1) / p;
      m.measured_us = static_cast<double>(m.bytes) * factor / (busbw * 1e3);
    }
    m.algo = get("algo");
    for (char& c : m.algo) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (m.algo == "nvlstree") m.algo = "nvls_tree";
    m.proto = get("proto");
    for (char& c : m.proto) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    m.quality = get("quality");
    quality_suspect(m.quality, where);
    m.source = get("source");
    if (m.source.empty()) throw UserError(fmt::format("{}: column 'source' is empty", where));
    rows.push_back(std::move(m));
  });
  return rows;
}

std::string nccl_validation_topology(const NcclMeasurement& m, bool line_rate) {
  if (m.gpu == "rtx2080ti") {
    // A PCIe-only server of GeForce cards: every GPU on a PCIe 3.0 x16 root
    // port of one CPU, the NIC on another. PCIe 3.0 x16: 8 GT/s x 16 lanes x
    // 128/130 / 8 = 15.75 GB/s per direction (PCI-SIG base specification 3.0);
    // the default PCIe fraction 0.75 leaves 11.8 GB/s, NCCL's own PCI_BW for
    // Gen3 x16 (12.0, NVIDIA/nccl src/graph/topo.h@5067397c line 25).
    std::string y = fmt::format("name: {}\ngpu: rtx2080ti\nnodes: {}\np2p: {}\ngdr: {}\n", m.system, m.nodes,
                                m.p2p ? "true" : "false", m.gdr ? "true" : "false");
    if (line_rate) y += "link_efficiency: {nvlink: 1.0, pcie: 1.0, network: 1.0}\n";
    y += fmt::format("node:\n  gpus: {}\n  devices:\n    - {{name: cpu0, kind: host_bridge}}\n", m.gpus_per_node);
    if (m.nodes > 1) y += "    - {name: nic0, kind: nic}\n";
    y += "  links:\n    - {a: [";
    for (int i = 0; i < m.gpus_per_node; ++i) y += fmt::format("{}gpu{}", i ? ", " : "", i);
    y += "], b: cpu0, bandwidth: 15.75GBps, latency: 500ns}\n";
    if (m.nodes > 1) {
      y += "    - {a: nic0, b: cpu0, bandwidth: 15.75GBps, latency: 500ns}\n";
      y += fmt::format("fabric: {{kind: switch, bandwidth: {}Gbps, latency: 1us}}\n", m.nic_gbps);
    }
    return y;
  }
  // Datasheet figures per direction: NVLink per GPU (A100 12 x 25 GB/s, H100/H200
  // 18 x 25, B200 18 x 50), PCIe Gen4 x16 32 GB/s (A100 servers), Gen5 x16 64.
  const double nvlink = m.gpu == "a100" ? 300 : m.gpu == "b200" ? 900 : 450;
  const double pcie = m.gpu == "a100" ? 32 : 64;
  const bool nvls = m.gpu != "a100";
  const int g = m.gpus_per_node;
  // More NICs than GPUs (AWS p5: 32 x 100 Gb/s EFA for 8 GPUs): each GPU's
  // NICs as one of their summed speed. NCCL's model sees the same: 32 channels
  // x 12 GB/s or 8 x 48 give the same bus bandwidth.
  const int k = m.nics_per_node > g ? g : m.nics_per_node;
  const double nic_gbps = m.nics_per_node > g ? m.nic_gbps * m.nics_per_node / g : m.nic_gbps;
  // One PCIe switch per NIC; GPU i sits on switch i * k / g (k >= g: one GPU
  // per switch group of k / g NICs).
  const int switches = std::min(g, k);
  std::string y = fmt::format("name: {}\ngpu: {}\nnodes: {}\nnode:\n  gpus: {}\n  devices:\n", m.system, m.gpu,
                              m.nodes, g);
  if (line_rate) y.insert(y.find("node:\n"), "link_efficiency: {nvlink: 1.0, pcie: 1.0, network: 1.0}\n");
  y += fmt::format("    - {{name: nvswitch, kind: nvswitch, nvls: {}}}\n", nvls ? "true" : "false");
  for (int s = 0; s < switches; ++s) y += fmt::format("    - {{name: pcie{}, kind: pcie_switch}}\n", s);
  for (int n = 0; n < k; ++n) y += fmt::format("    - {{name: nic{}, kind: nic}}\n", n);
  y += "  links:\n    - {a: [";
  for (int i = 0; i < g; ++i) y += fmt::format("{}gpu{}", i ? ", " : "", i);
  y += fmt::format("], b: nvswitch, bandwidth: {}GBps, latency: 200ns}}\n", nvlink);
  for (int s = 0; s < switches; ++s) {
    std::string members;
    for (int i = 0; i < g; ++i)
      if (i * switches / g == s) members += fmt::format("{}gpu{}", members.empty() ? "" : ", ", i);
    for (int n = 0; n < k; ++n)
      if (n * switches / k == s) members += fmt::format(", nic{}", n);
    y += fmt::format("    - {{a: [{}], b: pcie{}, bandwidth: {}GBps, latency: 500ns}}\n", members, s, pcie);
  }
  if (m.nodes > 1) y += fmt::format("fabric: {{kind: rail, bandwidth: {}Gbps, latency: 1us, spines: 2}}\n", nic_gbps);
  return y;
}

Topology nccl_validation_cluster(const NcclMeasurement& m, bool line_rate) {
  if (m.topology.empty())
    return parse_topology_text(nccl_validation_topology(m, line_rate), fmt::format("{} (generated)", m.system));
  std::vector<std::string> set = {fmt::format("nodes={}", m.nodes)};
  if (line_rate)
    for (const char* k : {"nvlink", "pcie", "network"}) set.push_back(fmt::format("link_efficiency.{}=1", k));
  Topology t = load_topology(m.topology, set);
  const std::string where = fmt::format("line {} ({})", m.line, m.topology);
  if (t.gpu_model() != m.gpu || t.gpus_per_node() != m.gpus_per_node)
    throw UserError(fmt::format("{}: the row's {} x {} per node, the topology's {} x {}", where, m.gpus_per_node, m.gpu,
                                t.gpus_per_node(), t.gpu_model()));
  if (m.nodes > 1 && !m.fabric.empty() && t.hints().transport != m.fabric)
    throw UserError(fmt::format("{}: the row's fabric '{}', the topology's transport '{}'", where, m.fabric,
                                t.hints().transport));
  return t;
}

std::string size_band(std::uint64_t bytes) {
  if (bytes <= 4096) return "floor (<= 4 KiB)";
  if (bytes < (16ULL << 20)) return "middle (4 KiB - 16 MiB)";
  return "large (>= 16 MiB)";
}

NcclValidation validate_nccl(const std::vector<NcclMeasurement>& rows, bool textbook) {
  NcclValidation v;
  Workspace ws;  // kept across rows: rows on one topology share plans and routes
  MapeTally band_t, system_t, op_t, fabric_t, band_class_t;
  double sum = 0;
  for (const NcclMeasurement& m : rows) {
    const Topology topo = nccl_validation_cluster(m, textbook);
    Collective c;
    c.name = to_string(m.op);
    c.op = m.op;
    c.bytes = m.bytes;
    for (int r = 0; r < m.nodes * m.gpus_per_node; ++r) c.group.push_back(r);
    if (!m.algo.empty() && m.op != CollOp::alltoall) c.algo = m.algo;
    if (!m.proto.empty() && m.op != CollOp::alltoall) c.proto = m.proto;
    if (textbook) {
      c.algo = m.op == CollOp::alltoall ? "direct" : "flat_ring";
      c.proto.clear();
    }
    std::string note;
    try {
      resolved_choice(c, topo, ws);
    } catch (const UserError&) {
      // The run forced what NCCL cannot do here (it then runs its own choice).
      note = fmt::format(" ({} unavailable)", c.algo);
      c.algo.clear();
      c.proto.clear();
    }
    TaskGraphBuilder b(static_cast<int>(c.group.size()));
    b.add_stream_all("comm");
    b.add_collective_tasks(c, "comm", c.name);
    const TaskGraph g = std::move(b).build();
    NcclValidationRow row;
    row.m = m;
    row.choice = resolved_choice(c, topo, ws) + note;
    row.predicted_us = simulate(g, topo, {}, ws).makespan.to_us();
    // The textbook model is parmsim's before NCCL's: it never saw the host.
    if (!textbook && m.host_us > row.predicted_us) {
      row.predicted_us = m.host_us;
      row.choice += " (host)";
    }
    row.error_pct = 100.0 * (row.predicted_us - m.measured_us) / m.measured_us;
    if (m.quality == "ok") {
      const double e = std::abs(row.error_pct);
      const std::string band = size_band(m.bytes), op = to_string(m.op);
      sum += e;
      ++v.counted;
      band_t.add(band, e);
      system_t.add(m.system, e);
      op_t.add(op, e);
      // One node of GeForce cards (rtx2080ti, PCIe only) is its own class.
      const bool pcie_node = m.nodes == 1 && m.gpu == "rtx2080ti";
      const std::string fabric = m.nodes == 1 ? (pcie_node ? "one node (pcie)" : "one node (nvswitch)")
                                 : m.fabric.empty() ? "unknown"
                                                    : m.fabric;
      fabric_t.add(fabric, e);
      // Classes of fabric: NCCL's own IB transport (and one node's NVSwitch),
      // the rented clouds' other transports (the registry's), and PCIe servers.
      bool cloud = false;
      for (const FabricTransport& t : fabric_transports()) cloud = cloud || (m.fabric == t.name && m.fabric != "ib");
      const std::string cls = pcie_node                           ? "PCIe"
                              : m.nodes == 1 || m.fabric == "ib" ? "InfiniBand and NVSwitch"
                              : cloud                             ? "EFA and GCP"
                                                                  : "";
      if (!cls.empty()) band_class_t.add(band + " / " + cls, e);
    }
    v.rows.push_back(std::move(row));
  }
  if (v.counted) v.mape = sum / v.counted;
  v.mape_band = band_t.means(), v.count_band = band_t.count;
  v.mape_system = system_t.means(), v.count_system = system_t.count;
  v.mape_op = op_t.means(), v.count_op = op_t.count;
  v.mape_fabric = fabric_t.means(), v.count_fabric = fabric_t.count;
  v.mape_band_class = band_class_t.means(), v.count_band_class = band_class_t.count;
  return v;
}

}  // namespace parmsim
