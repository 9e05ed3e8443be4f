#include "backend/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/compute/gpu_profile.hpp"

namespace parmsim::exec {

void add_trace(const TaskGraph& g, const SimResult& trace, int gpus_per_node, Samples* out) {
  for (const TraceRow& r : trace.trace) {
    if (!g.task(r.task).is_compute()) continue;
    const ComputeTask& t = g.task(r.task).compute();
    const double x = static_cast<double>(t.op == OpKind::gemm ? t.flops : t.bytes);
    const double s = std::max((r.end - r.start).to_seconds(), 1e-9);  // a clock tick at least
    if (x <= 0) continue;
    auto& k = out->kernels[std::string(g.kernel_name(t.kernel))];
    k.op = t.op;
    k.dtype = t.dtype;
    k.points.push_back({x, s});
  }
  for (const Collective& c : g.collectives()) {
    if (c.group.size() < 2 || c.bytes == 0) continue;
    Time last_start, end;
    for (int id : g.parts(c.id)) {
      last_start = std::max(last_start, trace.trace[id].start);
      end = std::max(end, trace.trace[id].end);
    }
    bool inter = false;
    for (int r : c.group) inter = inter || r / gpus_per_node != c.group[0] / gpus_per_node;
    out->collectives[{c.op, static_cast<int>(c.group.size()), inter}].push_back(
        {static_cast<double>(c.bytes), std::max((end - last_start).to_seconds(), 1e-9)});
  }
}

Samples calibrate_cpu(const Cluster& c, bool quick) {
  return calibrate_grid(c, quick);
}

Samples calibrate_grid(const Cluster& c, bool quick, Executor* executor,
                       const std::function<void(Execution&)>& collect) {
  Samples s;
  const std::vector<std::int64_t> Ms =
      quick ? std::vector<std::int64_t>{16, 48} : std::vector<std::int64_t>{16, 32, 64, 96};
  const std::vector<std::int64_t> Hs =
      quick ? std::vector<std::int64_t>{32, 96} : std::vector<std::int64_t>{32, 64, 128, 192};
  const std::vector<std::int64_t> Bs = quick ? std::vector<std::int64_t>{1, 4} : std::vector<std::int64_t>{1, 2, 4};
  std::vector<int> mps = {2};
  if (!quick && c.gpus % 4 == 0 && c.gpus >= 8) mps.push_back(4);
  std::uint64_t seed = 1;
  for (int mp : mps)
    for (std::int64_t M : Ms)
      for (std::int64_t H : Hs)
        for (std::int64_t B : Bs) {
          moe::LayerSpec l;
          l.B = B, l.L = 8, l.M = M, l.H = H, l.E = c.gpus, l.k = 2, l.f = 1.5, l.mp = mp;
          for (const std::string& n : moe::preset_names()) {
            Execution ex = execute_schedule(l, c, moe::preset(n), seed++, executor);
            if (collect) collect(ex);
            add_trace(ex.graph, ex.trace, c.gpus_per_node, &s);
          }
        }
  return s;
}

std::string calibration_yaml(const Samples& s, const std::string& source, std::string* table) {
  std::string y = fmt::format(
      "# parmsim calibration (parmsim calibrate): measured kernels and collectives.\n"
      "# kernels: time against FLOPs (gemm) or bytes, per kind of task; interpolated in log-log\n"
      "# within the measured range, the fitted alpha-beta line outside it.\n"
      "# collectives: time(size) = alpha + size / bandwidth, nccl-tests' size convention.\n"
      "# held_out_*: fitted on every other size, error on the others.\nsource: \"{}\"\nkernels:\n",
      source);
  *table += fmt::format("{:<28} {:>8} {:>10} {:>12}\n", "kernel", "points", "sizes", "held_out");
  for (const auto& [name, k] : s.kernels) {
    // One point per distinct size: the median of its repeats.
    std::map<double, std::vector<double>> by;
    for (const auto& p : k.points) by[p.x].push_back(p.t);
    std::vector<calib::Point> med;
    for (auto& [x, ts] : by) {
      std::sort(ts.begin(), ts.end());
      med.push_back({x, ts[ts.size() / 2]});
    }
    if (med.size() < 2) continue;
    double mape = 0;
    if (med.size() >= 4) mape = calib::fit_held_out(med).mape;
    y += fmt::format("  - {{name: {}, op: {}, dtype: {}, held_out_mape: {:.4f}, points_us: [", name, to_string(k.op),
                     to_string(k.dtype), mape);
    for (std::size_t i = 0; i < med.size(); ++i)
      y += fmt::format("{}[{:.0f}, {:.4f}]", i ? ", " : "", med[i].x, med[i].t * 1e6);
    y += "]}\n";
    *table += fmt::format("{:<28} {:>8} {:>10} {:>11.1f}%\n", name, k.points.size(), med.size(), 100 * mape);
  }
  y += "collectives:\n";
  *table += fmt::format("\n{:<14} {:>5} {:>6} {:>8} {:>12} {:>14} {:>10}\n", "collective", "ranks", "link", "points",
                        "alpha_us", "bandwidth_GBps", "held_out");
  for (const auto& [key, pts] : s.collectives) {
    const auto& [op, ranks, inter] = key;
    std::map<double, std::vector<double>> by;
    for (const auto& p : pts) by[p.x].push_back(p.t);
    std::vector<calib::Point> med;
    for (auto& [x, ts] : by) {
      std::sort(ts.begin(), ts.end());
      med.push_back({x, ts[ts.size() / 2]});
    }
    if (med.size() < 2) continue;
    calib::AlphaBeta ab = calib::fit_alpha_beta(med);
    if (ab.beta <= 0 || ab.alpha < 0) continue;  // noise swamped the sizes: no usable line
    const double mape = med.size() >= 4 ? calib::fit_held_out(med).mape : 0;
    y += fmt::format(
        "  - {{op: {}, ranks: {}, link: {}, alpha: {:.6f}us, bandwidth: {:.6f}GBps, points: {}, "
        "held_out_mape: {:.4f}}}\n",
        to_string(op), ranks, inter ? "inter" : "intra", ab.alpha * 1e6, 1 / ab.beta / 1e9, med.size(), mape);
    *table += fmt::format("{:<14} {:>5} {:>6} {:>8} {:>12.3f} {:>14.3f} {:>9.1f}%\n", to_string(op), ranks,
                          inter ? "inter" : "intra", pts.size(), ab.alpha * 1e6, 1 / ab.beta / 1e9, 100 * mape);
  }
  return y;
}

}  // namespace parmsim::exec
