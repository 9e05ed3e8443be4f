// parmsim calibrate: --backend cpu, --import-nccl-tests (measured curves), --fit-machine (a topology overlay)
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "backend/calibrate.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "cli/common.hpp"
#include "cli/coverage.hpp"
#include "cli/measured.hpp"
#include "cli/gpu_trace.hpp"
#include "sim/mpi/mpi_shim.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/calib/fit.hpp"
#include "sim/fit/machine_fit.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "sim/core/error.hpp"
#include "sim/io/output.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/resources.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {
namespace {

struct Args {
  std::vector<std::string> files, evaluate;
  std::string op, out, backend = "cpu", topology, topo_set, overlay, hold_out;
  std::string large_from = "256MiB", small_to = "64KiB";
  int gpus = 8, node_gpus = 0;
  int ranks = 0, nodes = 0;  // --ranks / --nodes: the group of tables without rank lines
  bool plan = false;
  std::string layer_file, set, schedule = "all";
  bool quick = false, fit_machine = false, force = false;
  exec::CudaOptions cuda;
};

// --plan: the layer's collectives, and the nccl-tests runs that would measure them.
void plan_cmd(const Args& a) {
  if (a.topology.empty() || !std::filesystem::is_regular_file(a.topology))
    throw UserError("calibrate --plan: give the cluster's topology file with -t FILE");
  const Topology topo = load_topology(a.topology, split_assignments(a.topo_set, "--topo-set"), load_overlay_arg(a.overlay));
  moe::LayerSpec spec;
  moe::ScheduleKeys keys;
  if (!a.layer_file.empty()) {
    for (const auto& [kv, where] : moe::layer_file_keys(YamlReader::load_file(a.layer_file)))
      moe::apply_keys(&spec, &keys, {kv}, where);
  }
  moe::apply_keys(&spec, &keys, split_assignments(a.set, "--set"), "--set");
  std::vector<std::string> names;
  if (a.schedule == "all")
    names = moe::preset_names();
  else if (moe::is_preset(a.schedule))
    names = {a.schedule};
  else
    throw UserError(fmt::format("--schedule: unknown schedule '{}': expected all or {}", a.schedule,
                                moe::schedule_choices({}, ", ", " or ")));
  const moe::Dims d = moe::make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
  topo.gpu().peak(spec.dtype);  // an unsupported dtype is refused up front
  {
    moe::SimCost e;
    for (const std::string& n : names) e += moe::estimate_schedule(spec, d, moe::schedule_options(n, keys));
    check_estimate("calibrate --plan: building the layer's graphs", e, "", "use fewer GPUs (--topo-set nodes=N)");
  }
  CollectiveUses uses;
  for (const std::string& n : names) {
    const moe::ScheduleOptions o = moe::schedule_options(n, keys);
    const auto fops = moe::forward_ops(spec, d, o);
    const auto bops = moe::backward_ops(fops, spec, d, o);
    uses.add(moe::build_graph(fops, spec, d, o, moe::GraphData::timing_only), topo, nullptr, n);
    uses.add(moe::build_backward_graph(fops, bops, spec, d, o, moe::GraphData::timing_only), topo, nullptr, n);
  }
  std::string scheds;
  for (const std::string& n : names) scheds += (scheds.empty() ? "" : ", ") + n;
  const std::string what = fmt::format("layer {} on {} (P={}, G=mp={}, N_EP={}, {} GPUs per node), schedules {}",
                                       moe::spec_string(spec), topo.name(), d.P, d.G, d.n_ep, topo.gpus_per_node(),
                                       scheds);
  if (uses.collectives.empty()) {
    fmt::print("{}: no collective of 2 or more ranks (forward and backward): nothing for nccl-tests to measure; "
               "`calibrate --backend cuda` measures the layer's kernels\n",
               what);
    return;
  }
  fmt::print("{}: its collectives, forward and backward\n", what);
  fmt::print("{}", nccl_tests_plan(uses, spec.dtype));
  fmt::print("\nthen: parmsim calibrate --import-nccl-tests OUTPUT... -o cal.yaml (each table's '#  Rank' lines give "
             "its group;\n      without them, --ranks N --nodes M), and parmsim layer -t {}{} ... --calibration cal.yaml "
             "reports what it covered\n",
             a.topology, a.topo_set.empty() ? "" : " --topo-set " + a.topo_set);
}

// The tables of an nccl-tests output, with --ranks/--nodes applied to those
// that list no ranks; what was assumed goes to `assumed`.
std::vector<calib::NcclTable> tables_of(const std::string& file, const std::string& op, const Args& a,
                                        std::vector<std::string>& assumed) {
  std::vector<calib::NcclTable> ts = calib::read_nccl_tests_all(file, op);
  for (calib::NcclTable& t : ts)
    if (std::string note = calib::apply_given_group(t, a.ranks, a.nodes); !note.empty())
      assumed.push_back(std::move(note));
  return ts;
}

void print_assumed(const std::vector<std::string>& assumed) {
  for (const std::string& n : assumed) fmt::print("assumed: {}\n", n);
}

// --fit-machine: link efficiencies and latencies of the topology, fitted to the
// imported tables; their error before and after, on those and on --evaluate's.
void fit_machine_cmd(const Args& a) {
  if (a.topology.empty() || !std::filesystem::is_regular_file(a.topology))
    throw UserError("calibrate --fit-machine: give the measured machine's topology file with -t FILE");
  const std::vector<std::string> sets = split_assignments(a.topo_set, "--topo-set"), base_overlay = load_overlay_arg(a.overlay);
  auto load = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> ov = base_overlay;
    ov.insert(ov.end(), extra.begin(), extra.end());
    return load_topology(a.topology, sets, ov);
  };
  std::vector<calib::MeasuredCollective> fit_on;
  // One entry per table (a file may hold several), fitted ones first.
  std::vector<std::pair<std::string, std::vector<calib::MeasuredCollective>>> files;
  std::vector<std::string> assumed;
  for (const std::string& f : a.files)
    for (const calib::NcclTable& t : tables_of(f, a.op, a, assumed)) {
      files.emplace_back(t.name(), calib::measured_from(t));
      fit_on.insert(fit_on.end(), files.back().second.begin(), files.back().second.end());
    }
  const std::size_t fitted_tables = files.size();
  for (const std::string& f : a.evaluate)
    for (const calib::NcclTable& t : tables_of(f, "", a, assumed)) files.emplace_back(t.name(), calib::measured_from(t));
  calib::FitOptions opt;
  opt.large_from = static_cast<double>(parse_sizes(a.large_from, "--fit-large-from").at(0));
  opt.small_to = static_cast<double>(parse_sizes(a.small_to, "--fit-small-to").at(0));
  const calib::MachineFit fit = calib::fit_machine(load, fit_on, opt);
  const Topology before = load({}), after = load(fit.assignments());
  // A fit that did not fit: a parameter at an end of its search range, or the worst fitted row worse than before.
  std::vector<std::string> problems;
  for (const calib::FittedParam& p : fit.params)
    if (const std::string b = p.at_bound(); !b.empty())
      problems.push_back(fmt::format(
          "{} ended at {}, the {} bound of its search range {}: the measurements ask for a value beyond it (another "
          "machine's, or another parameter is wrong)",
          p.key, p.time ? fmt::format("{:.3f} us", p.value) : fmt::format("{:.3f}", p.value), b, p.range()));
  {
    double worst_before = 0, worst_after = 0, at_before = 0, at_model = 0;
    const calib::MeasuredCollective* worst = nullptr;
    for (const calib::MeasuredCollective& m : fit_on) {
      const double b = std::abs(calib::model_seconds(m, before) - m.seconds) / m.seconds;
      const double mo = calib::model_seconds(m, after), e = std::abs(mo - m.seconds) / m.seconds;
      worst_before = std::max(worst_before, b);
      if (!worst || e > worst_after) worst = &m, worst_after = e, at_before = b, at_model = mo;
    }
    if (worst && worst_after > worst_before)
      problems.push_back(fmt::format(
          "the fit makes the worst fitted row worse ({:.2f}% before, {:.2f}% after): {} ({} over {} ranks, {:.0f} B: "
          "measured {:.6g} us, {:.6g} us after the fit, {:.2f}% off before)",
          100 * worst_before, 100 * worst_after, worst->where, to_string(worst->op), worst->ranks, worst->bytes,
          worst->seconds * 1e6, at_model * 1e6, 100 * at_before));
  }
  if (!problems.empty() && !a.out.empty() && !a.force) {
    std::string msg = "calibrate --fit-machine: ";
    for (std::size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw UserError(msg + "; nothing written to " + a.out + " (--force writes it anyway)");
  }
  print_assumed(assumed);
  fmt::print("machine parameters of {} fitted to {} measurement(s) from {} file(s):\n", a.topology, fit_on.size(),
             a.files.size());
  for (const calib::FittedParam& p : fit.params)
    fmt::print("  {:<26} {:>10}   ({} sizes {} {})\n", p.key,
               p.time ? fmt::format("{:.3f} us", p.value) : fmt::format("{:.3f}", p.value), p.points,
               p.time ? "<=" : ">=", p.time ? a.small_to : a.large_from);
  for (const std::string& n : fit.notes) fmt::print("  ({})\n", n);
  for (const std::string& p : problems) fmt::print("  warning: {}\n", p);
  fmt::print("\nsimulator (NCCL's model, uncalibrated) against the measurements, before -> after the fit:\n");
  fmt::print("{:<9} {:<48} {:<14} {:>5} {:>5} {:>13} {:>8} {:>13} {:>8}\n", "", "file", "op", "ranks", "sizes",
             "MAPE before", "after", "worst before", "after");
  std::vector<calib::MeasuredCollective> held_all;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& [f, ms] = files[i];
    const bool held = i >= fitted_tables;
    if (held) held_all.insert(held_all.end(), ms.begin(), ms.end());
    const calib::ModelError b = calib::model_error(ms, before), e = calib::model_error(ms, after);
    fmt::print("{:<9} {:<48} {:<14} {:>5} {:>5} {:>12.1f}% {:>7.1f}% {:>12.1f}% {:>7.1f}%\n",
               held ? "held out" : "fitted", f, ms.empty() ? "" : to_string(ms[0].op), ms.empty() ? 0 : ms[0].ranks,
               ms.size(), 100 * b.mape, 100 * e.mape, 100 * b.worst, 100 * e.worst);
  }
  if (!held_all.empty()) {
    const calib::ModelError b = calib::model_error(held_all, before), e = calib::model_error(held_all, after);
    fmt::print("{:<9} {:<48} {:<14} {:>5} {:>5} {:>12.1f}% {:>7.1f}% {:>12.1f}% {:>7.1f}%\n", "held out", "(all)", "",
               "", held_all.size(), 100 * b.mape, 100 * e.mape, 100 * b.worst, 100 * e.worst);
  }
  // Size by size: where the fit helped and where it hurt, and each side's worst row.
  std::vector<NamedTable> tables;
  for (std::size_t i = 0; i < files.size(); ++i)
    tables.push_back({files[i].first, i < fitted_tables ? "fitted" : "held out", files[i].second});
  fmt::print("\nper size, the simulator before -> after the fit (error = (simulated - measured) / measured):\n{}",
             nccl_size_table(tables, {{"before", &before}, {"after", &after}}));
  if (!a.out.empty()) {
    std::string header = fmt::format(
        "parmsim topology overlay (--overlay FILE): machine parameters fitted by\n  parmsim calibrate --fit-machine -t "
        "{}{} --import-nccl-tests",
        a.topology, a.topo_set.empty() ? "" : " --topo-set " + a.topo_set);
    for (const std::string& f : a.files) header += " " + f;
    for (const std::string& p : problems) header += "\nwritten with --force: " + p;
    write_atomically(a.out, [&](std::ostream& os) { os << calib::overlay_yaml(fit, header); });
    fmt::print("wrote {}\n", a.out);
  }
}

// A YAML double-quoted scalar (JSON's string syntax is YAML's): a path with quotes or backslashes stays one.
std::string yaml_quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// What an imported table must hold before it is fitted: a group of 2 or more
// ranks, and 3 or more distinct non-zero sizes (2 besides a held-out one).
void check_importable(const calib::NcclTable& t, bool held) {
  if (t.ranks == 0)
    throw UserError(fmt::format(
        "{}: the ranks are not listed (no '#  Rank N ... on HOST' lines; in -J output, no config.devices){}: the group "
        "size and whether it spans hosts are unknown; import nccl-tests' whole output, or state the group with --ranks N "
        "[--nodes M]",
        t.name(),
        t.per_process > 0 ? fmt::format(" and the header gives {} rank(s) per process, not how many processes",
                                        t.per_process)
                          : ""));
  if (t.ranks < 2)
    throw UserError(fmt::format("{}: {} rank: a collective calibration needs 2 or more ranks", t.name(), t.ranks));
  std::set<double> sizes;
  for (const calib::Point& p : t.points)
    if (p.x > 0) sizes.insert(p.x);
  if (sizes.size() < 3)
    throw UserError(fmt::format("{}: {} distinct non-zero size(s); calibrate fits a curve to 3 or more{} (nccl-tests "
                                "-b 8 -e 1G -f 2 measures 28)",
                                t.name(), sizes.size(), held ? ", one of them held out" : ""));
}

// The alpha-beta line is what the simulator uses beyond the measured sizes: it
// must have a positive latency and bandwidth, as written (6 decimals).
void check_line(const std::string& file, const calib::Curve& c) {
  const double alpha_us = c.line.alpha * 1e6, bw = 1e-9 / c.line.beta;
  const auto written = [](double v) { return std::stod(fmt::format("{:.6f}", v)); };
  if (!std::isfinite(bw) || !(c.line.beta > 0) || !(written(bw) > 0))
    throw UserError(fmt::format("{}: the alpha-beta line fitted to its {} sizes has bandwidth {:.6g} GB/s: time does "
                                "not grow with size over these rows, so nothing beyond them can be predicted; import "
                                "a table over more sizes (nothing written)",
                                file, c.points.size(), bw));
  if (!std::isfinite(alpha_us) || !(written(alpha_us) > 0))
    throw UserError(fmt::format("{}: the alpha-beta line fitted to its {} sizes has latency {:.6g} us (alpha must be "
                                "positive): the small sizes do not show a fixed cost; import a table that starts at "
                                "a few bytes (nothing written)",
                                file, c.points.size(), alpha_us));
}

// The file about to be written loads as --calibration would load it.
void check_loads(const std::string& yaml, const std::string& out) {
  try {
    (void)parse_calibration_text(yaml, out.empty() ? std::string("(calibration)") : out);
  } catch (const UserError& e) {
    throw UserError(fmt::format("calibrate: the calibration would not load (nothing written): {}", e.what()));
  }
}

}  // namespace

void add_calibrate(CLI::App& app) {
  auto* c = app.add_subcommand(
      "calibrate",
      "measure kernels and collectives on an executor (--backend cpu), or import nccl-tests text output "
      "(--import-nccl-tests), fit them, and write a calibration file for --calibration; with --fit-machine, fit "
      "the topology's link efficiencies and latencies instead and write a topology overlay for --overlay");
  auto a = std::make_shared<Args>();
  auto* import = c->add_option("--import-nccl-tests", a->files,
                "nccl-tests outputs, text or -J JSON (all_reduce_perf, alltoall_perf, ...)")
      ->check(CLI::ExistingFile);
  c->add_option("--backend", a->backend,
                "executor to measure when not importing: cpu, or cuda (every rank on one GPU, or one process per GPU "
                "under mpirun -np N with NCCL)")
      ->capture_default_str();
  c->add_option("--gpus", a->gpus, "ranks (cpu: threads; cuda: ranks on one GPU, or mpirun -np)")
      ->capture_default_str()
      ->check(int_in(1, 1024));
  c->add_option("--node-gpus", a->node_gpus, "ranks per node (default: all)")->check(int_in(0, 1024));
  c->add_option("--device", a->cuda.device, "cuda: GPU index (default: 0, or the local rank under mpirun)")
      ->check(int_in(0, 1023));
  c->add_option("--reps", a->cuda.reps, "cuda: measured runs per layer (the trace holds medians)")
      ->capture_default_str()
      ->check(int_in(1, 100000));
  c->add_flag("--quick", a->quick, "a smaller grid of layers (for tests)");
  c->add_option("--op", a->op, "the collective, when neither the file nor its name says")->needs(import);
  auto* ranks = c->add_option("--ranks", a->ranks,
                              "the group of an imported table that lists no ranks (a published table without its "
                              "'#  Rank' lines): N ranks; the import prints what it assumed, and refuses a table whose "
                              "rank lines say otherwise")
                    ->check(int_in(2, 1 << 20))
                    ->needs(import);
  c->add_option("--nodes", a->nodes, "with --ranks: the nodes (hosts) those ranks ran on, evenly (default: 1)")
      ->check(int_in(1, 1 << 20))
      ->needs(ranks);
  c->add_option("-t,--topology", a->topology,
                "the cluster the measurements come from: a name recorded in the calibration, or (--fit-machine) its "
                "topology file");
  auto* hold_out = c->add_option("--hold-out", a->hold_out,
                "a size (e.g. 64MiB) left out of every imported table's fit and reported (default: each size left out "
                "in turn)");
  hold_out->needs(import);
  auto* fit = c->add_flag("--fit-machine", a->fit_machine,
              "fit the topology's link efficiencies (nvlink, pcie, network) on the large sizes and nccl.launch / "
              "nccl.net_latency on the small ones to the simulator, and write them as a topology overlay (-o)");
  c->add_option("--evaluate", a->evaluate,
                "with --fit-machine: nccl-tests outputs not fitted, whose error before and after is reported")
      ->check(CLI::ExistingFile)
      ->needs(fit);
  c->add_option("--topo-set", a->topo_set, "with --fit-machine or --plan: override topology keys, e.g. nodes=2");
  add_overlay_option(c, a->overlay);
  c->add_option("--fit-large-from", a->large_from, "with --fit-machine: efficiencies are fitted on sizes >= this")
      ->capture_default_str()
      ->needs(fit);
  c->add_option("--fit-small-to", a->small_to, "with --fit-machine: latencies are fitted on sizes <= this")
      ->capture_default_str()
      ->needs(fit);
  c->add_flag("--force", a->force,
              "with --fit-machine and -o: write the overlay even when a fitted parameter ends at a bound of its "
              "search range or the fit makes the worst fitted row worse (otherwise refused, nothing written)")
      ->needs(fit);
  c->add_option("-o,--output", a->out, "calibration YAML to write (with --fit-machine: the topology overlay)");
  auto* plan = c->add_flag("--plan", a->plan,
                           "print a layer's collectives (op, ranks, placement, sizes) on the topology (-t FILE, "
                           "--topo-set) and the nccl-tests command lines (program, -g or mpirun -np and its host "
                           "layout, sizes) whose tables, imported, would time them");
  plan->excludes(import)->excludes(fit);
  c->add_option("--layer", a->layer_file, "with --plan: YAML file of layer keys (see --help-config, section layer)")
      ->check(CLI::ExistingFile)
      ->needs(plan);
  c->add_option("--set,-s", a->set, "with --plan: layer keys, e.g. B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4")
      ->needs(plan);
  c->add_option("--schedule", a->schedule, "with --plan: the schedule whose collectives to list, or all")
      ->capture_default_str()
      ->needs(plan);
  c->callback([a] {
    // Before measuring or fitting anything: the output is not an input, a link, a directory or a device.
    std::vector<NamedPath> inputs;
    for (const std::string& f : a->files) inputs.push_back({"an --import-nccl-tests input", f});
    for (const std::string& f : a->evaluate) inputs.push_back({"an --evaluate input", f});
    if (!a->overlay.empty()) inputs.push_back({"the --overlay input", a->overlay});
    if (a->fit_machine && !a->topology.empty()) inputs.push_back({"the --topology input", a->topology});
    check_outputs({{"--output", a->out}}, inputs);
    if (!a->topo_set.empty() && !a->fit_machine && !a->plan)
      throw UserError("--topo-set: only with --fit-machine or --plan (it overrides the topology they read)");
    if (a->plan) {
      if (!a->out.empty()) throw UserError("-o: --plan writes nothing (it prints the runs to make)");
      return plan_cmd(*a);
    }
    if (a->files.empty()) {
      if (a->fit_machine) throw UserError("calibrate --fit-machine: give the measurements with --import-nccl-tests");
      if (a->backend != "cpu" && a->backend != "cuda")
        throw UserError(fmt::format("calibrate: unknown backend '{}': cpu or cuda", a->backend));
      if (a->node_gpus > 0 && a->gpus % a->node_gpus != 0)
        throw UserError(fmt::format("--node-gpus: {} GPUs per node must divide --gpus {} (whole nodes)", a->node_gpus,
                                    a->gpus));
      const exec::Cluster cl{a->gpus, a->node_gpus > 0 ? a->node_gpus : a->gpus};
      std::unique_ptr<exec::GpuExecutor> gpu;
      std::string where = fmt::format("CPU executor, {} ranks, {} per node", cl.gpus, cl.gpus_per_node);
      if (a->backend == "cuda") {
        // One line and nothing measured when this process cannot use a GPU.
        refuse_mpirun_without_mpi("calibrate --backend cuda");
        if (const std::string why = exec::cuda_backend_unavailable(); !why.empty())
          throw UserError(fmt::format("calibrate --backend cuda: {}", why));
        a->cuda.loopback = !mpi::launched_by_mpirun();
        gpu = exec::make_cuda_executor(a->cuda);
        where = fmt::format("CUDA executor on {}, {} ranks, {} per node, {}", gpu->device_name(), cl.gpus,
                            cl.gpus_per_node,
                            gpu->world_size() > 1 ? fmt::format("{} processes over NCCL", gpu->world_size())
                                                  : std::string("every rank on one GPU"));
      }
      const bool lead = !gpu || gpu->world_rank() == 0;
      if (lead)
        fmt::print(stderr, "calibrate: executing a grid of layers (baseline, S1, S2) on the {}...\n", where);
      std::function<void(exec::Execution&)> collect;
      if (gpu && gpu->world_size() > 1)
        collect = [&gpu](exec::Execution& ex) { gather_gpu_trace(*gpu, ex.graph, ex.trace); };
      const exec::Samples s = exec::calibrate_grid(cl, a->quick, gpu.get(), collect);
      if (gpu && gpu->world_size() > 1) {
        gpu.reset();
        mpi::finalize();
      }
      if (!lead) return;
      std::string table;
      const std::string y = exec::calibration_yaml(s, where, &table);
      check_loads(y, a->out);
      fmt::print("{}", table);
      if (!a->out.empty()) {
        write_atomically(a->out, [&](std::ostream& os) { os << y; });
        fmt::print("wrote {}\n", a->out);
      }
      return;
    }
    if (a->fit_machine) return fit_machine_cmd(*a);
    std::optional<double> held;
    if (!a->hold_out.empty()) held = static_cast<double>(parse_sizes(a->hold_out, "--hold-out").at(0));
    std::string yaml =
        "# parmsim calibration: measured collectives.\n"
        "# Within the measured sizes the simulator interpolates points_us in log(size)-log(time); beyond them,\n"
        "# and for files without points, time(size) = alpha + size / bandwidth (size in nccl-tests' convention).\n";
    yaml += held ? fmt::format("# held_out_*: the size {} B was left out of the fit; its error.\n", *held)
                 : "# held_out_*: each size left out in turn and predicted from the others (mean relative error).\n";
    yaml += "collectives:\n";
    // Every table is read and fitted before anything is printed or written: a refused one leaves one line.
    std::string report;
    std::map<std::tuple<std::string, int, bool>, std::string> imported;  // (op, ranks, inter) -> file
    if (held)
      report += fmt::format("{:<14} {:>5} {:>5} {:>6} {:>5} {:>10} {:>8} {:>13} {:>12} {:>16} {:>16}\n", "op", "ranks", "hosts",
                 "link", "sizes", "alpha_us", "bw_GBps", "held_out(B)", "measured_us", "curve_us(err)", "line_us(err)");
    else
      report += fmt::format("{:<14} {:>5} {:>5} {:>6} {:>5} {:>10} {:>8}  {:>22}  {:>22}\n", "op", "ranks", "hosts", "link",
                 "sizes", "alpha_us", "bw_GBps", "held out: curve mape/worst", "line mape/worst");
    // One entry per table: a file may hold several (nccl-tests runs one after another).
    std::vector<std::string> assumed;
    for (const std::string& file : a->files)
    for (const calib::NcclTable& t : tables_of(file, a->op, *a, assumed)) {
      const std::string f = t.name();
      check_importable(t, held.has_value());
      std::vector<calib::Point> pts;
      for (const calib::Point& p : t.points)
        if (p.x > 0 && (!held || p.x != *held)) pts.push_back(p);
      const std::string link = t.hosts > 1 ? "inter" : "intra";
      if (const auto [it, fresh] = imported.emplace(std::make_tuple(t.op, t.ranks, t.hosts > 1), f); !fresh)
        throw UserError(fmt::format("{}: {} over {} ranks ({}) is already imported from {}; a calibration holds one "
                                    "entry per (op, ranks, link)",
                                    f, t.op, t.ranks, link, it->second));
      const calib::Curve curve = calib::fit_curve(pts);
      check_line(f, curve);
      // The line's worst error on the imported sizes (the curve's is 0 by construction).
      double line_fit_worst = 0;
      for (const auto& [x, tt] : curve.points) line_fit_worst = std::max(line_fit_worst, std::abs(curve.line.at(x) - tt) / tt);
      double curve_mape = 0, curve_worst = 0, line_mape = 0, line_worst = 0;
      std::string held_cols;
      if (held) {
        const auto h = calib::hold_out(t.points, *held);
        if (h.empty()) throw UserError(fmt::format("{}: --hold-out: no measurement of {} B", f, *held));
        curve_mape = curve_worst = std::abs(h[0].curve), line_mape = line_worst = std::abs(h[0].line);
        report += fmt::format("{:<14} {:>5} {:>5} {:>6} {:>5} {:>10.3f} {:>8.2f} {:>13.0f} {:>12.2f} {:>8.2f}({:+.1f}%) {:>8.2f}({:+.1f}%)\n",
                   t.op, t.ranks, t.hosts, link, curve.points.size(), curve.line.alpha * 1e6, 1e-9 / curve.line.beta,
                   *held, h[0].p.t * 1e6, curve.at(*held) * 1e6, 100 * h[0].curve, curve.line.at(*held) * 1e6,
                   100 * h[0].line);
      } else {
        const auto loo = calib::leave_one_out(pts);
        for (const calib::LeftOut& l : loo) {
          curve_mape += std::abs(l.curve), curve_worst = std::max(curve_worst, std::abs(l.curve));
          line_mape += std::abs(l.line), line_worst = std::max(line_worst, std::abs(l.line));
        }
        curve_mape /= static_cast<double>(loo.size()), line_mape /= static_cast<double>(loo.size());
        report += fmt::format("{:<14} {:>5} {:>5} {:>6} {:>5} {:>10.3f} {:>8.2f}  {:>12.2f}% {:>8.2f}%  {:>12.2f}% {:>8.2f}%\n",
                   t.op, t.ranks, t.hosts, link, curve.points.size(), curve.line.alpha * 1e6, 1e-9 / curve.line.beta,
                   100 * curve_mape, 100 * curve_worst, 100 * line_mape, 100 * line_worst);
      }
      std::string pts_us;
      for (const auto& [x, tt] : curve.points) pts_us += fmt::format("{}[{:.0f}, {:.6g}]", pts_us.empty() ? "" : ", ", x, tt * 1e6);
      yaml += fmt::format(
          "  - {{op: {}, ranks: {}, hosts: {}, link: {}, alpha: {:.6f}us, bandwidth: {:.6f}GBps, points: {}, "
          "held_out_mape: {:.6f}, held_out_curve_mape: {:.6f}, topology: {}, source: {},\n"
          "     points_us: [{}]}}\n",
          t.op, t.ranks, t.hosts, link, curve.line.alpha * 1e6, 1e-9 / curve.line.beta, curve.points.size(),
          line_mape, curve_mape, yaml_quoted(a->topology), yaml_quoted(f), pts_us);
    }
    // Whatever calibrate writes, --calibration reads.
    check_loads(yaml, a->out);
    print_assumed(assumed);
    fmt::print("{}", report);
    if (held)
      fmt::print("# held out: {:.0f} B, left out of every fit and predicted by the measured curve (log-log between its "
                 "neighbours) and by the alpha-beta line; the other sizes are reproduced exactly by the curve\n",
                 *held);
    else
      fmt::print("# held out: each size left out in turn and predicted from the others; the smallest and largest fall "
                 "outside the others' range, where the curve uses the line\n");
    if (!a->out.empty()) {
      write_atomically(a->out, [&](std::ostream& os) { os << yaml; });
      fmt::print("wrote {}\n", a->out);
    }
  });
}

}  // namespace parmsim::cli
