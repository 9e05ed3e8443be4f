#pragma once
// Whole training iterations of MoE transformer models (BERT-MoE, GPT-2-MoE):
// embeddings and the output head, attention and dense FFN blocks under
// Megatron tensor parallelism (column- then row-parallel GEMMs, an MP
// AllReduce after each row-parallel one, forward and backward), every
// `moe_every`-th FFN replaced by an MoE layer under each schedule, and the
// data-parallel gradient AllReduce of the dense parameters.
#include <string>
#include <vector>

#include "sim/moe/layer_sim.hpp"

namespace parmsim::moe {

struct ModelSpec {
  std::string name, description, file;
  std::string topology_file;
  std::vector<std::string> topology_overrides;
  std::string network = "flow";
  int layers = 12, moe_every = 2, heads = 12;
  std::int64_t vocab = 30522;
  LayerSpec layer;                   // B, L (sequence), M (hidden), H (FFN), E, k, f, mp, dtype
  std::int64_t experts_per_gpu = 0;  // when > 0, E = experts_per_gpu * GPUs
};

ModelSpec load_model_spec(const std::string& file);

struct Component {
  std::string name;
  int count = 0;           // times per iteration
  Time forward, backward;  // one instance
};

struct IterationResult {
  std::string schedule;
  std::vector<Component> parts;
  Time total() const;
  Time moe_time() const;
};

// One result per schedule (baseline, s1, s2), on the given topology.
std::vector<IterationResult> run_model(const ModelSpec& m, const Topology& topo, const Calibration* cal = nullptr);

}  // namespace parmsim::moe
