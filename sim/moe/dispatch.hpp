#pragma once
// MoE token dispatch and combine kernels, as `parmsim moe-dispatch` times them
// (docs/moe-dispatch.md): DeepEP's normal kernels (NVLink forwarding plus
// inter-node RDMA, each token sent once per destination node), DeepEP's
// low-latency kernels (pure RDMA, one message per top-k selection) and an NCCL
// AlltoAllv (Megatron-Core's alltoall dispatcher: one copy per selection).
//
// The tokens are routed first (route_tokens: seeded, uniform top-k as
// DeepEP's tests draw it, optionally group-limited), which fixes what each
// rank sends to each rank and node. A dispatcher turns those counts into
// transfers on the topology's links (NVLink through the NVSwitch, PCIe, NICs,
// the fabric) and the flow network times them; combine runs the same
// transfers backwards in the combine dtype. The bandwidths are the ones
// DeepEP's tests print: a byte count fixed by the routing over the time.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/time.hpp"
#include "sim/core/workspace.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim::moe {

// What a token travels as: bf16, or fp8 (e4m3) with one float32 scale per 128
// elements (DeepEP's per_token_cast_to_fp8, tests/utils.py).
enum class WireDtype : std::uint8_t { bf16, fp8 };
const char* to_string(WireDtype d);
// "bf16" or "fp8"; a UserError naming `option` otherwise.
WireDtype parse_wire_dtype(const std::string& s, const std::string& option);

// How tokens choose experts (dropless: every selection is dispatched).
//   uniform    every expert equally likely, DeepEP's tests' router;
//   zipf       expert of popularity rank i (1-based) weighted 1 / i^exponent,
//              the popularity ranks dealt to the experts by a seeded shuffle
//              (hot experts land on any rank);
//   histogram  expert e weighted by the e-th count of a file (one count per
//              expert, e.g. tokens per expert measured in a training run).
// Each token takes k distinct experts, drawn one after another with
// probabilities proportional to the weights of those not yet taken.
struct LoadModel {
  enum class Kind : std::uint8_t { uniform, zipf, histogram };
  Kind kind = Kind::uniform;
  double exponent = 0;          // zipf
  std::vector<double> weights;  // histogram: one per expert
  std::string text = "uniform";  // as given, for reports
};
// "uniform", "zipf:S" (S > 0) or a histogram file (counts separated by
// commas, blanks or lines; '#' starts a comment); a UserError naming
// `option` otherwise. The file's length is checked against the experts by
// check_dispatch_spec.
LoadModel parse_load_model(const std::string& s, const std::string& option);

// Dropless routing of `sources` token sets of `tokens` tokens each, cut into
// `parts` equal consecutive parts (the MP members' shares): the selections of
// each part on each expert, [(src * parts + part) * E + e], drawn as
// route_tokens draws them (source src's own generator, k distinct experts).
// A UserError when fewer than k experts have weight. Group-limited routing
// (topk_groups > 0 and below `groups`, a uniform load only): the E experts form
// `groups` groups of consecutive experts, and each token draws its k experts
// as route_tokens draws them under --topk-groups (groups ranked by their best
// i.i.d. score, the k best experts of the topk_groups best groups); a token's
// experts then fall in at most topk_groups groups.
std::vector<std::uint64_t> draw_expert_counts(const LoadModel& load, std::uint64_t seed, int sources,
                                              std::int64_t tokens, int parts, int E, int k, int groups = 1,
                                              int topk_groups = 0);

// DeepEP's tests run the normal kernels on 24 SMs (deepseek-ai/DeepEP@d8dd185
// tests/test_intranode.py line 209 `for i in (24, )`, tests/test_internode.py
// line 226 `num_sms = 24`; README.md line 125 `Buffer.set_num_sms(24)`).
inline constexpr int kDeepepTestSms = 24;

struct DispatchSpec {
  int ranks = 0;   // expert-parallel ranks: GPUs 0 .. ranks-1 of the topology
  int tokens = 0;  // tokens per rank entering dispatch
  int hidden = 0;
  int experts = 0;
  int topk = 0;
  // Node-limited routing (DeepSeek-V3): each token picks its experts among the
  // experts of its top `topk_groups` nodes, nodes ranked by their best expert
  // score. 0, or at least the number of nodes: no limit.
  int topk_groups = 0;
  WireDtype dispatch_dtype = WireDtype::bf16;
  WireDtype combine_dtype = WireDtype::bf16;
  std::uint64_t seed = 0;
  LoadModel load;
  // SMs DeepEP's normal kernels run on (Config::num_sms): half send, half
  // receive or forward (a channel is a pair of SMs). The default is what
  // DeepEP's tests use (kDeepepTestSms). The low-latency kernels and the NCCL
  // AlltoAll ignore it.
  int sms = kDeepepTestSms;
};

// What one SM of DeepEP's normal kernels copies per second (bytes/s): the
// most NCCL's own tuner lets one channel (one CTA, on one SM) move with its
// warp-copy LL128 protocol, perChMaxRingLL128Bw of the GPU's generation
// (NVIDIA/nccl@5067397c src/graph/tuning.cc lines 184-190: 20.0 GB/s on Volta
// and Ampere, 36.7 on Hopper, 40.0 on Blackwell), by compute capability.
// DeepEP's copies are the same kind of work: warps loading into registers
// and storing to a peer's buffer, a fixed set of them per SM.
double sm_copy_rate(const GpuProfile& gpu);

// Ranks per DeepEP node: the GPUs one NVLink domain forwards among, at most
// NUM_MAX_NVL_PEERS = 8 (deepseek-ai/DeepEP csrc/kernels/configs.cuh@d8dd185
// line 3), and never more than the ranks. Node-limited routing groups experts
// by these nodes, as DeepEP's tests do.
int dispatch_group(const DispatchSpec& s, const Topology& topo);

// Checks the spec against the topology; a UserError of one line naming the
// option (--ranks, --experts, --topk, --topk-groups, --dispatch-dtype) and
// the sizes that conflict. fp8 needs a GPU profile with fp8 (peak_fp8 > 0).
void check_dispatch_spec(const DispatchSpec& s, const Topology& topo);

// What the routing sends, counted per (source rank, destination).
struct DispatchTraffic {
  int ranks = 0, group = 0, nodes = 0;
  // [s * ranks + t]: tokens of rank s with at least one expert on rank t
  // (DeepEP's is_token_in_rank); (token, expert) selections of s on t's experts.
  std::vector<std::uint64_t> rank_tokens, selections;
  // [s * nodes + n]: tokens of rank s with at least one expert on node n.
  std::vector<std::uint64_t> node_tokens;
  // Selections per expert, all ranks' tokens (what each expert's GEMM takes).
  std::vector<std::uint64_t> expert_tokens;
  // Max over mean: of expert_tokens, and of the selections each rank
  // receives (its local experts' tokens). 1 when perfectly balanced.
  double expert_imbalance() const;
  double rank_imbalance() const;
};
// Draws every rank's top-k: rank s uses its own generator (mt19937_64 seeded
// with a splitmix64 mix of seed and s), so the draws do not depend on
// anything but the spec. Without a group limit, k distinct experts uniformly
// (Floyd's sampling): the same law as the top-k of i.i.d. scores. With one,
// DeepEP's tests' procedure on i.i.d. scores (tests/test_internode.py@d8dd185
// lines 24-28): group score = its best expert's, top groups, then top-k among
// their experts.
DispatchTraffic route_tokens(const DispatchSpec& s, int group);

struct DispatchResult {
  std::string kernel;
  Time dispatch, combine;  // the kernel launch floor plus the last transfer's end
  // DeepEP's tests' byte counts for rank 0 (what they print) and the bandwidths
  // (GB/s, 1e9 B/s) they give over the simulated times; nullopt where the
  // kernel's test defines none (no RDMA within one node; low-latency: no NVL).
  std::optional<double> dispatch_rdma_bytes, dispatch_nvl_bytes, combine_rdma_bytes, combine_nvl_bytes;
  std::optional<double> dispatch_rdma_GBps, dispatch_nvl_GBps, combine_rdma_GBps, combine_nvl_GBps;
  // What the simulated dispatch moved, all ranks: over NICs (leaving a GPU's
  // node or, for pure RDMA, its NIC) and between GPUs of one node over NVLink/PCIe.
  std::uint64_t wire_rdma_bytes = 0, wire_nvl_bytes = 0;
  std::uint64_t transfers = 0;  // point-to-point transfers of dispatch
  int nodes = 0;                // DeepEP nodes of the run (1: intranode kernels)
  // The routing's imbalance (DispatchTraffic): max/mean tokens per expert and per rank.
  double expert_imbalance = 1, rank_imbalance = 1;
  std::uint64_t max_expert_tokens = 0, max_rank_tokens = 0;
  double mean_expert_tokens = 0, mean_rank_tokens = 0;
};

// The registry of dispatchers: help texts, option checks and errors come from it.
struct Dispatcher {
  std::string_view name;
  std::string_view help;
  DispatchResult (*run)(const Topology& topo, const DispatchSpec& s, const DispatchTraffic& t, Workspace& ws);
};
std::span<const Dispatcher> dispatchers();
// The dispatcher called `name`; a UserError "--kernel: unknown dispatcher 'x': expected a, b or c".
const Dispatcher& find_dispatcher(std::string_view name);

// Checks, routes and times one dispatch and combine.
DispatchResult simulate_dispatch(const Topology& topo, const DispatchSpec& s, const Dispatcher& d, Workspace& ws);

}  // namespace parmsim::moe
