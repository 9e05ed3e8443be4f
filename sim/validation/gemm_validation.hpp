#pragma once
// Published GEMM measurements (validation/gemm.csv) against the GEMM model.
//
// CSV, one header line, '#' lines are comments, fields may be double-quoted. Columns (any order,
// extra columns ignored): gpu (a profile name), dtype (fp32|fp16|bf16), m, n, k, batch (empty = 1),
// measured_us or measured_tflops (exactly one per row; TFLOP/s become 2*m*n*k*batch / TFLOP/s),
// timing, source (both non-empty), notes (optional).
#include <map>
#include <string>
#include <vector>

#include "sim/compute/gemm_model.hpp"

namespace parmsim {

struct GemmMeasurement {
  int line = 0;
  std::string gpu;
  DType dtype = DType::fp16;
  GemmShape shape;
  double measured_us = 0;
  std::string timing, notes, source;
};

// Throws UserError "FILE:LINE: ..." for a missing column, a bad value or an unknown GPU profile.
std::vector<GemmMeasurement> load_gemm_measurements(const std::string& path);

struct GemmValidationRow {
  GemmMeasurement m;
  GemmPlan plan;
  double predicted_us = 0;
  double error_pct = 0;  // 100 * (predicted - measured) / measured
};

struct GemmValidation {
  std::vector<GemmValidationRow> rows;
  double mape = 0;                         // mean |error_pct| over all rows
  std::map<std::string, double> mape_gpu;  // by profile
  std::map<std::string, double> mape_dtype;
  std::map<std::string, int> count_gpu, count_dtype;
};

GemmValidation validate_gemms(const std::vector<GemmMeasurement>& rows);

}  // namespace parmsim
