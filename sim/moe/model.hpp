#pragma once
// Whole training iterations of MoE transformer models (BERT-MoE, GPT-2-MoE):
// embeddings and the output head, attention and dense FFN blocks under
// Megatron tensor parallelism (column- then row-parallel GEMMs, an MP
// AllReduce after each row-parallel one, forward and backward), every
// `moe_every`-th FFN replaced by an MoE layer under each schedule, and the
// data-parallel gradient AllReduce of the dense parameters, in buckets that
// overlap the backward pass (grad_sync_timeline).
#include <cstdint>
#include <functional>
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
  // Gradient bucket, in elements (key `grad_bucket`). The default is DeepSpeed's
  // reduce_bucket_size, 5e8 (deepspeed/runtime/zero/config.py:113; the plain
  // engine's MEMORY_OPT_ALLREDUCE_SIZE, engine.py:160, is the same). 0 (`none`):
  // one AllReduce of all dense gradients after the backward pass, not overlapped.
  // DeepSpeed overlaps only with zero_optimization.overlap_comm, whose default is
  // off below stage 3 (zero/config.py:383-385); its plain engine reduces after
  // backward (engine.py:2980-2982). For BERT-/GPT-2-MoE all dense gradients fit
  // in one 5e8 bucket, ready when backward ends, so the default equals `none`.
  // PyTorch DDP's bucket_cap_mb = 25 MiB is 6553600 fp32 elements.
  static constexpr std::int64_t kDeepSpeedReduceBucketSize = 500000000;
  std::int64_t grad_bucket = kDeepSpeedReduceBucketSize;
};

ModelSpec load_model_spec(const std::string& file);
// The same from text; `name` stands for the file (messages, the topology's directory).
ModelSpec parse_model_spec_text(const std::string& text, const std::string& name);

// The layer the model runs on `topo`: E = experts_per_gpu * GPUs when the spec
// gives experts_per_gpu (or neither key), else its E. Checks the layer
// (make_dims) and that the model's own products (vocabulary, attention) fit
// 64-bit counts, naming the spec's keys.
LayerSpec model_layer(const ModelSpec& m, const Topology& topo);

struct Component {
  std::string name;
  int count = 0;           // times per iteration
  Time forward, backward;  // one instance
};

// One step of the backward pass on the compute stream, in the order it runs
// (output head first, then the blocks last to first, the embedding last), and
// the data-parallel gradient elements it leaves ready when it ends.
struct BackwardStep {
  Time compute;
  std::int64_t grad_elems = 0;
  std::int64_t expert_grad_elems = 0;  // gradients reduced over the expert data-parallel group
};

// The gradient AllReduce against the backward pass. Buckets take whole steps'
// gradients in backward order, at most `bucket_elems` each (a step with more
// is a bucket alone; DeepSpeed's rule, stage_1_and_2.py:1201); a bucket is
// ready when its last step ends. Its AllReduce starts on the communication
// stream when it is ready and the previous bucket's AllReduce is done.
// `bucket_elems` <= 0: one AllReduce of everything after the last step.
struct GradSync {
  Time compute;    // the backward steps, end to end
  Time allreduce;  // all buckets' AllReduces, summed
  Time end;        // both streams done: max(compute, last AllReduce's end)
  std::vector<std::int64_t> bucket_elems;  // in the order they are reduced
  int buckets() const { return static_cast<int>(bucket_elems.size()); }
  Time exposed() const { return end - compute; }
  Time hidden() const { return allreduce - exposed(); }
};
// Expert gradients (expert_grad_elems) fill buckets of their own, reduced by
// `expert_allreduce_time` on the same stream.
GradSync grad_sync_timeline(const std::vector<BackwardStep>& steps, std::int64_t bucket_elems,
                            const std::function<Time(std::int64_t elems)>& allreduce_time,
                            const std::function<Time(std::int64_t elems)>& expert_allreduce_time = {});

struct IterationResult {
  std::string schedule;
  // The last part, dp_grad_allreduce, is the exposed part of the gradient
  // AllReduce (all of it when grad_bucket is none), so total() is the iteration.
  std::vector<Component> parts;
  GradSync grad_sync;  // the whole gradient AllReduce, hidden and exposed
  Time total() const;
  Time moe_time() const;
};

// One result per schedule (baseline, s1, s2), on the given topology.
std::vector<IterationResult> run_model(const ModelSpec& m, const Topology& topo, const Calibration* cal = nullptr);

}  // namespace parmsim::moe
