#include "sim/validation/moe_validation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/io/csv.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/mape.hpp"

namespace parmsim {

namespace {

// `lean` (docs/moe-costs.md): a gate GEMM in the layer's dtype with one
// softmax/top-k kernel, no host sync, the local experts as one batched GEMM;
// `index`: the dispatch and combine as row gathers. This is what Tutel's
// fast_encode/fast_decode with its batched-matmul experts and Megatron-Core's
// permute/unpermute with TE grouped GEMM do; the AlltoAll is NCCL's grouped
// send/recv (torch all_to_all_single) in both. Both run eager PyTorch: the host issues each call
// in about 7 us (the simplest op with autograd, pytorch/pytorch#41383; docs/moe-costs.md, "The host").
constexpr std::string_view kGatherExperts = "ds_moe=lean,dispatch=index,host_op=7us";
// Megatron-Core's MoELayer (docs/moe-costs.md, "Megatron-Core's MoELayer"): `lean`'s collectives
// and batched experts with Megatron-Core 0.16's router, host sync before the AlltoAll,
// probabilities' multiply, chunk sorts and (fp8) TE's quantization of bf16 rows and weights.
constexpr std::string_view kMcore = "ds_moe=mcore,dispatch=index,host_op=7us";

// The AllGather token dispatcher (docs/moe-costs.md) with the lean gate and
// dropless routing drawn uniformly: Flux's tests route by `--dist random`
// (bytedance/flux test/python/moe_ag_scatter/test_moe_ag.py@035e3caf).
constexpr std::string_view kAllGather = "ds_moe=lean,dispatch=index,host_op=7us,token_dispatcher=allgather,load=uniform";

constexpr std::array<MoeSystem, 9> kSystems = {{
    {"deepspeed-moe",
     "DeepSpeed-MoE 0.14.4 as the Parm paper measured it: parmsim's baseline (einsum dispatch, the fp32 gate)", true,
     "baseline", "ds_moe=0.14.4,dispatch=einsum"},
    {"parm-s1", "Parm's schedule S1 (docs/parm.md)", true, "s1", ""},
    {"parm-s2", "Parm's schedule S2 (docs/parm.md)", true, "s2", ""},
    {"tutel",
     "Tutel's moe_layer: a top-k gate, fast_encode/fast_decode gathers, batched-matmul experts; parmsim's baseline "
     "with the lean gate and index dispatch",
     true, "baseline", kGatherExperts},
    {"megatron-alltoall",
     "Megatron-Core MoELayer, alltoall dispatcher: router, permute, NCCL AlltoAll, TE grouped GEMM, unpermute; "
     "parmsim's baseline as Megatron-Core's MoELayer (ds_moe=mcore) with index dispatch",
     true, "baseline", kMcore},
    {"megatron-deepep",
     "Megatron-Core MoELayer, flex dispatcher with DeepEP's fused dispatch/combine kernels: not modelled; run as "
     "megatron-alltoall, its nearest, and reported apart",
     false, "baseline", kMcore},
    {"megatron-hybridep",
     "Megatron-Core MoELayer, flex dispatcher with HybridEP kernels: not modelled; run as megatron-alltoall and "
     "reported apart",
     false, "baseline", kMcore},
    {"flux-torch",
     "Flux's PyTorch reference (all-gather, scatter, grouped GEMM; GEMM, top-k reduce, reduce-scatter; forward, no "
     "gate): not modelled (its kernels are the test's); run as the AllGather token dispatcher, its nearest, with "
     "uniformly drawn routing, and reported apart",
     false, "baseline", kAllGather},
    {"flux-comet",
     "Flux/Comet's fused AllGather+GEMM and GEMM+ReduceScatter kernels, which overlap the collectives with the "
     "GEMMs, forward only: not modelled; run as the AllGather token dispatcher (no overlap) and reported apart",
     false, "baseline", kAllGather},
}};

// NVLink bandwidth per GPU and direction, bytes/s: half the datasheets'
// bidirectional figures. H100/H200 SXM 900 GB/s and A100 SXM 600 GB/s (NVIDIA
// H100 and A100 datasheets; the same figures validation/nccl-tests' clusters
// use), H800 SXM 400 GB/s (NVIDIA's H800 specification: H100 silicon with
// NVLink cut to 400 GB/s), B200 1.8 TB/s (NVIDIA DGX B200 datasheet).
double nvlink_gbps_per_direction(const std::string& gpu) {
  if (gpu == "h100" || gpu == "h200") return 450;
  if (gpu == "h800") return 200;
  if (gpu == "a100") return 300;
  if (gpu == "b200") return 900;
  return 0;
}

// PCIe x16 per direction, GB/s: Gen3 15.75 (RTX 2080 Ti, V100 PCIe), Gen4 31.5
// (A100 PCIe, RTX A6000, L20), Gen5 63 (H100 PCIe): PCI-SIG line rates after
// 128b/130b encoding; the topology's link_efficiency derates them.
double pcie_gbps(const std::string& gpu) {
  if (gpu == "rtx2080ti" || gpu == "v100") return 15.75;
  if (gpu == "h100" || gpu == "h200" || gpu == "h800" || gpu == "b200") return 63;
  return 31.5;
}

// A row's dtype that a layer takes (parse_dtype's list: fp32, fp16, bf16, fp8); a row in any
// other (fp4, ...) is kept and reported as not predicted.
bool layer_dtype(const std::string& d) {
  try {
    parse_dtype(d);
    return true;
  } catch (const UserError&) {
    return false;
  }
}

const char* const kWhats[] = {"layer_fwd", "layer_bwd", "layer_fwd_bwd"};
const char* const kNodes[] = {"single", "nvswitch", "pcie"};

}  // namespace

std::span<const MoeSystem> moe_systems() { return kSystems; }

std::vector<MoeMeasurement> load_moe_measurements(const std::string& path) {
  std::vector<MoeMeasurement> rows;
  read_csv_table(
      path,
      {"source_id", "system", "parmsim_system", "system_version", "gpu", "gpus", "gpus_per_node", "node", "B", "L", "M",
       "H", "E", "k", "f", "mp", "ep", "dtype", "what", "measured_ms", "quality", "source"},
      [&](const CsvRow& row) {
        const std::string& where = row.where;
        auto get = [&](const char* c) { return row.get(c); };
        auto required = [&](const char* c) {
          const std::string& v = row.get(c);
          if (v.empty()) throw UserError(fmt::format("{}: column '{}' is empty", where, c));
          return v;
        };
        MoeMeasurement m;
        m.line = row.line;
        m.where = where;
        m.source_id = required("source_id");
        m.system = required("system");
        m.system_version = get("system_version");
        const std::string sys = required("parmsim_system");
        m.parmsim_system = find_named(moe_systems(), sys);
        if (!m.parmsim_system)
          throw UserError(fmt::format("{}: column 'parmsim_system': unknown system '{}': expected {}", where, sys,
                                      join_names(names_of(moe_systems()), ", ", " or ")));
        m.gpu = required("gpu");
        bool known_gpu = false;
        for (const GpuProfile& g : gpu_profiles()) known_gpu = known_gpu || g.name == m.gpu;
        if (!known_gpu)
          throw UserError(
              fmt::format("{}: column 'gpu': unknown GPU '{}': expected {}", where, m.gpu, gpu_profile_names()));
        m.gpus = static_cast<int>(positive_int(get("gpus"), "gpus", where));
        m.gpus_per_node = static_cast<int>(positive_int(get("gpus_per_node"), "gpus_per_node", where));
        if (m.gpus > 65536 || m.gpus_per_node > 72)
          throw UserError(fmt::format("{}: at most 65536 GPUs, 72 per node", where));
        if (m.gpus % m.gpus_per_node != 0)
          throw UserError(fmt::format("{}: column 'gpus': {} is not a multiple of gpus_per_node {}", where, m.gpus,
                                      m.gpus_per_node));
        m.node = required("node");
        if (std::find(std::begin(kNodes), std::end(kNodes), m.node) == std::end(kNodes))
          throw UserError(fmt::format("{}: column 'node': expected single, nvswitch or pcie, got '{}'", where, m.node));
        if ((m.node == "single") != (m.gpus_per_node == 1))
          throw UserError(fmt::format("{}: column 'node': 'single' is for one GPU per node, and only it", where));
        m.what = required("what");
        if (std::find(std::begin(kWhats), std::end(kWhats), m.what) == std::end(kWhats))
          throw UserError(fmt::format("{}: column 'what': expected layer_fwd, layer_bwd or layer_fwd_bwd, got '{}'",
                                      where, m.what));
        m.dtype = required("dtype");
        // The layer keys, checked by the layer key registry; f empty = dropless.
        m.dropless = get("f").empty();
        const std::string mp = required("mp"), ep = required("ep");
        const std::int64_t mpv = positive_int(mp, "mp", where), epv = positive_int(ep, "ep", where);
        if (mpv * epv != m.gpus)
          throw UserError(fmt::format("{}: columns 'mp' x 'ep' = {} x {} is not the row's {} GPUs", where, mpv, epv,
                                      m.gpus));
        m.layer = fmt::format("B={},L={},M={},H={},E={},k={},f={},mp={}", required("B"), required("L"),
                              required("M"), required("H"), required("E"), required("k"),
                              m.dropless ? std::string("1.0") : get("f"), mp);
        if (layer_dtype(m.dtype)) m.layer += ",dtype=" + m.dtype;
        moe::LayerSpec spec;
        moe::ScheduleKeys keys;
        moe::apply_keys(&spec, &keys, split_csv(m.layer, where), where);
        m.measured_ms = positive_number(get("measured_ms"), "measured_ms", where);
        m.suspect = quality_suspect(get("quality"), where);
        m.B = spec.B;
        m.work_group = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|L={},M={},H={},E={},k={},f={},mp={},ep={}", m.source_id,
                                   m.system, m.parmsim_system->name, m.gpu, m.gpus, m.node, m.dtype, m.what, get("L"),
                                   get("M"), get("H"), get("E"), get("k"), get("f"), mp, ep);
        m.source = required("source");
        rows.push_back(std::move(m));
      });
  return rows;
}

std::string moe_validation_topology(const MoeMeasurement& m) {
  const int g = m.gpus_per_node, nodes = m.gpus / m.gpus_per_node;
  std::string y = fmt::format("name: {}-row{}\ngpu: {}\nnodes: {}\nnode:\n  gpus: {}\n  devices:\n", m.source_id,
                              m.line, m.gpu, nodes, g);
  std::string gpus;
  for (int i = 0; i < g; ++i) gpus += fmt::format("{}gpu{}", i ? ", " : "", i);
  const bool nvswitch = m.node == "nvswitch";
  if (nvswitch && nvlink_gbps_per_direction(m.gpu) <= 0)
    throw UserError(fmt::format("{}: column 'node': no NVLink bandwidth known for GPU '{}' (h100, h200, h800, a100, "
                                "b200 have one)",
                                m.where, m.gpu));
  if (nvswitch) y += "    - {name: nvswitch, kind: nvswitch}\n";
  // One PCIe switch with the GPUs and a NIC per GPU behind the host bridge
  // (one NIC per GPU, 400 Gb/s each, as DGX/HGX servers have; only multi-node rows use them).
  y += "    - {name: pcie0, kind: pcie_switch}\n    - {name: cpu0, kind: host_bridge}\n";
  if (nodes > 1)
    for (int i = 0; i < g; ++i) y += fmt::format("    - {{name: nic{}, kind: nic}}\n", i);
  y += "  links:\n";
  if (nvswitch)
    y += fmt::format("    - {{a: [{}], b: nvswitch, bandwidth: {}GBps, latency: 200ns}}\n", gpus,
                     nvlink_gbps_per_direction(m.gpu));
  std::string pcie = gpus;
  if (nodes > 1)
    for (int i = 0; i < g; ++i) pcie += fmt::format(", nic{}", i);
  y += fmt::format("    - {{a: [{}], b: pcie0, bandwidth: {}GBps, latency: 500ns}}\n", pcie, pcie_gbps(m.gpu));
  y += fmt::format("    - {{a: pcie0, b: cpu0, bandwidth: {}GBps, latency: 500ns}}\n", pcie_gbps(m.gpu));
  if (nodes > 1) y += "fabric: {kind: rail, bandwidth: 400Gbps, latency: 1us, spines: 2}\n";
  return y;
}

MoeValidation validate_moe(const std::vector<MoeMeasurement>& rows) {
  MoeValidation v;
  Workspace ws;  // kept across rows: rows on one topology share plans and routes
  MapeTally by_source, by_system, by_source_modelled, by_source_suspect;
  double sum = 0, sum_nearest = 0, sum_suspect = 0, sum_nearest_suspect = 0;
  int counted_suspect = 0, counted_nearest_suspect = 0;
  for (const MoeMeasurement& m : rows) {
    MoeValidationRow r;
    r.m = m;
    v.suspect_rows += m.suspect;
    const MoeSystem& sys = *m.parmsim_system;
    if (sys.schedule.empty()) {
      r.status = "not predicted";
      r.why = "system not modelled";
    } else if (!layer_dtype(m.dtype)) {
      r.status = "not predicted";
      r.why = fmt::format("dtype {} not modelled", m.dtype);
    } else {
      r.status = sys.modelled ? "modelled" : "nearest";
      moe::LayerSpec spec;
      moe::ScheduleKeys keys;
      moe::apply_keys(&spec, &keys, split_csv(m.layer, m.where), m.where);
      if (!sys.keys.empty()) moe::apply_keys(&spec, &keys, split_csv(std::string(sys.keys), m.where), m.where);
      const Topology topo = parse_topology_text(moe_validation_topology(m), m.where + " (generated topology)");
      topo.gpu().peak(spec.dtype);  // an unsupported dtype is the row's error
      moe::make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
      const moe::LayerRun run{topo, spec, "flow", nullptr, nullptr, &ws};
      const moe::ScheduleResult s = moe::run_schedule(run, moe::schedule_options(std::string(sys.schedule), keys));
      const Time t = m.what == "layer_fwd" ? s.forward : m.what == "layer_bwd" ? s.backward : s.total();
      r.predicted_ms = t.to_seconds() * 1e3;
      r.error_pct = 100.0 * (r.predicted_ms - m.measured_ms) / m.measured_ms;
      r.ran = fmt::format("{} {}{}{}", sys.schedule, m.layer, sys.keys.empty() ? "" : ",", sys.keys);
      const double e = std::abs(r.error_pct);
      if (m.suspect) {
        if (sys.modelled) {
          sum_suspect += e, ++counted_suspect;
          by_source_suspect.add(m.source_id, e);
        } else {
          sum_nearest_suspect += e, ++counted_nearest_suspect;
        }
      } else {
        if (sys.modelled) {
          sum += e, ++v.counted;
          by_source_modelled.add(m.source_id, e);
        } else {
          sum_nearest += e, ++v.counted_nearest;
        }
        by_source.add(m.source_id, e);
        by_system.add(std::string(sys.name), e);
      }
    }
    v.rows.push_back(std::move(r));
  }
  if (v.counted) v.mape = sum / v.counted;
  v.counted_with_suspect = v.counted + counted_suspect;
  if (v.counted_with_suspect) v.mape_with_suspect = (sum + sum_suspect) / v.counted_with_suspect;
  // Sources whose time does not follow the work: the first pair of rows (in file order) that
  // differ only in B, with kWorkRatio times the tokens or more and under kFlatRatio times the time.
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < rows.size(); ++j) {
      const MoeMeasurement &a = rows[i], &b = rows[j];
      if (a.work_group != b.work_group || v.flat_sources.count(a.source_id)) continue;
      const double tokens = static_cast<double>(b.B) / static_cast<double>(a.B), time = b.measured_ms / a.measured_ms;
      if (tokens >= FlatSource::kWorkRatio && time < FlatSource::kFlatRatio)
        v.flat_sources[a.source_id] = {a.line, b.line, tokens, time};
    }
  for (const auto& entry : v.flat_sources) {
    const std::string& src = entry.first;  // a named reference: clang before 16 cannot capture a structured binding
    if (std::any_of(rows.begin(), rows.end(), [&](const MoeMeasurement& m) { return m.source_id == src && !m.suspect; }))
      v.flat_ok_sources.push_back(src);
  }
  if (v.counted_nearest) v.mape_nearest = sum_nearest / v.counted_nearest;
  v.counted_nearest_with_suspect = v.counted_nearest + counted_nearest_suspect;
  if (v.counted_nearest_with_suspect)
    v.mape_nearest_with_suspect = (sum_nearest + sum_nearest_suspect) / v.counted_nearest_with_suspect;
  v.mape_source = by_source.means(), v.count_source = by_source.count;
  v.mape_system = by_system.means(), v.count_system = by_system.count;
  v.mape_source_modelled = by_source_modelled.means(), v.count_source_modelled = by_source_modelled.count;
  v.mape_source_suspect = by_source_suspect.means(), v.count_source_suspect = by_source_suspect.count;
  return v;
}

}  // namespace parmsim
