#include "cli/measured.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include "cli/common.hpp"
#include "cli/coverage.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/io/csv.hpp"
#include "sim/io/output.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/resources.hpp"
#include "sim/topo/topology_io.hpp"
#include "sim/validation/measured_csv.hpp"

namespace parmsim::cli {

namespace {

// "768KiB", "64MiB", "8B": nccl-tests' sizes are powers of two, mostly exact.
std::string size_text(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.4g}{}", b, unit[u]);
}

// The error of `model` against `measured`, signed, as a fraction.
double rel(double model, double measured) {
  return (model - measured) / measured;
}

// What compare runs a row with: the topology as given, a calibration's tables, an overlay's parameters.
struct Way {
  std::string name;
  bool overlay, table;
};
std::vector<Way> ways_for(bool has_ov, bool has_cal) {
  std::vector<Way> ways;
  if (has_ov || has_cal) ways.push_back({"uncalibrated", false, false});
  if (has_ov && has_cal) ways.push_back({"table", false, true}), ways.push_back({"params", true, false});
  ways.push_back({has_ov && has_cal ? "both" : has_cal ? "table" : has_ov ? "params" : "predicted", has_ov, has_cal});
  return ways;
}

// The collective ops a collective row may name (nccl-tests' programs measure these).
CollOp row_op(const MeasuredRow& r) {
  CollOp op{};
  if (!parse_coll_op(r.op, &op) || op == CollOp::alltoallv || op == CollOp::saa)
    throw UserError(
        fmt::format("{}: column 'op': expected allreduce, allgather, reducescatter, alltoall or sendrecv, "
                    "got '{}'",
                    r.where, excerpt(r.op)));
  return op;
}

}  // namespace

void compare_measured_csv(const CompareArgs& a) {
  const std::vector<MeasuredRow> rows = read_measured_csv(a.measured, a.topo);
  const auto cal = load_calibration_arg(a.calibration);
  const std::vector<std::string> ov = load_overlay_arg(a.overlay);
  const std::vector<Way> ways = ways_for(!a.overlay.empty(), !a.calibration.empty());
  const std::size_t W = ways.size();
  // Topologies by (file, overrides, overlay or not): loaded once.
  std::map<std::tuple<std::string, std::string, bool>, std::unique_ptr<const Topology>> topos;
  auto topology_of = [&](const MeasuredRow& r, bool overlay) -> const Topology& {
    auto& t = topos[{r.topology, r.topo_set, overlay}];
    if (!t) {
      const std::vector<std::string> sets =
          split_assignments(r.topo_set, fmt::format("{}: column 'topo_set'", r.where));
      try {
        t = std::make_unique<const Topology>(
            load_topology(r.topology, sets, overlay ? ov : std::vector<std::string>{}));
      } catch (const UserError& e) {
        throw UserError(
            fmt::format("{}: column '{}': {}", r.where, r.topo_set.empty() ? "topology" : "topo_set", e.what()));
      }
    }
    return *t;
  };
  // predicted[row][way], microseconds.
  std::vector<std::vector<double>> predicted(rows.size(), std::vector<double>(W, 0));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const MeasuredRow& r = rows[i];
    const CoverageLabel label(r.name);
    for (std::size_t w = 0; w < W; ++w) {
      const Topology& topo = topology_of(r, ways[w].overlay);
      const Calibration* c = ways[w].table ? cal.get() : nullptr;
      if (r.kind == "layer") {
        const std::string col = fmt::format("{}: column 'layer'", r.where);
        moe::LayerSpec spec;
        moe::ScheduleKeys keys;
        moe::apply_keys(&spec, &keys, split_assignments(r.layer, col), col);
        if (!moe::is_preset(r.schedule))
          throw UserError(fmt::format("{}: column 'schedule': expected {}, got '{}'", r.where,
                                      moe::schedule_choices({}, ", ", " or "), excerpt(r.schedule)));
        if (keys.shaped && r.schedule == "baseline")
          throw UserError(fmt::format("{}: {} shape the Parm schedules; schedule baseline would ignore them", col,
                                      moe::parm_shaping_key_names()));
        moe::Dims d;
        try {
          d = moe::make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
          topo.gpu().peak(spec.dtype);
        } catch (const UserError& e) {
          throw UserError(fmt::format("{}: the layer cannot be placed on topology {} ({} GPUs, {} per node): {}", col,
                                      topo.name(), topo.num_gpus(), topo.gpus_per_node(), e.what()));
        }
        const moe::ScheduleOptions o = moe::schedule_options(r.schedule, keys);
        check_estimate(fmt::format("{}: simulating the layer", r.where),
                       moe::with_symmetry(moe::estimate_schedule(spec, d, o),
                                         moe::layer_symmetry_order(spec, d, moe::symmetry_order(topo, a.network, true))),
                       a.max_memory, "use a smaller layer or fewer GPUs, or raise --max-memory");
        const moe::ScheduleResult res = moe::run_schedule(moe::LayerRun{topo, spec, a.network, c}, o);
        const Time t = r.what == "forward" ? res.forward : r.what == "backward" ? res.backward : res.total();
        predicted[i][w] = t.to_us();
      } else {
        calib::MeasuredCollective m;
        m.op = row_op(r);
        m.ranks = r.ranks;
        m.hosts = r.nodes;
        m.bytes = static_cast<double>(r.bytes);
        m.source = fmt::format("{}: columns 'ranks', 'nodes'", r.where);
        Collective coll;
        coll.name = r.op;
        coll.op = m.op;
        coll.group = calib::measured_group(m, topo);
        coll.bytes = r.bytes;
        int max_rank = 0;
        for (int g : coll.group) max_rank = std::max(max_rank, g);
        TaskGraphBuilder b(max_rank + 1);
        b.add_stream_all("comm");
        b.add_collective_tasks(coll, "comm", r.op);
        const TaskGraph g = std::move(b).build();
        predicted[i][w] = simulate(g, topo, SimOptions{a.network, c}).makespan.to_us();
      }
    }
  }
  // The table, the MAPE (overall and per kind) and the worst row, per way.
  int layers = 0;
  for (const MeasuredRow& r : rows) layers += r.kind == "layer";
  fmt::print("{}: {} measured row(s) ({} layer, {} collective) against the simulator ({} network)\n", a.measured,
             rows.size(), layers, static_cast<int>(rows.size()) - layers, a.network);
  std::string header = fmt::format("  {:<36} {:<10} {:<14} {:>13}", "row", "kind", "what", "measured_us");
  for (const Way& w : ways)
    header += fmt::format(" {:>14} {:>8}", (W > 1 ? w.name : std::string("predicted")) + "_us", "error");
  fmt::print("{}  system\n", header);
  std::string csv = "name,measured_us,predicted_us";
  if (W > 1)
    for (const Way& w : ways) csv += "," + w.name + "_us";
  csv += ",kind,row\n";
  std::vector<double> mape(W, 0), mape_layer(W, 0), worst(W, -1);
  std::vector<std::size_t> worst_at(W, 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const MeasuredRow& r = rows[i];
    const std::string what = r.kind == "layer" ? fmt::format("{} {}", r.schedule, r.what)
                                               : fmt::format("{} {}x{}", size_text(static_cast<double>(r.bytes)),
                                                             r.nodes, r.ranks / r.nodes);
    std::string line = fmt::format("  {:<36} {:<10} {:<14} {:>13.1f}", r.name, r.kind, what, r.measured_us);
    for (std::size_t w = 0; w < W; ++w) {
      const double e = rel(predicted[i][w], r.measured_us);
      line += fmt::format(" {:>14.1f} {:>+7.1f}%", predicted[i][w], 100 * e);
      mape[w] += std::abs(e);
      if (r.kind == "layer") mape_layer[w] += std::abs(e);
      if (std::abs(e) > worst[w]) worst[w] = std::abs(e), worst_at[w] = i;
    }
    fmt::print("{}  {}\n", line, r.system);
    csv += fmt::format("{},{:.6f},{:.6f}", csv_field(r.name), r.measured_us, std::max(predicted[i].back(), 1e-6));
    if (W > 1)
      for (double v : predicted[i]) csv += fmt::format(",{:.6f}", std::max(v, 1e-6));
    csv += fmt::format(",{},{}\n", r.kind, csv_field(r.where));
  }
  const int n = static_cast<int>(rows.size()), colls = n - layers;
  for (std::size_t w = 0; w < W; ++w) {
    // The run with everything given keeps the unprefixed line, as the trace comparison does.
    const std::string who = w + 1 < W ? ways[w].name + ": " : "";
    std::string by_kind;
    if (layers > 0 && colls > 0)
      by_kind = fmt::format(" (layers {:.1f}% over {}, collectives {:.1f}% over {})", 100 * mape_layer[w] / layers,
                            layers, 100 * (mape[w] - mape_layer[w]) / colls, colls);
    const MeasuredRow& wr = rows[worst_at[w]];
    fmt::print("{}MAPE {:.1f}% over {} row(s){}; worst {:.1f}% ({}{})\n", who, 100 * mape[w] / n, n, by_kind,
               100 * worst[w], wr.name, wr.name == wr.where ? "" : ", " + wr.where);
  }
  if (!a.out.empty()) {
    write_atomically(a.out, [&](std::ostream& os) { os << csv; });
    fmt::print("wrote {}\n", a.out);
  }
}

std::string nccl_size_table(const std::vector<NamedTable>& tables,
                            const std::vector<std::pair<std::string, const Topology*>>& models) {
  struct Worst {
    double err = -1;
    const calib::MeasuredCollective* at = nullptr;
    double mape = 0;
    int n = 0;
    void add(double e, const calib::MeasuredCollective& m) {
      mape += std::abs(e), ++n;
      if (std::abs(e) > err) err = std::abs(e), at = &m;
    }
    std::string text() const {
      if (!at) return "no rows";
      return fmt::format("MAPE {:.1f}%, worst {:.1f}% at {} ({})", 100 * mape / n, 100 * err, size_text(at->bytes),
                         at->where);
    }
  };
  std::string s;
  std::map<std::string, std::vector<Worst>> by_role;  // role -> per model
  for (const NamedTable& t : tables) {
    if (t.rows.empty()) continue;
    const calib::MeasuredCollective& m0 = t.rows.front();
    s += fmt::format("{}{}: {} over {} ranks on {} host(s), {} sizes\n", t.name,
                     t.role.empty() ? "" : " (" + t.role + ")", to_string(m0.op), m0.ranks, m0.hosts, t.rows.size());
    std::string head = fmt::format("  {:>12} {:>13}", "size(B)", "measured_us");
    for (const auto& [name, topo] : models) head += fmt::format(" {:>13} {:>8}", name + "_us", "error");
    s += head + "  row\n";
    std::vector<Worst> worst(models.size());
    auto& role = by_role[t.role];
    role.resize(models.size());
    for (const calib::MeasuredCollective& m : t.rows) {
      std::string line = fmt::format("  {:>12.0f} {:>13.2f}", m.bytes, m.seconds * 1e6);
      for (std::size_t k = 0; k < models.size(); ++k) {
        const double p = calib::model_seconds(m, *models[k].second);
        const double e = rel(p, m.seconds);
        line += fmt::format(" {:>13.2f} {:>+7.1f}%", p * 1e6, 100 * e);
        worst[k].add(e, m);
        role[k].add(e, m);
      }
      s += line + "  " + m.where + "\n";
    }
    for (std::size_t k = 0; k < models.size(); ++k) s += fmt::format("  {}: {}\n", models[k].first, worst[k].text());
  }
  if (tables.size() > 1)
    for (const auto& [role, worst] : by_role)
      for (std::size_t k = 0; k < models.size(); ++k)
        s += fmt::format("all {}tables, {}: {}\n", role.empty() ? "" : role + " ", models[k].first, worst[k].text());
  return s;
}

void compare_nccl_tests(const CompareArgs& a) {
  if (a.topo.empty()) throw UserError("compare --nccl-tests: give the topology to compare the tables with, -t FILE");
  if (!a.calibration.empty())
    throw UserError(
        "--calibration: compare --nccl-tests compares the tables with the topology's own model (a "
        "calibration imported from them reproduces them); --overlay applies fitted parameters");
  const Topology topo = load_topology(a.topo, split_assignments(a.topo_set, "--topo-set"), load_overlay_arg(a.overlay));
  std::vector<std::string> assumed;
  std::vector<NamedTable> tables;
  for (const std::string& f : a.nccl_tests)
    for (calib::NcclTable& t : calib::read_nccl_tests_all(f)) {
      if (std::string note = calib::apply_given_group(t, a.ranks, a.nodes); !note.empty()) assumed.push_back(note);
      tables.push_back({t.name(), "", calib::measured_from(t)});
    }
  const std::string table = nccl_size_table(tables, {{"simulated", &topo}});  // refusals before any output
  for (const std::string& n : assumed) fmt::print("assumed: {}\n", n);
  fmt::print("nccl-tests tables against {}{}{} (the simulator's time of each collective alone, NCCL's choice):\n",
             a.topo, a.topo_set.empty() ? "" : " --topo-set " + a.topo_set,
             a.overlay.empty() ? "" : " --overlay " + a.overlay);
  fmt::print("{}", table);
  if (!a.out.empty()) {
    std::string csv = "name,measured_us,predicted_us,op,ranks,hosts,bytes\n";
    for (const NamedTable& t : tables)
      for (const calib::MeasuredCollective& m : t.rows)
        csv += fmt::format("{},{:.6f},{:.6f},{},{},{},{:.0f}\n", csv_field(m.where), m.seconds * 1e6,
                           calib::model_seconds(m, topo) * 1e6, to_string(m.op), m.ranks, m.hosts, m.bytes);
    write_atomically(a.out, [&](std::ostream& os) { os << csv; });
    fmt::print("wrote {}\n", a.out);
  }
}

bool is_execute_trace_header(const std::string& first_line) {
  return first_line.rfind("task,name,rank,stream,kind,op,", 0) == 0;
}

}  // namespace parmsim::cli
