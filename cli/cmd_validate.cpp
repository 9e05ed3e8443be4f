// parmsim validate gemm|nccl|moe|moe-dispatch [FILE]: the GEMM model, the collectives and whole MoE
// layers against published measurements.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "sim/validation/nccl_validation.hpp"
#include "sim/validation/gemm_validation.hpp"
#include "sim/validation/moe_validation.hpp"
#include "sim/validation/dispatch_validation.hpp"

namespace parmsim::cli {

namespace {

// A MAPE over n rows: never "0.0%" (or nan) over none.
std::string mape_text(double mape, std::size_t n) {
  return n > 0 ? fmt::format("{:.1f}%", mape) : std::string("none (no rows to compare)");
}
nlohmann::json mape_json(double mape, std::size_t n) { return n > 0 ? nlohmann::json(mape) : nlohmann::json(nullptr); }

void print_gemm_table(const GemmValidation& v, const std::string& file) {
  fmt::print("GEMM model vs published measurements ({}, {} rows)\n", file, v.rows.size());
  fmt::print("{:>5} {:<10} {:<5} {:>26} {:>12} {:>12} {:>8} {:>8} {:>6}\n", "line", "gpu", "dtype", "m x n x k (batch)",
             "measured_us", "predicted_us", "error%", "tile", "waves");
  for (const GemmValidationRow& r : v.rows) {
    const GemmShape& s = r.m.shape;
    std::string shape = fmt::format("{}x{}x{}", s.m, s.n, s.k);
    if (s.batch != 1) shape += fmt::format(" ({})", s.batch);
    fmt::print("{:>5} {:<10} {:<5} {:>26} {:>12.1f} {:>12.1f} {:>+8.1f} {:>8} {:>6}\n", r.m.line, r.m.gpu,
               to_string(r.m.dtype), shape, r.m.measured_us, r.predicted_us, r.error_pct,
               fmt::format("{}x{}", r.plan.tile.m, r.plan.tile.n), r.plan.waves);
  }
  fmt::print("\nMAPE overall: {} ({} rows)\n", mape_text(v.mape, v.rows.size()), v.rows.size());
  for (const auto& [g, x] : v.mape_gpu) fmt::print("MAPE {:<10} {:5.1f}% ({} rows)\n", g, x, v.count_gpu.at(g));
  for (const auto& [d, x] : v.mape_dtype) fmt::print("MAPE {:<10} {:5.1f}% ({} rows)\n", d, x, v.count_dtype.at(d));
}

nlohmann::json gemm_json(const GemmValidation& v, const std::string& file) {
  nlohmann::json rows = nlohmann::json::array();
  for (const GemmValidationRow& r : v.rows)
    rows.push_back({{"line", r.m.line},
                    {"gpu", r.m.gpu},
                    {"dtype", to_string(r.m.dtype)},
                    {"m", r.m.shape.m},
                    {"n", r.m.shape.n},
                    {"k", r.m.shape.k},
                    {"batch", r.m.shape.batch},
                    {"measured_us", r.m.measured_us},
                    {"predicted_us", r.predicted_us},
                    {"error_pct", r.error_pct},
                    {"tile", {r.plan.tile.m, r.plan.tile.n}},
                    {"tiles", r.plan.tiles},
                    {"waves", r.plan.waves},
                    {"source", r.m.source}});
  return {{"file", file},
          {"rows", rows},
          {"mape_pct", mape_json(v.mape, v.rows.size())},
          {"mape_pct_by_gpu", v.mape_gpu},
          {"mape_pct_by_dtype", v.mape_dtype}};
}

void print_nccl_table(const NcclValidation& v, const std::string& file, bool all) {
  fmt::print("Collectives (NCCL's choice, flow network, uncalibrated) vs published nccl-tests runs ({}, {} rows)\n",
             file, v.rows.size());
  fmt::print("{:>5} {:<22} {:<4} {:>5} {:<13} {:>12} {:>12} {:>12} {:>8}  {:<18} {}\n", "line", "system", "gpu",
             "ranks", "op", "bytes", "measured_us", "predicted_us", "error%", "ran", "quality");
  for (const NcclValidationRow& r : v.rows) {
    if (!all && r.m.quality != "ok") continue;
    fmt::print("{:>5} {:<22} {:<4} {:>5} {:<13} {:>12} {:>12.1f} {:>12.1f} {:>+8.1f}  {:<18} {}{}\n", r.m.line,
               r.m.system, r.m.gpu, r.m.nodes * r.m.gpus_per_node, to_string(r.m.op), r.m.bytes, r.m.measured_us,
               r.predicted_us, r.error_pct, r.choice, r.m.quality, r.m.nics_assumed ? " (NICs assumed)" : "");
  }
  fmt::print("\nMAPE over the {} rows marked ok: {}\n", v.counted, mape_text(v.mape, static_cast<std::size_t>(v.counted)));
  fmt::print("by size band:\n");
  for (const auto& [k, x] : v.mape_band) fmt::print("  {:<26} {:6.1f}% ({} rows)\n", k, x, v.count_band.at(k));
  fmt::print("by size band and fabric class:\n");
  for (const auto& [k, x] : v.mape_band_class)
    fmt::print("  {:<48} {:6.1f}% ({} rows)\n", k, x, v.count_band_class.at(k));
  fmt::print("by op:\n");
  for (const auto& [k, x] : v.mape_op) fmt::print("  {:<26} {:6.1f}% ({} rows)\n", k, x, v.count_op.at(k));
  fmt::print("by fabric (across nodes):\n");
  for (const auto& [k, x] : v.mape_fabric) fmt::print("  {:<26} {:6.1f}% ({} rows)\n", k, x, v.count_fabric.at(k));
  fmt::print("by system:\n");
  for (const auto& [k, x] : v.mape_system) fmt::print("  {:<26} {:6.1f}% ({} rows)\n", k, x, v.count_system.at(k));
}

nlohmann::json nccl_json(const NcclValidation& v, const std::string& file) {
  nlohmann::json rows = nlohmann::json::array();
  for (const NcclValidationRow& r : v.rows)
    rows.push_back({{"line", r.m.line},
                    {"system", r.m.system},
                    {"gpu", r.m.gpu},
                    {"nodes", r.m.nodes},
                    {"gpus_per_node", r.m.gpus_per_node},
                    {"op", to_string(r.m.op)},
                    {"bytes", r.m.bytes},
                    {"measured_us", r.m.measured_us},
                    {"predicted_us", r.predicted_us},
                    {"error_pct", r.error_pct},
                    {"ran", r.choice},
                    {"host_us", r.m.host_us},
                    {"quality", r.m.quality},
                    {"nics_assumed", r.m.nics_assumed},
                    {"source", r.m.source}});
  return {{"file", file},           {"rows", rows},
          {"mape_pct", mape_json(v.mape, static_cast<std::size_t>(v.counted))},     {"mape_pct_by_band", v.mape_band},
          {"mape_pct_by_op", v.mape_op}, {"mape_pct_by_system", v.mape_system},
          {"mape_pct_by_fabric", v.mape_fabric}, {"mape_pct_by_band_and_fabric_class", v.mape_band_class}};
}


void print_moe_table(const MoeValidation& v, const std::string& file, bool all) {
  fmt::print("MoE layers (flow network, uncalibrated) vs published measurements ({}, {} rows{})\n", file,
             v.rows.size(),
             v.suspect_rows && !all ? fmt::format("; {} marked suspect, listed with --all", v.suspect_rows) : "");
  fmt::print("{:>5} {:<18} {:<18} {:<9} {:>4} {:<5} {:<13} {:>12} {:>12} {:>8}  {}\n", "line", "source",
             "parmsim_system", "gpu", "gpus", "dtype", "what", "measured_ms", "predicted_ms", "error%", "layer");
  for (const MoeValidationRow& r : v.rows) {
    if (r.m.suspect && !all) continue;
    const std::string pred = r.status == "not predicted" ? "-" : fmt::format("{:.3f}", r.predicted_ms);
    const std::string err = r.status == "not predicted" ? r.why : fmt::format("{:+.1f}", r.error_pct);
    fmt::print("{:>5} {:<18} {:<18} {:<9} {:>4} {:<5} {:<13} {:>12.3f} {:>12} {:>8}  {}{}{}\n", r.m.line,
               r.m.source_id, r.m.parmsim_system->name, r.m.gpu, r.m.gpus, r.m.dtype, r.m.what, r.m.measured_ms, pred,
               err, r.m.layer, r.status == "nearest" ? "  (nearest)" : "", r.m.suspect ? "  (suspect)" : "");
  }
  fmt::print("\nMAPE over the {} rows of modelled systems: {}\n", v.counted,
             mape_text(v.mape, static_cast<std::size_t>(v.counted)));
  if (v.counted_with_suspect != v.counted)
    fmt::print("  with the {} suspect rows of modelled systems counted too: {} ({} rows)\n",
               v.counted_with_suspect - v.counted,
               mape_text(v.mape_with_suspect, static_cast<std::size_t>(v.counted_with_suspect)),
               v.counted_with_suspect);
  for (const auto& [src, f] : v.flat_sources) {
    const bool ok = std::find(v.flat_ok_sources.begin(), v.flat_ok_sources.end(), src) != v.flat_ok_sources.end();
    fmt::print("  {}: its time does not follow the work: lines {} and {} differ only in B, {:g}x the tokens in {:.2f}x "
               "the time (a harness bound by something no layer key drives){}\n",
               src, f.line_small, f.line_large, f.tokens_ratio, f.time_ratio,
               ok ? "; WARNING: rows of it are marked ok and counted" : "; its rows are marked suspect");
  }
  fmt::print("by source (modelled systems):\n");
  for (const auto& [k, x] : v.mape_source_modelled)
    fmt::print("  {:<22} {:6.1f}% ({} rows)\n", k, x, v.count_source_modelled.at(k));
  for (const auto& [k, x] : v.mape_source_suspect)
    fmt::print("  {:<22} {:6.1f}% ({} rows, suspect: not counted)\n", k, x, v.count_source_suspect.at(k));
  fmt::print("by system (rows run as their nearest marked *):\n");
  for (const MoeSystem& s : moe_systems()) {
    const std::string k(s.name);
    if (!v.mape_system.count(k)) continue;
    fmt::print("  {:<22} {:6.1f}% ({} rows){}\n", k, v.mape_system.at(k), v.count_system.at(k), s.modelled ? "" : " *");
  }
  if (v.counted_nearest)
    fmt::print("MAPE over the {} rows of unmodelled systems run as their nearest: {:.1f}%\n", v.counted_nearest,
               v.mape_nearest);
  if (v.counted_nearest_with_suspect != v.counted_nearest)
    fmt::print("  with the {} suspect rows run as their nearest counted too: {:.1f}% ({} rows)\n",
               v.counted_nearest_with_suspect - v.counted_nearest, v.mape_nearest_with_suspect,
               v.counted_nearest_with_suspect);
  int skipped = 0;
  for (const MoeValidationRow& r : v.rows) skipped += r.status == "not predicted";
  if (skipped) fmt::print("{} rows not predicted (an unmodelled system or dtype)\n", skipped);
}

nlohmann::json moe_json(const MoeValidation& v, const std::string& file) {
  nlohmann::json rows = nlohmann::json::array();
  for (const MoeValidationRow& r : v.rows) {
    nlohmann::json j = {{"line", r.m.line},
                        {"source_id", r.m.source_id},
                        {"system", r.m.system},
                        {"parmsim_system", r.m.parmsim_system->name},
                        {"modelled", r.m.parmsim_system->modelled},
                        {"status", r.status},
                        {"gpu", r.m.gpu},
                        {"gpus", r.m.gpus},
                        {"gpus_per_node", r.m.gpus_per_node},
                        {"node", r.m.node},
                        {"dtype", r.m.dtype},
                        {"layer", r.m.layer},
                        {"what", r.m.what},
                        {"measured_ms", r.m.measured_ms},
                        {"quality", r.m.suspect ? "suspect" : "ok"},
                        {"source", r.m.source}};
    if (r.status == "not predicted") {
      j["why"] = r.why;
      j["predicted_ms"] = nullptr;
      j["error_pct"] = nullptr;
    } else {
      j["ran"] = r.ran;
      j["predicted_ms"] = r.predicted_ms;
      j["error_pct"] = r.error_pct;
    }
    rows.push_back(std::move(j));
  }
  nlohmann::json flat = nlohmann::json::object();
  for (const auto& [src, f] : v.flat_sources)
    flat[src] = {{"line_small", f.line_small},
                 {"line_large", f.line_large},
                 {"tokens_ratio", f.tokens_ratio},
                 {"time_ratio", f.time_ratio}};
  return {{"file", file},
          {"rows", rows},
          {"mape_pct", mape_json(v.mape, static_cast<std::size_t>(v.counted))},
          {"counted", v.counted},
          {"mape_pct_by_source", v.mape_source_modelled},
          {"mape_pct_by_system", v.mape_system},
          {"mape_pct_nearest", mape_json(v.mape_nearest, static_cast<std::size_t>(v.counted_nearest))},
          {"mape_pct_nearest_with_suspect",
           mape_json(v.mape_nearest_with_suspect, static_cast<std::size_t>(v.counted_nearest_with_suspect))},
          {"mape_pct_with_suspect", mape_json(v.mape_with_suspect, static_cast<std::size_t>(v.counted_with_suspect))},
          {"counted_with_suspect", v.counted_with_suspect},
          {"mape_pct_by_source_suspect", v.mape_source_suspect},
          {"flat_sources", flat},
          {"flat_sources_marked_ok", v.flat_ok_sources},
          {"counted_nearest", v.counted_nearest}};
}

std::string phase_text(const DispatchComparison& c) {
  return c.compared ? fmt::format("{:>9.1f} {:>9.1f} {:>+7.1f} {:<4}", c.measured_us, c.predicted_us, c.error_pct,
                                  c.basis == "time" ? "us" : c.basis == "rdma_GBps" ? "rdma" : "nvl")
                    : fmt::format("{:>9} {:>9} {:>7} {:<4}", "-", "-", "", "");
}

void print_dispatch_table(const DispatchValidation& v, const std::string& file) {
  fmt::print("MoE dispatch/combine (parmsim moe-dispatch, flow network, uncalibrated) vs published measurements "
             "({}, {} rows)\n",
             file, v.rows.size());
  fmt::print("{:>4} {:<26} {:<24} {:<6} {:>5} {:<4} {:>30} {:>30}  {}\n", "line", "source", "kernel", "gpu", "ranks",
             "disp", "dispatch: meas_us pred_us err% of", "combine: meas_us pred_us err% of", "ran");
  for (const DispatchValidationRow& r : v.rows) {
    if (r.status == "not predicted") continue;
    fmt::print("{:>4} {:<26} {:<24} {:<6} {:>5} {:<4} {:>30} {:>30}  {}{}{}\n", r.m.line, r.m.source_id,
               r.m.kernel_name, r.m.gpu, r.m.ranks, moe::to_string(r.m.spec.dispatch_dtype), phase_text(r.dispatch),
               phase_text(r.combine), r.ran, r.status == "nearest" ? "  (nearest)" : "",
               r.m.experts_assumed ? fmt::format("  (experts {} assumed)", r.m.spec.experts) : "");
  }
  fmt::print("\n\"of\": what the source published (us: a time; rdma/nvl: a bandwidth, made a time with the byte "
             "count of the simulated routing)\n");
  fmt::print("MAPE over the {} phases ({} rows) of modelled kernels: {}\n", v.counted, v.counted_rows,
             mape_text(v.mape, static_cast<std::size_t>(v.counted)));
  fmt::print("by source (modelled kernels):\n");
  for (const auto& [k, x] : v.mape_source_modelled)
    fmt::print("  {:<28} {:6.1f}% ({} phases)\n", k, x, v.count_source_modelled.at(k));
  fmt::print("by kernel (kernels run as their nearest marked *):\n");
  for (const DispatchKernel& kern : dispatch_kernels()) {
    const std::string k = dispatch_kernel_label(kern);
    if (!v.mape_kernel.count(k)) continue;
    fmt::print("  {:<44} {:6.1f}% ({} phases){}\n", k, v.mape_kernel.at(k), v.count_kernel.at(k),
               kern.modelled ? "" : " *");
  }
  if (v.counted_nearest)
    fmt::print("MAPE over the {} phases of kernels run as their nearest: {:.1f}%\n", v.counted_nearest, v.mape_nearest);
  if (v.not_predicted) {
    std::map<std::string, int> why;
    for (const DispatchValidationRow& r : v.rows)
      if (r.status == "not predicted") ++why[fmt::format("{} ({})", r.m.kernel_name, r.why)];
    fmt::print("{} rows not predicted:\n", v.not_predicted);
    for (const auto& [k, n] : why) fmt::print("  {:>3} {}\n", n, k);
  }
}

nlohmann::json phase_json(const DispatchComparison& c) {
  if (!c.compared) return nullptr;
  return {{"measured_us", c.measured_us}, {"predicted_us", c.predicted_us}, {"error_pct", c.error_pct},
          {"published", c.basis}};
}

nlohmann::json dispatch_json(const DispatchValidation& v, const std::string& file) {
  nlohmann::json rows = nlohmann::json::array();
  for (const DispatchValidationRow& r : v.rows) {
    nlohmann::json j = {{"line", r.m.line},
                        {"source_id", r.m.source_id},
                        {"kernel", r.m.kernel_name},
                        {"modelled", r.m.kernel->modelled},
                        {"status", r.status},
                        {"gpu", r.m.gpu},
                        {"ranks", r.m.ranks},
                        {"tokens", r.m.spec.tokens},
                        {"hidden", r.m.spec.hidden},
                        {"experts", r.m.spec.experts},
                        {"experts_assumed", r.m.experts_assumed},
                        {"topk", r.m.spec.topk},
                        {"sms", r.m.spec.sms},
                        {"dispatch_dtype", moe::to_string(r.m.spec.dispatch_dtype)},
                        {"source", r.m.source}};
    if (r.status == "not predicted") {
      j["why"] = r.why;
    } else {
      j["ran"] = r.ran;
      j["dispatch"] = phase_json(r.dispatch);
      j["combine"] = phase_json(r.combine);
    }
    rows.push_back(std::move(j));
  }
  return {{"file", file},
          {"rows", rows},
          {"mape_pct", mape_json(v.mape, static_cast<std::size_t>(v.counted))},
          {"counted", v.counted},
          {"counted_rows", v.counted_rows},
          {"mape_pct_by_source", v.mape_source_modelled},
          {"mape_pct_by_kernel", v.mape_kernel},
          {"mape_pct_nearest", mape_json(v.mape_nearest, static_cast<std::size_t>(v.counted_nearest))},
          {"counted_nearest", v.counted_nearest},
          {"not_predicted", v.not_predicted}};
}

}  // namespace

void add_validate(CLI::App& app) {
  auto* c = app.add_subcommand("validate", "compare a model with published measurements");
  c->require_subcommand(1);
  struct Args {
    std::string file = "validation/gemm.csv";
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* g = c->add_subcommand(
      "gemm",
      "the GEMM model (tiles and waves over the SMs) against measured GEMM times: per-row error and the mean "
      "absolute percentage error (MAPE) overall, by GPU and by dtype");
  g->add_option("file", a->file,
                "CSV of measurements: gpu, dtype, m, n, k, batch, measured_us or measured_tflops, timing, source "
                "(notes optional)")
      ->capture_default_str();
  g->add_flag("--json", a->json, "print JSON instead of a table");
  auto b = std::make_shared<Args>();
  b->file = "validation/nccl-tests.csv";
  auto all = std::make_shared<bool>(false);
  auto textbook = std::make_shared<bool>(false);
  auto* n = c->add_subcommand(
      "nccl",
      "collectives against published nccl-tests runs: each row's cluster is generated from its hardware columns, "
      "the collective is simulated uncalibrated with NCCL's choice (or what the run forced), and the table gives "
      "per-row error and the MAPE by size band, op and system (rows marked ok)");
  n->add_option("file", b->file,
                "CSV of measurements: system, gpu, nodes, gpus_per_node, nics_per_node, nic_gbps, op, bytes, "
                "time_us or busbw_GBps, algo, proto, quality (ok|suspect), source; optional: fabric, p2p, gdr, topology, "
                "host_us (the host's measured time per call: the prediction is at least that)")
      ->capture_default_str();
  n->add_flag("--json", b->json, "print JSON instead of a table");
  n->add_flag("--all", *all, "also list the rows marked suspect (never counted in the MAPE)");
  n->add_flag("--textbook", *textbook,
              "the model before NCCL's, for comparison: one flat ring (AllReduce, AllGather, ReduceScatter), "
              "direct AlltoAll, links at line rate");
  auto m = std::make_shared<Args>();
  m->file = "validation/moe.csv";
  std::string systems;
  for (const MoeSystem& s : moe_systems())
    systems += fmt::format("\n  {:<18} {}{}", s.name, s.modelled ? "" : "[not modelled] ", s.help);
  auto* mo = c->add_subcommand(
      "moe",
      "whole MoE layers against published measurements: each row's cluster is generated from its hardware columns, "
      "the layer is simulated uncalibrated as parmsim models the system that ran it, and the table gives per-row "
      "error and the MAPE by source and by system. Rows of systems parmsim does not model are run as their "
      "nearest and reported apart, or not predicted. The systems (column parmsim_system):" + systems);
  mo->add_option("file", m->file,
                 "CSV of measurements: source_id, system, parmsim_system, system_version, gpu, gpus, gpus_per_node, "
                 "node (single|nvswitch|pcie), B, L, M, H, E, k, f (empty: dropless), mp, ep, dtype, what "
                 "(layer_fwd|layer_bwd|layer_fwd_bwd), measured_ms, quality (ok|suspect), source")
      ->capture_default_str();
  mo->add_flag("--json", m->json, "print JSON instead of a table");
  auto mall = std::make_shared<bool>(false);
  mo->add_flag("--all", *mall, "also list the rows marked suspect (counted only in the MAPE that says so)");
  auto dd = std::make_shared<Args>();
  dd->file = "validation/moe-dispatch.csv";
  auto topodir = std::make_shared<std::string>("topologies");
  std::string kerns;
  for (const DispatchKernel& k : dispatch_kernels())
    kerns += fmt::format("\n  {:<24} {}{}{}", k.name, k.source.empty() ? "" : fmt::format("[rows of {}] ", k.source),
                         k.modelled ? "" : "[not modelled] ", k.help);
  auto* md = c->add_subcommand(
      "moe-dispatch",
      "MoE dispatch and combine kernels against published measurements: each row runs `parmsim moe-dispatch` "
      "uncalibrated on its GPU's bundled topology, and the table gives per-row error (dispatch and combine) and the "
      "MAPE by source and by kernel. Rows of kernels parmsim does not model are run as their nearest and reported "
      "apart, or not predicted. The kernels (column kernel):" + kerns);
  md->add_option("file", dd->file,
                 "CSV of measurements (validation/moe-dispatch-sources.md gives its columns): source_id, kernel, gpu, "
                 "ranks, ranks_per_node, nic_gbps, tokens, hidden, experts, topk, topk_groups, sms (optional), dispatch_dtype, "
                 "combine_dtype, dispatch_us, combine_us, dispatch_rdma_GBps, dispatch_nvl_GBps, combine_rdma_GBps, "
                 "combine_nvl_GBps, source")
      ->capture_default_str();
  md->add_option("--topologies", *topodir, "the folder of the bundled topologies the rows run on")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);
  md->add_flag("--json", dd->json, "print JSON instead of a table");
  md->callback([dd, topodir] {
    const DispatchValidation v = validate_dispatch(load_dispatch_measurements(dd->file), *topodir);
    if (dd->json)
      fmt::print("{}\n", dispatch_json(v, dd->file).dump(2));
    else
      print_dispatch_table(v, dd->file);
  });
  mo->callback([m, mall] {
    const MoeValidation v = validate_moe(load_moe_measurements(m->file));
    if (m->json)
      fmt::print("{}\n", moe_json(v, m->file).dump(2));
    else
      print_moe_table(v, m->file, *mall);
  });
  n->callback([b, all, textbook] {
    const NcclValidation v = validate_nccl(load_nccl_measurements(b->file), *textbook);
    if (b->json)
      fmt::print("{}\n", nccl_json(v, b->file).dump(2));
    else
      print_nccl_table(v, b->file, *all);
  });
  g->callback([a] {
    const GemmValidation v = validate_gemms(load_gemm_measurements(a->file));
    if (a->json)
      fmt::print("{}\n", gemm_json(v, a->file).dump(2));
    else
      print_gemm_table(v, a->file);
  });
}

}  // namespace parmsim::cli
