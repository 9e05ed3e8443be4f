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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/moe/layer_sim.hpp"
#include "sim/moe/phases.hpp"

namespace parmsim::moe {

// Attention kinds (key `attention`), a registry: help and errors come from it.
//   mha  multi-head attention: QKV M -> 3M, scores and context over M/heads per head, projection M -> M
//   mla  DeepSeek's multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1; DeepSeek-V3,
//        arXiv 2412.19437, Sec. 2.1.1): queries and keys/values through low-rank latents, decoupled RoPE
enum class AttentionKind { mha, mla };
struct AttentionKindEntry {
  std::string_view name;
  std::string_view help;
  AttentionKind kind;
};
std::span<const AttentionKindEntry> attention_kinds();

// MLA's dimensions (DeepSeek-V3's inference/configs/config_671B.json names them
// q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim).
struct MlaDims {
  std::int64_t q_lora_rank = 0;  // 0: queries projected from the hidden state directly (DeepSeek-V2-Lite)
  std::int64_t kv_lora_rank = 512, qk_nope_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128;
};

// One attention block's forward GEMM FLOPs per token, outside the scores and
// context (the projections), and the scores' and context's FLOPs per sequence:
// the derivations are in model.cpp. heads_local = heads / mp.
struct AttentionFlops {
  std::uint64_t projections_per_token = 0;
  std::uint64_t core_per_sequence = 0;  // scores + context, full L x L (no causal halving)
};
AttentionFlops mla_flops(std::uint64_t M, std::uint64_t heads_local, std::uint64_t L, const MlaDims& d);

// Pipeline schedules (key `pipeline_schedule`), a registry.
//   1f1b      Megatron-Core's one-forward-one-backward schedule without interleaving
//   dualpipe  DeepSeek's DualPipe (DeepSeek-V3 report Sec. 3.2.1 and Table 2), its bubble
enum class PipelineSchedule { one_f_one_b, dualpipe };
struct PipelineScheduleEntry {
  std::string_view name;
  std::string_view help;
  PipelineSchedule kind;
};
std::span<const PipelineScheduleEntry> pipeline_schedules();

// 1F1B on p stages with m micro-batches (Narayanan et al., SC21, arXiv 2104.04473,
// Sec. 2.2.1: the bubble is (p - 1) micro-batch slots, the iteration m + p - 1 of
// them; the DeepSeek-V3 report, Table 2, gives the same bubble, (PP - 1)(F + B)).
// A slot is the slowest stage's forward and backward of one micro-batch plus the
// two blocking P2P exchanges Megatron-Core's 1F1B waits on in each
// (send_forward_recv_backward, send_backward_recv_forward; NVIDIA/Megatron-LM
// megatron/core/pipeline_parallel/p2p_communication.py, called from schedules.py's
// forward_backward_pipelining_without_interleaving):
// (m + p - 1) x (F + B + 2 x p2p).
struct PipelineTime {
  Time slot;                 // F + B + 2 x p2p
  Time steady, bubble, p2p;  // m x (F + B), (p - 1) x slot, m x 2 x p2p
  Time total() const { return steady + bubble + p2p; }
};
PipelineTime one_f_one_b(int micro_batches, int stages, Time forward, Time backward, Time p2p);
// DualPipe's bubble, (PP/2 - 1)(F&B + B - 3W) (DeepSeek-V3 report Table 2;
// deepseek-ai/DualPipe@3da1bbea README.md), W the weight-gradient part of B.
// F&B, a forward and a backward chunk overlapped, is taken as F + B: the
// overlap of one chunk's communication with the other's computation is not
// modelled, so this is DualPipe's bubble at no overlap. Each of its slots also
// waits on the two P2P exchanges, as 1F1B's; the steady part is 1F1B's (each
// device runs every micro-batch's forward and backward once).
PipelineTime dualpipe(int micro_batches, int stages, Time forward, Time backward, Time weight_grad, Time p2p);

struct ModelSpec {
  std::string name, description, file;
  std::string topology_file;
  std::vector<std::string> topology_overrides;
  std::string network = "flow";
  int layers = 12, moe_every = 2, heads = 12;
  std::int64_t vocab = 30522;
  AttentionKind attention = AttentionKind::mha;
  MlaDims mla;
  int first_dense = 0;         // the first blocks' FFNs are dense (DeepSeek's first_k_dense_replace)
  std::int64_t dense_ffn = 0;  // the dense FFNs' H; 0: ffn
  // Pipeline parallelism: pp stages of consecutive blocks, each on GPUs/pp GPUs
  // (Megatron-Core's order tp-cp-ep-dp-pp: a stage is GPUs/pp consecutive ranks).
  int pp = 1;
  int first_stage_layers = 0, last_stage_layers = 0;  // 0: even (Megatron-Core's num_layers_in_{first,last}_pipeline_stage)
  int micro_batches = 1;    // per iteration, per data-parallel replica
  std::int64_t global_batch = 0;  // sequences per iteration (when given: micro_batches = global_batch / (batch * DP))
  int mtp_depth = 0;        // multi-token prediction modules on the last stage (DeepSeek-V3 Sec. 2.2)
  PipelineSchedule pipeline_schedule = PipelineSchedule::one_f_one_b;
  std::string pp_where, global_batch_where, schedule_where;  // "file:line:col" of the keys, for refusals that need the topology
  // Whether the spec runs as a pipeline (any of pp, micro_batches, global_batch,
  // mtp_depth given): the iteration is the pipeline schedule's and the output
  // says so; otherwise parts sum to the iteration as before.
  bool pipelined = false;
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
  Time weight_grad;        // of backward: its weight-gradient GEMMs, one after another (DualPipe's W)
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

// One attention block's op list on one rank (forward, or backward: reversed
// adjoints), by the spec's attention kind; its dense parameters per rank.
std::vector<MoeOp> model_attention_ops(const ModelSpec& m, const LayerSpec& s, const Dims& d, bool bwd);
std::int64_t model_attention_params(const ModelSpec& m, const LayerSpec& s, const Dims& d);

// Pipeline stages: which blocks each holds; the first holds the embedding, the
// last the output head and the MTP modules. UserError naming the key when pp
// does not split the blocks.
struct Stage {
  int first_block = 0, blocks = 0;
};
std::vector<Stage> pipeline_stages(const ModelSpec& m);
bool is_moe_block(const ModelSpec& m, int block);

// The topology overrides that make one stage's topology (`nodes` = nodes/pp)
// and two adjacent stages' (2 x nodes/pp, for the P2P sends) out of the whole
// cluster `full`. UserError naming `pp` when the stages are not whole nodes.
std::vector<std::string> stage_nodes_override(const ModelSpec& m, const Topology& full, int stages);

// Per pipeline stage, one micro-batch's forward and backward, the stage's part
// of each component, and its gradient AllReduce.
struct StageTime {
  Stage stage;
  Time forward, backward, weight_grad;
  std::vector<Component> parts;  // per micro-batch
  GradSync grad_sync;
};

struct PipelineResult {
  int stages = 1, micro_batches = 1, slowest = 0;
  Time p2p;  // one activation (or gradient) send between adjacent stages, simulated
  PipelineTime time;
  std::vector<StageTime> stage_times;
  PhaseTimes moe_phases;  // one MoE layer, forward + backward, by phase of its critical path
};

struct IterationResult {
  std::string schedule;
  // The last part, dp_grad_allreduce, is the exposed part of the gradient
  // AllReduce (all of it when grad_bucket is none), so total() is the iteration.
  std::vector<Component> parts;
  GradSync grad_sync;  // the whole gradient AllReduce, hidden and exposed
  PipelineResult pipeline;  // when the spec is pipelined
  Time total() const;
  Time moe_time() const;
};

// One result per schedule (baseline, s1, s2), on the given topology: the
// whole cluster, or with pp > 1 one stage's (stage_nodes_override), with
// `pair` two stages' for the P2P sends.
std::vector<IterationResult> run_model(const ModelSpec& m, const Topology& topo, const Calibration* cal = nullptr,
                                       const Topology* pair = nullptr);

}  // namespace parmsim::moe
