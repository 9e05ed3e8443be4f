#include "sim/validation/gemm_validation.hpp"

#include <fmt/format.h>

#include <cmath>

#include "sim/core/error.hpp"
#include "sim/io/csv.hpp"

namespace parmsim {


std::vector<GemmMeasurement> load_gemm_measurements(const std::string& path) {
  std::vector<GemmMeasurement> rows;
  read_csv_table(path, {"gpu", "dtype", "m", "n", "k", "batch", "measured_us", "measured_tflops", "timing", "source"},
                 [&](const CsvRow& row) {
    const std::string& where = row.where;
    auto get = [&](const char* c) { return row.get(c); };
    GemmMeasurement r;
    r.line = row.line;
    r.gpu = get("gpu");
    bool known = false;
    for (const GpuProfile& g : gpu_profiles()) known = known || (g.name == r.gpu && g.sm_count > 0);
    if (!known) throw UserError(fmt::format("{}: unknown GPU profile '{}' (or one without a tile model)", where, r.gpu));
    try {
      r.dtype = parse_dtype(get("dtype"));
      gpu_profile(r.gpu).peak(r.dtype);
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}: {}", where, e.what()));
    }
    r.shape.m = positive_int(get("m"), "m", where);
    r.shape.n = positive_int(get("n"), "n", where);
    r.shape.k = positive_int(get("k"), "k", where);
    r.shape.batch = get("batch").empty() ? 1 : positive_int(get("batch"), "batch", where);
    const std::string us = get("measured_us"), tf = get("measured_tflops");
    if (us.empty() == tf.empty())
      throw UserError(fmt::format("{}: give exactly one of measured_us and measured_tflops", where));
    r.measured_us = !us.empty() ? positive_number(us, "measured_us", where)
                                : r.shape.flops() / (positive_number(tf, "measured_tflops", where) * 1e12) * 1e6;
    r.timing = get("timing");
    r.source = get("source");
    r.notes = get("notes");
    if (r.timing.empty()) throw UserError(fmt::format("{}: column 'timing' is empty", where));
    if (r.source.empty()) throw UserError(fmt::format("{}: column 'source' is empty", where));
    rows.push_back(std::move(r));
  });
  if (rows.empty()) throw UserError(fmt::format("{}: no measurements", path));
  return rows;
}

GemmValidation validate_gemms(const std::vector<GemmMeasurement>& rows) {
  GemmValidation v;
  double sum = 0;
  std::map<std::string, double> sg, sd;
  for (const GemmMeasurement& m : rows) {
    GemmValidationRow r{m, plan_gemm(gpu_profile(m.gpu), m.dtype, m.shape), 0, 0};
    r.predicted_us = r.plan.total.to_us();
    r.error_pct = 100.0 * (r.predicted_us - m.measured_us) / m.measured_us;
    const double a = std::abs(r.error_pct);
    sum += a;
    sg[m.gpu] += a;
    sd[to_string(m.dtype)] += a;
    ++v.count_gpu[m.gpu];
    ++v.count_dtype[to_string(m.dtype)];
    v.rows.push_back(std::move(r));
  }
  v.mape = rows.empty() ? 0 : sum / static_cast<double>(rows.size());
  for (const auto& [g, s] : sg) v.mape_gpu[g] = s / v.count_gpu[g];
  for (const auto& [d, s] : sd) v.mape_dtype[d] = s / v.count_dtype[d];
  return v;
}

}  // namespace parmsim
