#include "sim/fit/machine_fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/coll/collective_cost.hpp"
#include "sim/core/error.hpp"

namespace parmsim::calib {

std::vector<MeasuredCollective> measured_from(const NcclTable& t) {
  CollOp op{};
  if (!parse_coll_op(t.op, &op) || op == CollOp::alltoallv || op == CollOp::saa)
    throw UserError(fmt::format("{}: no collective '{}' to fit the machine to", t.file, t.op));
  if (t.ranks < 2)
    throw UserError(fmt::format("{}: the ranks are not listed (no '#  Rank ... on HOST' lines or config.devices); "
                                "state the group with --ranks N [--nodes M]",
                                t.file));
  std::vector<MeasuredCollective> out;
  for (std::size_t i = 0; i < t.points.size(); ++i)
    if (const Point& p = t.points[i]; p.x > 0 && p.t > 0)
      out.push_back({op, t.ranks, std::max(1, t.hosts), p.x, p.t, t.name(), t.row(i)});
  return out;
}

std::vector<int> measured_group(const MeasuredCollective& m, const Topology& topo) {
  if (m.ranks % m.hosts != 0)
    throw UserError(fmt::format("{}: {} ranks do not spread evenly over {} hosts", m.source, m.ranks, m.hosts));
  const int ppn = m.ranks / m.hosts;
  if (m.hosts > topo.num_nodes() || ppn > topo.gpus_per_node())
    throw UserError(fmt::format(
        "{}: measured on {} host(s) of {} GPUs; topology '{}' has {} node(s) of {} GPUs (try --topo-set nodes={})",
        m.source, m.hosts, ppn, topo.name(), topo.num_nodes(), topo.gpus_per_node(), m.hosts));
  std::vector<int> g;
  for (int h = 0; h < m.hosts; ++h)
    for (int i = 0; i < ppn; ++i) g.push_back(h * topo.gpus_per_node() + i);
  return g;
}

double model_seconds(const MeasuredCollective& m, const Topology& topo) {
  Workspace ws;
  return model_seconds(m, topo, ws);
}

double model_seconds(const MeasuredCollective& m, const Topology& topo, Workspace& ws) {
  Collective c;
  c.name = to_string(m.op);
  c.op = m.op;
  c.group = measured_group(m, topo);
  c.bytes = static_cast<std::uint64_t>(m.bytes);
  return collective_time_s(c, topo, m.bytes, ws);
}

ModelError model_error(const std::vector<MeasuredCollective>& ms, const Topology& topo) {
  ModelError e;
  Workspace ws;
  for (const MeasuredCollective& m : ms) {
    const double r = std::abs(model_seconds(m, topo, ws) - m.seconds) / m.seconds;
    e.mape += r, e.worst = std::max(e.worst, r), ++e.n;
  }
  if (e.n) e.mape /= e.n;
  return e;
}

std::string FittedParam::assignment() const {
  return time ? fmt::format("{}={:.3f}us", key, value) : fmt::format("{}={:.3f}", key, value);
}

std::string FittedParam::at_bound() const {
  // The efficiencies' grid steps are 0.01 then 0.001: within half the finer step of an end is at it.
  const double tol = time ? 0.0 : 5e-4;
  if (value <= lower + tol) return "lower";
  if (std::isfinite(upper) && value >= upper - tol) return "upper";
  return "";
}

std::string FittedParam::range() const {
  if (time) return fmt::format("[{:g} us, no upper bound)", lower);
  return fmt::format("[{:.2f}, {:.2f}]", lower, upper);
}

std::vector<std::string> MachineFit::assignments() const {
  std::vector<std::string> out;
  for (const FittedParam& p : params) out.push_back(p.assignment());
  return out;
}

namespace {

// The efficiencies' search range (step 1 of the method, machine_fit.hpp).
constexpr double kEffLow = 0.30, kEffHigh = 1.00;

struct Fitter {
  const std::function<Topology(const std::vector<std::string>&)>& load;
  std::vector<MeasuredCollective> large, small;
  std::vector<FittedParam> eff;                 // the efficiencies being fitted
  double launch_us = 0, net_us = 0;             // the latencies
  bool fit_net = false;
  mutable Workspace ws;  // forms and plans of the topologies tried

  std::vector<std::string> overlay(const std::string& key = "", double v = 0) const {
    std::vector<std::string> o;
    for (const FittedParam& p : eff)
      o.push_back(p.key == key ? fmt::format("{}={:.6f}", key, v) : fmt::format("{}={:.6f}", p.key, p.value));
    if (!key.empty() && std::none_of(eff.begin(), eff.end(), [&](const FittedParam& p) { return p.key == key; }))
      o.push_back(fmt::format("{}={:.6f}", key, v));
    o.push_back(fmt::format("nccl.launch={:.6f}us", launch_us));
    if (fit_net) o.push_back(fmt::format("nccl.net_latency={:.6f}us", net_us));
    return o;
  }
  // Mean squared log(model / measured) over `ms`.
  double loss(const std::vector<MeasuredCollective>& ms, const Topology& t) const {
    double s = 0;
    for (const MeasuredCollective& m : ms) {
      const double r = std::log(model_seconds(m, t, ws) / m.seconds);
      s += r * r;
    }
    return ms.empty() ? 0 : s / static_cast<double>(ms.size());
  }
  double loss_at(const std::string& key, double v) const { return loss(large, load(overlay(key, v))); }

  void fit_efficiency(FittedParam& p) {
    double best = p.value, best_loss = std::numeric_limits<double>::infinity();
    auto probe = [&](double v) {
      const double l = loss_at(p.key, v);
      if (l < best_loss - 1e-15) best = v, best_loss = l;
    };
    for (int i = 30; i <= 100; ++i) probe(i / 100.0);  // kEffLow to kEffHigh
    const double c = best;
    // Within the range: at its ends the fine steps stop there too (they went down to 0.296 below 0.30).
    for (int i = -10; i <= 10; ++i)
      if (const double v = c + i / 1000.0; v >= kEffLow - 1e-12 && v <= kEffHigh) probe(v);
    p.value = best;
  }

  void fit_latencies() {
    // Residuals with no added latency; k_i: model us added per us of nccl.net_latency.
    std::vector<double> r, k, w;
    const Topology t0 = load(overlay_without_latencies());
    std::vector<std::string> o1 = overlay_without_latencies();
    o1.push_back("nccl.net_latency=1us");
    const Topology t1 = load(o1);
    for (const MeasuredCollective& m : small) {
      const double base = model_seconds(m, t0, ws) * 1e6;
      r.push_back(m.seconds * 1e6 - base);
      k.push_back(fit_net ? model_seconds(m, t1, ws) * 1e6 - base : 0.0);
      w.push_back(1.0 / (m.seconds * 1e6 * m.seconds * 1e6));
    }
    auto launch_only = [&] {
      double sw = 0, sr = 0;
      for (std::size_t i = 0; i < r.size(); ++i) sw += w[i], sr += w[i] * r[i];
      return std::max(0.0, sr / sw);
    };
    bool net_used = false;
    for (double ki : k) net_used |= ki > 1e-9;
    if (!net_used) {
      launch_us = launch_only();
      net_us = 0;
      return;
    }
    // Weighted least squares on [1, k_i] (launch, net) = r_i: the 2x2 normal equations.
    double s11 = 0, s1k = 0, skk = 0, s1r = 0, skr = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      s11 += w[i], s1k += w[i] * k[i], skk += w[i] * k[i] * k[i], s1r += w[i] * r[i], skr += w[i] * k[i] * r[i];
    }
    // Singular when every k_i is the same (each size crosses the network as often, as a 2-node
    // tree does): det is then 0 up to rounding, and dividing by that rounding gives any pair.
    const double det = s11 * skk - s1k * s1k;
    const bool singular = !(det > 1e-9 * s11 * skk);
    double l = singular ? -1 : (skk * s1r - s1k * skr) / det, n = singular ? -1 : (s11 * skr - s1k * s1r) / det;
    if (singular || l < 0 || n < 0) {
      // Clamp the negative one to 0 and refit the other alone.
      const double n_alone = skk > 0 ? std::max(0.0, skr / skk) : 0.0;
      const double l_alone = launch_only();
      auto sse = [&](double a, double b) {
        double s = 0;
        for (std::size_t i = 0; i < r.size(); ++i) s += w[i] * (a + b * k[i] - r[i]) * (a + b * k[i] - r[i]);
        return s;
      };
      if (sse(l_alone, 0) <= sse(0, n_alone))
        l = l_alone, n = 0;
      else
        l = 0, n = n_alone;
    }
    launch_us = l, net_us = n;
  }
  std::vector<std::string> overlay_without_latencies() const {
    std::vector<std::string> o;
    for (const FittedParam& p : eff) o.push_back(fmt::format("{}={:.6f}", p.key, p.value));
    o.push_back("nccl.launch=0us");
    o.push_back("nccl.net_latency=0us");
    return o;
  }
};

}  // namespace

MachineFit fit_machine(const std::function<Topology(const std::vector<std::string>&)>& load,
                       const std::vector<MeasuredCollective>& ms, const FitOptions& opt) {
  if (ms.empty()) throw UserError("fit the machine: no measurements");
  MachineFit out;
  Fitter f{load, {}, {}, {}, 0, 0, false};
  const Topology base = load({});
  for (const MeasuredCollective& m : ms) {
    measured_group(m, base);  // throws when the topology cannot hold it
    if (m.bytes >= opt.large_from) f.large.push_back(m);
    if (m.bytes <= opt.small_to) f.small.push_back(m);
  }
  // Which link classes do the large sizes exercise? Those whose efficiency changes a modelled time.
  if (f.large.empty()) {
    out.notes.push_back(fmt::format("no measurement of {:.0f} B or more: link efficiencies not fitted", opt.large_from));
  } else {
    for (const char* cls : {"nvlink", "pcie", "network"}) {
      const std::string key = fmt::format("link_efficiency.{}", cls);
      const Topology hi = load({key + "=1.0"}), lo = load({key + "=0.5"});
      bool used = false;
      for (const MeasuredCollective& m : f.large) used |= model_seconds(m, hi, f.ws) != model_seconds(m, lo, f.ws);
      if (used)
        f.eff.push_back({key, 1.0, false, static_cast<int>(f.large.size()), kEffLow, kEffHigh});
      else
        out.notes.push_back(fmt::format("{}: not on the path of these measurements, not fitted", key));
    }
  }
  // Does any small size cross the network (nccl.net_latency matters)?
  if (f.small.empty()) {
    out.notes.push_back(fmt::format("no measurement of {:.0f} B or less: latencies not fitted", opt.small_to));
  } else {
    const Topology a = load({"nccl.net_latency=0us"}), b = load({"nccl.net_latency=1us"});
    for (const MeasuredCollective& m : f.small) f.fit_net |= model_seconds(m, a, f.ws) != model_seconds(m, b, f.ws);
    if (!f.fit_net) out.notes.push_back("nccl.net_latency: no measurement crosses the network, not fitted");
  }
  for (int round = 0; round < 2; ++round) {
    for (FittedParam& p : f.eff) f.fit_efficiency(p);
    if (!f.small.empty()) f.fit_latencies();
  }
  out.params = f.eff;
  if (!f.small.empty()) {
    const double inf = std::numeric_limits<double>::infinity();
    out.params.push_back({"nccl.launch", f.launch_us, true, static_cast<int>(f.small.size()), 0.0, inf});
    if (f.fit_net)
      out.params.push_back({"nccl.net_latency", f.net_us, true, static_cast<int>(f.small.size()), 0.0, inf});
  }
  return out;
}

std::string overlay_yaml(const MachineFit& fit, const std::string& header) {
  std::string y;
  for (std::size_t s = 0, e; s < header.size(); s = e + 1) {
    e = header.find('\n', s);
    if (e == std::string::npos) e = header.size();
    y += "# " + header.substr(s, e - s) + "\n";
  }
  for (const std::string& n : fit.notes) y += "# " + n + "\n";
  for (const FittedParam& p : fit.params)
    y += p.time ? fmt::format("{}: {:.3f}us\n", p.key, p.value) : fmt::format("{}: {:.3f}\n", p.key, p.value);
  return y;
}

}  // namespace parmsim::calib
