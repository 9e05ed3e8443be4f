// parmsim compare
#include <fmt/format.h>

#include <filesystem>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/verify.hpp"
#include "sim/calib/calibration.hpp"
#include "cli/common.hpp"
#include "sim/net/network_model.hpp"
#include "cli/measured.hpp"
#include "cli/measured_trace.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/io/csv.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

namespace {

// compare --measured TRACE: the trace `parmsim execute` wrote, task by task.
void compare_trace(const CompareArgs* a) {
  if (a->topo.empty())
    throw UserError(fmt::format("compare --measured {}: a trace of parmsim execute; give the topology it ran on "
                                "with -t FILE (topologies/cpu-host.yaml for CPU runs)",
                                a->measured));
  check_outputs({{"--output", a->out}}, {{"the --measured trace", a->measured},
                                        {"the --measured trace's .json sidecar", a->measured + ".json"},
                                        {"the topology file", a->topo},
                                        {"the calibration file", a->calibration},
                                        {"the --overlay file", a->overlay}});
  const auto slurp = [](const std::string& file, const std::string& missing) {
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) throw UserError(missing);
    return read_file(file);
  };
  const std::string side = slurp(
      a->measured + ".json",
      fmt::format("{}: no {}.json beside it; traces from `parmsim execute` have one", a->measured, a->measured));
  // Rebuild the executed graph, then the measured durations by task id.
  const MemoryLimit lim = memory_limit(a->max_memory);
  const TaskGraph g = graph_from_sidecar(side, a->measured + ".json", exec::small_layer(), lim.bytes, lim.why);
  const MeasuredRows rows =
      read_trace_rows(slurp(a->measured, fmt::format("{}: cannot open file", a->measured)), a->measured, g);
  const std::vector<double>&measured = rows.duration, &mstart = rows.start, &mend = rows.end;
  const double measured_end = rows.end_time;
  // Up to three simulators side by side: uncalibrated (the topology as given), table-calibrated
  // (--calibration: measured kernels and collectives), parameter-calibrated (--overlay: fitted link
  // efficiencies and latencies). "predicted" is the one with everything given.
  struct Sum {
    double measured = 0;
    std::vector<double> predicted;
    int n = 0;
  };
  struct Way {
    std::string name;
    bool overlay, table;
  };
  std::vector<Way> ways;
  const bool has_ov = !a->overlay.empty(), has_cal = !a->calibration.empty();
  if (has_ov || has_cal) ways.push_back({"uncalibrated", false, false});
  if (has_ov && has_cal) ways.push_back({"table", false, true}), ways.push_back({"params", true, false});
  ways.push_back({has_ov && has_cal ? "both" : has_cal ? "table" : has_ov ? "params" : "predicted", has_ov, has_cal});
  const auto cal = load_calibration_arg(a->calibration);
  const std::vector<std::string> sets = split_assignments(a->topo_set, "--topo-set"), ov = load_overlay_arg(a->overlay);
  std::map<std::string, Sum> kinds;
  std::vector<double> pred_end;
  for (const Way& w : ways) {
    const Topology topo = load_topology(a->topo, sets, w.overlay ? ov : std::vector<std::string>{});
    const SimResult r = simulate(g, topo, SimOptions{a->network, w.table ? cal.get() : nullptr});
    pred_end.push_back(r.makespan.to_us());
    // Per kind: compute tasks by their kind; collectives by op, timed from
    // the last member's arrival (what the simulator times) in both.
    std::map<std::string, double> got;
    std::map<std::string, int> count;
    for (const Task& t : g.tasks()) {
      if (!t.is_compute()) continue;
      const std::string k(g.kernel_name(t.compute().kernel));
      got[k] += (r.trace[t.id].end - r.trace[t.id].start).to_us();
      if (&w == &ways.front()) kinds[k].measured += measured[t.id], ++kinds[k].n;
    }
    for (const Collective& col : g.collectives()) {
      if (col.group.size() < 2) continue;
      double ms = 0, me = 0, ps = 0, pe = 0;
      for (int id : g.parts(col.id)) {
        ms = std::max(ms, mstart[id]);
        me = std::max(me, mend[id]);
        ps = std::max(ps, r.trace[id].start.to_us());
        pe = std::max(pe, r.trace[id].end.to_us());
      }
      const std::string k = std::string("coll:") + to_string(col.op);
      got[k] += pe - ps;
      if (&w == &ways.front()) kinds[k].measured += me - ms, ++kinds[k].n;
    }
    for (auto& [k, sum] : kinds) sum.predicted.push_back(got[k]);
  }
  const std::size_t W = ways.size();
  std::vector<double> mape(W, 0), worst(W, 0);
  std::vector<std::string> worst_name(W);
  std::string csv = "name,measured_us,predicted_us";
  if (W > 1)
    for (const Way& w : ways) csv += "," + w.name + "_us";
  csv += "\n";
  std::string header = fmt::format("{:<26} {:>6} {:>12}", "task kind", "tasks", "measured_us");
  for (const Way& w : ways) header += fmt::format(" {:>14} {:>8}", (W > 1 ? w.name : std::string("predicted")) + "_us", "error");
  fmt::print("{}\n", header);
  int counted = 0;
  for (const auto& [name, k] : kinds) {
    if (k.measured <= 0) continue;
    std::string row = fmt::format("{:<26} {:>6} {:>12.2f}", name, k.n, k.measured);
    for (std::size_t i = 0; i < W; ++i) {
      const double err = (k.predicted[i] - k.measured) / k.measured;
      row += fmt::format(" {:>14.2f} {:>7.1f}%", k.predicted[i], 100 * err);
      mape[i] += std::abs(err);
      if (std::abs(err) > worst[i]) worst[i] = std::abs(err), worst_name[i] = name;
    }
    fmt::print("{}\n", row);
    ++counted;
    csv += fmt::format("{},{:.6f},{:.6f}", csv_field(name), k.measured, std::max(k.predicted.back(), 1e-6));
    if (W > 1)
      for (double v : k.predicted) csv += fmt::format(",{:.6f}", std::max(v, 1e-6));
    csv += "\n";
  }
  for (double& m : mape) m = counted ? m / counted : 0;
  csv += fmt::format("end_to_end,{:.6f},{:.6f}", measured_end, pred_end.back());
  if (W > 1)
    for (double v : pred_end) csv += fmt::format(",{:.6f}", v);
  csv += "\n";
  for (std::size_t i = 0; i < W; ++i) {
    // The simulator with everything given keeps the unprefixed lines (scripts read them).
    const std::string who = i + 1 < W ? ways[i].name + ": " : "";
    const double e2e = (pred_end[i] - measured_end) / measured_end;
    fmt::print("{}end to end: measured {:.1f} us, predicted {:.1f} us, error {:+.1f}%\n", who, measured_end,
               pred_end[i], 100 * e2e);
    fmt::print("{}per task kind: MAPE {:.1f}%, worst {:.1f}% ({})\n", who, 100 * mape[i], 100 * worst[i],
               worst_name[i]);
  }
  if (!a->out.empty()) write_atomically(a->out, [&](std::ostream& os) { os << csv; });
}

}  // namespace

void add_compare(CLI::App& app) {
  auto* c = app.add_subcommand(
      "compare",
      "compare the simulator with measurements: --measured FILE.csv (measured layers and collectives, one per row; "
      "docs/measured.md), --measured TRACE (a trace from `parmsim execute`: per task kind and end to end) or "
      "--nccl-tests TABLE... (measured nccl-tests tables against -t TOPOLOGY, per size); each row's error, the MAPE "
      "and the worst row; with --calibration and/or --overlay, uncalibrated, table-calibrated and "
      "parameter-calibrated side by side");
  auto a = std::make_shared<CompareArgs>();
  auto* measured = c->add_option("--measured", a->measured,
                                 "a CSV of measured layer and collective times (kind, measured_us, ...: "
                                 "--help-config, section measured), or a trace CSV written by parmsim execute "
                                 "(its .json sidecar beside it)")
                       ->check(CLI::ExistingFile);
  auto* nccl = c->add_option("--nccl-tests", a->nccl_tests,
                             "nccl-tests outputs (text or -J JSON) to compare with -t TOPOLOGY, size by size")
                   ->check(CLI::ExistingFile)
                   ->excludes(measured);
  c->add_option("--topology,-t", a->topo,
                "topology to simulate on (--measured FILE.csv: for rows that name none; topologies/cpu-host.yaml for "
                "CPU traces)")
      ->check(CLI::ExistingFile);
  c->add_option("--topo-set", a->topo_set, "topology overrides (with -t)");
  add_overlay_option(c, a->overlay);
  add_calibration_option(c, a->calibration);
  c->add_option("-n,--network", a->network,
                fmt::format("{} (default: analytical for an execute trace, flow for a measured CSV, as layer)",
                            network_model_names(" | ", " | ")));
  auto* ranks = c->add_option("--ranks", a->ranks,
                              "with --nccl-tests: the group of a table that lists no ranks (no '#  Rank' lines)")
                    ->check(int_in(2, 1 << 20))
                    ->needs(nccl);
  c->add_option("--nodes", a->nodes, "with --ranks: the nodes those ranks ran on, evenly (default: 1)")
      ->check(int_in(1, 1 << 20))
      ->needs(ranks);
  add_max_memory_option(c, a->max_memory);
  c->add_option("-o,--output", a->out, "CSV: name, measured_us, predicted_us, ... (for plots/make_figures.py)");
  c->callback([a, c] {
    check_network_option(a->network);
    if (a->measured.empty() && a->nccl_tests.empty())
      throw UserError("compare: give the measurements: --measured FILE.csv (or an execute trace) or --nccl-tests "
                      "TABLE...");
    if (!a->nccl_tests.empty()) {
      if (c->count("--network") > 0)
        throw UserError("--network: compare --nccl-tests times each collective alone with its cost form (the "
                        "simulator's time for one collective); there is no network model to choose");
      std::vector<NamedPath> inputs{{"the topology file", a->topo}, {"the --overlay file", a->overlay}};
      for (const std::string& f : a->nccl_tests) inputs.push_back({"an --nccl-tests input", f});
      check_outputs({{"--output", a->out}}, inputs);
      return compare_nccl_tests(*a);
    }
    std::string first;
    {
      std::istringstream in(read_file(a->measured));
      std::getline(in, first);
    }
    if (!is_execute_trace_header(first)) {
      if (c->count("--network") == 0) a->network = "flow";  // as `layer` and `validate moe` simulate layers
      if (!a->topo_set.empty() && a->topo.empty())
        throw UserError("--topo-set: needs -t (rows set their own overrides in the topo_set column)");
      check_outputs({{"--output", a->out}}, {{"the --measured file", a->measured},
                                            {"the topology file", a->topo},
                                            {"the calibration file", a->calibration},
                                            {"the --overlay file", a->overlay}});
      return compare_measured_csv(*a);
    }
    compare_trace(a.get());
  });
}

}  // namespace parmsim::cli
