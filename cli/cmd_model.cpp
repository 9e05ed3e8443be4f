// parmsim model
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "sim/net/network_model.hpp"
#include "sim/moe/model.hpp"
#include "sim/moe/resources.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

void add_model(CLI::App& app) {
  auto* c = app.add_subcommand("model",
                               "predict a whole training iteration of an MoE transformer (BERT-MoE, GPT-2-MoE) "
                               "under baseline, S1 and S2");
  struct Args {
    std::string spec, network, calibration, overlay, max_memory;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  c->add_option("spec", a->spec, "model YAML (experiments/bert-moe.yaml, experiments/gpt2-moe.yaml)")
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
    const Topology topo = load_topology(m.topology_file, m.topology_overrides, load_overlay_arg(a->overlay));
    const auto cal = load_calibration_arg(a->calibration);
    const moe::LayerSpec layer = moe::model_layer(m, topo);  // E as run: experts_per_gpu * GPUs, or the spec's E
    {
      // The MoE layer's schedules dominate what the iteration simulates (sim/moe/resources.hpp).
      const moe::Dims d = moe::make_dims(layer, topo.num_gpus(), topo.gpus_per_node());
      moe::SimCost e;
      for (const std::string& n : moe::preset_names()) e += moe::estimate_schedule(layer, d, moe::preset(n));
      check_estimate(fmt::format("model: simulating the MoE layer's schedules ({})", moe::spec_string(layer)), e,
                     a->max_memory, "use fewer GPUs or raise --max-memory");
    }
    const auto res = moe::run_model(m, topo, cal.get());
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
      std::cout << j.dump(1) << "\n";
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
    fmt::print("{:<27}", "dp allreduce, all_us");
    for (const auto& r : res) fmt::print(" {:>14.1f}", r.grad_sync.allreduce.to_us());
    fmt::print("\n{:<27}", "dp allreduce, hidden_us");
    for (const auto& r : res) fmt::print(" {:>14.1f}", r.grad_sync.hidden().to_us());
    fmt::print("\n{:<27}", "iteration_us");
    for (const auto& r : res) fmt::print(" {:>14.1f}", r.total().to_us());
    fmt::print("\n{:<27}", "speedup vs baseline");
    for (const auto& r : res) fmt::print(" {:>13.2f}x", base / r.total().to_seconds());
    fmt::print("\n{:<27}", "MoE share of iteration");
    for (const auto& r : res) fmt::print(" {:>13.1f}%", 100.0 * r.moe_time().to_seconds() / r.total().to_seconds());
    fmt::print("\n");
  });
}

}  // namespace parmsim::cli
