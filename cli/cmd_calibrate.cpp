// parmsim calibrate --import-nccl-tests
#include <fmt/format.h>

#include <memory>

#include "backend/calibrate.hpp"
#include "sim/calib/nccl_tests.hpp"
#include "cli/common.hpp"
#include "sim/core/error.hpp"
#include "sim/io/output.hpp"

namespace parmsim::cli {

void add_calibrate(CLI::App& app) {
  auto* c = app.add_subcommand(
      "calibrate",
      "measure kernels and collectives on an executor (--backend cpu), or import nccl-tests text output "
      "(--import-nccl-tests), fit them, and write a calibration file for --calibration");
  struct Args {
    std::vector<std::string> files;
    std::string op, out, backend = "cpu", topology;
    int gpus = 8, node_gpus = 0;
    bool quick = false;
  };
  auto a = std::make_shared<Args>();
  c->add_option("--import-nccl-tests", a->files,
                "nccl-tests outputs, text or -J JSON (all_reduce_perf, alltoall_perf, ...)")
      ->check(CLI::ExistingFile);
  c->add_option("--backend", a->backend, "executor to measure when not importing: cpu (for GPUs, import nccl-tests results)")
      ->capture_default_str();
  c->add_option("--gpus", a->gpus, "ranks for --backend cpu")->capture_default_str()->check(int_in(1, 1024));
  c->add_option("--node-gpus", a->node_gpus, "ranks per node for --backend cpu (default: all)")
      ->check(int_in(0, 1024));
  c->add_flag("--quick", a->quick, "a smaller grid of layers (for tests)");
  c->add_option("--op", a->op, "the collective, when neither the file nor its name says");
  c->add_option("--topology", a->topology, "name of the cluster the measurements come from (recorded in the file)");
  c->add_option("-o,--output", a->out, "calibration YAML to write");
  c->callback([a] {
    // Before measuring or fitting anything: the output is not an input, a link, a directory or a device.
    std::vector<NamedPath> inputs;
    for (const std::string& f : a->files) inputs.push_back({"an --import-nccl-tests input", f});
    check_outputs({{"--output", a->out}}, inputs);
    if (a->files.empty()) {
      if (a->backend != "cpu")
        throw ParmError(fmt::format("calibrate: backend '{}' is not available here; use --backend cpu", a->backend));
      const exec::Cluster cl{a->gpus, a->node_gpus > 0 ? a->node_gpus : a->gpus};
      fmt::print(stderr, "calibrate: executing a grid of layers (baseline, S1, S2) on {} CPU ranks...\n", cl.gpus);
      const exec::Samples s = exec::calibrate_cpu(cl, a->quick);
      std::string table;
      const std::string y = exec::calibration_yaml(
          s, fmt::format("CPU executor, {} ranks, {} per node", cl.gpus, cl.gpus_per_node), &table);
      fmt::print("{}", table);
      if (!a->out.empty()) {
        write_atomically(a->out, [&](std::ostream& os) { os << y; });
        fmt::print("wrote {}\n", a->out);
      }
      return;
    }
    std::string yaml =
        "# parmsim calibration: alpha-beta fits of measured collectives.\n"
        "# time(size) = alpha + size / bandwidth, with size in nccl-tests' convention.\n"
        "# held_out_*: fitted on every other size, error on the others (mean and worst relative).\n"
        "collectives:\n";
    fmt::print("{:<14} {:>5} {:>5} {:>6} {:>12} {:>14} {:>12} {:>14} {:>12}\n", "op", "ranks", "hosts", "link",
               "alpha_us", "bandwidth_GBps", "held_out", "held_out>=1MiB", "worst>=1MiB");
    for (const std::string& f : a->files) {
      const calib::NcclTable t = calib::read_nccl_tests(f, a->op);
      const calib::AlphaBeta ab = calib::fit_alpha_beta(t.points);
      const calib::HeldOut h = calib::fit_held_out(t.points);
      // The target is stated for messages of 1 MiB and above: the same split, restricted.
      double mape_big = 0, worst_big = 0;
      int n_big = 0;
      for (const calib::Point& p : h.test)
        if (p.x >= 1048576.0) {
          const double e = std::abs(h.fit.at(p.x) - p.t) / p.t;
          mape_big += e, worst_big = std::max(worst_big, e), ++n_big;
        }
      if (n_big) mape_big /= n_big;
      const std::string link = t.hosts > 1 ? "inter" : "intra";
      fmt::print("{:<14} {:>5} {:>5} {:>6} {:>12.3f} {:>14.2f} {:>11.2f}% {:>13.2f}% {:>11.2f}%\n", t.op, t.ranks,
                 t.hosts, link, ab.alpha * 1e6, 1.0 / ab.beta / 1e9, 100 * h.mape, 100 * mape_big, 100 * worst_big);
      yaml += fmt::format(
          "  - {{op: {}, ranks: {}, hosts: {}, link: {}, alpha: {:.6f}us, bandwidth: {:.6f}GBps, points: {}, "
          "held_out_mape: {:.6f}, held_out_mape_1MiB: {:.6f}, held_out_worst_1MiB: {:.6f}, topology: \"{}\", "
          "source: \"{}\"}}\n",
          t.op, t.ranks, t.hosts, link, ab.alpha * 1e6, 1.0 / ab.beta / 1e9, t.points.size(), h.mape, mape_big,
          worst_big, a->topology, f);
    }
    if (!a->out.empty()) {
      write_atomically(a->out, [&](std::ostream& os) { os << yaml; });
      fmt::print("wrote {}\n", a->out);
    }
  });
}

}  // namespace parmsim::cli
