#include "sim/moe/sensitivity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/io/csv.hpp"
#include "sim/moe/layer_sim.hpp"

namespace parmsim::moe {

namespace {

// "0.8" with 3 significant decimals, as a topology key takes it.
std::string num(double v) { return fmt::format("{:.4g}", v); }

bool has_class(const Topology& t, LinkClass c) {
  for (int i = 0; i < t.num_links(); ++i)
    if (t.link_class(i) == c) return true;
  return false;
}

SensitivityEnd evaluate(const Topology& topo, const LayerSpec& spec, const ScheduleKeys& keys,
                        const std::string& network, Workspace& ws) {
  const Dims dims = make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
  const GpuProfile& gpu = topo.gpu();
  const AlphaBeta ab = alpha_beta_from_topology(topo, &ws);
  SensitivityEnd e;
  e.choice = auto_choice(spec, dims, ab, gpu);
  const LayerRun run{topo, spec, network, nullptr, &ab, &ws};
  const Time base = run_schedule(run, schedule_options("baseline", keys)).total();
  const Time s1 = run_schedule(run, schedule_options("s1", keys)).total();
  const Time s2 = run_schedule(run, schedule_options("s2", keys)).total();
  const Time chosen = e.choice == "s2" ? s2 : s1;
  e.speedup = base.to_seconds() / chosen.to_seconds();
  e.winner = s2 < s1 ? "s2" : "s1";
  return e;
}

}  // namespace

std::vector<SensitivityInput> default_sensitivity_inputs(const Topology& topo) {
  std::vector<SensitivityInput> v;
  const LinkEfficiency& eff = topo.efficiency();
  // The collective model's validated error (README, "Validation against published
  // measurements": parmsim validate nccl, MAPE one node (NVSwitch) 12.9%, InfiniBand 12.2%)
  // taken as the uncertainty of the links' sustained fraction, capped at line rate.
  if (has_class(topo, LinkClass::nvlink))
    v.push_back({"link_efficiency.nvlink", true, num(eff.nvlink * (1 - 0.129)), num(std::min(1.0, eff.nvlink * 1.129)),
                 "the NVSwitch rows' MAPE of parmsim validate nccl, 12.9%, either side (at most line rate)"});
  if (topo.num_nodes() > 1)
    v.push_back({"link_efficiency.network", true, num(eff.network * (1 - 0.122)),
                 num(std::min(1.0, eff.network * 1.122)),
                 "the InfiniBand rows' MAPE of parmsim validate nccl, 12.2%, either side (at most line rate)"});
  // PCIe: from NCCL's own per-link figure over the line rate (24/32 and 48/64 GB/s on
  // Gen4 and Gen5 x16, NVIDIA/nccl src/graph/topo.h: 0.75, the default link_efficiency.pcie)
  // to the line rate.
  v.push_back({"link_efficiency.pcie", true, num(std::min(eff.pcie, 0.75)), num(std::max(eff.pcie, 1.0)),
               "NCCL's PCIe figure over the line rate (0.75, NVIDIA/nccl src/graph/topo.h) to the line rate"});
  // The GPUs' peer-to-peer and GPUDirect RDMA (topology keys p2p, gdr): without them NCCL goes
  // through host memory (docs/collectives.md). p2p only where no NVLink joins the GPUs
  // (p2p: false with NVLink is refused); gdr where NICs carry the layer's traffic.
  if (!has_class(topo, LinkClass::nvlink))
    v.push_back({"p2p", true, "false", "true",
                 "GeForce cards have no PCIe peer-to-peer (topologies/parm-32gpu.yaml); datacenter cards do"});
  bool host_bridge = false;  // gdr: false needs a host bridge to stage through
  for (int i = 0; i < topo.num_devices(); ++i) host_bridge = host_bridge || topo.device(i).kind == DeviceKind::host_bridge;
  if (topo.num_nodes() > 1 && host_bridge)
    v.push_back({"gdr", true, "false", "true",
                 "GPUDirect RDMA: Tesla/Quadro/datacenter cards only (NVIDIA GPUDirect RDMA manual)"});
  // NCCL's per-operation latency beyond what the model charges: a published 16-rank AlltoAll
  // of 1 KiB across two nodes took 49.8 us where the model (its tuner's latency and the
  // proxy's launch per further network peer) gives 43.4 us (validation/nccl-tests.csv line
  // 217, azure-ndm-a100-v4-2node): 6.4 us unexplained.
  v.push_back({"nccl.launch", true, num(topo.hints().launch_us) + "us", num(topo.hints().launch_us + 6.4) + "us",
               "0 to the 6.4 us a published 16-rank AlltoAll of 1 KiB took beyond the model (validation/nccl-tests.csv:217)"});
  // The GPU's compute: the GEMM model's validated error (parmsim validate gemm: MAPE 13.6% over
  // 53 published cuBLAS runs) either side of the profile's sustained throughput, at most its
  // peak; the kernel floor from the smallest cuBLAS GEMMs' device time, 2.1 us (FP16 128^3)
  // to 4.2 us (FP32 128^3) (JuliaGPU/GemmKernels.jl#169), around the profiles' 3 us.
  v.push_back({"compute.gemm_efficiency", true, num(1 - 0.136), num(std::min(1.136, max_gemm_efficiency(gpu_profile(topo.gpu_model())))),
               "the GEMM model's MAPE, 13.6% either side (parmsim validate gemm; at most the peak)"});
  v.push_back({"compute.launch", true, "2.1us", "4.2us",
               "the smallest cuBLAS GEMMs' device time: 2.1 us (FP16 128^3) to 4.2 us (FP32 128^3), GemmKernels.jl#169"});
  // The host's time per kernel launch or collective call, eager PyTorch's: 0 (the host
  // keeps ahead) to 45 us (a whole eager model, facebookresearch/sam2#768: 53.7 ms per
  // frame for 1185 launches; docs/moe-costs.md, "The host").
  v.push_back({"host_op", false, "host_op=0us", "host_op=45us",
               "0 (the host keeps ahead) to 45 us per launch (an eager model, sam2#768; pytorch#41383: 5-7 us per op)"});
  // The modelling choices docs/moe-costs.md and docs/parm.md mark as our reading.
  v.push_back({"saa", false, "", "saa=pipelined",
               "S2's fused AlltoAll+AllGather: the Parm authors' released kernel, or rail-wise pipelined rounds"});
  v.push_back({"dispatch", false, "", "dispatch=index",
               "DeepSpeed's dense einsum dispatch/combine, or row gathers (Tutel, FSMoE)"});
  v.push_back({"ds_moe", false, "", "ds_moe=0.14.5",
               "DeepSpeed-MoE 0.14.4 (what Parm measured) or 0.14.5 (duplicates dropped before the AlltoAll)"});
  v.push_back({"gather", false, "", "gather=after_iorder,fuse_combine=0",
               "S2's MP-AllGather before I-Order (fused into the combine SAA) or after it (as S1)"});
  return v;
}

SensitivityInput parse_vary(const std::string& spec, const std::string& where) {
  const std::size_t eq = spec.find('='), colon = spec.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos)
    throw UserError(fmt::format("{}: '{}': expected KEY=LOW:HIGH (a topology key, e.g. link_efficiency.network=0.7:1.0)",
                                where, spec));
  SensitivityInput in;
  in.parameter = spec.substr(0, eq);
  in.topology = true;
  in.low = spec.substr(eq + 1, colon - eq - 1);
  in.high = spec.substr(colon + 1);
  in.source = "given with " + where;
  // Both ends numbers, or times: compared as numbers (times in picoseconds).
  auto value = [&](const std::string& s, const char* end) {
    double v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
    std::string why;
    if (const auto t = units::parse_time(s, &why)) return static_cast<double>(t->count_ps());
    throw UserError(fmt::format("{}: {}: the {} end '{}' is not a number or a time", where, in.parameter, end, s));
  };
  const double lo = value(in.low, "low"), hi = value(in.high, "high");
  if (!(lo < hi))
    throw UserError(fmt::format("{}: {}: the range {}:{} is {}; give LOW < HIGH", where, in.parameter, in.low, in.high,
                                lo == hi ? "empty" : "inverted"));
  return in;
}

Sensitivity layer_sensitivity(const std::function<Topology(const std::vector<std::string>&)>& load,
                              const LayerSpec& spec, const ScheduleKeys& keys,
                              const std::vector<SensitivityInput>& inputs, const std::string& network) {
  Sensitivity out;
  Workspace ws;  // every evaluation's simulations
  out.nominal = evaluate(load({}), spec, keys, network, ws);
  for (const SensitivityInput& in : inputs) {
    SensitivityRow row;
    row.input = in;
    auto end = [&](const std::string& v) {
      if (in.topology) return evaluate(load({in.parameter + "=" + v}), spec, keys, network, ws);
      LayerSpec s = spec;
      ScheduleKeys k = keys;
      if (!v.empty()) apply_keys(&s, &k, split_csv(v, "sensitivity " + in.parameter), "sensitivity " + in.parameter);
      return evaluate(load({}), s, k, network, ws);
    };
    row.low = end(in.low);
    row.high = end(in.high);
    row.flips = row.low.choice != out.nominal.choice || row.high.choice != out.nominal.choice;
    row.winner_flips = row.low.winner != out.nominal.winner || row.high.winner != out.nominal.winner;
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace parmsim::moe
