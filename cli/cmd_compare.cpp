// parmsim compare
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/verify.hpp"
#include "sim/calib/calibration.hpp"
#include "cli/common.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

namespace {

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
  return f;
}

}  // namespace

void add_compare(CLI::App& app) {
  auto* c = app.add_subcommand("compare",
                               "simulate the task graph of a measured trace (from `parmsim execute`) and report "
                               "measured against predicted time per task kind and end to end");
  struct Args {
    std::string measured, topo, topo_set, calibration, network = "analytical", out;
  };
  auto a = std::make_shared<Args>();
  c->add_option("--measured", a->measured, "trace CSV written by parmsim execute (its .json sidecar beside it)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--topology,-t", a->topo, "topology to simulate on (topologies/cpu-host.yaml for CPU runs)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--topo-set", a->topo_set, "topology overrides");
  add_calibration_option(c, a->calibration);
  c->add_option("-n,--network", a->network, "analytical | flow")->capture_default_str();
  c->add_option("-o,--output", a->out, "CSV: name, measured_us, predicted_us (for plots/make_figures.py)");
  c->callback([a] {
    check_outputs({{"--output", a->out}}, {{"the --measured trace", a->measured},
                                          {"the --measured trace's .json sidecar", a->measured + ".json"},
                                          {"the topology file", a->topo},
                                          {"the calibration file", a->calibration}});
    std::ifstream sj(a->measured + ".json");
    if (!sj)
      throw ParmError(
          fmt::format("{}: no {}.json beside it; traces from `parmsim execute` have one", a->measured, a->measured));
    nlohmann::json side;
    try {
      YamlReader::load_file(a->measured + ".json");  // strict JSON, no repeated key
      sj >> side;
    } catch (const std::exception& e) {
      throw ParmError(fmt::format("{}.json: {}", a->measured, e.what()));
    }
    // Rebuild the executed graph.
    moe::LayerSpec s = exec::small_layer();
    moe::ScheduleOptions custom = moe::preset("s1");
    moe::apply_assignments(&s, &custom, split_assignments(side.value("layer", std::string())), a->measured + ".json");
    const std::string sched = side.value("schedule", std::string("s2"));
    const exec::Cluster cl{side.value("gpus", 8), side.value("node_gpus", 8)};
    const moe::Dims d = moe::make_dims(s, cl.gpus, cl.gpus_per_node);
    const moe::ScheduleOptions o = moe::preset(sched);
    const auto f = moe::forward_ops(s, d, o);
    const TaskGraph g = moe::build_training_graph(f, moe::backward_ops(f, s, d, o), s, d, o);
    // Measured durations by task id.
    std::ifstream in(a->measured);
    std::string line;
    std::getline(in, line);
    // Repeated GPU runs add the duration percentiles as two more columns.
    const std::string head = "task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops";
    const std::size_t columns = line == head ? 11 : line == head + ",duration_p10_us,duration_p90_us" ? 13 : 0;
    if (columns == 0)
      throw ParmError(fmt::format("{}:1: not a parmsim trace CSV header", a->measured));
    std::vector<double> measured(g.tasks().size(), -1), mstart(g.tasks().size(), 0), mend(g.tasks().size(), 0);
    double measured_end = 0;
    int lineno = 1;
    while (std::getline(in, line)) {
      ++lineno;
      const auto fl = csv_fields(line);
      std::size_t id = 0;
      try {
        if (fl.size() != columns) throw std::invalid_argument("x");
        id = std::stoul(fl[0]);
        if (id >= measured.size() || fl[1] != g.task(static_cast<int>(id)).name) throw std::invalid_argument("x");
        measured[id] = std::stod(fl[8]);
        mstart[id] = std::stod(fl[6]);
        mend[id] = std::stod(fl[7]);
        measured_end = std::max(measured_end, mend[id]);
      } catch (const std::logic_error&) {
        throw ParmError(fmt::format("{}:{}: row does not match task {} of the graph in {}.json", a->measured, lineno,
                                    id, a->measured));
      }
    }
    for (std::size_t i = 0; i < measured.size(); ++i)
      if (measured[i] < 0) throw ParmError(fmt::format("{}: task '{}' has no row", a->measured, g.task(i).name));
    const Topology topo = load_topology(a->topo, split_assignments(a->topo_set));
    const auto cal = load_calibration_arg(a->calibration);
    const SimResult r = simulate(g, topo, SimOptions{a->network, cal.get()});
    // Per kind: compute tasks by their kind; collectives by op, timed from
    // the last member's arrival (what the simulator times) in both.
    struct Sum {
      double measured = 0, predicted = 0;
      int n = 0;
    };
    std::map<std::string, Sum> kinds;
    for (const Task& t : g.tasks()) {
      if (t.kind != TaskKind::compute) continue;
      auto& k = kinds[std::string(task_kind(t.name))];
      k.measured += measured[t.id];
      k.predicted += (r.trace[t.id].end - r.trace[t.id].start).to_us();
      ++k.n;
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
      auto& k = kinds[std::string("coll:") + to_string(col.op)];
      k.measured += me - ms;
      k.predicted += pe - ps;
      ++k.n;
    }
    double mape = 0, worst = 0;
    std::string worst_name;
    std::string csv = "name,measured_us,predicted_us\n";
    fmt::print("{:<26} {:>6} {:>14} {:>14} {:>9}\n", "task kind", "tasks", "measured_us", "predicted_us", "error");
    int counted = 0;
    for (const auto& [name, k] : kinds) {
      if (k.measured <= 0) continue;
      const double err = (k.predicted - k.measured) / k.measured;
      fmt::print("{:<26} {:>6} {:>14.2f} {:>14.2f} {:>8.1f}%\n", name, k.n, k.measured, k.predicted, 100 * err);
      mape += std::abs(err), ++counted;
      if (std::abs(err) > worst) worst = std::abs(err), worst_name = name;
      csv += fmt::format("{},{:.6f},{:.6f}\n", name, k.measured, std::max(k.predicted, 1e-6));
    }
    if (counted) mape /= counted;
    const double pred_end = r.makespan.to_us();
    const double e2e = (pred_end - measured_end) / measured_end;
    csv += fmt::format("end_to_end,{:.6f},{:.6f}\n", measured_end, pred_end);
    fmt::print("end to end: measured {:.1f} us, predicted {:.1f} us, error {:+.1f}%\n", measured_end, pred_end,
               100 * e2e);
    fmt::print("per task kind: MAPE {:.1f}%, worst {:.1f}% ({})\n", 100 * mape, 100 * worst, worst_name);
    if (!a->out.empty()) write_atomically(a->out, [&](std::ostream& os) { os << csv; });
  });
}

}  // namespace parmsim::cli
