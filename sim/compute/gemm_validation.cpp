#include "sim/compute/gemm_validation.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <fstream>

#include "sim/core/error.hpp"
#include "sim/io/csv.hpp"

namespace parmsim {


std::vector<GemmMeasurement> load_gemm_measurements(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ParmError(fmt::format("{}: cannot open", path));
  std::vector<GemmMeasurement> rows;
  std::map<std::string, std::size_t> col;
  std::string line;
  int lineno = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = fmt::format("{}:{}", path, lineno);
    if (trim(line).empty() || trim(line)[0] == '#') continue;
    std::vector<std::string> f = split_csv(line, where);
    for (auto& s : f) s = trim(s);
    if (!header) {
      for (std::size_t i = 0; i < f.size(); ++i) col[f[i]] = i;
      for (const char* need : {"gpu", "dtype", "m", "n", "k", "batch", "measured_us", "measured_tflops", "timing",
                               "source"})
        if (!col.count(need)) throw ParmError(fmt::format("{}: missing column '{}'", where, need));
      header = true;
      continue;
    }
    auto get = [&](const char* c) -> std::string {
      const auto it = col.find(c);
      return it == col.end() || it->second >= f.size() ? std::string() : f[it->second];
    };
    GemmMeasurement r;
    r.line = lineno;
    r.gpu = get("gpu");
    bool known = false;
    for (const GpuProfile& g : gpu_profiles()) known = known || (g.name == r.gpu && g.sm_count > 0);
    if (!known) throw ParmError(fmt::format("{}: unknown GPU profile '{}' (or one without a tile model)", where, r.gpu));
    try {
      r.dtype = parse_dtype(get("dtype"));
      gpu_profile(r.gpu).peak(r.dtype);
    } catch (const ParmError& e) {
      throw ParmError(fmt::format("{}: {}", where, e.what()));
    }
    r.shape.m = positive_int(get("m"), "m", where);
    r.shape.n = positive_int(get("n"), "n", where);
    r.shape.k = positive_int(get("k"), "k", where);
    r.shape.batch = get("batch").empty() ? 1 : positive_int(get("batch"), "batch", where);
    const std::string us = get("measured_us"), tf = get("measured_tflops");
    if (us.empty() == tf.empty())
      throw ParmError(fmt::format("{}: give exactly one of measured_us and measured_tflops", where));
    r.measured_us = !us.empty() ? positive_number(us, "measured_us", where)
                                : r.shape.flops() / (positive_number(tf, "measured_tflops", where) * 1e12) * 1e6;
    r.timing = get("timing");
    r.source = get("source");
    r.notes = get("notes");
    if (r.timing.empty()) throw ParmError(fmt::format("{}: column 'timing' is empty", where));
    if (r.source.empty()) throw ParmError(fmt::format("{}: column 'source' is empty", where));
    rows.push_back(std::move(r));
  }
  if (!header) throw ParmError(fmt::format("{}: no header line", path));
  if (rows.empty()) throw ParmError(fmt::format("{}: no measurements", path));
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
