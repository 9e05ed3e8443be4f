#pragma once
// Published MoE dispatch/combine measurements (validation/moe-dispatch.csv,
// its column conventions in validation/moe-dispatch-sources.md) against
// parmsim moe-dispatch, uncalibrated.
//
// Each row runs on the bundled topology of its GPU (dispatch_topology: H800
// topologies/h800-cluster.yaml, H100 dgx-h100, H200 h200-cluster, B200
// dgx-b200, GB200 nvl72) with as many nodes as its ranks need and, across
// nodes, the row's NIC speed; the row's kernel runs as the dispatcher
// parmsim has for it (dispatch_kernels()). A published time is compared with
// the simulated one; a published bandwidth becomes a time through the same
// byte count the simulator computes from its routing (the sources' tests'
// definitions). Nothing is fitted to these rows.
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/moe/dispatch.hpp"

namespace parmsim {

// How parmsim runs one published kernel, or why it does not.
struct DispatchKernel {
  std::string_view name;  // the CSV's kernel
  std::string_view help;
  bool modelled = false;       // its rows count in the headline MAPE
  std::string_view dispatcher;  // moe::dispatchers() entry it runs as; empty: not predicted
  // The source_id whose rows this entry takes (empty: any); the first entry
  // of a kernel that matches a row decides (a kernel whose data path changed
  // between the tables of one source and another).
  std::string_view source = {};
};
std::span<const DispatchKernel> dispatch_kernels();
// "name", or "name (source)" for an entry that takes one source's rows: the
// key of the MAPE by kernel.
std::string dispatch_kernel_label(const DispatchKernel& k);
// The kernel names, each once, in table order.
std::vector<std::string_view> kernel_names();

struct DispatchMeasurement {
  int line = 0;
  std::string where;  // "FILE:LINE"
  std::string source_id, kernel_name, gpu, source;
  std::string dispatch_dtype, combine_dtype;  // as published: bf16, fp8, mxfp8, nvfp4
  const DispatchKernel* kernel = nullptr;
  int ranks = 0, ranks_per_node = 0;  // 0: not published
  double nic_gbps = 0;                // 0: not published
  moe::DispatchSpec spec;             // experts: the row's, or its test script's (experts_assumed)
  bool experts_assumed = false;
  int sms = 0;  // the SMs the source states (column sms), 0 where it does not
  // Published values; nullopt where the cell is empty.
  std::optional<double> dispatch_us, combine_us, dispatch_rdma_GBps, dispatch_nvl_GBps, combine_rdma_GBps,
      combine_nvl_GBps;
};

// Throws UserError "FILE:LINE: column 'X': ..." for a missing column or a bad value.
std::vector<DispatchMeasurement> load_dispatch_measurements(const std::string& path);

// The bundled topology file (under `dir`) for a row's GPU and the --topo-set
// assignments that size it; empty file: no topology for this GPU.
struct DispatchTopology {
  std::string file;
  std::vector<std::string> overrides;
};
DispatchTopology dispatch_topology(const DispatchMeasurement& m, const std::string& dir);

// One compared phase (dispatch or combine) of a row.
struct DispatchComparison {
  bool compared = false;
  std::string basis;  // "time", "rdma_GBps" or "nvl_GBps": what was published
  double measured_us = 0, predicted_us = 0, error_pct = 0;  // error: 100 * (predicted - measured) / measured
};

struct DispatchValidationRow {
  DispatchMeasurement m;
  std::string status, why;  // "modelled", "nearest" or "not predicted" (why)
  std::string ran;          // dispatcher and topology
  DispatchComparison dispatch, combine;
};

struct DispatchValidation {
  std::vector<DispatchValidationRow> rows;
  // Over compared phases (a row gives up to two: dispatch and combine).
  double mape = 0;  // modelled kernels
  int counted = 0, counted_rows = 0;
  double mape_nearest = 0;  // kernels run as their nearest
  int counted_nearest = 0;
  int not_predicted = 0;
  std::map<std::string, double> mape_source, mape_kernel, mape_source_modelled;
  std::map<std::string, int> count_source, count_kernel, count_source_modelled;
};

// `topology_dir`: where the bundled topologies are (topologies/).
DispatchValidation validate_dispatch(const std::vector<DispatchMeasurement>& rows, const std::string& topology_dir);

}  // namespace parmsim
