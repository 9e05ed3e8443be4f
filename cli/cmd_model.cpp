// parmsim model
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "sim/net/network_model.hpp"
#include "sim/moe/model.hpp"
#include "sim/moe/resources.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

namespace {

// The text report of a pipelined spec: stages, the slowest stage's components
// over the iteration, the MoE layer's phases, the pipeline's parts.
// The rows every model's text ends with (a pipelined one also gives the bubble's share).
void print_totals(const std::vector<moe::IterationResult>& res, bool pipelined) {
  const double base = res.front().total().to_seconds();
  fmt::print("{:<27}", "dp allreduce, all_us");
  for (const auto& r : res) fmt::print(" {:>14.1f}", r.grad_sync.allreduce.to_us());
  fmt::print("\n{:<27}", "dp allreduce, hidden_us");
  for (const auto& r : res) fmt::print(" {:>14.1f}", r.grad_sync.hidden().to_us());
  fmt::print("\n{:<27}", "iteration_us");
  for (const auto& r : res) fmt::print(" {:>14.1f}", r.total().to_us());
  fmt::print("\n{:<27}", "speedup vs baseline");
  for (const auto& r : res) fmt::print(" {:>13.2f}x", base / r.total().to_seconds());
  if (pipelined) {
    fmt::print("\n{:<27}", "bubble share of iteration");
    for (const auto& r : res)
      fmt::print(" {:>13.1f}%", 100.0 * r.pipeline.time.bubble.to_seconds() / r.total().to_seconds());
  }
  fmt::print("\n{:<27}", "MoE share of iteration");
  for (const auto& r : res) fmt::print(" {:>13.1f}%", 100.0 * r.moe_time().to_seconds() / r.total().to_seconds());
  fmt::print("\n");
}

void print_pipelined(const moe::ModelSpec& m, const Topology& full, const Topology& stage, const moe::LayerSpec& layer,
                     const std::vector<moe::IterationResult>& res) {
  const moe::PipelineResult& p0 = res.front().pipeline;
  fmt::print("model {} on {} ({} GPUs), {} network: {} blocks ({} dense first, then {} an MoE layer), "
             "attention {}, {} MTP module(s) ({})\n",
             m.name, full.name(), full.num_gpus(), m.network, m.layers, m.first_dense,
             m.moe_every == 1 ? std::string("every FFN") : fmt::format("one FFN in {}", m.moe_every),
             moe::attention_kinds()[static_cast<int>(m.attention)].name, m.mtp_depth, moe::spec_string(layer));
  std::string split;
  for (const auto& t : p0.stage_times) split += (split.empty() ? "" : ",") + std::to_string(t.stage.blocks);
  fmt::print("pipeline: pp={} stages of {} GPUs ({} nodes), schedule {}, {} micro-batch(es) of batch={} per "
             "iteration and replica, {} data-parallel replica(s); blocks per stage {}\n",
             m.pp, stage.num_gpus(), stage.num_gpus() / stage.gpus_per_node(),
             moe::pipeline_schedules()[static_cast<int>(m.pipeline_schedule)].name, p0.micro_batches, layer.B,
             stage.num_gpus() / layer.mp, split);
  if (m.pp > 1)
    fmt::print("P2P: one micro-batch's activations between adjacent stages, {:.1f} us (simulated on two stages' GPUs)\n",
               p0.p2p.to_us());
  else
    fmt::print("P2P: none (one stage)\n");
  fmt::print("baseline: {}\n", moe::baseline_system(layer));
  fmt::print("gradient AllReduce: per stage, {}; dp_grad_allreduce below is the most exposed stage's\n",
             m.grad_bucket > 0 ? fmt::format("buckets of at most {} elements, overlapped with the last "
                                             "micro-batch's backward",
                                             m.grad_bucket)
                               : std::string("one AllReduce after the last backward (grad_bucket: none)"));
  fmt::print("{:<28} {:>14} {:>14} {:>14}\n", "stage (blocks): F+B us", "baseline", "s1", "s2");
  for (std::size_t i = 0; i < p0.stage_times.size(); ++i) {
    const auto& st = p0.stage_times[i].stage;
    fmt::print("{:<28}", fmt::format("{} ({}-{})", i, st.first_block, st.first_block + st.blocks - 1));
    for (const auto& r : res) {
      const auto& t = r.pipeline.stage_times[i];
      fmt::print(" {:>13.1f}{}", (t.forward + t.backward).to_us(), static_cast<int>(i) == r.pipeline.slowest ? "*" : " ");
    }
    fmt::print("\n");
  }
  fmt::print("{:<28}", "slowest stage: F / B / W us");
  for (const auto& r : res) {
    const auto& t = r.pipeline.stage_times[static_cast<std::size_t>(r.pipeline.slowest)];
    fmt::print(" {}", fmt::format("{:.0f}/{:.0f}/{:.0f}", t.forward.to_us(), t.backward.to_us(), t.weight_grad.to_us()));
  }
  fmt::print("\n");
  fmt::print("iteration by component (the slowest stage, *; count per iteration), us:\n");
  fmt::print("{:<20} {:>6} {:>14} {:>14} {:>14}\n", "component", "count", "baseline_us", "s1_us", "s2_us");
  for (std::size_t i = 0; i < res.front().parts.size(); ++i) {
    fmt::print("{:<20} {:>6}", res.front().parts[i].name, res.front().parts[i].count);
    for (const auto& r : res) fmt::print(" {:>14.1f}", ((r.parts[i].forward + r.parts[i].backward) * r.parts[i].count).to_us());
    fmt::print("\n");
  }
  fmt::print("one MoE layer by phase of its critical path (forward + backward), us:\n");
  for (std::size_t ph = 0; ph < moe::kPhases; ++ph) {
    bool any = false;
    for (const auto& r : res) any = any || r.pipeline.moe_phases.t[ph] > Time::zero();
    if (!any) continue;
    fmt::print("  {:<25}", moe::to_string(static_cast<moe::Phase>(ph)));
    for (const auto& r : res) fmt::print(" {:>14.1f}", r.pipeline.moe_phases.t[ph].to_us());
    fmt::print("\n");
  }
  print_totals(res, true);
}

}  // namespace

void add_model(CLI::App& app) {
  auto* c = app.add_subcommand("model",
                               "predict a whole training iteration of an MoE transformer (BERT-MoE, GPT-2-MoE, DeepSeek-V3 with pipeline stages) "
                               "under baseline, S1 and S2");
  struct Args {
    std::string spec, network, calibration, overlay, max_memory;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  c->add_option("spec", a->spec, "model YAML (experiments/bert-moe.yaml, experiments/gpt2-moe.yaml, experiments/deepseek-v3.yaml)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("-n,--network", a->network, fmt::format("override the spec's network model ({})", network_model_names(" | ", " | ")));
  c->add_flag("--json", a->json, "print JSON");
  add_calibration_option(c, a->calibration);
  add_overlay_option(c, a->overlay);
  add_max_memory_option(c, a->max_memory);
  c->callback([a] {
    moe::ModelSpec m = moe::load_model_spec(a->spec);
    if (!a->network.empty()) check_network_option(a->network), m.network = a->network;
    const auto overlay = load_overlay_arg(a->overlay);
    const Topology full = load_topology(m.topology_file, m.topology_overrides, overlay);
    // With pp > 1, one stage's GPUs (`nodes` = nodes/pp) and two adjacent stages' (the P2P sends).
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> o = m.topology_overrides;
      o.insert(o.end(), extra.begin(), extra.end());
      return load_topology(m.topology_file, o, overlay);
    };
    const Topology topo = m.pp > 1 ? with(moe::stage_nodes_override(m, full, 1)) : full;
    std::optional<Topology> pair;
    if (m.pp > 1) {
      if (topo.num_gpus() * m.pp != full.num_gpus())
        throw UserError(fmt::format("{}: key 'pp': expected a topology whose size `nodes` sets ({} GPUs at nodes={} "
                                    "is not {}/{})",
                                    m.pp_where, topo.num_gpus(), full.num_gpus() / full.gpus_per_node() / m.pp,
                                    full.num_gpus(), m.pp));
      pair.emplace(with(moe::stage_nodes_override(m, full, 2)));
    }
    const auto cal = load_calibration_arg(a->calibration);
    const moe::LayerSpec layer = moe::model_layer(m, topo);  // E as run: experts_per_gpu * GPUs, or the spec's E
    {
      // The MoE layer's schedules dominate what the iteration simulates (sim/moe/resources.hpp).
      const moe::Dims d = moe::make_dims(layer, topo.num_gpus(), topo.gpus_per_node());
      moe::SimCost e;
      // run_model simulates with symmetry
      const int order = moe::layer_symmetry_order(layer, d, moe::symmetry_order(topo, m.network, true));
      for (const std::string& n : moe::preset_names())
        e += moe::with_symmetry(moe::estimate_schedule(layer, d, moe::preset(n)), order);
      check_estimate(fmt::format("model: simulating the MoE layer's schedules ({})", moe::spec_string(layer)), e,
                     a->max_memory, "use fewer GPUs or raise --max-memory");
    }
    const auto res = moe::run_model(m, topo, cal.get(), pair ? &*pair : nullptr);
    const double base = res.front().total().to_seconds();
    if (a->json) {
      nlohmann::json j = {{"model", m.name},
                          {"topology", topo.name()},
                          {"network", m.network},
                          {"layer", moe::spec_string(layer)},
                          {"grad_bucket", m.grad_bucket}};
      nlohmann::json sch = nlohmann::json::object();
      for (const auto& r : res) {
        nlohmann::json parts = nlohmann::json::array();
        for (const auto& p : r.parts)
          parts.push_back({{"component", p.name},
                           {"count", p.count},
                           {"forward_us", p.forward.to_us()},
                           {"backward_us", p.backward.to_us()},
                           {"total_us", ((p.forward + p.backward) * p.count).to_us()}});
        sch[r.schedule] = {{"iteration_us", r.total().to_us()},
                           {"moe_us", r.moe_time().to_us()},
                           {"dp_grad_allreduce_us", r.grad_sync.allreduce.to_us()},
                           {"dp_grad_allreduce_hidden_us", r.grad_sync.hidden().to_us()},
                           {"dp_grad_allreduce_exposed_us", r.grad_sync.exposed().to_us()},
                           {"dp_grad_buckets", r.grad_sync.bucket_elems},
                           {"speedup_vs_baseline", base / r.total().to_seconds()},
                           {"moe_speedup_vs_baseline", res.front().moe_time().to_seconds() / r.moe_time().to_seconds()},
                           {"components", parts}};
      }
      j["schedules"] = sch;
      j["baseline_system"] = moe::baseline_system(layer);
      if (m.pipelined) {
        const moe::PipelineResult& p0 = res.front().pipeline;
        j["pipeline"] = {{"pp", m.pp},
                         {"stage_gpus", topo.num_gpus()},
                         {"gpus", full.num_gpus()},
                         {"schedule", std::string(moe::pipeline_schedules()[static_cast<int>(m.pipeline_schedule)].name)},
                         {"micro_batches", p0.micro_batches},
                         {"p2p_send_us", p0.p2p.to_us()},
                         {"attention", std::string(moe::attention_kinds()[static_cast<int>(m.attention)].name)},
                         {"mtp_depth", m.mtp_depth}};
        for (const auto& r : res) {
          const moe::PipelineResult& pr = r.pipeline;
          nlohmann::json st = nlohmann::json::array();
          for (const auto& t : pr.stage_times)
            st.push_back({{"first_block", t.stage.first_block},
                          {"blocks", t.stage.blocks},
                          {"forward_us", t.forward.to_us()},
                          {"backward_us", t.backward.to_us()},
                          {"weight_grad_us", t.weight_grad.to_us()},
                          {"dp_grad_allreduce_exposed_us", t.grad_sync.exposed().to_us()}});
          nlohmann::json ph = nlohmann::json::object();
          for (std::size_t i = 0; i < moe::kPhases; ++i)
            ph[std::string(moe::to_string(static_cast<moe::Phase>(i)))] = pr.moe_phases.t[i].to_us();
          j["schedules"][r.schedule]["pipeline"] = {{"slowest_stage", pr.slowest},
                                                    {"slot_us", pr.time.slot.to_us()},
                                                    {"steady_us", pr.time.steady.to_us()},
                                                    {"bubble_us", pr.time.bubble.to_us()},
                                                    {"p2p_us", pr.time.p2p.to_us()},
                                                    {"stages", st},
                                                    {"moe_layer_phases_us", ph}};
        }
      }
      std::cout << j.dump(1) << "\n";
      return;
    }
    if (m.pipelined) {
      print_pipelined(m, full, topo, layer, res);
      return;
    }
    fmt::print("model {} on {} ({} GPUs), {} network: {} blocks, one FFN in {} an MoE layer ({})\n", m.name,
               topo.name(), topo.num_gpus(), m.network, m.layers, m.moe_every, moe::spec_string(layer));
    fmt::print("baseline: {}\n", moe::baseline_system(layer));
    fmt::print("gradient AllReduce: {}; dp_grad_allreduce below is its exposed part\n",
               m.grad_bucket > 0 ? fmt::format("{} bucket(s) of at most {} elements, overlapped with backward",
                                               res.front().grad_sync.buckets(), m.grad_bucket)
                                 : std::string("one AllReduce after backward (grad_bucket: none)"));
    fmt::print("{:<20} {:>6} {:>14} {:>14} {:>14}\n", "component (per use)", "count", "baseline_us", "s1_us", "s2_us");
    for (std::size_t i = 0; i < res.front().parts.size(); ++i) {
      fmt::print("{:<20} {:>6}", res.front().parts[i].name, res.front().parts[i].count);
      for (const auto& r : res) fmt::print(" {:>14.1f}", (r.parts[i].forward + r.parts[i].backward).to_us());
      fmt::print("\n");
    }
    print_totals(res, false);
  });
}

}  // namespace parmsim::cli
