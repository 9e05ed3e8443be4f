#include "sim/moe/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/net/network_model.hpp"

namespace parmsim::moe {

namespace {

constexpr AttentionKindEntry kAttentionKinds[] = {
    {"mha", "multi-head attention, hidden/heads dimensions per head", AttentionKind::mha},
    {"mla", "multi-head latent attention (DeepSeek-V2/V3) with the mla keys' dimensions", AttentionKind::mla}};
constexpr PipelineScheduleEntry kPipelineSchedules[] = {
    {"1f1b", "one forward, one backward (Megatron-Core, no interleaving): (m + p - 1) slots of the slowest stage",
     PipelineSchedule::one_f_one_b},
    {"dualpipe",
     "DeepSeek's DualPipe: m slots and a bubble of (p/2 - 1)(F&B + B - 3W) with F&B = F + B (no overlap "
     "modelled); even pp, an even number of micro-batches, at least 2 x pp",
     PipelineSchedule::dualpipe}};

std::string attention_kind_help() {
  return join_names(names_of(std::span<const AttentionKindEntry>(kAttentionKinds)), " | ", " | ");
}
std::string pipeline_schedule_help() {
  std::string h;
  for (const PipelineScheduleEntry& e : kPipelineSchedules)
    h += (h.empty() ? "" : "; ") + std::string(e.name) + ": " + std::string(e.help);
  return h;
}

const Section kModel{"model",
                     "A model spec for `parmsim model` (experiments/bert-moe.yaml, gpt2-moe.yaml, deepseek-v3.yaml).",
                     {{"name", "string", "required", ""},
                      {"description", "string", "\"\"", ""},
                      {"topology", "string", "required", "topology YAML, relative to this file"},
                      {"topology_set", "map", "{}", "topology overrides"},
                      {"network", "string", "flow", network_model_names(" | ", " | ")},
                      {"layers", "int", "required", "transformer blocks"},
                      {"moe_every", "int", "2", "every n-th block's FFN is an MoE layer"},
                      {"heads", "int", "required", "attention heads"},
                      {"vocab", "int", "required", "vocabulary size (output head)"},
                      {"hidden", "int", "required", "M"},
                      {"ffn", "int", "required", "H, for dense FFNs and experts"},
                      {"seq", "int", "required", "L, tokens per sample"},
                      {"batch", "int", "required", "B, samples per GPU"},
                      {"experts_per_gpu", "int", "1", "E = experts_per_gpu * GPUs (or give E)"},
                      {"E", "int", "-", "experts"},
                      {"k", "int", "2", "top-k"},
                      {"f", "number", "1.2", "capacity factor"},
                      {"mp", "int", "required", "tensor-parallel (and expert-sharding) degree"},
                      {"ep", "int", "GPUs/mp",
                       "expert-parallel size; below GPUs/mp the experts are replicated over GPUs/(mp*ep) "
                       "data-parallel copies (Megatron-Core's layout, docs/parm.md)"},
                      {"dtype", "string", "fp32",
                       "fp32 | fp16 | bf16 | fp8 (fp8: the MoE layers as the layer key dtype=fp8; the dense blocks "
                       "in bf16)"},
                      {"glu", "bool", "false",
                       "gated FFNs (SwiGLU) in the dense blocks and the experts: fc1 M -> 2*ffn (layer key glu)"},
                      {"grad_bucket", "int | none", "500000000",
                       "gradient AllReduce bucket in elements, overlapped with backward (DeepSpeed's "
                       "reduce_bucket_size default); none or 0: one AllReduce after backward"},
                      {"ds_moe", "string", "0.14.4", "the baseline's DeepSpeed-MoE (layer key ds_moe)"},
                      {"dispatch", "string", "einsum", "token dispatch/combine: einsum | index (layer key dispatch)"},
                      {"shared_ffn", "int", "0", "shared experts' total intermediate size (layer key shared_H)"},
                      {"load", "string", "capacity",
                       "the MoE layers' routing: capacity | uniform | zipf:S | a histogram file (layer key load)"},
                      {"seed", "int", "0", "the seed of the load model's draws (layer key seed)"},
                      {"expert_groups", "int", "1", "groups of consecutive experts (layer key expert_groups)"},
                      {"topk_groups", "int", "0",
                       "each token's experts from at most this many groups; needs load: uniform (layer key "
                       "topk_groups)"},
                      {"first_dense", "int", "0", "the first n blocks have dense FFNs (DeepSeek's first_k_dense_replace)"},
                      {"dense_ffn", "int", "ffn", "the dense FFNs' intermediate size"},
                      {"attention", "string", "mha", "attention kind: " + attention_kind_help()},
                      {"q_lora_rank", "int", "0", "mla: query latent rank (0: no query compression)"},
                      {"kv_lora_rank", "int", "512", "mla: key/value latent rank"},
                      {"qk_nope_head_dim", "int", "128", "mla: per-head query/key dimensions without RoPE"},
                      {"qk_rope_head_dim", "int", "64", "mla: per-head query/key dimensions with RoPE (decoupled key shared by heads)"},
                      {"v_head_dim", "int", "128", "mla: per-head value dimensions"},
                      {"pp", "int", "1",
                       "pipeline stages: consecutive blocks on GPUs/pp consecutive GPUs each (Megatron-Core's order "
                       "tp-cp-ep-dp-pp), the stage simulated on its own GPUs (docs/models.md, \"Pipelines, MLA and DeepSeek-V3\")"},
                      {"first_stage_layers", "int", "layers/pp", "blocks on the first stage (Megatron-Core's num_layers_in_first_pipeline_stage)"},
                      {"last_stage_layers", "int", "layers/pp", "blocks on the last stage (num_layers_in_last_pipeline_stage)"},
                      {"micro_batches", "int", "1", "micro-batches per iteration and data-parallel replica (or give global_batch)"},
                      {"global_batch", "int", "-", "sequences per iteration: micro_batches = global_batch / (batch * GPUs/(pp*mp))"},
                      {"pipeline_schedule", "string", "1f1b", pipeline_schedule_help()},
                      {"mtp_depth", "int", "0", "multi-token prediction modules on the last stage (DeepSeek-V3 Sec. 2.2)"}}};
SectionRegistrar reg(kModel);

MoeOp kernel(const char* label, OpKind op, std::uint64_t flops, std::uint64_t bytes) {
  MoeOp o{MoeStep::kernel};
  o.label = label;
  o.kernel_op = op;
  o.flops = flops;
  o.bytes = bytes;
  return o;
}

// C[m,n] = A[m,k] B[k,n], `batch` times: 2mnk flops, A and B read and C written once.
MoeOp gemm(const char* label, std::uint64_t m, std::uint64_t n, std::uint64_t k, std::uint64_t batch,
           std::uint64_t dtype_bytes) {
  MoeOp o = kernel(label, OpKind::gemm, 2 * m * n * k * batch, (m * k + k * n + m * n) * batch * dtype_bytes);
  o.shape = {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
             static_cast<std::int64_t>(batch)};
  return o;
}

// A forward GEMM, or its backward as two GEMMs: the data gradient dA[m,k] = dC[m,n] B^T
// (shape m, k, n) and the weight gradient dB[k,n] = A^T dC (shape k, n, m).
void push_gemm(std::vector<MoeOp>& v, bool bwd, const char* fwd, const char* dgrad, const char* wgrad,
               std::uint64_t m, std::uint64_t n, std::uint64_t k, std::uint64_t batch, std::uint64_t b) {
  if (!bwd) {
    v.push_back(gemm(fwd, m, n, k, batch, b));
    return;
  }
  // Pushed in forward order and reversed with the list: the data gradient runs first.
  v.push_back(gemm(wgrad, k, n, m, batch, b));
  v.push_back(gemm(dgrad, m, k, n, batch, b));
}

MoeOp allreduce(GroupKind g, std::int64_t elems, const char* label) {
  MoeOp o{MoeStep::ar};
  o.group = g;
  o.elems = elems;
  o.label = label;
  return o;
}

Time simulate_ops(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const Topology& topo,
                  const std::string& network, const Calibration* cal, Workspace& ws) {
  if (ops.empty()) return Time::zero();
  // The ops around the MoE layer route no token: the layer's load model (dropless routing,
  // which the graph builder draws and executors refuse) does not apply to them.
  LayerSpec plain = s;
  plain.load.reset();
  plain.topk_groups = 0;
  const TaskGraph g = build_graph(ops, plain, d, preset("s1"));
  return simulate(g, topo, SimOptions{network, cal}, ws).makespan;
}

}  // namespace

namespace {

ModelSpec build_model_spec(const YamlReader& r) {
  const std::string& file = r.file();
  r.check_keys(kModel);
  ModelSpec m;
  m.file = file;
  m.name = r.at("name").as_string();
  m.description = r.get_string("description", "");
  m.topology_file =
      (std::filesystem::path(file).parent_path() / r.at("topology").as_string()).lexically_normal().string();
  if (auto s = r.opt("topology_set"))
    for (const std::string& k : s->keys()) m.topology_overrides.push_back(k + "=" + s->at(k).as_string());
  m.network = r.get_string("network", "flow");
  if (!is_network_model(m.network)) r.at("network").fail(network_model_names(", ", " or "));
  m.layers = static_cast<int>(r.at("layers").as_int(1, 10000));
  m.moe_every = static_cast<int>(r.has("moe_every") ? r.at("moe_every").as_int(1, 10000) : 2);
  m.heads = static_cast<int>(r.at("heads").as_int(1, 100000));
  m.vocab = r.at("vocab").as_int(1, 1LL << 32);
  auto set = [&](const char* key, const char* as) {
    if (!r.has(key)) return;
    // A histogram file is relative to the spec's folder, as its topology is.
    set_key(&m.layer, nullptr, as, key_value_in_file(as, r.at(key).as_string(), file), r.at(key).where());
  };
  set("hidden", "M");
  set("ffn", "H");
  set("seq", "L");
  set("batch", "B");
  set("E", "E");
  set("k", "k");
  set("f", "f");
  set("mp", "mp");
  set("ep", "ep");
  set("dtype", "dtype");
  set("glu", "glu");
  set("ds_moe", "ds_moe");
  set("dispatch", "dispatch");
  set("shared_ffn", "shared_H");
  set("load", "load");
  set("seed", "seed");
  set("expert_groups", "expert_groups");
  set("topk_groups", "topk_groups");
  if (r.has("first_dense")) m.first_dense = static_cast<int>(r.at("first_dense").as_int(0, m.layers));
  if (r.has("dense_ffn")) m.dense_ffn = r.at("dense_ffn").as_int(1, std::int64_t{1} << 40);
  if (r.has("attention")) {
    const YamlReader a = r.at("attention");
    const AttentionKindEntry* e = find_named(attention_kinds(), a.as_string());
    if (!e) a.fail(join_names(names_of(attention_kinds()), ", ", " or "));
    m.attention = e->kind;
  }
  for (const char* k : {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
    if (r.has(k) && m.attention != AttentionKind::mla)
      r.at(k).fail("no MLA dimension without `attention: mla`");
  auto dim = [&](const char* key, std::int64_t lo, std::int64_t& v) {
    if (r.has(key)) v = r.at(key).as_int(lo, std::int64_t{1} << 20);
  };
  dim("q_lora_rank", 0, m.mla.q_lora_rank);
  dim("kv_lora_rank", 1, m.mla.kv_lora_rank);
  dim("qk_nope_head_dim", 0, m.mla.qk_nope_head_dim);
  dim("qk_rope_head_dim", 0, m.mla.qk_rope_head_dim);
  dim("v_head_dim", 1, m.mla.v_head_dim);
  if (m.attention == AttentionKind::mla && m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim == 0)
    r.at("qk_nope_head_dim").fail("qk_nope_head_dim + qk_rope_head_dim > 0 (the scores' dimensions)");
  m.pipelined = r.has("pp") || r.has("micro_batches") || r.has("global_batch") || r.has("mtp_depth") ||
                r.has("first_stage_layers") || r.has("last_stage_layers") || r.has("pipeline_schedule");
  if (r.has("pp")) {
    m.pp = static_cast<int>(r.at("pp").as_int(1, 4096));
    m.pp_where = r.at("pp").where();
  }
  if (r.has("pipeline_schedule")) {
    const YamlReader a = r.at("pipeline_schedule");
    const PipelineScheduleEntry* e = find_named(pipeline_schedules(), a.as_string());
    if (!e) a.fail(join_names(names_of(pipeline_schedules()), ", ", " or "));
    m.pipeline_schedule = e->kind;
    m.schedule_where = a.where();
  }
  if (r.has("first_stage_layers")) m.first_stage_layers = static_cast<int>(r.at("first_stage_layers").as_int(1, m.layers));
  if (r.has("last_stage_layers")) m.last_stage_layers = static_cast<int>(r.at("last_stage_layers").as_int(1, m.layers));
  if (r.has("micro_batches") && r.has("global_batch"))
    r.at("micro_batches").fail("no `micro_batches` beside `global_batch`: give one of the two");
  if (r.has("micro_batches")) m.micro_batches = static_cast<int>(r.at("micro_batches").as_int(1, 1 << 20));
  if (r.has("global_batch")) {
    m.global_batch = r.at("global_batch").as_int(1, std::int64_t{1} << 40);
    m.global_batch_where = r.at("global_batch").where();
  }
  if (r.has("mtp_depth")) m.mtp_depth = static_cast<int>(r.at("mtp_depth").as_int(0, 64));
  if (r.has("grad_bucket")) {
    const YamlReader g = r.at("grad_bucket");
    m.grad_bucket = g.as_string() == "none" ? 0 : g.as_int(0, std::int64_t{1} << 50);
  }
  if (r.has("E") && r.has("experts_per_gpu"))
    r.at("experts_per_gpu").fail("no `experts_per_gpu` beside `E`: give one of the two (E wins, so one would be ignored)");
  m.experts_per_gpu = r.has("E") ? 0 : (r.has("experts_per_gpu") ? r.at("experts_per_gpu").as_int(1, 1 << 20) : 1);
  if (m.heads % m.layer.mp != 0) r.at("heads").fail(fmt::format("a multiple of mp={}", m.layer.mp));
  // Each head has hidden/heads dimensions: a remainder would be dropped.
  if (m.attention == AttentionKind::mha && m.layer.M % m.heads != 0)
    r.at("heads").fail(fmt::format("a divisor of hidden={} (each head takes hidden/heads dimensions)", m.layer.M));
  if (m.moe_every > m.layers)
    r.at("moe_every").fail(fmt::format("at most layers={} (else no block has an MoE layer)", m.layers));
  if (m.first_dense >= m.layers)
    r.at("first_dense").fail(fmt::format("below layers={} (else no block has an MoE layer)", m.layers));
  if (m.pp > m.layers) r.at("pp").fail(fmt::format("at most layers={} (every stage holds a block)", m.layers));
  // DualPipe's own checks (deepseek-ai/DualPipe@3da1bbea dualpipe/dualpipe.py L332-333); the
  // micro-batches from global_batch are checked once the topology gives the replicas (run_model).
  if (m.pipeline_schedule == PipelineSchedule::dualpipe && m.pp % 2 != 0)
    r.at("pipeline_schedule").fail(fmt::format("an even pp for dualpipe (pp={}), or 1f1b", m.pp));
  try {
    (void)pipeline_stages(m);
  } catch (const UserError& e) {
    const char* key = r.has("first_stage_layers") ? "first_stage_layers"
                      : r.has("last_stage_layers") ? "last_stage_layers"
                                                   : "pp";
    r.at(key).fail(e.what());
  }
  return m;
}

}  // namespace

std::span<const AttentionKindEntry> attention_kinds() { return kAttentionKinds; }
std::span<const PipelineScheduleEntry> pipeline_schedules() { return kPipelineSchedules; }

// MLA's forward GEMMs per token on one tensor-parallel rank (DeepSeek-V3's
// inference/model.py@9b4e9788 class MLA, the training form without absorbed
// weights; DeepSeek-V2 arXiv 2405.04434, Eqs. 37-47). With rq = q_lora_rank,
// rkv = kv_lora_rank, dn, dr, dv the head dimensions and hl = heads / mp:
//   wq_a   M -> rq                 (replicated over tensor-parallel ranks)
//   wq_b   rq -> hl * (dn + dr)    (column-parallel; with rq = 0 one wq: M -> hl * (dn + dr))
//   wkv_a  M -> rkv + dr           (the latent and the decoupled RoPE key shared by the heads; replicated)
//   wkv_b  rkv -> hl * (dn + dv)   (column-parallel)
//   wo     hl * dv -> M            (row-parallel)
// 2 FLOPs per multiply-add: projections = 2 * (M*rq + rq*hl*(dn+dr) + M*(rkv+dr) + rkv*hl*(dn+dv) + hl*dv*M).
// Per sequence of L tokens and head: scores L x L over dn + dr, context L x L over dv:
// core = 2*L*L*hl*(dn+dr) + 2*L*L*hl*dv (every pair, as the mha blocks here count them).
AttentionFlops mla_flops(std::uint64_t M, std::uint64_t hl, std::uint64_t L, const MlaDims& d) {
  const std::uint64_t rq = static_cast<std::uint64_t>(d.q_lora_rank), rkv = static_cast<std::uint64_t>(d.kv_lora_rank),
                      dn = static_cast<std::uint64_t>(d.qk_nope_head_dim), dr = static_cast<std::uint64_t>(d.qk_rope_head_dim),
                      dv = static_cast<std::uint64_t>(d.v_head_dim);
  const std::uint64_t q = rq > 0 ? M * rq + rq * hl * (dn + dr) : M * hl * (dn + dr);
  return {2 * (q + M * (rkv + dr) + rkv * hl * (dn + dv) + hl * dv * M), 2 * L * L * hl * (dn + dr) + 2 * L * L * hl * dv};
}

PipelineTime one_f_one_b(int micro_batches, int stages, Time forward, Time backward, Time p2p) {
  if (micro_batches < 1 || stages < 1) throw InternalError("one_f_one_b: no micro-batch or no stage");
  if (stages == 1) p2p = Time::zero();  // nothing to send
  PipelineTime t;
  t.slot = forward + backward + p2p * 2;
  t.steady = (forward + backward) * micro_batches;
  t.p2p = p2p * 2 * micro_batches;
  t.bubble = t.slot * (stages - 1);
  return t;
}

PipelineTime dualpipe(int micro_batches, int stages, Time forward, Time backward, Time weight_grad, Time p2p) {
  if (stages % 2 != 0 || micro_batches % 2 != 0 || micro_batches < 2 * stages)
    throw InternalError("dualpipe: needs an even pp and an even number of micro-batches, at least 2 x pp");
  PipelineTime t;
  t.slot = forward + backward + p2p * 2;
  t.steady = (forward + backward) * micro_batches;
  t.p2p = p2p * 2 * micro_batches;
  // F&B + B - 3W with F&B = F + B, and the slot's P2P; never below zero.
  const Time w3 = weight_grad * 3, all = forward + backward * 2 + p2p * 2;
  t.bubble = (all > w3 ? all - w3 : Time::zero()) * (stages / 2 - 1);
  return t;
}

bool is_moe_block(const ModelSpec& m, int block) { return block >= m.first_dense && (block + 1) % m.moe_every == 0; }

std::vector<Stage> pipeline_stages(const ModelSpec& m) {
  const int p = m.pp, first = m.first_stage_layers, last = m.last_stage_layers;
  if (p == 1) {
    if (first > 0 && first != m.layers)
      throw UserError(fmt::format("first_stage_layers = layers={} with pp=1 (one stage holds every block)", m.layers));
    if (last > 0 && last != m.layers)
      throw UserError(fmt::format("last_stage_layers = layers={} with pp=1 (one stage holds every block)", m.layers));
    return {{0, m.layers}};
  }
  // The blocks not on a stage given by first/last_stage_layers, over the other stages, evenly.
  const int fixed = (first > 0) + (last > 0);
  const int rest = m.layers - first - last, others = p - fixed;
  if (rest < others || rest % others != 0)
    throw UserError(fmt::format(
        "pp={} to split layers={} into stages of whole blocks: {} block(s) left over {} stage(s) do not divide "
        "(first_stage_layers={}, last_stage_layers={}; Megatron-Core's num_layers_in_first/last_pipeline_stage)",
        p, m.layers, rest, others, first, last));
  const int each = rest / others;
  std::vector<Stage> v;
  int b = 0;
  for (int i = 0; i < p; ++i) {
    const int n = (i == 0 && first > 0) ? first : (i == p - 1 && last > 0) ? last : each;
    v.push_back({b, n});
    b += n;
  }
  return v;
}

std::vector<std::string> stage_nodes_override(const ModelSpec& m, const Topology& full, int stages) {
  const int P = full.num_gpus(), per_node = full.gpus_per_node(), nodes = P / per_node;
  auto refuse = [&](const std::string& why) {
    throw UserError(fmt::format("{}: key 'pp': expected {}, got '{}'", m.pp_where.empty() ? m.file : m.pp_where, why, m.pp));
  };
  if (P % m.pp != 0) refuse(fmt::format("a divisor of the topology's {} GPUs ({})", P, full.name()));
  if (nodes % m.pp != 0)
    refuse(fmt::format("a divisor of the topology's {} nodes of {} GPUs ({}): a stage is whole nodes", nodes, per_node,
                       full.name()));
  return {fmt::format("nodes={}", nodes / m.pp * stages)};
}

ModelSpec load_model_spec(const std::string& file) { return build_model_spec(YamlReader::load_file(file)); }
ModelSpec parse_model_spec_text(const std::string& text, const std::string& name) {
  return build_model_spec(YamlReader::load_string(text, name));
}

Time IterationResult::total() const {
  Time t;
  for (const Component& c : parts) t += (c.forward + c.backward) * c.count;
  return t;
}

Time IterationResult::moe_time() const {
  for (const Component& c : parts)
    if (c.name == "moe_layer") return (c.forward + c.backward) * c.count;
  return Time::zero();
}

GradSync grad_sync_timeline(const std::vector<BackwardStep>& steps, std::int64_t bucket_elems,
                            const std::function<Time(std::int64_t)>& allreduce_time,
                            const std::function<Time(std::int64_t)>& expert_allreduce_time) {
  GradSync g;
  std::int64_t total = 0, expert_total = 0;
  for (const BackwardStep& st : steps) {
    g.compute += st.compute;
    total += st.grad_elems;
    expert_total += st.expert_grad_elems;
  }
  if (expert_total > 0 && !expert_allreduce_time)
    throw InternalError("grad_sync_timeline: expert gradients without an expert AllReduce");
  if (bucket_elems <= 0) {  // after the backward pass, one AllReduce (and one of the expert gradients)
    if (total > 0) {
      g.allreduce = allreduce_time(total);
      g.bucket_elems = {total};
    }
    if (expert_total > 0) {
      g.allreduce += expert_allreduce_time(expert_total);
      g.bucket_elems.push_back(expert_total);
    }
    g.end = g.compute + g.allreduce;
    return g;
  }
  Time now, comm_free;  // compute stream's clock; when the communication stream is free
  // Dense and expert gradients fill buckets of their own (they reduce over
  // different groups); both reduce on the one communication stream.
  struct Bucket {
    std::int64_t elems = 0;
    Time ready;
  };
  Bucket dense, expert;
  auto flush = [&](Bucket& b, const std::function<Time(std::int64_t)>& ar) {
    const Time a = ar(b.elems);
    comm_free = std::max(comm_free, b.ready) + a;
    g.allreduce += a;
    g.bucket_elems.push_back(b.elems);
    b.elems = 0;
  };
  auto add = [&](Bucket& b, std::int64_t elems, const std::function<Time(std::int64_t)>& ar) {
    if (elems <= 0) return;
    if (b.elems > 0 && b.elems + elems > bucket_elems) flush(b, ar);
    b.elems += elems;
    b.ready = now;
    if (b.elems >= bucket_elems) flush(b, ar);
  };
  for (const BackwardStep& st : steps) {
    now += st.compute;
    add(dense, st.grad_elems, allreduce_time);
    add(expert, st.expert_grad_elems, expert_allreduce_time);
  }
  if (dense.elems > 0) flush(dense, allreduce_time);
  if (expert.elems > 0) flush(expert, expert_allreduce_time);
  g.end = std::max(g.compute, comm_free);
  return g;
}

LayerSpec model_layer(const ModelSpec& m, const Topology& topo) {
  LayerSpec s = m.layer;
  // experts_per_gpu: E = experts_per_gpu * P, the EP block being the world;
  // with `ep`, E = experts_per_gpu * mp * ep (one block of mp*ep GPUs).
  if (m.experts_per_gpu > 0) s.E = m.experts_per_gpu * (s.ep > 0 ? static_cast<std::int64_t>(s.mp) * s.ep : topo.num_gpus());
  Dims d;
  try {
    d = make_dims(s, topo.num_gpus(), topo.gpus_per_node());
  } catch (const UserError& e) {  // the layout or the layer's counts: name the spec, and the stage
    throw UserError(fmt::format("{}: {}{}", m.file, e.what(),
                                m.pp > 1 ? fmt::format(" (the GPUs of one pipeline stage, pp={})", m.pp) : ""));
  }
  // The model's products beyond the layer's (make_dims checks those): the
  // output head's S*V and the word embedding's V*M, the attention scores'
  // B*heads*L*L; bytes at most 4x and a factor 3 leave them below 2^63.
  using i128 = __int128;
  const i128 limit = i128{1} << 60, S = d.S;
  auto check = [&](i128 v, const char* keys, const char* what) {
    if (v > limit)
      throw UserError(fmt::format("{}: model too large: keys {} (batch={}, seq={}, hidden={}, heads={}, vocab={}): {} "
                                  "= {:.3g} overflows the simulator's 64-bit counts (at most 2^60)",
                                  m.file, keys, s.B, s.L, s.M, m.heads, m.vocab, what, static_cast<double>(v)));
  };
  check(S * m.vocab, "'vocab', 'batch', 'seq'", "the output head's logits batch*seq*vocab");
  check(i128{m.vocab} * s.M, "'vocab', 'hidden'", "the word embedding vocab*hidden");
  check(i128{s.B} * m.heads * s.L * s.L, "'seq', 'batch', 'heads'", "the attention scores batch*heads*seq^2");
  check(2 * S * s.M * s.M, "'hidden', 'batch', 'seq'", "the attention GEMMs' FLOPs 2*batch*seq*hidden^2");
  check(2 * S * s.M * s.H, "'ffn', 'hidden', 'batch', 'seq'", "the FFN GEMMs' FLOPs 2*batch*seq*hidden*ffn");
  check(2 * S * s.M * m.vocab, "'vocab', 'hidden', 'batch', 'seq'", "the output head's FLOPs 2*batch*seq*hidden*vocab");
  check(2 * S * s.L * s.M, "'seq', 'hidden', 'batch'", "the attention's FLOPs 2*batch*seq^2*hidden");
  if (m.attention == AttentionKind::mla) {  // mla_flops' terms, each times 2*batch*seq (6 for backward's two GEMMs)
    const i128 hl = m.heads, rq = m.mla.q_lora_rank, rkv = m.mla.kv_lora_rank, dn = m.mla.qk_nope_head_dim,
               dr = m.mla.qk_rope_head_dim, dv = m.mla.v_head_dim, Mi = s.M;
    const i128 per_token = Mi * rq + rq * hl * (dn + dr) + Mi * hl * (dn + dr) + Mi * (rkv + dr) + rkv * hl * (dn + dv) +
                           hl * dv * Mi;
    check(6 * S * per_token, "'heads', 'hidden', 'batch', 'seq' and the mla dimensions",
          "MLA's projection FLOPs 6*batch*seq*(its weights)");
    check(6 * S * s.L * hl * (dn + dr + dv), "'heads', 'seq', 'batch' and the mla head dimensions",
          "MLA's scores and context FLOPs 6*batch*seq^2*heads*(dn+dr+dv)");
  }
  return s;
}

std::vector<MoeOp> model_attention_ops(const ModelSpec& m, const LayerSpec& s, const Dims& d, bool bwd) {
  const std::uint64_t b = static_cast<std::uint64_t>(d.dtype_bytes);
  const std::uint64_t S = d.S, M = s.M, G = d.G, L = s.L, B = s.B;
  const std::uint64_t hl = static_cast<std::uint64_t>(m.heads) / G;  // heads per MP rank
  std::vector<MoeOp> v;
  v.push_back(kernel("layernorm", OpKind::elementwise, 0, 2 * S * M * b));
  if (m.attention == AttentionKind::mla) {
    // MLA (mla_flops has the shapes): the query and key/value latents (replicated down
    // projections, RMSNorm on each latent), the column-parallel up projections, scores over
    // dn + dr and context over dv per head, the row-parallel output projection.
    const std::uint64_t rq = static_cast<std::uint64_t>(m.mla.q_lora_rank),
                        rkv = static_cast<std::uint64_t>(m.mla.kv_lora_rank),
                        dqk = static_cast<std::uint64_t>(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim),
                        dr = static_cast<std::uint64_t>(m.mla.qk_rope_head_dim),
                        dn = static_cast<std::uint64_t>(m.mla.qk_nope_head_dim),
                        dv = static_cast<std::uint64_t>(m.mla.v_head_dim);
    if (rq > 0) {
      push_gemm(v, bwd, "q_down_gemm", "q_down_gemm_dgrad", "q_down_gemm_wgrad", S, rq, M, 1, b);
      v.push_back(kernel("q_rmsnorm", OpKind::elementwise, 0, 2 * S * rq * b));
      push_gemm(v, bwd, "q_up_gemm", "q_up_gemm_dgrad", "q_up_gemm_wgrad", S, hl * dqk, rq, 1, b);
    } else {
      push_gemm(v, bwd, "q_gemm", "q_gemm_dgrad", "q_gemm_wgrad", S, hl * dqk, M, 1, b);
    }
    push_gemm(v, bwd, "kv_down_gemm", "kv_down_gemm_dgrad", "kv_down_gemm_wgrad", S, rkv + dr, M, 1, b);
    v.push_back(kernel("kv_rmsnorm", OpKind::elementwise, 0, 2 * S * rkv * b));
    push_gemm(v, bwd, "kv_up_gemm", "kv_up_gemm_dgrad", "kv_up_gemm_wgrad", S, hl * (dn + dv), rkv, 1, b);
    push_gemm(v, bwd, "attn_scores", "attn_scores_dq", "attn_scores_dk", L, L, dqk, B * hl, b);
    v.push_back(kernel("attn_softmax", OpKind::softmax, 0, (bwd ? 3 : 2) * B * hl * L * L * b));
    push_gemm(v, bwd, "attn_context", "attn_context_dp", "attn_context_dv", L, dv, L, B * hl, b);
    push_gemm(v, bwd, "attn_proj", "attn_proj_dgrad", "attn_proj_wgrad", S, M, hl * dv, 1, b);
  } else {
    // Attention block (pre-LN): LN, QKV (column-parallel), scores and context (batched over the
    // rank's B*hl heads), softmax, projection (row-parallel), AllReduce.
    const std::uint64_t dh = M / static_cast<std::uint64_t>(m.heads);
    push_gemm(v, bwd, "qkv_gemm", "qkv_gemm_dgrad", "qkv_gemm_wgrad", S, 3 * M / G, M, 1, b);
    // scores[L,L] = Q[L,dh] K^T[dh,L]; its backward: dQ = dScores K, dK^T = Q^T dScores.
    push_gemm(v, bwd, "attn_scores", "attn_scores_dq", "attn_scores_dk", L, L, dh, B * hl, b);
    v.push_back(kernel("attn_softmax", OpKind::softmax, 0, (bwd ? 3 : 2) * B * hl * L * L * b));
    // context[L,dh] = P[L,L] V[L,dh]; its backward: dP = dContext V^T, dV = P^T dContext.
    push_gemm(v, bwd, "attn_context", "attn_context_dp", "attn_context_dv", L, dh, L, B * hl, b);
    push_gemm(v, bwd, "attn_proj", "attn_proj_dgrad", "attn_proj_wgrad", S, M, M / G, 1, b);
  }
  v.push_back(allreduce(GroupKind::mp, static_cast<std::int64_t>(S * M), "mp_allreduce"));
  if (bwd) std::reverse(v.begin(), v.end());
  return v;
}

std::int64_t model_attention_params(const ModelSpec& m, const LayerSpec& s, const Dims& d) {
  const std::uint64_t M = s.M, G = d.G, hl = static_cast<std::uint64_t>(m.heads) / G;
  if (m.attention == AttentionKind::mha) return static_cast<std::int64_t>(4 * M * M / G + 4 * M);
  // mla: the projections' weights (mla_flops' multiply-adds per token) and the RMSNorms of the
  // block's input and of both latents; no biases (DeepSeek-V3's inference/model.py).
  return static_cast<std::int64_t>(mla_flops(M, hl, 1, m.mla).projections_per_token / 2 + M +
                                   static_cast<std::uint64_t>(m.mla.q_lora_rank + m.mla.kv_lora_rank));
}

std::vector<IterationResult> run_model(const ModelSpec& m, const Topology& topo, const Calibration* cal,
                                       const Topology* pair) {
  Workspace ws;  // the plans, routes and pools of every simulation below
  const LayerSpec s = model_layer(m, topo);
  const Dims d = make_dims(s, topo.num_gpus(), topo.gpus_per_node());
  const std::uint64_t b = static_cast<std::uint64_t>(d.dtype_bytes);
  const std::uint64_t S = d.S, M = s.M, H = s.H, G = d.G, L = s.L, V = m.vocab;
  const std::uint64_t Hd = m.dense_ffn > 0 ? static_cast<std::uint64_t>(m.dense_ffn) : H;  // dense FFNs
  const std::uint64_t glu = s.glu ? 2 : 1;  // fc1's width, in units of ffn
  const bool mla = m.attention == AttentionKind::mla;

  const auto attention = [&](bool bwd) { return model_attention_ops(m, s, d, bwd); };
  auto dense_ffn = [&](bool bwd) {
    std::vector<MoeOp> v;
    v.push_back(kernel("layernorm", OpKind::elementwise, 0, 2 * S * M * b));
    // Gated (glu): fc1 twice as wide, the activation's bytes as the experts' (layer_kernels.cpp, act_units).
    push_gemm(v, bwd, "fc1_gemm", "fc1_gemm_dgrad", "fc1_gemm_wgrad", S, glu * Hd / G, M, 1, b);
    if (s.glu)
      v.push_back(kernel("swiglu", OpKind::activation, 0, (bwd ? 5 : 3) * S * Hd / G * b));
    else
      v.push_back(kernel("gelu", OpKind::activation, 0, (bwd ? 3 : 2) * S * Hd / G * b));
    push_gemm(v, bwd, "fc2_gemm", "fc2_gemm_dgrad", "fc2_gemm_wgrad", S, M, Hd / G, 1, b);
    v.push_back(allreduce(GroupKind::mp, static_cast<std::int64_t>(S * M), "mp_allreduce"));
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  // Embedding lookup, and the vocabulary-parallel output head with its loss.
  auto embedding = [&] { return std::vector<MoeOp>{kernel("embedding", OpKind::elementwise, 0, 2 * S * M * b)}; };
  auto head = [&](bool bwd) {
    std::vector<MoeOp> v;
    push_gemm(v, bwd, "lm_head_gemm", "lm_head_gemm_dgrad", "lm_head_gemm_wgrad", S, V / G, M, 1, b);
    v.push_back(kernel("cross_entropy", OpKind::softmax, 0, 2 * S * V / G * b));
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  auto embed_head = [&](bool bwd) {  // forward: lookup, then head; backward: head (reversed already), lookup
    std::vector<MoeOp> v = bwd ? head(true) : embedding();
    for (const MoeOp& o : bwd ? embedding() : head(false)) v.push_back(o);
    return v;
  };
  // An MTP module's own work before its block (DeepSeek-V3 Sec. 2.2, Eq. 21): the shared
  // embedding's lookup of the next tokens, RMSNorm of both inputs, and the projection
  // M_k of the concatenation [2M] -> M (replicated over tensor-parallel ranks).
  auto mtp_in = [&](bool bwd) {
    std::vector<MoeOp> v = embedding();
    v.push_back(kernel("mtp_rmsnorm", OpKind::elementwise, 0, 2 * 2 * S * M * b));
    push_gemm(v, bwd, "mtp_proj_gemm", "mtp_proj_gemm_dgrad", "mtp_proj_gemm_wgrad", S, M, 2 * M, 1, b);
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  // Dense parameters are replicated over the N_EP data-parallel ranks of an EP
  // group (experts are not: experts = GPUs); their gradients are AllReduced over
  // that group. Per block: attention 4*M*M/G weights + 4*M (biases, LayerNorm)
  // (mla: its five projections and three RMSNorms, model_attention_params);
  // dense FFN 2*M*H/G (3*M*H/G gated); MoE gate M*E and the shared experts'
  // (glu+1)*M*shared_H/G. Word embedding (tied with the head) V*M/G and
  // position embedding L*M (mha; mla's RoPE has none), whose gradients are
  // complete when the lookup's backward ends.
  int moe_layers = 0;
  for (int blk = 0; blk < m.layers; ++blk) moe_layers += is_moe_block(m, blk);
  const int dense_layers = m.layers - moe_layers;
  const auto i64 = [](std::uint64_t x) { return static_cast<std::int64_t>(x); };
  const std::int64_t attn_params = model_attention_params(m, s, d), ffn_params = i64((glu + 1) * M * Hd / G),
                     gate_params = i64(M * static_cast<std::uint64_t>(s.E) +
                                       (glu + 1) * M * static_cast<std::uint64_t>(s.shared_H) / G),
                     embed_params = i64(V * M / G + (mla ? 0 : L * M));

  const Time attn_f = simulate_ops(attention(false), s, d, topo, m.network, cal, ws);
  const Time attn_b = simulate_ops(attention(true), s, d, topo, m.network, cal, ws);
  const Time ffn_f = simulate_ops(dense_ffn(false), s, d, topo, m.network, cal, ws);
  const Time ffn_b = simulate_ops(dense_ffn(true), s, d, topo, m.network, cal, ws);
  const Time eh_f = simulate_ops(embed_head(false), s, d, topo, m.network, cal, ws);
  const Time eh_b = simulate_ops(embed_head(true), s, d, topo, m.network, cal, ws);
  // The lookup's backward ends the pass; the rest of eh_b (head and loss) begins it.
  const Time emb_b = std::min(eh_b, simulate_ops(embedding(), s, d, topo, m.network, cal, ws));
  // Gradients are AllReduced over each parameter's data-parallel group, as
  // Megatron-Core's DDP does (megatron/core/parallel_state.py@d98e8a64: the
  // decoder generator's "dp" groups and the expert generator's "dp" groups,
  // _EXPERT_DATA_PARALLEL_GROUP): dense parameters over the P/mp ranks with
  // the same MP index (GroupKind::dense_dp, the whole EP group when ep = P/mp),
  // expert parameters over the DP = P/(mp*ep) replicas of their EP rank
  // (GroupKind::expert_dp; none when DP = 1: each expert lives on one rank).
  std::map<std::int64_t, Time> ar_memo, expert_ar_memo;  // bucket elements -> AllReduce time
  const auto allreduce_time = [&](std::int64_t elems) {
    if (d.P / d.G <= 1 || elems <= 0) return Time::zero();
    auto [it, fresh] = ar_memo.try_emplace(elems);
    if (fresh)
      it->second =
          simulate_ops({allreduce(GroupKind::dense_dp, elems, "dp_grad_allreduce")}, s, d, topo, m.network, cal, ws);
    return it->second;
  };
  const auto expert_allreduce_time = [&](std::int64_t elems) {
    if (d.dp <= 1 || elems <= 0) return Time::zero();
    auto [it, fresh] = expert_ar_memo.try_emplace(elems);
    if (fresh)
      it->second = simulate_ops({allreduce(GroupKind::expert_dp, elems, "expert_dp_grad_allreduce")}, s, d, topo,
                                m.network, cal, ws);
    return it->second;
  };
  // Each MoE layer's expert weights on a rank: E/N_EP experts of W1 and W2, M*H/G each (gated:
  // W1 is twice as wide, three matrices).
  const std::int64_t expert_params =
      d.dp > 1 ? i64((glu + 1) * static_cast<std::uint64_t>(d.E_local) * M * H / G) : 0;
  std::vector<IterationResult> out;
  LayerRun run{topo, s, m.network, cal, nullptr, &ws};
  run.phases = m.pipelined;
  if (!m.pipelined) {
    for (const std::string& name : preset_names()) {
      const ScheduleResult r = run_schedule(run, preset(name));
      // Backward: head and loss, blocks last to first (FFN or MoE layer, then attention), embedding lookup.
      std::vector<BackwardStep> steps = {{eh_b - emb_b, 0}};
      for (int layer = m.layers - 1; layer >= 0; --layer) {
        const bool moe = is_moe_block(m, layer);
        steps.push_back(moe ? BackwardStep{r.backward, gate_params, expert_params} : BackwardStep{ffn_b, ffn_params});
        steps.push_back({attn_b, attn_params});
      }
      steps.push_back({emb_b, embed_params});
      IterationResult it;
      it.schedule = name;
      it.grad_sync = grad_sync_timeline(steps, m.grad_bucket, allreduce_time, expert_allreduce_time);
      it.parts = {{"embedding_and_head", 1, eh_f, eh_b},
                  {"attention", m.layers, attn_f, attn_b},
                  {"dense_ffn", dense_layers, ffn_f, ffn_b},
                  {"moe_layer", moe_layers, r.forward, r.backward},
                  {"dp_grad_allreduce", 1, Time::zero(), it.grad_sync.exposed()}};
      out.push_back(std::move(it));
    }
    return out;
  }

  // A pipeline (docs/models.md, "Pipelines"). `topo` is one stage's GPUs; every
  // stage runs on the same GPUs' shape (the stages of Megatron-Core's order
  // tp-cp-ep-dp-pp are GPUs/pp consecutive ranks, whole nodes: stage_nodes_override).
  const std::vector<Stage> stages = pipeline_stages(m);
  const int p = m.pp;
  int micro = m.micro_batches;
  if (m.global_batch > 0) {
    const std::int64_t replicas = topo.num_gpus() / s.mp;  // data-parallel replicas of the model: GPUs/(pp*mp)
    if (m.global_batch % (replicas * s.B) != 0)
      throw UserError(fmt::format("{}: key 'global_batch': expected a multiple of batch={} x {} data-parallel "
                                  "replicas (GPUs/(pp*mp) = {}/{}), got '{}'",
                                  m.global_batch_where, s.B, replicas, topo.num_gpus() * p, p * s.mp, m.global_batch));
    micro = static_cast<int>(m.global_batch / (replicas * s.B));
  }
  if (m.pipeline_schedule == PipelineSchedule::dualpipe && (micro % 2 != 0 || micro < 2 * p))
    throw UserError(fmt::format("{}: key 'pipeline_schedule': expected an even number of micro-batches, at least 2 x "
                                "pp = {}, for dualpipe (deepseek-ai/DualPipe dualpipe.py L333), got dualpipe with {}",
                                m.schedule_where, 2 * p, micro));
  // One micro-batch's activations (forward) or their gradients (backward),
  // S x M per GPU, from each GPU of a stage to the same GPU of the next:
  // every GPU of the stage at once, simulated on two stages' GPUs.
  Time p2p;
  if (p > 1) {
    if (!pair || pair->num_gpus() != 2 * topo.num_gpus())
      throw InternalError("run_model: a pipeline needs the topology of two stages");
    const int n = topo.num_gpus();
    TaskGraphBuilder gb(2 * n);
    gb.add_stream_all("comm");
    for (int r = 0; r < n; ++r) {
      Collective c;
      c.name = fmt::format("p2p_{}", r);
      c.op = CollOp::sendrecv;
      c.group = {r, r + n};
      c.bytes = S * M * b;
      gb.add_collective_tasks(std::move(c), "comm", fmt::format("p2p_{}", r));
    }
    const TaskGraph g = std::move(gb).build();
    p2p = simulate(g, *pair, SimOptions{m.network, cal}, ws).makespan;
  }
  // DualPipe's W: each backward's weight-gradient GEMMs (kernels named *_wgrad), one after
  // another on the GPU's model (the experts' once per local expert when run one by one).
  // The lean gate's and experts' backward GEMMs are the data and weight gradients as one
  // batch of two equal GEMMs (layer_kernels.cpp): half of each is W. ds_moe=mcore's gate has
  // its weight gradient apart (gate_wgrad), its experts lean's pairs.
  const GpuProfile& gpu = topo.gpu();
  const bool lean = lean_like(s.ds_moe), lean_gate = s.ds_moe == DsMoe::lean;
  const auto wgrad = [&](std::span<const MoeOp> ops) {
    Time t;
    for (const MoeOp& o : ops)
      for (const Kernel& k : kernel_list(o, s, d)) {
        const bool lean_pair = lean && o.backward && k.op == OpKind::gemm &&
                               (o.kind == MoeStep::experts || (lean_gate && o.kind == MoeStep::gate));
        if (!lean_pair && !std::string_view(k.name).ends_with("_wgrad")) continue;
        Time one = kernel_time(k, s.dtype, gpu, nullptr, {});
        if (lean_pair) one = Time::ps(one.count_ps() / 2);
        t += o.kind == MoeStep::experts ? one * expert_repeats(s, d) : one;
      }
    return t;
  };
  const Time attn_w = wgrad(attention(true)), ffn_w = wgrad(dense_ffn(true)), head_w = wgrad(head(true)),
             mtp_in_w = wgrad(mtp_in(true));
  const Time emb_f = simulate_ops(embedding(), s, d, topo, m.network, cal, ws);
  const Time head_f = simulate_ops(head(false), s, d, topo, m.network, cal, ws);
  const Time head_b = simulate_ops(head(true), s, d, topo, m.network, cal, ws);
  const Time mtp_in_f = m.mtp_depth > 0 ? simulate_ops(mtp_in(false), s, d, topo, m.network, cal, ws) : Time::zero();
  const Time mtp_in_b = m.mtp_depth > 0 ? simulate_ops(mtp_in(true), s, d, topo, m.network, cal, ws) : Time::zero();
  const std::int64_t head_params = i64(V * M / G);  // the last stage's copy of the output head
  for (const std::string& name : preset_names()) {
    const ScheduleResult r = run_schedule(run, preset(name));
    OpList fops, bops;
    forward_ops(s, d, preset(name), &fops);
    backward_ops(std::span<const MoeOp>(fops.data(), fops.size()), s, d, preset(name), &bops);
    const Time moe_w = wgrad(std::span<const MoeOp>(bops.data(), bops.size()));
    IterationResult it;
    it.schedule = name;
    PipelineResult& pr = it.pipeline;
    pr.stages = p;
    pr.micro_batches = micro;
    pr.p2p = p2p;
    pr.moe_phases = r.phases;
    const Time mtp_f = mtp_in_f + attn_f + r.forward + head_f, mtp_b = mtp_in_b + attn_b + r.backward + head_b;
    for (int i = 0; i < p; ++i) {
      const Stage& st = stages[static_cast<std::size_t>(i)];
      const bool first = i == 0, last = i == p - 1;
      int moe = 0;
      for (int blk = st.first_block; blk < st.first_block + st.blocks; ++blk) moe += is_moe_block(m, blk);
      StageTime t;
      t.stage = st;
      t.parts = {{"embedding", first ? 1 : 0, emb_f, emb_b},
                 {"attention", st.blocks, attn_f, attn_b, attn_w},
                 {"dense_ffn", st.blocks - moe, ffn_f, ffn_b, ffn_w},
                 {"moe_layer", moe, r.forward, r.backward, moe_w},
                 {"output_head", last ? 1 : 0, head_f, head_b, head_w},
                 {"mtp_module", last ? m.mtp_depth : 0, mtp_f, mtp_b, mtp_in_w + attn_w + moe_w + head_w}};
      for (const Component& c : t.parts) {
        t.forward += c.forward * c.count;
        t.backward += c.backward * c.count;
        t.weight_grad += c.weight_grad * c.count;
      }
      // The stage's backward of its last micro-batch, in order, and the gradients each step leaves:
      // the MTP module's own are its projection 2M x M and two RMSNorms (2M), its block's attention,
      // gate and shared experts; the embedding and head are the main model's (Sec. 2.2: shared).
      std::vector<BackwardStep> steps;
      if (last) {
        steps.push_back({head_b, head_params});
        for (int k = 0; k < m.mtp_depth; ++k) {
          steps.push_back({head_b, 0});
          steps.push_back({r.backward, gate_params, expert_params});
          steps.push_back({attn_b, attn_params});
          steps.push_back({mtp_in_b, i64(2 * M * M + 2 * M)});
        }
      }
      for (int blk = st.first_block + st.blocks - 1; blk >= st.first_block; --blk) {
        steps.push_back(is_moe_block(m, blk) ? BackwardStep{r.backward, gate_params, expert_params}
                                             : BackwardStep{ffn_b, ffn_params});
        steps.push_back({attn_b, attn_params});
      }
      if (first) steps.push_back({emb_b, embed_params});
      t.grad_sync = grad_sync_timeline(steps, m.grad_bucket, allreduce_time, expert_allreduce_time);
      pr.stage_times.push_back(std::move(t));
    }
    // The slowest stage sets the slot; the gradient AllReduce that stays
    // exposed longest ends the iteration.
    int slow = 0, sync = 0;
    for (int i = 1; i < p; ++i) {
      const StageTime& a = pr.stage_times[static_cast<std::size_t>(i)];
      const StageTime& z = pr.stage_times[static_cast<std::size_t>(slow)];
      if (a.forward + a.backward > z.forward + z.backward) slow = i;
      if (a.grad_sync.exposed() > pr.stage_times[static_cast<std::size_t>(sync)].grad_sync.exposed()) sync = i;
    }
    pr.slowest = slow;
    const StageTime& z = pr.stage_times[static_cast<std::size_t>(slow)];
    pr.time = m.pipeline_schedule == PipelineSchedule::dualpipe
                  ? dualpipe(micro, p, z.forward, z.backward, z.weight_grad, p2p)
                  : one_f_one_b(micro, p, z.forward, z.backward, p2p);
    it.grad_sync = pr.stage_times[static_cast<std::size_t>(sync)].grad_sync;
    for (const Component& c : z.parts) it.parts.push_back({c.name, c.count * micro, c.forward, c.backward});
    const Time p2p_slot = p > 1 ? p2p : Time::zero();
    it.parts.push_back({"p2p", p > 1 ? 2 * micro : 0, p2p_slot, Time::zero()});
    if (m.pipeline_schedule == PipelineSchedule::dualpipe)  // the bubble as one part: (p/2 - 1) x (F + 2B - 3W + 2 P2P)
      it.parts.push_back({"pipeline_bubble", 1, Time::zero(), pr.time.bubble});
    else
      it.parts.push_back({"pipeline_bubble", p - 1, z.forward + p2p_slot, z.backward + p2p_slot});
    it.parts.push_back({"dp_grad_allreduce", 1, Time::zero(), it.grad_sync.exposed()});
    out.push_back(std::move(it));
  }
  return out;
}

}  // namespace parmsim::moe
