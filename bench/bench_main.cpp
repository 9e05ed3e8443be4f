// parmsim_bench: speed figures for the simulator (Google Benchmark).
//   parmsim_bench --benchmark_filter=EventQueue     event-queue throughput (100,000 and 64 pending)
//   parmsim_bench --benchmark_filter=FatTree        1024-GPU AlltoAll and AllReduce, flow model
//   parmsim_bench --benchmark_filter=ModelLayer     the closed form of one layer (docs/performance.md)
//   parmsim_bench --benchmark_filter=LayerScale     layers on 1024, 256, 8192 and 16384 GPUs, with and without symmetry
// Peak memory (max RSS of the process so far) is reported as a counter.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <random>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/event_queue.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/net/rate_memo.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;

static double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// One collective of 64 MiB over ranks 0..p-1, each rank on one stream.
static TaskGraph one_collective(CollOp op, const std::string& algo, int p) {
  TaskGraphBuilder b(p);
  b.add_stream_all("comm");
  Collective c;
  c.name = "c";
  c.op = op;
  c.algo = algo;
  c.bytes = 64ULL << 20;
  for (int i = 0; i < p; ++i) c.group.push_back(i);
  b.add_collective_tasks(c, "comm", "c");
  return std::move(b).build();
}

// Steady state with N pending events: each iteration schedules one event at a
// random future time and pops the earliest. items/s = schedule+pop pairs.
// 100,000 pending runs the queue's bucket mode, 64 its heap mode (a small queue).
static void BM_EventQueue(benchmark::State& state) {
  const int pending = static_cast<int>(state.range(0));
  EventQueue<std::uint32_t> q;
  // xorshift64: a generator that costs a few cycles, so the figure is the queue's.
  std::uint64_t x = 88172645463325252ULL;
  auto rng = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  Time now;
  for (int i = 0; i < pending; ++i) q.push(Time::ps(static_cast<std::int64_t>(rng() % 1'000'000)), i);
  for (auto _ : state) {
    auto e = q.pop();
    now = e.time;
    q.push(now + Time::ps(static_cast<std::int64_t>(rng() % 1'000'000)), e.payload);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventQueue)->Arg(100'000)->Arg(64);

// Direct AlltoAll of 64 MiB per GPU over all 1024 GPUs of the fat-tree:
// 1,047,552 transfers, max-min fair sharing re-solved on every start/finish.
static void BM_FatTreeAlltoAll(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/fat-tree-1024.yaml");
  const TaskGraph g = one_collective(CollOp::alltoall, "", 1024);
  SimResult r;
  Workspace ws;
  for (auto _ : state) r = simulate(g, t, {state.range(0) == 0 ? "flow" : "analytical"}, ws);
  state.counters["sim_us"] = r.makespan.to_us();
  state.counters["transfers"] = static_cast<double>(r.transfers);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_FatTreeAlltoAll)->Arg(0)->Unit(benchmark::kMillisecond)->Iterations(1);

// 1024-GPU AllReduce of 64 MiB with NCCL's choice (auto: NVLS-Tree across 128
// nodes), flow network: the plan, the flows and the simulation.
static void BM_FatTreeAllReduce(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/fat-tree-1024.yaml");
  const TaskGraph g = one_collective(CollOp::allreduce, "", 1024);
  SimResult r;
  Workspace ws;
  for (auto _ : state) r = simulate(g, t, {"flow"}, ws);
  state.counters["sim_us"] = r.makespan.to_us();
  state.counters["transfers"] = static_cast<double>(r.transfers);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_FatTreeAllReduce)->Unit(benchmark::kMillisecond)->Iterations(3);

// 1024 GPUs on one switch (450 GB/s per GPU, 500 ns per hop), 64 MiB per GPU:
// Arg 0: direct AlltoAll (1,047,552 transfers); 1: textbook flat ring AllReduce
// (2046 steps of 1024 transfers); 2: AllReduce with NCCL's choice.
static void BM_Switch1024(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/switch-1024.yaml");
  const TaskGraph g = one_collective(state.range(0) == 0 ? CollOp::alltoall : CollOp::allreduce,
                                     state.range(0) == 0 ? "direct" : state.range(0) == 1 ? "flat_ring" : "", 1024);
  SimResult r;
  Workspace ws;
  for (auto _ : state) r = simulate(g, t, {"flow"}, ws);
  state.counters["sim_us"] = r.makespan.to_us();
  state.counters["transfers"] = static_cast<double>(r.transfers);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_Switch1024)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(1);

// One MoE layer (B=4, L=512, M=1024, H=4096, E=32, k=2, f=1.2, mp=4) on the
// paper's 32-GPU cluster: baseline, S1 and S2, forward and backward, flow
// network. The flow model's rate memo (sim/net/rate_memo.hpp) /0: as a sweep
// or a second layer finds it (it holds the sets of flows of earlier
// iterations); /1: emptied before each iteration (one layer in a fresh
// process); /2: off (every set of flows solved).
static void BM_LayerAllSchedules(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  Workspace ws;
  const moe::LayerRun run{t, moe::LayerSpec{}, "flow", nullptr, nullptr, &ws};
  const auto mode = state.range(0);
  set_rate_memo(ws, mode != 2);
  for (auto _ : state) {
    if (mode == 1) clear_rate_memos(ws);
    for (const char* n : {"baseline", "s1", "s2"}) benchmark::DoNotOptimize(moe::run_schedule(run, moe::preset(n)));
  }
}
BENCHMARK(BM_LayerAllSchedules)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// Layers at cluster scale, baseline, S1 and S2, forward and backward, flow
// network, one iteration each (docs/performance.md, "Symmetry"):
//   /0  1024 GPUs: fat-tree-1024, B=8,L=2048,M=4096,H=14336,E=1024,k=2,f=1.25,mp=8,dtype=bf16
//   /1  256 GPUs: the what-if's 4:1 fat-tree (32 servers, 4 per leaf, 4 spines),
//       B=8,L=1024,M=2048,H=4096,E=256,k=2,f=1.2,mp=4 (fp32), its largest configuration
//   /2  the same as /1 without symmetry (every rank simulated)
//   /3  8192 GPUs: h200-cluster, nodes=1024, B=4,L=4096,M=7168,H=2048,E=8192,k=8,f=1.25,mp=8,dtype=bf16
//       (tens of seconds; its peak RSS is the process's so far, so run it alone:
//       --benchmark_filter=LayerScale/3)
//   /4  16384 GPUs: the same with nodes=2048, E=16384 (run it alone: --benchmark_filter=LayerScale/4)
static void BM_LayerScale(benchmark::State& state) {
  const auto mode = state.range(0);
  const std::string dir = std::string(PARMSIM_SOURCE_DIR) + "/topologies/";
  const Topology t =
      mode == 0   ? load_topology(dir + "fat-tree-1024.yaml")
      : mode == 3 ? load_topology(dir + "h200-cluster.yaml", {"nodes=1024"})
      : mode == 4 ? load_topology(dir + "h200-cluster.yaml", {"nodes=2048"})
                  : load_topology(dir + "fat-tree-1024.yaml",
                                  {"nodes=32", "fabric.nodes_per_leaf=4", "fabric.spines=4", "fabric.oversubscription=4"});
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  moe::apply_keys(&spec, &keys,
                  mode == 0   ? std::vector<std::string>{"B=8", "L=2048", "M=4096", "H=14336", "E=1024", "k=2",
                                                         "f=1.25", "mp=8", "dtype=bf16"}
                  : mode == 3 ? std::vector<std::string>{"B=4", "L=4096", "M=7168", "H=2048", "E=8192", "k=8",
                                                         "f=1.25", "mp=8", "dtype=bf16"}
                  : mode == 4 ? std::vector<std::string>{"B=4", "L=4096", "M=7168", "H=2048", "E=16384", "k=8",
                                                         "f=1.25", "mp=8", "dtype=bf16"}
                              : std::vector<std::string>{"B=8", "L=1024", "M=2048", "H=4096", "E=256", "k=2", "f=1.2", "mp=4"},
                  "bench");
  for (auto _ : state) {
    Workspace ws;
    moe::LayerRun run{t, spec, "flow", nullptr, nullptr, &ws};
    run.symmetry = mode != 2;
    for (const char* n : {"baseline", "s1", "s2"}) benchmark::DoNotOptimize(moe::run_schedule(run, moe::preset(n)));
  }
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_LayerScale)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Arg(4)->Unit(benchmark::kMillisecond)->Iterations(1);

// The part of BM_LayerAllSchedules that is not simulation: the same layer's
// op lists and timing-only task graphs, forward and backward, for the three
// schedules (what run_schedule builds before it simulates).
static void BM_LayerGraphsOnly(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  const moe::LayerSpec s;
  const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
  for (auto _ : state)
    for (const char* n : {"baseline", "s1", "s2"}) {
      const moe::ScheduleOptions o = moe::preset(n);
      const auto f = moe::forward_ops(s, d, o);
      const auto b = moe::backward_ops(f, s, d, o);
      benchmark::DoNotOptimize(moe::build_graph(f, s, d, o, moe::GraphData::timing_only));
      benchmark::DoNotOptimize(moe::build_backward_graph(f, b, s, d, o, moe::GraphData::timing_only));
    }
}
BENCHMARK(BM_LayerGraphsOnly)->Unit(benchmark::kMillisecond);

// The closed form of one layer: S1 and S2, forward and backward (what `auto` evaluates).
static void BM_ModelLayerEval(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  moe::LayerSpec s;
  const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
  const moe::AlphaBeta ab = moe::alpha_beta_from_topology(t);
  const GpuProfile& gpu = t.gpu();
  const moe::ScheduleOptions o = moe::preset(state.range(0) == 0 ? "s1" : "s2");
  for (auto _ : state) benchmark::DoNotOptimize(moe::model_layer(s, d, o, ab, gpu));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ModelLayerEval)->Arg(0)->Arg(1);

// The closed form over distinct layer shapes, one after another: 4 x 3 x 3 x
// 2 x 2 x 2 x 3 = 864 specs (B, L, M, H/M, E, k, mp; MP groups stay in a node of 4), so nothing that depends
// on sizes can be reused from one evaluation to the next; only what depends
// on the topology and the group shape (the bound collectives) is.
static void BM_ModelLayerEvalDistinct(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  std::vector<std::pair<moe::LayerSpec, moe::Dims>> specs;
  for (std::int64_t B : {1, 2, 4, 8})
    for (std::int64_t L : {256, 512, 1024})
      for (std::int64_t M : {512, 1024, 2048})
        for (std::int64_t hm : {2, 4})
          for (std::int64_t E : {32, 64})
            for (std::int64_t k : {1, 2})
              for (int mp : {1, 2, 4}) {
                moe::LayerSpec s;
                s.B = B, s.L = L, s.M = M, s.H = hm * M, s.E = E, s.k = k, s.mp = mp;
                specs.emplace_back(s, moe::make_dims(s, t.num_gpus(), t.gpus_per_node()));
              }
  const moe::AlphaBeta ab = moe::alpha_beta_from_topology(t);
  const GpuProfile& gpu = t.gpu();
  const moe::ScheduleOptions o = moe::preset(state.range(0) == 0 ? "s1" : "s2");
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& [s, d] = specs[i];
    i = i + 1 == specs.size() ? 0 : i + 1;
    benchmark::DoNotOptimize(moe::model_layer(s, d, o, ab, gpu));
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["specs"] = static_cast<double>(specs.size());
}
BENCHMARK(BM_ModelLayerEvalDistinct)->Arg(0)->Arg(1);

// A fresh AlphaBeta for every evaluation (what a one-off caller pays; sweeps
// and `layer` make one per topology, sim/sweep/runner.cpp): the topology's
// fingerprint, and every collective bound and resolved again (in the
// caller's workspace, whose cost forms stay warm).
static void BM_ModelLayerEvalFreshAlphaBeta(benchmark::State& state) {
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  moe::LayerSpec s;
  const moe::Dims d = moe::make_dims(s, t.num_gpus(), t.gpus_per_node());
  const GpuProfile& gpu = t.gpu();
  const moe::ScheduleOptions o = moe::preset(state.range(0) == 0 ? "s1" : "s2");
  Workspace ws;
  for (auto _ : state) {
    const moe::AlphaBeta ab = moe::alpha_beta_from_topology(t, &ws);
    benchmark::DoNotOptimize(moe::model_layer(s, d, o, ab, gpu));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ModelLayerEvalFreshAlphaBeta)->Arg(0)->Arg(1);

BENCHMARK_MAIN();
