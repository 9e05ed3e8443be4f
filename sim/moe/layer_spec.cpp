// Layer keys, schedule presets and the search space; MP/EP/ESP groups and derived sizes.
#include "sim/moe/layer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <map>
#include <utility>
#include <span>

#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/moe/dispatch.hpp"

namespace parmsim::moe {

// ---------------------------------------------------------------- options

std::string ScheduleOptions::describe() const {
  if (!parm) return "baseline";
  return fmt::format("split={},gather={},fuse_dispatch={},fuse_combine={},chunks={},a2a_algo={}",
                     split == Split::before_gate ? "before_gate" : "after_order",
                     gather == Gather::after_iorder ? "after_iorder" : "before_iorder", fuse_dispatch ? 1 : 0,
                     fuse_combine ? 1 : 0, chunks, a2a_algo);
}

namespace {
// The schedule presets: the baseline and Parm's two schedules (docs/parm.md).
ScheduleOptions make_baseline() {
  ScheduleOptions o;
  o.parm = false;
  return o;
}
// Split before gate, gather after I-Order, nothing fused: ScheduleOptions' defaults.
ScheduleOptions make_s1() { return {}; }
ScheduleOptions make_s2() {
  ScheduleOptions o;
  o.gather = Gather::before_iorder;
  o.fuse_dispatch = true;
  o.fuse_combine = true;
  // One chunk: no source describes S2 pipelining its ReduceScatter into the
  // SAA; `chunks` stays an option for what-ifs and --search.
  return o;
}
constexpr std::array<SchedulePreset, 3> kPresets = {{
    {"baseline", "DeepSpeed-MoE (the version `ds_moe` names)", make_baseline},
    {"s1", "Parm S1: MP paused inside the layer, ESP by AllGather/ReduceScatter", make_s1},
    {"s2", "Parm S2: S1 with the AlltoAlls fused with the intra-node AllGathers (SAA)", make_s2},
}};
}  // namespace

std::span<const SchedulePreset> schedule_presets() { return kPresets; }

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (std::string_view n : names_of(schedule_presets())) v.emplace_back(n);
  return v;
}

std::string schedule_choices(std::initializer_list<std::string_view> extra, std::string_view sep,
                             std::string_view last) {
  std::vector<std::string_view> all = names_of(schedule_presets());
  all.insert(all.end(), extra.begin(), extra.end());
  return join_names(all, sep, last);
}

bool is_preset(std::string_view name) { return find_named(schedule_presets(), name) != nullptr; }

ScheduleOptions preset(const std::string& name) {
  if (const SchedulePreset* p = find_named(schedule_presets(), name)) {
    ScheduleOptions o = p->make();
    o.name = name;
    return o;
  }
  throw UserError(fmt::format("unknown schedule '{}': expected {}", name, schedule_choices({"auto", "all"}, ", ", " or ")));
}

std::vector<ScheduleOptions> search_space() {
  std::vector<ScheduleOptions> out;
  for (Split sp : {Split::before_gate, Split::after_order})
    for (Gather ga : {Gather::after_iorder, Gather::before_iorder})
      for (bool fd : {false, true})
        for (bool fc : {false, true}) {
          if (fc && ga != Gather::before_iorder) continue;  // nothing to fuse with
          // Slots split after Order: I-Order needs every member's slots, so it
          // must follow the MP-AllGather (an I-Order on a slice of the slots
          // would leave partial sums, not a slice of the output).
          if (sp == Split::after_order && ga != Gather::before_iorder) continue;
          for (int c : {1, 2, 4}) {
            ScheduleOptions o;
            o.name = "custom";
            o.split = sp;
            o.gather = ga;
            o.fuse_dispatch = fd;
            o.fuse_combine = fc;
            o.chunks = c;
            out.push_back(o);
          }
        }
  return out;
}

const char* to_string(DsMoe v) {
  return v == DsMoe::v0_14_4 ? "0.14.4" : v == DsMoe::v0_14_5 ? "0.14.5" : v == DsMoe::lean ? "lean" : "mcore";
}
const char* to_string(Dispatch v) {
  return v == Dispatch::einsum ? "einsum" : "index";
}
const char* to_string(TokenDispatcher v) {
  return v == TokenDispatcher::alltoall ? "alltoall" : "allgather";
}

std::string baseline_system(const LayerSpec& s) {
  // lean: parmsim's idealised DeepSpeed-MoE (one ESP AllReduce, no host sync, batched experts).
  // mcore: Megatron-Core's MoELayer on lean's collectives (layer_kernels.cpp).
  const std::string sys = s.ds_moe == DsMoe::lean    ? "a lean DeepSpeed-MoE"
                          : s.ds_moe == DsMoe::mcore ? "Megatron-Core's MoELayer"
                                                     : fmt::format("DeepSpeed-MoE {}", to_string(s.ds_moe));
  if (s.token_dispatcher == TokenDispatcher::allgather)
    return fmt::format("{} with Megatron-Core's AllGather token dispatcher (ds_moe={}, token_dispatcher=allgather)", sys,
                       to_string(s.ds_moe));
  return fmt::format("{} with {} dispatch (ds_moe={}, dispatch={})", sys,
                     s.dispatch == Dispatch::einsum ? "einsum" : "index", to_string(s.ds_moe), to_string(s.dispatch));
}

// ---------------------------------------------------------------- groups, dims

Groups make_groups(int P, int G, int n_ep) {
  if (G <= 0 || P <= 0 || P % G != 0) throw UserError(fmt::format("mp={} must divide the number of GPUs P={}", G, P));
  if (n_ep == 0) n_ep = P / G;
  if (n_ep < 1 || P % (G * n_ep) != 0)
    throw UserError(fmt::format("ep={} * mp={} = {} does not divide P={} GPUs", n_ep, G, G * n_ep, P));
  // Megatron-Core's RankGenerator, order "tp-cp-ep-dp-pp" with cp = pp = 1:
  // rank = t + G*(e + N_EP*b) (megatron/core/parallel_state.py@d98e8a64,
  // generate_masked_orthogonal_rank_groups and the expert rank generator).
  Groups g;
  g.P = P;
  g.G = G;
  g.n_ep = n_ep;
  g.dp = P / (G * n_ep);
  g.mp.assign(P / G, {});
  g.ep.assign(static_cast<std::size_t>(G) * g.dp, {});
  g.block.assign(g.dp, {});
  g.dense_dp.assign(G, {});
  g.expert_dp.assign(static_cast<std::size_t>(G) * n_ep, {});
  g.mp_of.assign(P, 0);
  g.ep_of.assign(P, 0);
  for (int r = 0; r < P; ++r) {
    const int t = r % G, e = (r / G) % n_ep, b = r / (G * n_ep);
    g.mp[r / G].push_back(r);
    g.ep[b * G + t].push_back(r);
    g.block[b].push_back(r);
    g.dense_dp[t].push_back(r);
    g.expert_dp[t + G * e].push_back(r);
    g.mp_of[r] = r / G;
    g.ep_of[r] = b * G + t;
  }
  return g;
}

namespace {
// ceil(k * f * tokens / E), with f a decimal: a tiny epsilon keeps 153.6000000001 from rounding to 155.
double capacity_real(std::int64_t k, double f, std::int64_t tokens, std::int64_t E) {
  return std::ceil(static_cast<double>(k) * f * static_cast<double>(tokens) / static_cast<double>(E) - 1e-9);
}
std::int64_t capacity(std::int64_t k, double f, std::int64_t tokens, std::int64_t E) {
  return static_cast<std::int64_t>(capacity_real(k, f, tokens, E));
}

// The element, byte and FLOP counts the layer forms from its keys are 64-bit
// (schedule_ops, layer_kernels, graph_builder); each is checked here against
// 2^60, which leaves 8x headroom for the dtype's bytes and the backward's
// factors. `keys` names the keys the count grows with, most specific first.
constexpr std::int64_t kMaxCount = std::int64_t{1} << 60;

[[noreturn]] void too_large(const LayerSpec& s, double v, std::initializer_list<const char*> keys, const char* what) {
  std::string names, values;
  for (const char* k : keys) {
    const std::string key = k;
    const std::string val = key == "B"   ? std::to_string(s.B)
                            : key == "L" ? std::to_string(s.L)
                            : key == "M" ? std::to_string(s.M)
                            : key == "H" ? std::to_string(s.H)
                            : key == "E" ? std::to_string(s.E)
                            : key == "k" ? std::to_string(s.k)
                                         : fmt::format("{:g}", s.f);
    names += (names.empty() ? "" : ", ") + fmt::format("'{}'", key);
    values += (values.empty() ? "" : ", ") + key + "=" + val;
  }
  throw UserError(fmt::format(
      "layer too large: key{} {} ({}): {} = {:.3g} overflows the simulator's 64-bit counts (at most 2^60 = {:.3g})",
      keys.size() > 1 ? "s" : "", names, values, what, v, static_cast<double>(kMaxCount)));
}

// The factors of each product are bounded by the checks before it, so no
// product here exceeds 2^127.
void check_count(const LayerSpec& s, __int128 v, std::initializer_list<const char*> keys, const char* what) {
  if (v > kMaxCount) too_large(s, static_cast<double>(v), keys, what);
}
}  // namespace

Dims make_dims(const LayerSpec& s, int P, int gpus_per_node) {
  Dims d;
  d.P = P;
  d.G = s.mp;
  if (P < 1 || gpus_per_node < 1)
    throw UserError(fmt::format("a layer needs at least one GPU (P={}, GPUs per node {})", P, gpus_per_node));
  if (s.mp < 1) throw UserError("mp must be at least 1");
  if (s.B < 1 || s.L < 1 || s.M < 1 || s.H < 1 || s.E < 1 || s.k < 1)
    throw UserError(fmt::format("layer keys B, L, M, H, E, k must be at least 1 ({})", spec_string(s)));
  if (s.E > kMaxExperts) throw UserError(fmt::format("key 'E': {} experts, at most {}", s.E, kMaxExperts));
  if (!std::isfinite(s.f) || !(s.f > 0)) throw UserError(fmt::format("key 'f': expected a capacity factor > 0, got {}", s.f));
  using i128 = __int128;
  const i128 S = i128{s.B} * s.L;
  check_count(s, S, {"B", "L"}, "the tokens B*L");
  check_count(s, i128{s.M} * s.H, {"M", "H"}, "an expert's weights M*H");
  check_count(s, i128{s.M} * s.E, {"M", "E"}, "the gate's weights M*E");
  check_count(s, S * s.M, {"M", "B", "L"}, "the layer's input B*L*M");
  if (gpus_per_node % s.mp != 0)
    throw UserError(fmt::format("mp={} must divide the GPUs of a node ({}): MP and ESP groups stay inside a node", s.mp,
                                gpus_per_node));
  if (P % s.mp != 0) throw UserError(fmt::format("mp={} must divide the number of GPUs P={}", s.mp, P));
  if (s.ep < 0) throw UserError(fmt::format("key 'ep': expected an expert-parallel size >= 1, got {}", s.ep));
  if (s.ep > 0 && (static_cast<std::int64_t>(s.ep) * s.mp > P || P % (static_cast<std::int64_t>(s.ep) * s.mp) != 0))
    throw UserError(fmt::format("ep={} * mp={} = {} does not divide P={} GPUs", s.ep, s.mp,
                                static_cast<std::int64_t>(s.ep) * s.mp, P));
  d.n_ep = s.ep > 0 ? s.ep : P / s.mp;
  d.dp = P / (s.mp * d.n_ep);
  if (s.E % d.n_ep != 0)
    throw UserError(
        s.ep > 0 ? fmt::format("E={} experts must be divisible by the expert-parallel size ep={}", s.E, d.n_ep)
                 : fmt::format("E={} experts must be divisible by the expert-parallel size N_EP = P/mp = {}", s.E,
                               d.n_ep));
  if (s.k > s.E) throw UserError(fmt::format("top-k k={} exceeds the number of experts E={}", s.k, s.E));
  d.S = s.B * s.L;
  {
    // The capacity (tokens per expert buffer) and every count formed from it.
    const double t = capacity_real(s.k, s.f, d.S, s.E);
    if (!(t <= static_cast<double>(kMaxCount))) too_large(s, t, {"f", "k", "B", "L", "E"}, "the capacity k*f*B*L/E");
    const i128 C = static_cast<i128>(t), k = s.k, E = s.E, M = s.M, H = s.H, G = s.mp;
    check_count(s, S * E, {"B", "L", "E"}, "the gate's probabilities B*L*E");
    check_count(s, S * E * C, {"f", "k", "B", "L", "E"}, "the gate's masks B*L*E*C");
    check_count(s, S * E * C * (8 * k + 9) + 352 * k * S * E + 12 * k * S * C, {"f", "k", "B", "L", "E"},
                "the gate's bytes ~8*k*B*L*E*C");
    check_count(s, E * (C + G) * M, {"M", "f", "k", "B", "L", "E"}, "the dispatch buffer E*C*M");
    check_count(s, 2 * S * E * C * M, {"M", "f", "k", "B", "L", "E"}, "the dispatch einsum's FLOPs 2*B*L*E*C*M");
    check_count(s, 2 * E * (C + G) * M * H, {"M", "H", "f", "k", "B", "L", "E"},
                "the experts' FLOPs 2*E*C*M*H");
    // Gated experts: fc1 twice as wide, 3*E*C*M*H FLOPs in all.
    if (s.glu)
      check_count(s, 3 * E * (C + G) * M * H, {"M", "H", "f", "k", "B", "L", "E"},
                  "the gated experts' FLOPs 3*E*C*M*H");
  }
  if (d.S % s.mp != 0)
    throw UserError(
        fmt::format("B*L = {} tokens must be divisible by mp={} (MP-Split keeps S/mp tokens per rank)", d.S, s.mp));
  d.E_local = s.E / d.n_ep;
  d.T_base = capacity(s.k, s.f, d.S, s.E);
  d.T_parm = capacity(s.k, s.f, d.S / s.mp, s.E);
  if (d.T_parm < 1 || d.T_base < 1)
    throw UserError(fmt::format("capacity of zero tokens per expert: k*f*B*L/(mp*E) = {}*{}*{}/({}*{}) < 1", s.k, s.f,
                                d.S, s.mp, s.E));
  if (s.H % s.mp != 0) throw UserError(fmt::format("H={} must be divisible by mp={} (expert sharding)", s.H, s.mp));
  if (s.shared_H < 0 || s.shared_H % s.mp != 0)
    throw UserError(fmt::format("key 'shared_H': {} must be a multiple of mp={} (the shared experts are sharded as the "
                                "routed ones), or 0 for none", s.shared_H, s.mp));
  // The shared experts' FLOPs, 3*S*M*shared_H gated (2* without), against the same bound.
  if (s.shared_H > 0 && __int128{3} * d.S * s.M * s.shared_H > kMaxCount)
    throw UserError(fmt::format("layer too large: keys 'shared_H', 'M', 'B', 'L' (shared_H={}, M={}, B={}, L={}): the "
                                "shared experts' FLOPs 3*B*L*M*shared_H overflow the simulator's 64-bit counts (at "
                                "most 2^60)", s.shared_H, s.M, s.B, s.L));
  // ds_moe=mcore is Megatron-Core's MoELayer with TP=1 (the moe_perf baselines' layout). With
  // tensor parallelism Megatron-Core runs sequence parallelism: each TP rank routes its S/mp
  // tokens and the AlltoAll dispatcher gathers and scatters over the expert-TP group, which this
  // mode does not build (it would keep DeepSpeed's S tokens per rank and its ESP AllReduce).
  if (s.ds_moe == DsMoe::mcore && s.mp > 1 && s.token_dispatcher == TokenDispatcher::alltoall)
    throw UserError(fmt::format("key 'ds_moe': mcore models Megatron-Core's MoELayer at mp=1; with mp={} Megatron-Core "
                                "runs sequence parallelism, which it does not build: set mp=1, or ds_moe=lean",
                                s.mp));
  // An fp8 layer's activations are bf16; its expert GEMMs and the rows sent to the experts are fp8.
  d.fp8 = s.dtype == DType::fp8;
  // Megatron-Core's AlltoAll dispatcher permutes and sends the bf16 hidden states
  // (token_dispatcher.py@cf39a4dd L598-638); TE's GroupedLinear quantizes them
  // (transformer_engine/pytorch/module/grouped_linear.py@5c2f2ff5 L146).
  d.fp8_rows = d.fp8 && s.ds_moe != DsMoe::mcore;
  d.dtype_bytes = dtype_bytes(d.fp8 ? DType::bf16 : s.dtype);
  if (d.fp8) {
    // One fp32 scale per 128 elements of a token row (DeepSeek-V3's 1x128 activation tiles,
    // arXiv 2412.19437 section 3.3.2; DeepEP's per_token_cast_to_fp8, as moe-dispatch counts it).
    if (s.M % 128 != 0)
      throw UserError(fmt::format("key 'dtype': fp8 scales each token row in blocks of 128 elements; M={} is not a "
                                  "multiple of 128",
                                  s.M));
  }
  if (s.expert_groups < 1 || s.E % s.expert_groups != 0)
    throw UserError(fmt::format("key 'expert_groups': E={} experts do not divide into {} equal groups", s.E,
                                s.expert_groups));
  if (s.topk_groups < 0 || s.topk_groups > s.expert_groups)
    throw UserError(fmt::format("key 'topk_groups': {} groups per token, but expert_groups={} (0: no limit)",
                                s.topk_groups, s.expert_groups));
  if (s.topk_groups > 0) {
    if (!s.load)
      throw UserError("key 'topk_groups': group-limited routing is drawn by the dropless load model; set "
                      "load=uniform (the capacity layer has no routing to limit)");
    if (s.load->kind != LoadModel::Kind::uniform)
      throw UserError(fmt::format("key 'topk_groups': group-limited routing is drawn from uniform scores (as "
                                  "moe-dispatch --topk-groups); not with load={}",
                                  s.load->text));
    const std::int64_t reach = static_cast<std::int64_t>(s.topk_groups) * (s.E / s.expert_groups);
    if (s.k > reach)
      throw UserError(fmt::format("key 'topk_groups': top-k k={} experts per token, but {} group(s) of {} experts "
                                  "hold only {}",
                                  s.k, s.topk_groups, s.E / s.expert_groups, reach));
  }
  if (s.load && s.load->kind == LoadModel::Kind::histogram && static_cast<std::int64_t>(s.load->weights.size()) != s.E)
    throw UserError(fmt::format("key 'load': histogram {} has {} counts, expected one per expert, E={}", s.load->text,
                                s.load->weights.size(), s.E));
  return d;
}

double inter_node_share(const LayerLoad& l, const Dims& d, int gpus_per_node) {
  // MP group i holds ranks i*G .. i*G+G-1, one node's (mp divides a node); its block
  // b = i / N_EP; expert e sits on EP rank q = e / E_local of the block, rank
  // b*G*N_EP + G*q + t, on the same node for every MP index t (G divides a node).
  std::uint64_t all = 0, away = 0;
  for (int i = 0; i < l.groups; ++i) {
    const std::int64_t b = i / d.n_ep, node = static_cast<std::int64_t>(i) * d.G / gpus_per_node;
    for (int t = 0; t < l.parts; ++t)
      for (int e = 0; e < l.E; ++e) {
        const std::uint64_t c = l.count(i, t, e);
        const std::int64_t rank = b * d.G * d.n_ep + d.G * (e / d.E_local);
        all += c;
        if (rank / gpus_per_node != node) away += c;
      }
  }
  return all ? static_cast<double>(away) / static_cast<double>(all) : 0.0;
}

bool fp8_wire(const Dims& d, MoeStep kind, CollData data, bool experts_seen) {
  return d.fp8_rows && !experts_seen && data == CollData::current &&
         (kind == MoeStep::a2a || kind == MoeStep::ag || kind == MoeStep::saa);
}

std::shared_ptr<const LayerLoad> draw_layer_load(const LayerSpec& s, const Dims& d) {
  if (!s.load) throw InternalError("draw_layer_load: no load model");
  auto out = std::make_shared<LayerLoad>();
  LayerLoad& l = *out;
  l.groups = d.P / d.G;
  l.parts = d.G;
  l.E = static_cast<int>(s.E);
  l.counts = draw_expert_counts(*s.load, s.seed, l.groups, d.S, d.G, l.E, static_cast<int>(s.k), s.expert_groups,
                                s.topk_groups);
  l.expert_rows.assign(static_cast<std::size_t>(d.dp) * l.E, 0);
  for (int i = 0; i < l.groups; ++i) {
    const int b = i / d.n_ep;
    for (int t = 0; t < l.parts; ++t)
      for (int e = 0; e < l.E; ++e) l.expert_rows[static_cast<std::size_t>(b) * l.E + e] += l.count(i, t, e);
  }
  std::uint64_t total = 0;
  for (std::uint64_t v : l.expert_rows) total += v, l.max_expert_rows = std::max(l.max_expert_rows, v);
  l.mean_expert_rows = static_cast<double>(total) / static_cast<double>(l.expert_rows.size());
  for (std::size_t r = 0; r < l.expert_rows.size(); r += static_cast<std::size_t>(d.E_local)) {
    std::uint64_t in = 0;
    for (std::int64_t j = 0; j < d.E_local; ++j) in += l.expert_rows[r + static_cast<std::size_t>(j)];
    l.max_rank_rows = std::max(l.max_rank_rows, in);
  }
  l.mean_rank_rows = static_cast<double>(total) / static_cast<double>(d.dp * d.n_ep);
  l.expert_imbalance = total ? static_cast<double>(l.max_expert_rows) / l.mean_expert_rows : 1.0;
  l.rank_imbalance = total ? static_cast<double>(l.max_rank_rows) / l.mean_rank_rows : 1.0;
  return out;
}


}  // namespace parmsim::moe
