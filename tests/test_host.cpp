// The host thread that issues the layer's kernels (layer key host_op): its
// tasks in the graph, the GPU waiting for it, syncs, and the closed form
// that must time the same recurrence.
#include <catch2/catch.hpp>
#include <string>

#include "sim/compute/gpu_profile.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

const char* const kOneGpu =
    "name: one\ngpu: rtx2080ti\nnodes: 1\nnode:\n  gpus: 1\n  devices:\n    - {name: cpu0, kind: host_bridge}\n"
    "  links:\n    - {a: gpu0, b: cpu0, bandwidth: 13GBps, latency: 500ns}\n";

ScheduleResult run(const Topology& t, const std::vector<std::string>& kv, const std::string& schedule,
                   SimResult* fwd = nullptr, TaskGraph* fg = nullptr) {
  LayerSpec spec;
  ScheduleKeys keys;
  apply_keys(&spec, &keys, kv, "test");
  return run_schedule({t, spec}, schedule_options(schedule, keys), fwd, fg);
}

}  // namespace

TEST_CASE("host_op: a launch-bound layer waits for its host, op by op", "[moe][host]") {
  // One GPU, a tiny lean layer: every kernel takes about the 3 us floor, far
  // below the host's 100 us per launch. The forward pass issues, by hand from
  // the op list (docs/moe-costs.md, lean): gate_gemm, softmax_topk, order,
  // dispatch AlltoAll, expert_fc1, expert_act, expert_fc2, the ESP AllReduce,
  // combine AlltoAll, iorder = 10 calls. The GPU runs each as soon as it is
  // issued, so the pass ends 10 x 100 us after it starts plus the last
  // kernel, iorder, on the GPU.
  const Topology t = parse_topology_text(kOneGpu, "one.yaml");
  SimResult fr;
  TaskGraph fg;
  const ScheduleResult r =
      run(t, {"B=1", "L=8", "M=16", "H=32", "E=2", "k=1", "f=1.0", "mp=1", "dtype=fp16", "ds_moe=lean",
              "dispatch=index", "host_op=100us"},
          "baseline", &fr, &fg);
  Time last;
  int host_tasks = 0;
  for (const Task& k : fg.tasks()) {
    if (!k.is_compute()) continue;
    if (k.compute().op == OpKind::host) {
      ++host_tasks;
      CHECK(fg.streams(0)[k.stream] == "host");
      CHECK(k.compute().host_wait == Time::us(100));
      CHECK(fg.kernel_name(k.compute().kernel) == "host");
    }
    if (fg.kernel_name(k.compute().kernel) == "iorder") last = fr.trace[k.id].end - fr.trace[k.id].start;
  }
  CHECK(host_tasks == 10);
  CHECK(last > Time::zero());
  CHECK(r.forward == Time::us(1000) + last);
  // The host is busier than the GPU: launch-bound, and it shows.
  CHECK(r.host_rank0 > r.compute_rank0);
}

TEST_CASE("host_op: zero leaves the graph as it was; a sync makes the host wait", "[moe][host]") {
  const Topology t = parse_topology_text(kOneGpu, "one.yaml");
  TaskGraph g0, g1;
  SimResult r0, r1;
  const std::vector<std::string> layer = {"B=2", "L=64", "M=64", "H=128", "E=4", "k=2", "mp=1", "dtype=fp16"};
  run(t, layer, "baseline", &r0, &g0);
  std::vector<std::string> hosted = layer;
  hosted.push_back("host_op=7us");
  run(t, hosted, "baseline", &r1, &g1);
  CHECK(g0.streams(0).size() == 3);  // compute, comm, rs
  CHECK(g1.streams(0).size() == 4);  // and host
  // DeepSpeed's gate syncs (exp_counts.to('cpu')): the host task after the
  // sync starts only when the GPU has finished it, and the sync itself no
  // longer charges the fixed 10 us wait.
  int sync = -1;
  for (const Task& k : g1.tasks())
    if (k.is_compute() && g1.kernel_name(k.compute().kernel) == "exp_counts_sync") sync = k.id;
  REQUIRE(sync >= 0);
  CHECK(g1.task(sync).compute().host_wait == Time::zero());
  bool waited = false;
  for (const Task& k : g1.tasks())
    if (k.is_compute() && k.compute().op == OpKind::host)
      for (int d : k.deps)
        if (d == sync) {
          waited = true;
          CHECK(r1.trace[k.id].start >= r1.trace[sync].end);
        }
  CHECK(waited);
}

TEST_CASE("host_op: the closed form times the same host as the simulator", "[moe][host]") {
  // Two independent walks of one recurrence: the engine runs the builder's
  // host tasks; the closed form replays them op by op (closed_form.cpp).
  for (const char* file : {"parm-32gpu", "dgx-h100"})
    for (const char* host : {"host_op=3us", "host_op=40us"})
      for (const char* sched : {"baseline", "s1"}) {
        const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + file + ".yaml");
        const ScheduleResult r = run(t, {host}, sched);
        CAPTURE(file, host, sched);
        CHECK(r.model_total_s() == Approx(r.total().to_seconds()).epsilon(1e-3));
      }
}
