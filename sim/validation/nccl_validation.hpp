#pragma once
// Published nccl-tests measurements (validation/nccl-tests.csv) against the
// simulator, uncalibrated.
//
// Each row names its hardware (gpu, nodes, gpus_per_node, nics_per_node,
// nic_gbps), the collective and the size. The row's cluster is generated from
// those columns (nccl_validation_topology: one NVSwitch per server, one PCIe
// switch per NIC shared by the GPUs next to it, a rail fabric), the
// collective is simulated with NCCL's choice (or the algorithm/protocol the
// run forced), and the simulated time is compared with the measured one
// (printed time, or size x nccl-tests factor / busbw when only busbw was
// published). Nothing is fitted to these rows.
#include <map>
#include <string>
#include <vector>

#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {

struct NcclMeasurement {
  int line = 0;
  std::string system, gpu, fabric, algo, proto, quality, source;
  int nodes = 1, gpus_per_node = 8;
  int nics_per_node = 0;  // 0 = not published: the GPU's usual (A100 8 x 200G, others 8 x 400G)
  double nic_gbps = 0;
  bool nics_assumed = false;
  bool p2p = true, gdr = true;  // optional columns p2p, gdr (empty: true)
  // Optional column `topology`: a bundled topology file the row runs on
  // (resolved against the CSV's folder, e.g. ../topologies/aws-p5.yaml) with
  // nodes set to the row's; empty: the cluster generated from the columns.
  std::string topology;
  // Optional column `host_us`: the host's time per collective call in the
  // run's launch mode, measured on the same host (its source in
  // validation/nccl-tests-sources.md); 0 = not measured. nccl-tests issues its
  // timed calls back to back from one thread and waits once at the end, so a
  // call's time is the larger of the GPU's time and the host's:
  // predicted = max(simulated, host_us).
  double host_us = 0;
  CollOp op = CollOp::allreduce;
  std::uint64_t bytes = 0;
  double measured_us = 0;  // printed, or derived from busbw
};

// Throws UserError "FILE:LINE: ..." for a missing column or a bad value.
std::vector<NcclMeasurement> load_nccl_measurements(const std::string& path);

// The cluster a row runs on: its `topology` file with nodes=N (checked
// against the row's gpu, gpus_per_node and fabric), else the generated one.
Topology nccl_validation_cluster(const NcclMeasurement& m, bool line_rate = false);

// The YAML of the generated cluster; `line_rate`: every link at its line
// rate (link_efficiency 1), as parmsim modelled links before NCCL's model.
std::string nccl_validation_topology(const NcclMeasurement& m, bool line_rate = false);

struct NcclValidationRow {
  NcclMeasurement m;
  std::string choice;  // what the simulator ran, e.g. "nvls/simple/8"; " (host)" when host_us binds
  double predicted_us = 0;
  double error_pct = 0;  // 100 * (predicted - measured) / measured
};

// Size bands of the targets: latency floor (<= 4 KiB), middle (4 KiB - 16 MiB), large (>= 16 MiB).
std::string size_band(std::uint64_t bytes);

struct NcclValidation {
  std::vector<NcclValidationRow> rows;  // every row; statistics over quality=ok rows only
  std::map<std::string, double> mape_band, mape_system, mape_op, mape_fabric;
  std::map<std::string, int> count_band, count_system, count_op, count_fabric;
  // By size band and fabric class ("large (>= 16 MiB) / InfiniBand and NVSwitch"): the classes of the
  // targets, InfiniBand and NVSwitch (one node, or fabric ib), EFA and GCP (efa, tcpx, tcpxo, roce).
  std::map<std::string, double> mape_band_class;
  std::map<std::string, int> count_band_class;
  double mape = 0;
  int counted = 0;
};

// `textbook`: the model before NCCL's (a single flat ring for AllReduce,
// AllGather and ReduceScatter, direct AlltoAll, links at line rate), for the
// before/after comparison.
NcclValidation validate_nccl(const std::vector<NcclMeasurement>& rows, bool textbook = false);

}  // namespace parmsim
