// parmsim validate gemm [FILE]: the GEMM model against published measurements.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "sim/validation/nccl_validation.hpp"
#include "sim/validation/gemm_validation.hpp"

namespace parmsim::cli {

namespace {

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
  fmt::print("\nMAPE overall: {:.1f}% ({} rows)\n", v.mape, v.rows.size());
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
          {"mape_pct", v.mape},
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
  fmt::print("\nMAPE over the {} rows marked ok: {:.1f}%\n", v.counted, v.mape);
  fmt::print("by size band:\n");
  for (const auto& [k, x] : v.mape_band) fmt::print("  {:<26} {:6.1f}% ({} rows)\n", k, x, v.count_band.at(k));
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
                    {"quality", r.m.quality},
                    {"nics_assumed", r.m.nics_assumed},
                    {"source", r.m.source}});
  return {{"file", file},           {"rows", rows},
          {"mape_pct", v.mape},     {"mape_pct_by_band", v.mape_band},
          {"mape_pct_by_op", v.mape_op}, {"mape_pct_by_system", v.mape_system},
          {"mape_pct_by_fabric", v.mape_fabric}};
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
                "time_us or busbw_GBps, algo, proto, quality (ok|suspect), source")
      ->capture_default_str();
  n->add_flag("--json", b->json, "print JSON instead of a table");
  n->add_flag("--all", *all, "also list the rows marked suspect (never counted in the MAPE)");
  n->add_flag("--textbook", *textbook,
              "the model before NCCL's, for comparison: one flat ring (AllReduce, AllGather, ReduceScatter), "
              "direct AlltoAll, links at line rate");
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
