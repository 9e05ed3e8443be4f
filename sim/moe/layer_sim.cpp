#include "sim/moe/layer_sim.hpp"

#include "sim/compute/gpu_profile.hpp"
#include "sim/moe/memory.hpp"

namespace parmsim::moe {

namespace {
// Rank 0's busy time on the GPU's compute stream, or (`host`) on the host
// thread that issues the work (the builder's host tasks, LayerSpec::host_op).
Time rank0_compute(const TaskGraph& g, const SimResult& r, bool host = false) {
  Time t;
  for (const TraceRow& row : r.trace) {
    const Task& k = g.task(row.task);
    if (k.rank == 0 && k.is_compute() && (k.compute().op == OpKind::host) == host) t += row.end - row.start;
  }
  return t;
}
}  // namespace

ScheduleResult run_schedule(const LayerRun& run, const ScheduleOptions& o, SimResult* fwd_trace, TaskGraph* fwd_graph,
                            SimResult* bwd_trace, TaskGraph* bwd_graph) {
  const Dims d = make_dims(run.spec, run.topo.num_gpus(), run.topo.gpus_per_node());
  const GpuProfile& gpu = run.topo.gpu();
  const auto fops = forward_ops(run.spec, d, o);
  const auto bops = backward_ops(fops, run.spec, d, o);
  // The simulator reads no data bindings: graphs without them cost less to build.
  TaskGraph fg = build_graph(fops, run.spec, d, o, GraphData::timing_only);
  TaskGraph bg = build_backward_graph(fops, bops, run.spec, d, o, GraphData::timing_only);
  SimOptions so;
  so.network = run.network;
  so.calibration = run.calibration;
  so.symmetry = run.symmetry;
  Workspace fresh;
  Workspace& ws = run.workspace ? *run.workspace : fresh;
  SimResult fr = simulate(fg, run.topo, so, ws);
  SimResult br = simulate(bg, run.topo, so, ws);
  ScheduleResult res;
  res.options = o;
  res.forward = fr.makespan;
  res.backward = br.makespan;
  AlphaBeta own;
  if (!run.model) {
    own = alpha_beta_from_topology(run.topo, &ws, run.symmetry);  // this call's: its forms kept in ws
    own.calibration = run.calibration;
  }
  const AlphaBeta& ab = run.model ? *run.model : own;
  res.model_forward_s = model_time(fops, run.spec, d, o, ab, gpu);
  res.model_backward_s = model_time(bops, run.spec, d, o, ab, gpu);
  res.intra_node_bytes = fr.intra_node_bytes + br.intra_node_bytes;
  res.inter_node_bytes = fr.inter_node_bytes + br.inter_node_bytes;
  res.compute_rank0 = rank0_compute(fg, fr) + rank0_compute(bg, br);
  res.host_rank0 = rank0_compute(fg, fr, true) + rank0_compute(bg, br, true);
  res.peak_memory_bytes = peak_memory(fops, run.spec, d).peak();
  res.fits = res.peak_memory_bytes <= run.topo.gpu_memory();
  if (run.phases) {
    res.phases = layer_phases(fg, fr, fops, run.spec, d);
    res.phases += layer_phases(bg, br, bops, run.spec, d);
  }
  if (fwd_trace) *fwd_trace = std::move(fr);
  if (bwd_trace) *bwd_trace = std::move(br);
  if (fwd_graph) *fwd_graph = std::move(fg);
  if (bwd_graph) *bwd_graph = std::move(bg);
  return res;
}

std::string auto_choice(const LayerSpec& s, const Dims& d, const AlphaBeta& ab, const GpuProfile& gpu) {
  const double t1 = model_layer(s, d, preset("s1"), ab, gpu).total();
  const double t2 = model_layer(s, d, preset("s2"), ab, gpu).total();
  return t2 < t1 ? "s2" : "s1";
}

}  // namespace parmsim::moe
