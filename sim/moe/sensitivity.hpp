#pragma once
// What decides a layer's verdict: each uncertain input varied over its
// sourced range, one at a time, with everything else at its nominal value.
// For each end of each range the layer runs baseline, S1 and S2 in the
// simulator; the closed form picks auto's schedule (the paper's choice). The
// result says how far auto's speedup over the baseline moves, and whether
// auto's choice, or the schedule the simulator finds faster, flips.
#include <functional>
#include <string>
#include <vector>

#include "sim/moe/layer_keys.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim::moe {

// One uncertain input. `topology`: a topology key (as --topo-set takes it)
// with numeric ends; otherwise layer or schedule keys, each end a list of
// assignments ("saa=pipelined", "gather=after_iorder,fuse_combine=0"). An
// empty end runs the layer as given.
struct SensitivityInput {
  std::string parameter;  // a topology key, or a name for layer-key choices
  bool topology = false;
  std::string low, high;  // topology: values ("0.8", "27.4us"); layer: assignments
  std::string source;     // where the range comes from
};

// The inputs varied by default on `topo`: link efficiencies around their
// nominal value by the error of the validated collective model, NCCL's
// per-operation latency, and the modelling choices (saa, dispatch, ds_moe,
// S2's gather placement). Numeric ranges are relative to `topo`'s values.
std::vector<SensitivityInput> default_sensitivity_inputs(const Topology& topo);

// `--vary KEY=LOW:HIGH` for a topology key: replaces the default range of
// KEY, or adds one. LOW < HIGH, both numbers (or times with a unit); an
// empty or inverted range is a UserError naming `where` and the key.
SensitivityInput parse_vary(const std::string& spec, const std::string& where);

struct SensitivityEnd {
  double speedup = 0;      // baseline time / auto's schedule's time, both simulated
  std::string choice;      // auto's pick (closed form): "s1" or "s2"
  std::string winner;      // the faster of S1 and S2 in the simulator
};

struct SensitivityRow {
  SensitivityInput input;
  SensitivityEnd low, high;
  bool flips = false;         // auto's choice differs from the nominal one at an end
  bool winner_flips = false;  // the simulator's S1/S2 winner differs from the nominal one at an end
};

struct Sensitivity {
  SensitivityEnd nominal;
  std::vector<SensitivityRow> rows;
};

// `load(extra)`: the topology as given with `extra` --topo-set assignments
// applied after the user's. `keys`: the layer's schedule keys as given.
Sensitivity layer_sensitivity(const std::function<Topology(const std::vector<std::string>&)>& load,
                              const LayerSpec& spec, const ScheduleKeys& keys,
                              const std::vector<SensitivityInput>& inputs, const std::string& network);

}  // namespace parmsim::moe
