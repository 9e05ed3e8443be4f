// parmsim verify | execute
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "backend/verify.hpp"
#include "sim/cli/common.hpp"
#include "sim/core/error.hpp"
#include "sim/io/output.hpp"

namespace parmsim::cli {

namespace {

struct LayerArgs {
  std::string set, schedule = "all";
  int gpus = 8, node_gpus = 0;
  std::uint64_t seed = 1;
  void add(CLI::App* c) {
    c->add_option("--set,-s", set,
                  "layer keys (B,L,M,H,E,k,f,mp, and schedule options); small defaults: "
                  "B=2,L=8,M=16,H=32,E=8,k=2,f=2,mp=2");
    c->add_option("--schedule", schedule, "baseline | s1 | s2 | all | search (every builder option)")
        ->capture_default_str();
    c->add_option("--gpus", gpus, "ranks (one thread per rank and stream)")->capture_default_str();
    c->add_option("--node-gpus", node_gpus, "GPUs per node (default: all ranks on one node)");
    c->add_option("--seed", seed, "random inputs and weights")->capture_default_str();
  }
  moe::LayerSpec spec(moe::ScheduleOptions* custom, bool* has_custom) const {
    moe::LayerSpec s = exec::small_layer();
    const auto kv = split_assignments(set);
    moe::apply_assignments(&s, custom, kv, "--set");
    *has_custom = false;
    for (const auto& x : kv) {
      const std::string k = x.substr(0, x.find('='));
      *has_custom =
          *has_custom || k == "split" || k == "gather" || k == "fuse_dispatch" || k == "fuse_combine" || k == "chunks";
    }
    return s;
  }
  exec::Cluster cluster() const { return {gpus, node_gpus > 0 ? node_gpus : gpus}; }
  std::vector<moe::ScheduleOptions> schedules(const moe::ScheduleOptions& custom, bool has_custom) const {
    std::vector<moe::ScheduleOptions> v;
    if (schedule == "search") {
      v.push_back(moe::preset("baseline"));
      for (auto o : moe::search_space()) {
        o.name = o.describe();
        v.push_back(o);
      }
      return v;
    }
    std::vector<std::string> names =
        schedule == "all" ? std::vector<std::string>{"baseline", "s1", "s2"} : std::vector<std::string>{schedule};
    for (const auto& n : names) {
      moe::ScheduleOptions o = moe::preset(n);
      if (n != "baseline" && has_custom) o = custom, o.name = n + "*";
      v.push_back(o);
    }
    return v;
  }
};

}  // namespace

void add_exec(CLI::App& app) {
  auto* v = app.add_subcommand("verify",
                               "run the schedules' task graphs on the CPU executor with random data and compare "
                               "output and gradients with a dense single-device MoE layer");
  auto va = std::make_shared<LayerArgs>();
  auto tol = std::make_shared<double>(1e-5);
  va->add(v);
  v->add_option("--tolerance", *tol, "largest max-relative error accepted")->capture_default_str();
  v->callback([va, tol] {
    moe::ScheduleOptions custom = moe::preset("s1");
    bool has_custom = false;
    const moe::LayerSpec s = va->spec(&custom, &has_custom);
    const auto cl = va->cluster();
    fmt::print("verify {} on {} ranks ({} per node), seed {}\n", moe::spec_string(s), cl.gpus, cl.gpus_per_node,
               va->seed);
    fmt::print("{:<40} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12} {:>6}\n", "schedule", "dropped", "output",
               "input_grad", "gate_grad", "fc1_grad", "fc2_grad", "");
    bool ok = true;
    for (const auto& o : va->schedules(custom, has_custom)) {
      const exec::VerifyResult r = exec::verify_schedule(s, cl, o, va->seed);
      const bool pass = r.worst() <= *tol;
      ok = ok && pass;
      fmt::print("{:<40} {:>10}", o.name.size() > 40 ? o.name.substr(0, 40) : o.name, r.dropped);
      for (const auto& e : r.errors) fmt::print(" {:>12.3e}", e.max_rel_error);
      fmt::print(" {:>6}\n", pass ? "ok" : "FAIL");
    }
    if (!ok) throw ParmError(fmt::format("verify: an error exceeds the tolerance {:g}", *tol));
  });

  auto* e = app.add_subcommand("execute",
                               "run a layer's training graph (forward + backward) for real and write the "
                               "measured trace");
  struct EArgs {
    LayerArgs layer;
    std::string backend = "cpu", trace;
  };
  auto ea = std::make_shared<EArgs>();
  ea->layer.schedule = "s2";
  ea->layer.add(e);
  e->add_option("--backend", ea->backend, "cpu | cuda")->capture_default_str();
  e->add_option("--trace", ea->trace, "write the measured per-task trace CSV here")->required();
  e->callback([ea] {
    if (ea->backend == "cuda")
      throw ParmError("execute: the CUDA backend is not part of this build yet; use --backend cpu");
    if (ea->backend != "cpu") throw ParmError(fmt::format("execute: unknown backend '{}': cpu or cuda", ea->backend));
    moe::ScheduleOptions custom = moe::preset("s1");
    bool has_custom = false;
    const moe::LayerSpec s = ea->layer.spec(&custom, &has_custom);
    const auto scheds = ea->layer.schedules(custom, has_custom);
    if (scheds.size() != 1) throw ParmError("execute: give one --schedule (baseline, s1 or s2)");
    const exec::Execution ex = exec::execute_schedule(s, ea->layer.cluster(), scheds[0], ea->layer.seed);
    write_atomically(ea->trace, [&](std::ostream& os) { write_trace_csv(os, ex.graph, ex.trace); });
    // What `parmsim compare` needs to rebuild the same graph.
    const nlohmann::json side = {{"layer", ea->layer.set},          {"schedule", ea->layer.schedule},
                                 {"gpus", ea->layer.gpus},          {"node_gpus", ea->layer.cluster().gpus_per_node},
                                 {"seed", ea->layer.seed},          {"backend", ea->backend},
                                 {"tasks", ex.graph.tasks().size()}};
    write_atomically(ea->trace + ".json", [&](std::ostream& os) { os << side.dump(1) << "\n"; });
    fmt::print("executed {} ({} tasks on {} ranks) in {:.3f} ms on the CPU; trace: {}\n", scheds[0].name,
               ex.graph.tasks().size(), ex.graph.num_ranks(), ex.trace.makespan.to_us() / 1e3, ea->trace);
  });
}

}  // namespace parmsim::cli
