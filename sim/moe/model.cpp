#include "sim/moe/model.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"

namespace parmsim::moe {

namespace {

const Section kModel{"model",
                     "A model spec for `parmsim model` (experiments/bert-moe.yaml, gpt2-moe.yaml).",
                     {{"name", "string", "required", ""},
                      {"description", "string", "\"\"", ""},
                      {"topology", "string", "required", "topology YAML, relative to this file"},
                      {"topology_set", "map", "{}", "topology overrides"},
                      {"network", "string", "flow", "analytical | flow"},
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
                      {"dtype", "string", "fp32", "fp32 | fp16 | bf16"}}};
SectionRegistrar reg(kModel);

MoeOp kernel(const char* label, OpKind op, std::uint64_t flops, std::uint64_t bytes) {
  MoeOp o{OpKind2::kernel};
  o.label = label;
  o.kernel_op = op;
  o.flops = flops;
  o.bytes = bytes;
  return o;
}

MoeOp allreduce(GroupKind g, std::int64_t elems, const char* label) {
  MoeOp o{OpKind2::ar};
  o.group = g;
  o.elems = elems;
  o.label = label;
  return o;
}

Time simulate_ops(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const Topology& topo,
                  const std::string& network, const Calibration* cal) {
  if (ops.empty()) return Time::zero();
  const TaskGraph g = build_graph(ops, s, d, preset("s1"));
  return simulate(g, topo, SimOptions{network, cal}).makespan;
}

}  // namespace

ModelSpec load_model_spec(const std::string& file) {
  const YamlReader r = YamlReader::load_file(file);
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
  if (m.network != "flow" && m.network != "analytical") r.at("network").fail("analytical or flow");
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
  set("dtype", "dtype");
  m.experts_per_gpu = r.has("E") ? 0 : (r.has("experts_per_gpu") ? r.at("experts_per_gpu").as_int(1, 1 << 20) : 1);
  if (m.heads % m.layer.mp != 0) r.at("heads").fail(fmt::format("a multiple of mp={}", m.layer.mp));
  return m;
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

std::vector<IterationResult> run_model(const ModelSpec& m, const Topology& topo, const Calibration* cal) {
  LayerSpec s = m.layer;
  if (m.experts_per_gpu > 0) s.E = m.experts_per_gpu * topo.num_gpus();
  const Dims d = make_dims(s, topo.num_gpus(), topo.gpus_per_node());
  const std::uint64_t b = static_cast<std::uint64_t>(d.dtype_bytes);
  const std::uint64_t S = d.S, M = s.M, H = s.H, G = d.G, L = s.L, B = s.B, V = m.vocab;
  const std::uint64_t hl = static_cast<std::uint64_t>(m.heads) / G;  // heads per MP rank
  const std::uint64_t dh = M / static_cast<std::uint64_t>(m.heads);

  // Attention block (pre-LN): LN, QKV (column-parallel), scores, softmax, context, projection (row-parallel),
  // AllReduce.
  auto attention = [&](bool bwd) {
    const std::uint64_t w = bwd ? 2 : 1;
    std::vector<MoeOp> v = {
        kernel("layernorm", OpKind::elementwise, 0, 2 * S * M * b),
        kernel("qkv_gemm", OpKind::gemm, w * 2 * S * M * 3 * M / G, w * (S * M + 3 * M * M / G + 3 * S * M / G) * b),
        kernel("attn_scores", OpKind::gemm, w * 2 * B * hl * L * L * dh, w * (2 * S * M / G + B * hl * L * L) * b),
        kernel("attn_softmax", OpKind::softmax, 0, (bwd ? 3 : 2) * B * hl * L * L * b),
        kernel("attn_context", OpKind::gemm, w * 2 * B * hl * L * L * dh, w * (B * hl * L * L + 2 * S * M / G) * b),
        kernel("attn_proj", OpKind::gemm, w * 2 * S * M / G * M, w * (S * M / G + M * M / G + S * M) * b),
        allreduce(GroupKind::mp, static_cast<std::int64_t>(S * M), "mp_allreduce"),
    };
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  auto dense_ffn = [&](bool bwd) {
    const std::uint64_t w = bwd ? 2 : 1;
    std::vector<MoeOp> v = {
        kernel("layernorm", OpKind::elementwise, 0, 2 * S * M * b),
        kernel("fc1_gemm", OpKind::gemm, w * 2 * S * M * H / G, w * (S * M + M * H / G + S * H / G) * b),
        kernel("gelu", OpKind::activation, 0, (bwd ? 3 : 2) * S * H / G * b),
        kernel("fc2_gemm", OpKind::gemm, w * 2 * S * H / G * M, w * (S * H / G + H / G * M + S * M) * b),
        allreduce(GroupKind::mp, static_cast<std::int64_t>(S * M), "mp_allreduce"),
    };
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  // Embedding lookup, and the vocabulary-parallel output head with its loss.
  auto embed_head = [&](bool bwd) {
    const std::uint64_t w = bwd ? 2 : 1;
    std::vector<MoeOp> v = {
        kernel("embedding", OpKind::elementwise, 0, 2 * S * M * b),
        kernel("lm_head_gemm", OpKind::gemm, w * 2 * S * M * V / G, w * (S * M + M * V / G + S * V / G) * b),
        kernel("cross_entropy", OpKind::softmax, 0, 2 * S * V / G * b),
    };
    if (bwd) std::reverse(v.begin(), v.end());
    return v;
  };
  // Dense parameters are replicated over the N_EP data-parallel ranks of an EP
  // group (experts are not: experts = GPUs); their gradients are AllReduced once.
  const int moe_layers = m.layers / m.moe_every;
  const int dense_layers = m.layers - moe_layers;
  const std::uint64_t dense_params = static_cast<std::uint64_t>(m.layers) * (4 * M * M / G + 4 * M) +
                                     static_cast<std::uint64_t>(dense_layers) * 2 * M * H / G +
                                     static_cast<std::uint64_t>(moe_layers) * M * static_cast<std::uint64_t>(s.E) +
                                     V * M / G + L * M;

  const Time attn_f = simulate_ops(attention(false), s, d, topo, m.network, cal);
  const Time attn_b = simulate_ops(attention(true), s, d, topo, m.network, cal);
  const Time ffn_f = simulate_ops(dense_ffn(false), s, d, topo, m.network, cal);
  const Time ffn_b = simulate_ops(dense_ffn(true), s, d, topo, m.network, cal);
  const Time eh_f = simulate_ops(embed_head(false), s, d, topo, m.network, cal);
  const Time eh_b = simulate_ops(embed_head(true), s, d, topo, m.network, cal);
  const Time dp =
      d.n_ep > 1
          ? simulate_ops({allreduce(GroupKind::ep, static_cast<std::int64_t>(dense_params), "dp_grad_allreduce")}, s, d,
                         topo, m.network, cal)
          : Time::zero();
  std::vector<IterationResult> out;
  const LayerRun run{topo, s, m.network, cal};
  for (const char* name : {"baseline", "s1", "s2"}) {
    const ScheduleResult r = run_schedule(run, preset(name));
    IterationResult it;
    it.schedule = name;
    it.parts = {{"embedding_and_head", 1, eh_f, eh_b},
                {"attention", m.layers, attn_f, attn_b},
                {"dense_ffn", dense_layers, ffn_f, ffn_b},
                {"moe_layer", moe_layers, r.forward, r.backward},
                {"dp_grad_allreduce", 1, Time::zero(), dp}};
    out.push_back(std::move(it));
  }
  return out;
}

}  // namespace parmsim::moe
