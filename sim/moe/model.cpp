#include "sim/moe/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/net/network_model.hpp"

namespace parmsim::moe {

namespace {

const Section kModel{"model",
                     "A model spec for `parmsim model` (experiments/bert-moe.yaml, gpt2-moe.yaml).",
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
                       "reduce_bucket_size default); none or 0: one AllReduce after backward"}}};
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
  const TaskGraph g = build_graph(ops, s, d, preset("s1"));
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
    if (r.has(key)) set_key(&m.layer, nullptr, as, r.at(key).as_string(), r.at(key).where());
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
  if (r.has("grad_bucket")) {
    const YamlReader g = r.at("grad_bucket");
    m.grad_bucket = g.as_string() == "none" ? 0 : g.as_int(0, std::int64_t{1} << 50);
  }
  if (r.has("E") && r.has("experts_per_gpu"))
    r.at("experts_per_gpu").fail("no `experts_per_gpu` beside `E`: give one of the two (E wins, so one would be ignored)");
  m.experts_per_gpu = r.has("E") ? 0 : (r.has("experts_per_gpu") ? r.at("experts_per_gpu").as_int(1, 1 << 20) : 1);
  if (m.heads % m.layer.mp != 0) r.at("heads").fail(fmt::format("a multiple of mp={}", m.layer.mp));
  // Each head has hidden/heads dimensions: a remainder would be dropped.
  if (m.layer.M % m.heads != 0)
    r.at("heads").fail(fmt::format("a divisor of hidden={} (each head takes hidden/heads dimensions)", m.layer.M));
  if (m.moe_every > m.layers)
    r.at("moe_every").fail(fmt::format("at most layers={} (else no block has an MoE layer)", m.layers));
  return m;
}

}  // namespace

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
  const Dims d = make_dims(s, topo.num_gpus(), topo.gpus_per_node());
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
  return s;
}

std::vector<IterationResult> run_model(const ModelSpec& m, const Topology& topo, const Calibration* cal) {
  Workspace ws;  // the plans, routes and pools of every simulation below
  const LayerSpec s = model_layer(m, topo);
  const Dims d = make_dims(s, topo.num_gpus(), topo.gpus_per_node());
  const std::uint64_t b = static_cast<std::uint64_t>(d.dtype_bytes);
  const std::uint64_t S = d.S, M = s.M, H = s.H, G = d.G, L = s.L, B = s.B, V = m.vocab;
  const std::uint64_t hl = static_cast<std::uint64_t>(m.heads) / G;  // heads per MP rank
  const std::uint64_t dh = M / static_cast<std::uint64_t>(m.heads);
  const std::uint64_t glu = s.glu ? 2 : 1;  // fc1's width, in units of ffn

  // Every GEMM carries its shape (m, n, k, batch); backward GEMMs are a data- and a weight-gradient GEMM.
  // Attention block (pre-LN): LN, QKV (column-parallel), scores and context (batched over the rank's B*hl
  // heads), softmax, projection (row-parallel), AllReduce.
  auto attention = [&](bool bwd) {
    std::vector<MoeOp> v;
    v.push_back(kernel("layernorm", OpKind::elementwise, 0, 2 * S * M * b));
    push_gemm(v, bwd, "qkv_gemm", "qkv_gemm_dgrad", "qkv_gemm_wgrad", S, 3 * M / G, M, 1, b);
    // scores[L,L] = Q[L,dh] K^T[dh,L]; its backward: dQ = dScores K, dK^T = Q^T dScores.
    push_gemm(v, bwd, "attn_scores", "attn_scores_dq", "attn_scores_dk", L, L, dh, B * hl, b);
    v.push_back(kernel("attn_softmax", OpKind::softmax, 0, (bwd ? 3 : 2) * B * hl * L * L * b));
    // context[L,dh] = P[L,L] V[L,dh]; its backward: dP = dContext V^T, dV = P^T dContext.
    push_gemm(v, bwd, "attn_context", "attn_context_dp", "attn_context_dv", L, dh, L, B * hl, b);
    push_gemm(v, bwd, "attn_proj", "attn_proj_dgrad", "attn_proj_wgrad", S, M, M / G, 1, b);
    v.push_back(allreduce(GroupKind::mp, static_cast<std::int64_t>(S * M), "mp_allreduce"));
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  auto dense_ffn = [&](bool bwd) {
    std::vector<MoeOp> v;
    v.push_back(kernel("layernorm", OpKind::elementwise, 0, 2 * S * M * b));
    // Gated (glu): fc1 twice as wide, the activation's bytes as the experts' (layer_kernels.cpp, act_units).
    push_gemm(v, bwd, "fc1_gemm", "fc1_gemm_dgrad", "fc1_gemm_wgrad", S, glu * H / G, M, 1, b);
    if (s.glu)
      v.push_back(kernel("swiglu", OpKind::activation, 0, (bwd ? 5 : 3) * S * H / G * b));
    else
      v.push_back(kernel("gelu", OpKind::activation, 0, (bwd ? 3 : 2) * S * H / G * b));
    push_gemm(v, bwd, "fc2_gemm", "fc2_gemm_dgrad", "fc2_gemm_wgrad", S, M, H / G, 1, b);
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
  // Dense parameters are replicated over the N_EP data-parallel ranks of an EP
  // group (experts are not: experts = GPUs); their gradients are AllReduced over
  // that group. Per block: attention 4*M*M/G weights + 4*M (biases, LayerNorm);
  // dense FFN 2*M*H/G (3*M*H/G gated); MoE gate M*E. Word embedding (tied with the head) V*M/G and
  // position embedding L*M, whose gradients are complete when the lookup's backward ends.
  const int moe_layers = m.layers / m.moe_every;
  const int dense_layers = m.layers - moe_layers;
  const auto i64 = [](std::uint64_t x) { return static_cast<std::int64_t>(x); };
  const std::int64_t attn_params = i64(4 * M * M / G + 4 * M), ffn_params = i64((glu + 1) * M * H / G),
                     gate_params = i64(M * static_cast<std::uint64_t>(s.E)), embed_params = i64(V * M / G + L * M);

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
  const LayerRun run{topo, s, m.network, cal, nullptr, &ws};
  for (const std::string& name : preset_names()) {
    const ScheduleResult r = run_schedule(run, preset(name));
    // Backward: head and loss, blocks last to first (FFN or MoE layer, then attention), embedding lookup.
    std::vector<BackwardStep> steps = {{eh_b - emb_b, 0}};
    for (int layer = m.layers - 1; layer >= 0; --layer) {
      const bool moe = (layer + 1) % m.moe_every == 0 && (layer + 1) / m.moe_every <= moe_layers;
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

}  // namespace parmsim::moe
