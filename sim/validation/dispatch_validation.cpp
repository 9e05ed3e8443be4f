#include "sim/validation/dispatch_validation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/io/csv.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/mape.hpp"

namespace parmsim {

namespace {

constexpr std::array<DispatchKernel, 15> kKernels = {{
    {"deepep-normal-intranode", "DeepEP V1 normal kernels within one node", true, "deepep-normal"},
    {"deepep-normal-internode", "DeepEP V1 normal kernels across nodes (NVLink forwarding plus RDMA)", true,
     "deepep-normal"},
    {"deepep-normal", "DeepEP V1 normal kernels as NVIDIA measured them on GB200 (path not stated)", true,
     "deepep-normal"},
    {"deepep-ll",
     "DeepEP V1 low-latency kernels, as the current table (source deepseek-deepep-v1, measured since 2025-06-05) "
     "ran them: NVLink to peers of the same node",
     true, "deepep-ll-nvlink", "deepseek-deepep-v1"},
    {"deepep-ll", "DeepEP V1 low-latency kernels as first released: pure RDMA", true, "deepep-ll"},
    {"uccl-ep-normal-intranode",
     "UCCL-EP normal kernels (DeepEP's algorithm, RDMA through a CPU proxy): run as deepep-normal, reported apart",
     false, "deepep-normal"},
    {"uccl-ep-normal-internode", "UCCL-EP normal kernels across nodes: run as deepep-normal, reported apart", false,
     "deepep-normal"},
    {"uccl-ep-ll", "UCCL-EP low-latency kernels: run as deepep-ll, reported apart", false, "deepep-ll"},
    {"hybrid-ep-torchapi",
     "NVIDIA Hybrid-EP (TMA NVLink path, IBGDA RDMA, one copy per node as DeepEP), timed around the Python call: "
     "run as deepep-normal, reported apart",
     false, "deepep-normal"},
    {"hybrid-ep-kernelonly", "NVIDIA Hybrid-EP, kernel time only: run as deepep-normal, reported apart", false,
     "deepep-normal"},
    {"nccl-ep-ll",
     "NCCL EP low-latency mode (per-selection sends as DeepEP's; NVLink to NVLink peers by LSA stores, RDMA to the "
     "others: NVIDIA/nccl contrib/nccl_ep/README.md@5067397c line 38): run as deepep-ll-nvlink, reported apart",
     false, "deepep-ll-nvlink"},
    {"deepep-v2", "DeepEP V2 (ElasticBuffer on NCCL's device API), GPUs named by architecture only: not predicted",
     false, ""},
    {"deepep-pcie-normal", "NVIDIA's DeepEP normal kernels with NVLink disabled, on H20: not predicted", false, ""},
    {"trtllm-nvlink-one-sided",
     "TensorRT-LLM's one-sided NVLink AlltoAll (one copy per rank, inference kernels): not predicted", false, ""},
    {"nccl-alltoall", "an NCCL AlltoAllv of the permuted tokens (Megatron-Core's alltoall dispatcher)", true,
     "nccl-alltoall"},
}};

std::optional<double> optional_number(const CsvRow& row, const char* col) {
  const std::string v = row.get(col);
  if (v.empty()) return std::nullopt;
  return positive_number(v, col, row.where);
}

// The expert count of the test script that measured a row that does not
// state it: DeepEP's test_intranode.py / test_internode.py@d8dd185 line 16,
// (256 // ranks) * ranks; test_low_latency.py line 160, 288 (which it asserts
// divides by the ranks: where it does not, the largest multiple of the ranks
// below it, at least the ranks).
int script_experts(bool low_latency, int ranks) {
  const int e = low_latency ? 288 : 256;
  if (e % ranks == 0) return e;
  return std::max(ranks, e / ranks * ranks);
}

}  // namespace

std::span<const DispatchKernel> dispatch_kernels() { return kKernels; }

std::string dispatch_kernel_label(const DispatchKernel& k) {
  return k.source.empty() ? std::string(k.name) : fmt::format("{} ({})", k.name, k.source);
}

std::vector<std::string_view> kernel_names() {
  std::vector<std::string_view> v;
  for (const DispatchKernel& k : kKernels)
    if (std::find(v.begin(), v.end(), k.name) == v.end()) v.push_back(k.name);
  return v;
}

std::vector<DispatchMeasurement> load_dispatch_measurements(const std::string& path) {
  std::vector<DispatchMeasurement> rows;
  read_csv_table(
      path,
      {"source_id", "kernel", "gpu", "ranks", "ranks_per_node", "nic_gbps", "tokens", "hidden", "experts", "topk",
       "topk_groups", "dispatch_dtype", "combine_dtype", "dispatch_us", "combine_us", "dispatch_rdma_GBps",
       "dispatch_nvl_GBps", "combine_rdma_GBps", "combine_nvl_GBps", "source"},
      [&](const CsvRow& row) {
        const std::string& where = row.where;
        auto required = [&](const char* c) {
          const std::string& v = row.get(c);
          if (v.empty()) throw UserError(fmt::format("{}: column '{}' is empty", where, c));
          return v;
        };
        auto count = [&](const char* c, std::int64_t hi) {
          const std::int64_t v = positive_int(required(c), c, where);
          if (v > hi) throw UserError(fmt::format("{}: column '{}': at most {}, got {}", where, c, hi, v));
          return static_cast<int>(v);
        };
        DispatchMeasurement m;
        m.line = row.line;
        m.where = where;
        m.source_id = required("source_id");
        m.kernel_name = required("kernel");
        for (const DispatchKernel& k : dispatch_kernels())
          if (k.name == m.kernel_name && (k.source.empty() || k.source == m.source_id)) {
            m.kernel = &k;
            break;
          }
        if (!m.kernel)
          throw UserError(fmt::format("{}: column 'kernel': unknown kernel '{}': expected {}", where, m.kernel_name,
                                      join_names(kernel_names(), ", ", " or ")));
        m.gpu = required("gpu");
        m.ranks = count("ranks", 65536);
        if (!row.get("ranks_per_node").empty()) m.ranks_per_node = count("ranks_per_node", 72);
        if (!row.get("nic_gbps").empty()) m.nic_gbps = positive_number(row.get("nic_gbps"), "nic_gbps", where);
        moe::DispatchSpec& s = m.spec;
        s.ranks = m.ranks;
        s.tokens = count("tokens", 1 << 20);
        s.hidden = count("hidden", 1 << 20);
        s.topk = count("topk", 1024);
        if (row.get("experts").empty()) {
          s.experts = script_experts(m.kernel->dispatcher.starts_with("deepep-ll"), m.ranks);
          m.experts_assumed = true;
        } else {
          s.experts = count("experts", 1 << 20);
        }
        if (!row.get("topk_groups").empty()) s.topk_groups = count("topk_groups", 65536);
        // The SMs the kernel ran on where the source states them (optional
        // column). A DeepEP row runs on them; any other row (Hybrid-EP's TMA
        // kernels, run as their nearest) and a row that does not state them
        // run DeepEP as its tests do, on moe::kDeepepTestSms.
        if (!row.get("sms").empty()) {
          m.sms = count("sms", 1024);
          if (m.kernel_name.starts_with("deepep")) s.sms = m.sms;
        }
        // Other wire formats (mxfp8, nvfp4) load, and are not predicted.
        m.dispatch_dtype = required("dispatch_dtype");
        m.combine_dtype = row.get("combine_dtype").empty() ? "bf16" : row.get("combine_dtype");
        for (const std::string* d : {&m.dispatch_dtype, &m.combine_dtype})
          if (*d != "bf16" && *d != "fp8" && *d != "mxfp8" && *d != "nvfp4")
            throw UserError(fmt::format("{}: column '{}': expected fp8, bf16, mxfp8 or nvfp4, got '{}'", where,
                                        d == &m.dispatch_dtype ? "dispatch_dtype" : "combine_dtype", *d));
        if (m.dispatch_dtype == "fp8") s.dispatch_dtype = moe::WireDtype::fp8;
        if (m.combine_dtype == "fp8") s.combine_dtype = moe::WireDtype::fp8;
        m.dispatch_us = optional_number(row, "dispatch_us");
        m.combine_us = optional_number(row, "combine_us");
        m.dispatch_rdma_GBps = optional_number(row, "dispatch_rdma_GBps");
        m.dispatch_nvl_GBps = optional_number(row, "dispatch_nvl_GBps");
        m.combine_rdma_GBps = optional_number(row, "combine_rdma_GBps");
        m.combine_nvl_GBps = optional_number(row, "combine_nvl_GBps");
        m.source = required("source");
        rows.push_back(std::move(m));
      });
  return rows;
}

DispatchTopology dispatch_topology(const DispatchMeasurement& m, const std::string& dir) {
  // GPU -> the bundled topology of the systems these GPUs were measured in
  // (validation/moe-dispatch-sources.md) and its GPUs per node.
  struct Entry {
    const char* gpu;
    const char* file;
    int per_node;
  };
  static constexpr std::array<Entry, 5> kTopologies = {{{"h800", "h800-cluster.yaml", 8},
                                                        {"h100", "dgx-h100.yaml", 8},
                                                        {"h200", "h200-cluster.yaml", 8},
                                                        {"b200", "dgx-b200.yaml", 8},
                                                        {"gb200", "nvl72.yaml", 72}}};
  DispatchTopology t;
  for (const Entry& e : kTopologies) {
    if (m.gpu != e.gpu) continue;
    if (m.ranks_per_node > 0 && m.ranks_per_node != e.per_node) return t;
    const int nodes = (m.ranks + e.per_node - 1) / e.per_node;
    if (e.per_node == 72 && nodes > 1) return t;  // one NVL72 rack
    t.file = dir + "/" + e.file;
    if (e.per_node != 72) t.overrides.push_back(fmt::format("nodes={}", nodes));
    if (nodes > 1 && m.nic_gbps > 0) t.overrides.push_back(fmt::format("fabric.bandwidth={}Gbps", m.nic_gbps));
  }
  return t;
}

DispatchValidation validate_dispatch(const std::vector<DispatchMeasurement>& rows, const std::string& topology_dir) {
  DispatchValidation v;
  Workspace ws;
  MapeTally by_source, by_kernel, by_source_modelled;
  double sum = 0, sum_nearest = 0;
  for (const DispatchMeasurement& m : rows) {
    DispatchValidationRow r;
    r.m = m;
    const DispatchTopology where = dispatch_topology(m, topology_dir);
    if (m.kernel->dispatcher.empty()) {
      r.status = "not predicted";
      r.why = "kernel not modelled";
    } else if (m.dispatch_dtype != "bf16" && m.dispatch_dtype != "fp8") {
      r.status = "not predicted";
      r.why = fmt::format("{} dispatch not modelled", m.dispatch_dtype);
    } else if (where.file.empty()) {
      r.status = "not predicted";
      r.why = fmt::format("no topology for {}{}", m.gpu,
                          m.ranks_per_node > 0 ? fmt::format(" with {} per node", m.ranks_per_node) : "");
    }
    if (!r.status.empty()) {
      ++v.not_predicted;
      v.rows.push_back(std::move(r));
      continue;
    }
    const Topology topo = load_topology(where.file, where.overrides);
    const moe::Dispatcher& d = moe::find_dispatcher(m.kernel->dispatcher);
    moe::DispatchResult res;
    try {
      res = moe::simulate_dispatch(topo, m.spec, d, ws);
    } catch (const UserError& e) {
      // A size the dispatcher refuses (DeepEP's nodes of 8 do not divide 36
      // ranks): reported, not predicted.
      r.status = "not predicted";
      r.why = fmt::format("{} refuses it: {}", d.name, e.what());
      ++v.not_predicted;
      v.rows.push_back(std::move(r));
      continue;
    }
    r.status = m.kernel->modelled ? "modelled" : "nearest";
    std::string sets;
    for (const std::string& o : where.overrides) sets += (sets.empty() ? " " : ",") + o;
    r.ran = fmt::format("{} on {}{}{}", d.name, topo.name(), sets,
                        d.name == "deepep-normal" ? fmt::format(" ({} SMs)", m.spec.sms) : "");
    // One phase: the published time, else the published bandwidth as a time
    // over the byte count the simulator's routing gives (RDMA first, as the
    // sources' tables lead with it).
    auto compare = [&](std::optional<double> us, std::optional<double> rdma, std::optional<double> nvl,
                       std::optional<double> rdma_bytes, std::optional<double> nvl_bytes, Time predicted) {
      DispatchComparison c;
      if (us) {
        c.basis = "time", c.measured_us = *us;
      } else if (rdma && rdma_bytes) {
        c.basis = "rdma_GBps", c.measured_us = *rdma_bytes / (*rdma * 1e3);
      } else if (nvl && (nvl_bytes || rdma_bytes)) {
        // A low-latency kernel's one byte count (the selections) whatever
        // fabric the source's column names: NCCL EP's one-node row is in its
        // NVL column (validation/moe-dispatch-sources.md).
        c.basis = "nvl_GBps", c.measured_us = (nvl_bytes ? *nvl_bytes : *rdma_bytes) / (*nvl * 1e3);
      } else {
        return c;
      }
      c.compared = true;
      c.predicted_us = predicted.to_us();
      c.error_pct = 100.0 * (c.predicted_us - c.measured_us) / c.measured_us;
      return c;
    };
    r.dispatch = compare(m.dispatch_us, m.dispatch_rdma_GBps, m.dispatch_nvl_GBps, res.dispatch_rdma_bytes,
                         res.dispatch_nvl_bytes, res.dispatch);
    r.combine = compare(m.combine_us, m.combine_rdma_GBps, m.combine_nvl_GBps, res.combine_rdma_bytes,
                        res.combine_nvl_bytes, res.combine);
    bool any = false;
    for (const DispatchComparison* c : {&r.dispatch, &r.combine}) {
      if (!c->compared) continue;
      any = true;
      const double e = std::abs(c->error_pct);
      if (m.kernel->modelled) {
        sum += e, ++v.counted;
        by_source_modelled.add(m.source_id, e);
      } else {
        sum_nearest += e, ++v.counted_nearest;
      }
      by_source.add(m.source_id, e);
      by_kernel.add(dispatch_kernel_label(*m.kernel), e);
    }
    if (any && m.kernel->modelled) ++v.counted_rows;
    if (!any) r.why = "no published value the model has a byte count for";
    v.rows.push_back(std::move(r));
  }
  if (v.counted) v.mape = sum / v.counted;
  if (v.counted_nearest) v.mape_nearest = sum_nearest / v.counted_nearest;
  v.mape_source = by_source.means(), v.count_source = by_source.count;
  v.mape_kernel = by_kernel.means(), v.count_kernel = by_kernel.count;
  v.mape_source_modelled = by_source_modelled.means(), v.count_source_modelled = by_source_modelled.count;
  return v;
}

}  // namespace parmsim
