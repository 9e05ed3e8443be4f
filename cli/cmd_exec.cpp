// parmsim verify | execute
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cuda/cuda_backend.hpp"
#include "cli/gpu_trace.hpp"
#include "backend/verify.hpp"
#include "cli/common.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/engine/trace_writer.hpp"
#include "sim/io/output.hpp"
#include "sim/mpi/mpi_shim.hpp"

namespace parmsim::cli {

namespace {

// The executors run every rank (CPU: a thread per rank and stream) at once.
constexpr int kMaxExecRanks = 1024;

struct LayerArgs {
  std::string set, schedule = "all", max_memory;
  int gpus = 8, node_gpus = 0;
  std::uint64_t seed = 1;
  void add(CLI::App* c) {
    c->footer(moe::layer_keys_help());
    c->add_option("--set,-s", set,
                  "layer keys and schedule options (listed below); small defaults: "
                  "B=2,L=8,M=16,H=32,E=8,k=2,f=2,mp=2");
    c->add_option("--schedule", schedule, moe::schedule_choices({"all", "search"}, " | ", " | ") + " (search: every builder option)")
        ->capture_default_str();
    c->add_option("--gpus", gpus, "ranks (cpu: a thread per rank and stream; cuda: ranks on one GPU, or mpirun -np)")
        ->capture_default_str()
        ->check(int_in(1, kMaxExecRanks));
    c->add_option("--node-gpus", node_gpus, "GPUs per node (default: all ranks on one node)")
        ->check(int_in(0, kMaxExecRanks));
    c->add_option("--seed", seed, "random inputs and weights")->capture_default_str()->check(uint64_any());
    add_max_memory_option(c, max_memory);
  }
  // Before anything is allocated: the layer's tensors fit under --max-memory.
  void check_memory(const std::string& cmd, const moe::LayerSpec& s,
                    const std::vector<moe::ScheduleOptions>& scheds) const {
    const MemoryLimit lim = memory_limit(max_memory);
    exec::MemoryEstimate worst;
    for (const auto& o : scheds) {
      const exec::MemoryEstimate m = exec::estimate_memory(s, cluster(), o, cmd == "verify");
      if (m.total() > worst.total()) worst = m;
    }
    if (worst.total() <= static_cast<double>(lim.bytes)) return;
    auto gib = [](double b) {
      return b >= 0x1p30 ? fmt::format("{:.2f}GiB", b / 0x1p30)
                         : b >= 0x1p20 ? fmt::format("{:.1f}MiB", b / 0x1p20) : fmt::format("{:.1f}KiB", b / 0x1p10);
    };
    throw UserError(fmt::format(
        "{}: {} on {} ranks needs about {} of host memory (rank buffers {}, inputs and weights {}, collective copies "
        "{}{}); the limit is {} ({}); nothing run or written",
        cmd, moe::spec_string(s), gpus, gib(worst.total()), gib(worst.buffers), gib(worst.data), gib(worst.scratch),
        worst.reference > 0 ? ", reference layer " + gib(worst.reference) : std::string(),
        units::format_bytes(lim.bytes), lim.why));
  }
  moe::LayerSpec spec(moe::ScheduleKeys* keys) const {
    moe::LayerSpec s = exec::small_layer();
    moe::apply_keys(&s, keys, split_assignments(set, "--set"), "--set");
    // 0.14.5's dropped duplicates are modelled for timing only: its AlltoAlls
    // move D/G while the executors' data bindings follow the 0.14.4 layout.
    if (s.ds_moe == moe::DsMoe::v0_14_5)
      throw UserError("--set ds_moe=0.14.5: the executors run the 0.14.4 and lean baselines only (0.14.5 is timed by "
                      "the simulator: parmsim layer)");
    exec::check_executable(s);
    if (keys->shaped && (schedule == "baseline" || schedule == "search"))
      throw UserError(fmt::format("--set: {} shape the Parm schedules; --schedule {} would ignore them",
                                  moe::parm_shaping_key_names(), schedule));
    return s;
  }
  exec::Cluster cluster() const {
    if (node_gpus > 0 && gpus % node_gpus != 0)
      throw UserError(fmt::format("--node-gpus: {} GPUs per node must divide --gpus {} (whole nodes)", node_gpus, gpus));
    return {gpus, node_gpus > 0 ? node_gpus : gpus};
  }
  std::vector<moe::ScheduleOptions> schedules(const moe::ScheduleKeys& keys) const {
    std::vector<moe::ScheduleOptions> v;
    if (schedule != "search" && schedule != "all" && !moe::is_preset(schedule))
      throw UserError(fmt::format("--schedule: unknown schedule '{}': expected {}", schedule,
                                  moe::schedule_choices({"all", "search"}, ", ", " or ")));
    if (schedule == "search") {
      v.push_back(moe::preset("baseline"));
      for (auto o : moe::search_space()) {
        o.name = o.describe();
        v.push_back(o);
      }
      return v;
    }
    const std::vector<std::string> names = schedule == "all" ? moe::preset_names() : std::vector<std::string>{schedule};
    for (const auto& n : names) v.push_back(moe::schedule_options(n, keys));
    return v;
  }
};

// --backend and the CUDA executor's options, shared by verify and execute.
struct BackendArgs {
  std::string backend = "cpu";
  exec::CudaOptions cuda;
  CLI::App* app = nullptr;
  void add(CLI::App* c, bool timing) {
    app = c;
    c->add_option("--backend", backend,
                  "cpu | cuda (cuda: every rank on one GPU (loopback), or one process per GPU under mpirun -np N)")
        ->capture_default_str();
    c->add_option("--device", cuda.device, "GPU index (default: 0, or the local rank under mpirun)")
        ->check(int_in(0, 1023));
    if (timing) {
      c->add_option("--warmup", cuda.warmup, "cuda: runs before the measured ones")
          ->capture_default_str()
          ->check(int_in(0, 100000));
      c->add_option("--reps", cuda.reps, "cuda: measured runs (the trace holds medians and p10/p90)")
          ->capture_default_str()
          ->check(int_in(1, 100000));
    } else {
      cuda.warmup = 0, cuda.reps = 1;
    }
  }
  // The executor to use (null: the CPU one). Under mpirun the CUDA executor
  // runs one rank per process over NCCL. Only here is the CUDA module opened.
  std::unique_ptr<exec::GpuExecutor> make(const std::string& cmd) {
    if (backend == "cpu") {
      // The CUDA executor's options would be ignored.
      for (const char* o : {"--device", "--warmup", "--reps"})
        if (app && app->get_option_no_throw(o) && app->count(o) > 0)
          throw UserError(fmt::format("{}: applies to --backend cuda, not cpu", o));
      return nullptr;
    }
    if (backend != "cuda") throw UserError(fmt::format("{}: unknown backend '{}': cpu or cuda", cmd, backend));
    refuse_mpirun_without_mpi(cmd + " --backend cuda");
    if (const std::string why = exec::cuda_backend_unavailable(); !why.empty())
      throw UserError(fmt::format("{} --backend cuda: {}", cmd, why));
    cuda.loopback = !mpi::launched_by_mpirun();
    return exec::make_cuda_executor(cuda);
  }
};

}  // namespace

void add_exec(CLI::App& app) {
  auto* v = app.add_subcommand(
      "verify",
      "run the schedules' task graphs on the CPU executor (or --backend cuda) with random data and compare "
      "output and gradients with a dense single-device MoE layer");
  auto va = std::make_shared<LayerArgs>();
  auto tol = std::make_shared<double>(-1);
  auto vb = std::make_shared<BackendArgs>();
  va->add(v);
  vb->add(v, false);
  v->add_option("--tolerance", *tol, "largest max-relative error accepted (default: 1e-5; 2e-2 for fp16/bf16)")
      ->check(finite_at_least(0));
  v->callback([va, vb, tol] {
    moe::ScheduleKeys keys;
    const auto cl = va->cluster();
    const moe::LayerSpec s = va->spec(&keys);
    const double limit = *tol >= 0 ? *tol : s.dtype == DType::fp32 ? 1e-5 : 2e-2;
    const auto schedules = va->schedules(keys);  // rejects an unknown --schedule before any output
    va->check_memory("verify", s, schedules);
    auto gpu = vb->make("verify");
    const bool lead = !gpu || gpu->world_rank() == 0;
    if (lead) {
      fmt::print("verify {} on {} ranks ({} per node), seed {}, {}\n", moe::spec_string(s), cl.gpus, cl.gpus_per_node,
                 va->seed,
                 gpu ? fmt::format("cuda on {} ({})", gpu->device_name(),
                                   gpu->world_size() > 1 ? fmt::format("{} processes, NCCL", gpu->world_size())
                                                         : std::string("loopback"))
                     : std::string("cpu"));
    }
    // The schedule column is as wide as the longest name: search variants print in full.
    std::size_t w = 8;
    for (const auto& o : schedules) w = std::max(w, o.name.size());
    if (lead)
      fmt::print("{:<{}} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12} {:>6}\n", "schedule", w, "dropped", "output",
                 "input_grad", "gate_grad", "fc1_grad", "fc2_grad", "");
    bool ok = true;
    for (const auto& o : schedules) {
      exec::VerifyResult r = exec::verify_schedule(s, cl, o, va->seed, nullptr, gpu.get());
      for (auto& e : r.errors) e.max_rel_error = mpi::allreduce_max(e.max_rel_error);
      const bool pass = r.worst() <= limit;
      ok = ok && pass;
      if (!lead) continue;
      fmt::print("{:<{}} {:>10}", o.name, w, r.dropped);
      for (const auto& e : r.errors) fmt::print(" {:>12.3e}", e.max_rel_error);
      fmt::print(" {:>6}\n", pass ? "ok" : "FAIL");
    }
    gpu.reset();
    mpi::finalize();
    if (!ok) throw UserError(fmt::format("verify: an error exceeds the tolerance {:g}", limit));
  });

  auto* e = app.add_subcommand("execute",
                               "run a layer's training graph (forward + backward) for real and write the "
                               "measured trace");
  struct EArgs {
    LayerArgs layer;
    BackendArgs be;
    std::string trace;
  };
  auto ea = std::make_shared<EArgs>();
  ea->layer.schedule = "s2";
  ea->layer.add(e);
  ea->be.add(e, true);
  e->add_option("--trace", ea->trace, "write the measured per-task trace CSV here")->required();
  e->callback([ea] {
    // Before running anything: the trace and its sidecar can be written.
    check_outputs({{"--trace", ea->trace}, {"--trace (its .json sidecar)", ea->trace + ".json"}}, {});
    moe::ScheduleKeys keys;
    ea->layer.cluster();  // --node-gpus divides --gpus
    const moe::LayerSpec s = ea->layer.spec(&keys);
    const auto scheds = ea->layer.schedules(keys);
    if (scheds.size() != 1) throw UserError("execute: give one --schedule (baseline, s1 or s2)");
    ea->layer.check_memory("execute", s, scheds);
    auto gpu = ea->be.make("execute");
    exec::Execution ex = exec::execute_schedule(s, ea->layer.cluster(), scheds[0], ea->layer.seed, gpu.get());
    if (gpu && gpu->world_size() > 1) {
      // Every process measured its own rank's tasks: rank 0 collects them.
      gather_gpu_trace(*gpu, ex.graph, ex.trace);
      const bool lead = gpu->world_rank() == 0;
      gpu.reset();
      mpi::finalize();
      if (!lead) return;
    }
    write_atomically(ea->trace, [&](std::ostream& os) { write_trace_csv(os, ex.graph, ex.trace); });
    // What `parmsim compare` needs to rebuild the same graph.
    const nlohmann::json side = {{"layer", ea->layer.set},          {"schedule", ea->layer.schedule},
                                 {"gpus", ea->layer.gpus},          {"node_gpus", ea->layer.cluster().gpus_per_node},
                                 {"seed", ea->layer.seed},          {"backend", ea->be.backend},
                                 {"tasks", ex.graph.tasks().size()}};
    write_atomically(ea->trace + ".json", [&](std::ostream& os) { os << side.dump(1) << "\n"; });
    fmt::print(
        "executed {} ({} tasks on {} ranks) in {:.3f} ms{}; trace: {}\n", scheds[0].name, ex.graph.tasks().size(),
        ex.graph.num_ranks(), ex.trace.makespan.to_us() / 1e3,
        ea->be.backend == "cpu" ? " on the CPU" : fmt::format(" on the GPU (median of {} runs)", ea->be.cuda.reps),
        ea->trace);
  });
}

}  // namespace parmsim::cli
