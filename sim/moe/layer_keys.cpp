// The layer-key registry (layer_keys.hpp) and the parsers behind it.
#include "sim/moe/layer_keys.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>

#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/core/units.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/dispatch.hpp"

namespace parmsim::moe {

namespace {

using Key = LayerKey;

std::int64_t parse_int(const Key& key, const std::string& v, const std::string& where, std::int64_t lo,
                       std::int64_t hi = INT64_MAX) {
  auto range = [&] {
    return hi == INT64_MAX ? fmt::format(">= {}", lo) : fmt::format("in [{}, {}]", lo, hi);
  };
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument("x");
    if (x < lo || x > hi)
      throw UserError(fmt::format("{}: key '{}': expected an integer {}, got '{}'", where, key.name, range(), excerpt(v)));
    return x;
  } catch (const std::out_of_range&) {
    throw UserError(
        fmt::format("{}: key '{}': expected an integer in [{}, {}], got '{}'", where, key.name, lo, hi, excerpt(v)));
  } catch (const std::logic_error&) {
    throw UserError(fmt::format("{}: key '{}': expected an integer, got '{}'", where, key.name, excerpt(v)));
  }
}

// The index of `v` among the key's choices, or a UserError listing them ("expected a, b or c").
std::size_t choose(const Key& key, const std::string& v, const std::string& where) {
  std::string names;
  for (std::size_t i = 0; i < key.choices.size(); ++i) {
    if (v == key.choices[i]) return i;
    names += (i == 0 ? "" : i + 1 == key.choices.size() ? " or " : ", ") + std::string(key.choices[i]);
  }
  throw UserError(fmt::format("{}: key '{}': expected {}, got '{}'", where, key.name, names, excerpt(v)));
}

bool parse_bool(const Key& key, const std::string& v, const std::string& where) {
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  throw UserError(fmt::format("{}: key '{}': expected true/false or 1/0, got '{}'", where, key.name, excerpt(v)));
}

// Setters, one per key. The positive integer keys share one.
template <std::int64_t LayerSpec::*Field>
void set_count(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.*Field = parse_int(k, v, w, 1);
}
void set_E(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.E = parse_int(k, v, w, 1, kMaxExperts);
}
void set_mp(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.mp = static_cast<int>(parse_int(k, v, w, 1, kMaxMp));
}
// ep: an expert-parallel size >= 1, or "P/mp" (the default, 0: the whole world).
void set_ep(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.ep = v == "P/mp" ? 0 : static_cast<int>(parse_int(k, v, w, 1, kMaxMp));
}
// load: "capacity" (the default: capacity-factor buffers), or a load model of sim/moe/dispatch.hpp.
void set_load(const Key&, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  if (v == "capacity") {
    s.load.reset();
    return;
  }
  s.load = std::make_shared<const LoadModel>(parse_load_model(v, fmt::format("{}: key 'load':", w)));
}
void set_seed(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.seed = static_cast<std::uint64_t>(parse_int(k, v, w, 0));
}
void set_f(const Key&, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  try {
    std::size_t used = 0;
    s.f = std::stod(v, &used);
    if (used != v.size() || !(s.f > 0) || !std::isfinite(s.f)) throw std::invalid_argument("x");
  } catch (const std::logic_error&) {
    throw UserError(fmt::format("{}: key 'f': expected a capacity factor > 0, got '{}'", w, excerpt(v)));
  }
}
void set_dtype(const Key&, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  try {
    s.dtype = parse_dtype(v);
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: key 'dtype': {}", w, e.what()));
  }
}
// Enumerated keys: the choice's index is the enum's value (the arrays below follow the enums' order).
void set_ds_moe(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.ds_moe = static_cast<DsMoe>(choose(k, v, w));
}
void set_dispatch(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.dispatch = static_cast<Dispatch>(choose(k, v, w));
}
void set_token_dispatcher(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.token_dispatcher = static_cast<TokenDispatcher>(choose(k, v, w));
}
void set_saa(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.saa_algo = std::string(k.choices[choose(k, v, w)]);
}
void set_split(const Key& k, LayerSpec&, ScheduleOptions& o, const std::string& v, const std::string& w) {
  o.split = static_cast<Split>(choose(k, v, w));
  o.name = "custom";
}
void set_gather(const Key& k, LayerSpec&, ScheduleOptions& o, const std::string& v, const std::string& w) {
  o.gather = static_cast<Gather>(choose(k, v, w));
  o.name = "custom";
}
// A time of at least 0 and at most 1 s ("7us", "0").
void set_host_op(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  std::string why;
  const std::optional<Time> t = v == "0" ? std::optional<Time>(Time{}) : units::parse_time(v, &why);
  if (!t || t->count_ps() < 0 || *t > Time::ms(1000))
    throw UserError(fmt::format("{}: key '{}': expected a time in [0, 1s] such as 7us, got '{}'{}", w, k.name, excerpt(v),
                                why.empty() ? "" : " (" + why + ")"));
  s.host_op = *t;
}
void set_fuse_dispatch(const Key& k, LayerSpec&, ScheduleOptions& o, const std::string& v, const std::string& w) {
  o.fuse_dispatch = parse_bool(k, v, w);
  o.name = "custom";
}
void set_fuse_combine(const Key& k, LayerSpec&, ScheduleOptions& o, const std::string& v, const std::string& w) {
  o.fuse_combine = parse_bool(k, v, w);
  o.name = "custom";
}
void set_chunks(const Key& k, LayerSpec&, ScheduleOptions& o, const std::string& v, const std::string& w) {
  o.chunks = static_cast<int>(parse_int(k, v, w, 1, kMaxChunks));
  o.name = "custom";
}
void set_a2a_algo(const Key& k, LayerSpec&, ScheduleOptions& o, const std::string& v, const std::string& w) {
  o.a2a_algo = std::string(k.choices[choose(k, v, w)]);
}

// In the order of the enums DsMoe, Dispatch, Split and Gather (layer.hpp).
constexpr std::array<std::string_view, 4> kDsMoe = {"0.14.4", "0.14.5", "lean", "mcore"};
constexpr std::array<std::string_view, 2> kDispatch = {"einsum", "index"};
constexpr std::array<std::string_view, 2> kTokenDispatcher = {"alltoall", "allgather"};
constexpr std::array<std::string_view, 2> kSaa = {"released", "pipelined"};
constexpr std::array<std::string_view, 2> kSplit = {"before_gate", "after_order"};
constexpr std::array<std::string_view, 2> kGather = {"after_iorder", "before_iorder"};
constexpr std::array<std::string_view, 3> kA2a = {"p2p", "pairwise", "direct"};
static_assert(static_cast<int>(DsMoe::lean) == 2 && static_cast<int>(DsMoe::mcore) == 3 && static_cast<int>(Dispatch::index) == 1 &&
              static_cast<int>(TokenDispatcher::allgather) == 1 &&
              static_cast<int>(Split::after_order) == 1 && static_cast<int>(Gather::before_iorder) == 1);

// Getters, one per key.
std::string num(std::int64_t v) { return fmt::format("{}", v); }
template <std::int64_t LayerSpec::*Field>
std::string get_count(const LayerSpec& s, const ScheduleOptions&) {
  return num(s.*Field);
}
std::string get_mp(const LayerSpec& s, const ScheduleOptions&) { return num(s.mp); }
std::string get_ep(const LayerSpec& s, const ScheduleOptions&) { return s.ep > 0 ? num(s.ep) : "P/mp"; }
std::string get_load(const LayerSpec& s, const ScheduleOptions&) { return s.load ? s.load->text : "capacity"; }
std::string get_seed(const LayerSpec& s, const ScheduleOptions&) { return num(static_cast<std::int64_t>(s.seed)); }
std::string get_f(const LayerSpec& s, const ScheduleOptions&) { return fmt::format("{}", s.f); }
std::string get_dtype(const LayerSpec& s, const ScheduleOptions&) { return to_string(s.dtype); }
std::string get_ds_moe(const LayerSpec& s, const ScheduleOptions&) { return to_string(s.ds_moe); }
std::string get_dispatch(const LayerSpec& s, const ScheduleOptions&) { return to_string(s.dispatch); }
std::string get_token_dispatcher(const LayerSpec& s, const ScheduleOptions&) { return to_string(s.token_dispatcher); }
std::string get_saa(const LayerSpec& s, const ScheduleOptions&) { return s.saa_algo; }
std::string get_host_op(const LayerSpec& s, const ScheduleOptions&) { return fmt::format("{}us", static_cast<double>(s.host_op.count_ps()) / 1e6); }
std::string get_split(const LayerSpec&, const ScheduleOptions& o) { return std::string(kSplit[static_cast<int>(o.split)]); }
std::string get_gather(const LayerSpec&, const ScheduleOptions& o) {
  return std::string(kGather[static_cast<int>(o.gather)]);
}
std::string get_fuse_dispatch(const LayerSpec&, const ScheduleOptions& o) { return o.fuse_dispatch ? "true" : "false"; }
std::string get_fuse_combine(const LayerSpec&, const ScheduleOptions& o) { return o.fuse_combine ? "true" : "false"; }
std::string get_chunks(const LayerSpec&, const ScheduleOptions& o) { return num(o.chunks); }
std::string get_a2a_algo(const LayerSpec&, const ScheduleOptions& o) { return o.a2a_algo; }

// The experts' shape: gated (SwiGLU) experts, and the shared experts' size.
void set_glu(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.glu = parse_bool(k, v, w);
}
void set_shared_H(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.shared_H = parse_int(k, v, w, 0);
}
// Group-limited routing: the groups the experts form, and how many of them a token may use.
void set_expert_groups(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.expert_groups = static_cast<int>(parse_int(k, v, w, 1, kMaxExperts));
}
void set_topk_groups(const Key& k, LayerSpec& s, ScheduleOptions&, const std::string& v, const std::string& w) {
  s.topk_groups = static_cast<int>(parse_int(k, v, w, 0, kMaxExperts));
}
std::string get_expert_groups(const LayerSpec& s, const ScheduleOptions&) { return num(s.expert_groups); }
std::string get_topk_groups(const LayerSpec& s, const ScheduleOptions&) { return num(s.topk_groups); }
std::string get_glu(const LayerSpec& s, const ScheduleOptions&) { return s.glu ? "true" : "false"; }
std::string get_shared_H(const LayerSpec& s, const ScheduleOptions&) { return num(s.shared_H); }

constexpr KeyScope L = KeyScope::layer, S = KeyScope::schedule;

// The defaults shown are LayerSpec's and s1's (layer.hpp); tests/test_registries.cpp checks them.
// The layer keys' order is the order of spec_string() and of the sweep CSV's columns.
constexpr std::array<LayerKey, 27> kKeys = {{
    {"B", "int", "4", "samples per GPU (B*L tokens enter the layer on each GPU)", L, {}, set_count<&LayerSpec::B>, get_count<&LayerSpec::B>, true},
    {"L", "int", "512", "tokens per sample", L, {}, set_count<&LayerSpec::L>, get_count<&LayerSpec::L>, true},
    {"M", "int", "1024", "model (embedding) size", L, {}, set_count<&LayerSpec::M>, get_count<&LayerSpec::M>, true},
    {"H", "int", "4096", "expert FFN hidden size", L, {}, set_count<&LayerSpec::H>, get_count<&LayerSpec::H>, true},
    {"E", "int", "32", "experts in all (E/N_EP on each expert-parallel rank)", L, {}, set_E, get_count<&LayerSpec::E>, true},
    {"k", "int", "2", "experts each token goes to (top-k)", L, {}, set_count<&LayerSpec::k>, get_count<&LayerSpec::k>, true},
    {"f", "number", "1.2", "capacity factor: an expert takes at most k*f*B*L/E tokens", L, {}, set_f, get_f, true},
    {"mp", "int", "4", "tensor-parallel and expert-sharding degree, N_MP = N_ESP = G (inside a node)", L, {}, set_mp, get_mp, true},
    {"dtype", "string", "fp32",
     "fp32 | fp16 | bf16 | fp8 (fp8: expert GEMMs in fp8 and tokens dispatched in fp8, the rest bf16; with "
     "ds_moe=mcore the tokens travel in bf16 and TE casts them; docs/moe-costs.md, \"FP8 layers\")", L, {}, set_dtype,
     get_dtype, true},
    {"ds_moe", "string", "0.14.4",
     "the baseline's DeepSpeed-MoE: 0.14.4 (what Parm measured) | 0.14.5 | lean | mcore (Megatron-Core 0.16's "
     "MoELayer at mp=1: lean's collectives with its router, host sync and probability multiply; docs/moe-costs.md)",
     L, kDsMoe,
     set_ds_moe, get_ds_moe},
    {"dispatch", "string", "einsum",
     "token dispatch/combine: einsum (DeepSpeed's dense einsums) | index (gather/scatter kernels)", L, kDispatch,
     set_dispatch, get_dispatch},
    {"token_dispatcher", "string", "alltoall",
     "the baseline's token dispatcher, as Megatron-Core's: alltoall (an AlltoAll over EP) | allgather (the tokens "
     "AllGathered over the mp*ep block, local experts on the rows routed to them, a ReduceScatter back; "
     "docs/moe-costs.md, \"The AllGather dispatcher\"); S1 and S2 dispatch by AlltoAll either way",
     L, kTokenDispatcher, set_token_dispatcher, get_token_dispatcher, false, false, false},
    {"saa", "string", "released",
     "fused AlltoAll+AllGather: released (the Parm authors' kernel) | pipelined (rail-wise rounds)", L, kSaa,
     set_saa, get_saa},
    {"host_op", "time", "0us",
     "host time per kernel launch and per collective call, eager PyTorch's (0: the host keeps ahead of the GPU; "
     "docs/moe-costs.md)", L, {}, set_host_op, get_host_op},
    {"ep", "int", "P/mp",
     "expert-parallel size N_EP (Megatron-Core's EP); below P/mp the world holds P/(mp*ep) data-parallel "
     "replicas of the mp*ep block, ranks in Megatron-Core's order tp-ep-dp (docs/parm.md, \"Layouts\")",
     L, {}, set_ep, get_ep, false, false, false},
    {"load", "string", "capacity",
     "capacity (buffers of the capacity factor f, tokens past it dropped) | uniform | zipf:S | a histogram file of "
     "E counts: dropless routing drawn from that load model, AlltoAllv and per-expert GEMMs of the drawn tokens "
     "(docs/moe-costs.md, \"Dropless routing\")",
     L, {}, set_load, get_load, false, false, false},
    {"seed", "int", "0", "the seed of the load model's draws (same seed, same output)", L, {}, set_seed, get_seed,
     false, false, false},
    {"glu", "bool", "false",
     "gated experts (SwiGLU): fc1 M -> 2H, silu(a)*b, fc2 H -> M; 1.5x the expert GEMMs and weights "
     "(docs/moe-costs.md, \"Gated experts\")", L, {}, set_glu, get_glu, false, false, false},
    {"shared_H", "int", "0",
     "shared experts' total intermediate size (0: none): a dense FFN on every token beside the routed experts, "
     "sharded over mp (docs/moe-costs.md, \"Shared experts\")", L, {}, set_shared_H, get_shared_H, false, false,
     false},
    {"expert_groups", "int", "1",
     "groups of E/expert_groups consecutive experts for group-limited routing (DeepSeek-V3's n_group)", L, {},
     set_expert_groups, get_expert_groups, false, false, false},
    {"topk_groups", "int", "0",
     "each token's k experts come from at most this many groups (DeepSeek-V3's topk_group; 0: no limit); needs "
     "load=uniform (docs/moe-costs.md, \"Group-limited routing\")", L, {}, set_topk_groups, get_topk_groups, false,
     false, false},
    {"split", "string", "before_gate", "Parm MP-Split: before_gate | after_order", S, kSplit, set_split, get_split,
     false, true},
    {"gather", "string", "schedule", "MP-AllGather: after_iorder (O) | before_iorder (D)", S, kGather, set_gather,
     get_gather, false, true},
    {"fuse_dispatch", "bool", "schedule", "AlltoAll + ESP-AllGather as one SAA", S, {}, set_fuse_dispatch,
     get_fuse_dispatch, false, true},
    {"fuse_combine", "bool", "schedule", "AlltoAll + MP-AllGather as one SAA", S, {}, set_fuse_combine,
     get_fuse_combine, false, true},
    {"chunks", "int", "schedule", "ReduceScatter -> AlltoAll pipeline chunks", S, {}, set_chunks, get_chunks, false,
     true},
    {"a2a_algo", "string", "p2p", "p2p (NCCL send/recv, PXN) | pairwise | direct", S, kA2a, set_a2a_algo,
     get_a2a_algo},
}};

}  // namespace

namespace {
// The `layer` section of --help-config.
const Section kLayerFile = layer_file_section();
const SectionRegistrar reg(kLayerFile);
}  // namespace

std::span<const LayerKey> layer_keys() { return kKeys; }

std::string file_relative_load(const std::string& value, const std::string& file) {
  if (value == "capacity" || value == "uniform" || value.rfind("zipf", 0) == 0 || value.empty() ||
      std::filesystem::path(value).is_absolute())
    return value;
  return (std::filesystem::path(file).parent_path() / value).lexically_normal().string();
}

std::string key_value_in_file(std::string_view key, const std::string& value, const std::string& file) {
  return key == "load" ? file_relative_load(value, file) : value;
}

std::vector<std::pair<std::string, std::string>> layer_file_keys(const YamlReader& r) {
  r.check_keys(kLayerFile);
  std::vector<std::pair<std::string, std::string>> kv;
  for (const std::string& k : r.keys())
    kv.emplace_back(k + "=" + key_value_in_file(k, r.at(k).as_string(), r.file()), r.at(k).where());
  return kv;
}

const LayerKey* find_layer_key(std::string_view name) { return find_named(layer_keys(), name); }

std::string layer_key_columns(std::string_view sep) {
  std::vector<std::string_view> v;
  for (const LayerKey& k : kKeys)
    if (k.scope == KeyScope::layer && k.column) v.push_back(k.name);
  return join_names(v, sep, sep);
}

std::string layer_key_values(const LayerSpec& spec, std::string_view sep) {
  const ScheduleOptions unused;
  std::string out;
  for (const LayerKey& k : kKeys)
    if (k.scope == KeyScope::layer && k.column) out += (out.empty() ? "" : std::string(sep)) + k.get(spec, unused);
  return out;
}

std::string spec_string(const LayerSpec& s) {
  // Every key named always, then only what differs from the defaults, so existing spec strings keep their form.
  const ScheduleOptions unused;
  std::string out;
  for (const LayerKey& k : kKeys) {
    if (k.scope != KeyScope::layer) continue;
    const std::string v = k.get(s, unused);
    if (k.named_always || v != k.fallback) out += fmt::format("{}{}={}", out.empty() ? "" : ",", k.name, v);
  }
  return out;
}

std::string layer_key_names(KeyScope scope) {
  std::string out;
  for (const LayerKey& k : kKeys)
    if (k.scope == scope) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

std::string layer_keys_help() {
  std::string out = "Layer keys (--set KEY=VALUE,..., a --layer file, a sweep grid):\n";
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    const LayerKey& k = kKeys[i];
    if (k.scope == KeyScope::schedule && (i == 0 || kKeys[i - 1].scope != KeyScope::schedule))
      out += "Schedule options (they refine s1 and s2; a2a_algo applies to every schedule):\n";
    out += fmt::format("  {:<14} {:<7} {:<12} {}\n", k.name, k.type, k.fallback, k.help);
  }
  return out;
}

Section layer_file_section() {
  Section s{"layer", "A layer file for `parmsim layer --layer FILE` (every key optional; --set overrides).", {}};
  for (const LayerKey& k : kKeys)
    s.keys.push_back({std::string(k.name), std::string(k.type), std::string(k.fallback), std::string(k.help)});
  return s;
}

void set_key(LayerSpec* s, ScheduleOptions* o, const std::string& key, const std::string& v, const std::string& where) {
  const LayerKey* k = find_layer_key(key);
  if (!k || (k->scope == KeyScope::schedule && !o))
    throw UserError(fmt::format("{}: unknown layer key '{}'; layer keys: {}{}", where, key,
                                layer_key_names(KeyScope::layer),
                                o ? "; schedule options: " + layer_key_names(KeyScope::schedule) : ""));
  ScheduleOptions unused;
  k->set(*k, *s, o ? *o : unused, v, where);
}

void apply_assignments(LayerSpec* s, ScheduleOptions* o, const std::vector<std::string>& kv, const std::string& where) {
  for (const std::string& a : kv) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0) throw UserError(fmt::format("{}: '{}' is not key=value", where, a));
    set_key(s, o, a.substr(0, eq), a.substr(eq + 1), where);
  }
}

void apply_keys(LayerSpec* s, ScheduleKeys* keys, const std::vector<std::string>& kv, const std::string& where) {
  for (const std::string& a : kv) {
    apply_assignments(s, &keys->parm, {a}, where);
    const LayerKey* k = find_layer_key(a.substr(0, a.find('=')));
    if (k->scope == KeyScope::schedule) keys->given.push_back(a);
    keys->shaped = keys->shaped || k->shapes_parm;
  }
}

std::string parm_shaping_key_names() {
  std::vector<std::string_view> v;
  for (const LayerKey& k : kKeys)
    if (k.shapes_parm) v.push_back(k.name);
  return join_names(v, ", ", " and ");
}

ScheduleOptions schedule_options(const std::string& name, const ScheduleKeys& keys) {
  ScheduleOptions o = preset(name);
  const bool parm = o.parm;
  LayerSpec unused;
  for (const std::string& kv : keys.given) {
    const auto eq = kv.find('=');
    const LayerKey* k = find_layer_key(kv.substr(0, eq));
    if (!k) throw InternalError(fmt::format("schedule key '{}' is not registered", kv));
    if (k->shapes_parm && !parm) continue;  // the baseline has none of Parm's options
    k->set(*k, unused, o, kv.substr(eq + 1), "schedule options");
  }
  o.name = parm && keys.shaped ? name + "*" : name;
  return o;
}

}  // namespace parmsim::moe
