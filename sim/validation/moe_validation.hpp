#pragma once
// Published measurements of whole MoE layers (validation/moe.csv) against the
// simulator, uncalibrated.
//
// Each row names the system that ran it (`parmsim_system`, one of
// moe_systems()), its hardware (gpu, gpus, gpus_per_node, node) and every
// layer key. The row's cluster is generated from the hardware columns
// (moe_validation_topology), the layer is simulated under the schedule and
// keys the system maps to, and the forward, backward or whole time (`what`)
// is compared with the measured one. Nothing is fitted to these rows.
//
// A system parmsim models (Tutel, Megatron-Core's AlltoAll dispatcher, ...)
// counts in the headline MAPE. A system it does not model is either predicted
// with the nearest modelled system and reported apart (DeepEP against the
// AlltoAll dispatcher: how far the model is from the faster kernels), or not
// predicted at all (Flux's fused kernels). A row whose dtype parmsim has no
// model of (fp4) is not predicted either.
//
// Column `quality` (ok|suspect), as in validation/nccl-tests.csv: a suspect row's
// run is known or likely not to time the layer its keys describe (the reason is in
// validation/moe-sources.md, under the row's source). It is predicted and listed with
// `--all`, never counted in a MAPE but the one that says so (`mape_with_suspect`).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace parmsim {

// How parmsim runs one system's layer, or why it does not.
struct MoeSystem {
  std::string_view name;  // the CSV's parmsim_system
  std::string_view help;  // what the system is, and how parmsim models it or why not
  bool modelled = false;  // rows count in the headline MAPE
  // The schedule preset and the layer keys (over the row's) the rows run
  // with: a modelled system's model, or an unmodelled one's nearest. Empty
  // schedule: not predicted.
  std::string_view schedule;
  std::string_view keys;
};
// Every system, in the order help and errors list them.
std::span<const MoeSystem> moe_systems();

struct MoeMeasurement {
  int line = 0;
  std::string where;  // "FILE:LINE"
  std::string source_id, system, system_version, gpu, node, dtype, what, source;
  const MoeSystem* parmsim_system = nullptr;
  int gpus = 1, gpus_per_node = 1;
  // The layer keys as "B=..,L=..,...,dtype=.." (f = 1.0 when the row is
  // dropless: every such run forced balanced routing, so each expert gets
  // exactly k*S/E tokens, what capacity factor 1.0 gives).
  std::string layer;
  bool dropless = false;
  double measured_ms = 0;
  bool suspect = false;     // column quality: suspect (true) or ok
  std::int64_t B = 0;       // samples per GPU, the key a source's batch variants vary
  std::string work_group;   // the row's columns but B and measured_ms: rows that differ only in B
};

// Throws UserError "FILE:LINE: column 'X': ..." for a missing column or a bad value.
std::vector<MoeMeasurement> load_moe_measurements(const std::string& path);

// The YAML of the cluster a row runs on: `single` (one GPU), `nvswitch`
// (the GPUs on one NVSwitch at the GPU's NVLink bandwidth) or `pcie` (the
// GPUs on one PCIe switch), the nodes on a rail fabric of 8 x 400 Gb/s.
std::string moe_validation_topology(const MoeMeasurement& m);

struct MoeValidationRow {
  MoeMeasurement m;
  // "modelled", "nearest" (an unmodelled system run as its nearest) or
  // "not predicted"; `why` says why not.
  std::string status, why;
  std::string ran;  // the schedule and keys run
  double predicted_ms = 0, error_pct = 0;  // 100 * (predicted - measured) / measured
};

// A source whose time does not follow the layer's work: among its rows, two that differ only in
// B, the larger with at least kWorkRatio times the tokens (and so at least that much of every
// GEMM's FLOPs and every AlltoAll's bytes), measured less than kFlatRatio times apart. What
// such a source times is bound by something no layer key drives (a host-bound harness), and
// parmsim's layer keys cannot predict it; the check reads the measurements alone. Such a
// source's rows belong in quality=suspect; validate moe names a flat source with ok rows.
struct FlatSource {
  static constexpr double kWorkRatio = 4, kFlatRatio = 1.25;
  int line_small = 0, line_large = 0;  // the two rows
  double tokens_ratio = 0, time_ratio = 0;
};

struct MoeValidation {
  std::vector<MoeValidationRow> rows;  // every row; the statistics below over quality=ok rows
  double mape = 0;  // over the modelled rows
  int counted = 0;
  // The modelled rows with the suspect ones counted too, and the suspect modelled rows by source.
  double mape_with_suspect = 0;
  int counted_with_suspect = 0, suspect_rows = 0;
  std::map<std::string, double> mape_source_suspect;
  std::map<std::string, int> count_source_suspect;
  // Sources whose time does not follow the work (FlatSource), over every row; those of them
  // with a quality=ok row in flat_ok_sources.
  std::map<std::string, FlatSource> flat_sources;
  std::vector<std::string> flat_ok_sources;
  double mape_nearest = 0;  // over the rows run as their nearest system
  int counted_nearest = 0;
  double mape_nearest_with_suspect = 0;  // the same with the suspect ones counted too
  int counted_nearest_with_suspect = 0;
  // Over the predicted rows (modelled and nearest), keyed by source_id and by
  // parmsim_system; the modelled rows alone by source.
  std::map<std::string, double> mape_source, mape_system, mape_source_modelled;
  std::map<std::string, int> count_source, count_system, count_source_modelled;
};

MoeValidation validate_moe(const std::vector<MoeMeasurement>& rows);

}  // namespace parmsim
