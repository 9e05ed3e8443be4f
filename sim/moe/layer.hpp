#pragma once
// One MoE layer under MP + EP + ESP (docs/parm.md): its spec, the rank-to-group
// mapping, the three schedules as operation sequences, their task graphs and
// their closed-form (alpha-beta) times.
//
// A schedule is first a list of MoeOps for the forward pass; the backward
// list is derived from it by reversing it and taking each op's adjoint
// (AllGather <-> ReduceScatter, SAA -> ReduceScatter+AlltoAll, MP-Split ->
// MP-AllGather, ...). The same lists feed the task-graph builder and the
// closed form, so the simulator and the model always time the same work.
#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {
class YamlReader;
struct GpuProfile;
struct Calibration;
class CollectiveCosts;
class BoundCollective;
}  // namespace parmsim

namespace parmsim::moe {
struct LoadModel;

// Which DeepSpeed-MoE the baseline is (docs/moe-costs.md):
//   v0_14_4  DeepSpeed-MoE 0.7 .. 0.14.4, what Parm measured against: with
//            expert sharding every MP rank sends the full, identical dispatch
//            buffer; one ESP AllReduce per local expert, forward and backward;
//   v0_14_5  0.14.5 and later: duplicates dropped before each AlltoAll and
//            gathered over MP after it;
//   lean     parmsim's earlier idealised baseline: one ESP AllReduce of the
//            whole buffer, an fp16/bf16 gate without gating tensors or host sync,
//            local experts as one batched GEMM (for ablations);
//   mcore    Megatron-Core 0.16's MoELayer with the AlltoAll dispatcher and TE grouped GEMM:
//            `lean`'s collectives and batched experts, with the router's fp32 logits, its
//            small kernels and the host sync before the AlltoAll, the probabilities'
//            multiply after the activation, bf16 rows on the wire in an fp8 layer and TE's
//            per-call weight quantization (layer_kernels.cpp; docs/moe-costs.md).
enum class DsMoe { v0_14_4, v0_14_5, lean, mcore };
// The baselines whose collectives and experts are `lean`'s: one ESP AllReduce of the whole
// buffer, the local experts as one batched GEMM.
inline bool lean_like(DsMoe v) { return v == DsMoe::lean || v == DsMoe::mcore; }
// How tokens are dispatched to and combined from expert slots, in every schedule:
//   einsum  DeepSpeed-MoE's dense einsums over the [S, E, C] masks (GEMMs of 2*S*E*C*M FLOPs);
//   index   gather/scatter kernels that move each token row once (Tutel, FSMoE): memory copies.
enum class Dispatch { einsum, index };
// How the baseline moves tokens to its experts, as Megatron-Core's token
// dispatchers (megatron/core/transformer/moe/token_dispatcher.py@0014f137):
//   alltoall   AlltoAll over the EP group (DeepSpeed-MoE's, and Megatron-Core's
//              MoEAlltoAllTokenDispatcher): every schedule's dispatch so far;
//   allgather  MoEAllGatherTokenDispatcher: each rank's share of the tokens
//              AllGathered over the MP x EP block, each rank's local experts on
//              the block's tokens routed to them, the outputs ReduceScattered
//              back (docs/moe-costs.md, "The AllGather dispatcher"). The
//              baseline's only; S1 and S2 are AlltoAll schedules.
enum class TokenDispatcher { alltoall, allgather };
const char* to_string(DsMoe v);
const char* to_string(Dispatch v);
const char* to_string(TokenDispatcher v);

struct LayerSpec {
  std::int64_t B = 4, L = 512, M = 1024, H = 4096, E = 32, k = 2;
  double f = 1.2;
  int mp = 4;  // N_MP = N_ESP = G: Megatron-Core's TP, and its ETP (= TP, as Parm shards experts)
  // Expert-parallel size N_EP (Megatron-Core's EP); 0: P/mp, the whole world
  // (one expert-parallel group per MP index). With ep < P/mp the world holds
  // DP = P/(mp*ep) replicas of the mp*ep-rank block, ranks in Megatron-Core's
  // default order tp-cp-ep-dp-pp (docs/parm.md, "Layouts").
  int ep = 0;
  // Dropless routing under a load model (sim/moe/dispatch.hpp: uniform,
  // zipf:S, a histogram file), drawn with `seed`: the EP AlltoAlls become
  // AlltoAllvs of the drawn rows per peer and each expert's GEMMs take its
  // drawn rows (docs/moe-costs.md, "Dropless routing"). Null: the capacity
  // factor's fixed buffers, as before.
  std::shared_ptr<const LoadModel> load;
  std::uint64_t seed = 0;
  DType dtype = DType::fp32;
  DsMoe ds_moe = DsMoe::v0_14_4;
  Dispatch dispatch = Dispatch::einsum;
  TokenDispatcher token_dispatcher = TokenDispatcher::alltoall;
  // The fused AlltoAll+AllGather's algorithm (sim/coll): "released" (the Parm
  // authors' kernel) or "pipelined" (rail-wise rounds, parmsim's earlier reading).
  std::string saa_algo = "released";
  // The host's time per kernel launch and per collective call, as eager
  // PyTorch issues them one at a time (docs/moe-costs.md, "The host"). Zero:
  // the host keeps ahead of the GPU, as parmsim modelled it before.
  Time host_op;
  // Gated experts (SwiGLU, docs/moe-costs.md "Gated experts"): fc1 is M -> 2H
  // (the gate and up projections side by side), the activation silu(a) * b
  // takes both halves to H, fc2 is H -> M. false: fc1 M -> H, one activation.
  bool glu = false;
  // Shared experts' total intermediate size (0: none): a dense FFN every token
  // of the rank's S goes through beside the routed experts, sharded over mp as
  // they are, gated when glu is (docs/moe-costs.md, "Shared experts").
  std::int64_t shared_H = 0;
  // Group-limited routing (DeepSeek-V3's n_group / topk_group; Megatron-Core's
  // moe_router_num_groups / moe_router_group_topk): the E experts form
  // `expert_groups` equal groups of consecutive experts, and each token takes
  // its k experts from at most `topk_groups` of them (0: no limit). Drawn by
  // the dropless load model (load=uniform), as moe-dispatch --topk-groups
  // draws it (docs/moe-costs.md, "Group-limited routing").
  int expert_groups = 1;
  int topk_groups = 0;
};

enum class Split { before_gate, after_order };
enum class Gather { after_iorder, before_iorder };

// Builder options: every choice docs/parm.md marks as our reading.
struct ScheduleOptions {
  std::string name;  // "baseline", "s1", "s2" or "custom"
  bool parm = true;  // false: DeepSpeed-MoE baseline (the other fields are ignored)
  Split split = Split::before_gate;
  Gather gather = Gather::after_iorder;
  bool fuse_dispatch = false;  // AlltoAll + ESP-AllGather -> SAA
  bool fuse_combine = false;   // AlltoAll + MP-AllGather -> SAA (needs gather = before_iorder)
  int chunks = 1;              // ReduceScatter -> AlltoAll/SAA pipeline chunks
  std::string a2a_algo = "p2p";  // NCCL grouped send/recv (torch all_to_all_single), PXN
  std::string describe() const;
};

// The schedule presets, by name: the registry every list of schedules comes from.
struct SchedulePreset {
  std::string_view name;
  std::string_view help;
  ScheduleOptions (*make)();
};
std::span<const SchedulePreset> schedule_presets();
ScheduleOptions preset(const std::string& name);  // one of schedule_presets(); throws otherwise
bool is_preset(std::string_view name);
std::vector<std::string> preset_names();
// The presets' names and then `extra`, joined: schedule_choices({"auto"}, ", ", " or ") = "baseline, s1, s2 or auto".
std::string schedule_choices(std::initializer_list<std::string_view> extra, std::string_view sep,
                             std::string_view last);
// Every combination of the builder's options (for --search).
std::vector<ScheduleOptions> search_space();

// Bounds of single keys; B, L, M, H are bounded through the counts they form
// (make_dims: at most 2^60 elements, bytes or FLOPs each).
constexpr std::int64_t kMaxExperts = 1 << 20;  // E
constexpr int kMaxMp = 1 << 16;                // mp
constexpr int kMaxChunks = 1024;               // chunks
// One key of the registry (sim/moe/layer_keys.hpp). Unknown keys and bad
// values are UserErrors naming the key. `opts` may be null when schedule keys
// are not accepted.
void set_key(LayerSpec* spec, ScheduleOptions* opts, const std::string& key, const std::string& value,
             const std::string& where);
void apply_assignments(LayerSpec* spec, ScheduleOptions* opts, const std::vector<std::string>& kv,
                       const std::string& where);
std::string spec_string(const LayerSpec& s);
// The system the baseline schedule models, as reports name it: "DeepSpeed-MoE 0.14.4
// with einsum dispatch (ds_moe=0.14.4, dispatch=einsum)" by default.
std::string baseline_system(const LayerSpec& s);

// Groups (docs/parm.md, "Layouts"): ranks numbered node by node and, as
// Megatron-Core's RankGenerator numbers them in its default order
// "tp-cp-ep-dp-pp" (cp = pp = 1 here), rank = t + G*(e + N_EP*b) for MP index
// t < G, EP index e < N_EP and replica b < DP = P/(G*N_EP).
// MP (= ESP) groups are G consecutive ranks; EP groups take the ranks of one
// block (G*N_EP consecutive ranks) with the same MP index; the fused
// collective (SAA) runs over a block; dense data-parallel groups take every
// rank with the same MP index (P/G of them), expert data-parallel groups the
// ranks with the same (t, e) in every block (DP of them).
struct Groups {
  int P = 0, G = 0, n_ep = 0, dp = 1;
  std::vector<std::vector<int>> mp;     // mp[i] = ranks i*G .. i*G+G-1
  std::vector<std::vector<int>> ep;     // ep[b*G + t] = ranks b*G*N_EP + t + G*e, e < N_EP
  std::vector<std::vector<int>> block;  // block[b] = ranks b*G*N_EP .. (b+1)*G*N_EP - 1
  std::vector<std::vector<int>> dense_dp;   // dense_dp[t] = ranks t, t+G, t+2G, ... (P/G of them)
  std::vector<std::vector<int>> expert_dp;  // expert_dp[t + G*e] = ranks t + G*e + G*N_EP*b, b < DP
  std::vector<int> mp_of, ep_of;        // rank -> group index
};
// n_ep = 0: P/G (one block).
Groups make_groups(int P, int G, int n_ep = 0);

// Sizes derived from a spec on P GPUs with `gpus_per_node` per node.
// Throws UserError for impossible combinations, and for layers whose element,
// byte or FLOP counts would pass 2^60 (the error names the keys involved).
struct Dims {
  int P = 0, G = 0, n_ep = 0;
  int dp = 1;                // replicas of the G*N_EP block: P/(G*N_EP)
  std::int64_t S = 0;        // tokens per GPU entering the layer (B*L)
  std::int64_t E_local = 0;  // experts per EP rank
  std::int64_t T_base = 0;   // tokens per expert buffer, baseline (capacity on S tokens)
  std::int64_t T_parm = 0;   // tokens per expert buffer, Parm (capacity on S/G tokens)
  // Bytes of an activation element: the dtype's, and bf16's (2) in an fp8 layer, whose
  // activations, gate and combine stay in bf16 (docs/moe-costs.md, "FP8 layers").
  int dtype_bytes = 4;
  // dtype fp8: the experts' GEMMs (routed and shared) in fp8, the tokens on their way to
  // the experts in fp8 with one fp32 scale per 128 elements (fp8_wire), the rest in bf16.
  bool fp8 = false;
  // fp8 layers whose rows travel in fp8 (fp8_wire): all but ds_moe=mcore, whose AlltoAll
  // dispatcher sends the bf16 hidden states and TE quantizes them inside the grouped GEMM.
  bool fp8_rows = false;
};
Dims make_dims(const LayerSpec& s, int P, int gpus_per_node);

// A layer's drawn routing under its load model: per MP group i (P/G token
// sets of S tokens, the set every MP rank of the group holds) and per MP
// member's share t (S/G tokens each), the selections on each expert.
struct LayerLoad {
  int groups = 0, parts = 0, E = 0;
  std::vector<std::uint64_t> counts;  // [(i * parts + t) * E + e]
  // Tokens per expert, per block b (the rows each expert's GEMM takes on the
  // block's ranks): [b * E + e]; and max/mean of them and of the tokens per EP
  // rank (an EP rank's experts' tokens, over every block).
  std::vector<std::uint64_t> expert_rows;
  double expert_imbalance = 1, rank_imbalance = 1;
  std::uint64_t max_expert_rows = 0, max_rank_rows = 0;
  double mean_expert_rows = 0, mean_rank_rows = 0;
  std::uint64_t count(int i, int t, std::int64_t e) const {
    return counts[(static_cast<std::size_t>(i) * parts + t) * E + static_cast<std::size_t>(e)];
  }
};
// The spec's drawn routing (s.load must be set); the same spec, the same draws.
std::shared_ptr<const LayerLoad> draw_layer_load(const LayerSpec& s, const Dims& d);
// The share of a drawn routing's selections whose expert sits on another node than the
// token (nodes of `gpus_per_node` GPUs): what the layer's AlltoAll(v), one copy per
// selection, sends between nodes.
double inter_node_share(const LayerLoad& l, const Dims& d, int gpus_per_node);

// What one step of a schedule does: a compute op of the layer (gate, order,
// iorder, experts, slot_slice, kernel), a view (split, mp_gather_free) or a
// collective (a2a, ag, rs, ar, saa, and rs_then: a ReduceScatter pipelined
// into an AlltoAll or SAA).
enum class MoeStep {
  gate,
  order,
  iorder,
  experts,
  split,
  mp_gather_free,
  a2a,
  ag,
  rs,
  ar,
  saa,
  rs_then,
  kernel,
  slot_slice,
  shared  // the shared experts' dense FFN on the rank's S tokens (LayerSpec::shared_H)
};
// world: the fused collective's group, the G*N_EP ranks of a block (all P
// with one block); dense_dp / expert_dp: the data-parallel groups of the
// dense and of the expert parameters (`parmsim model`'s gradient AllReduce).
enum class GroupKind { ep, esp, mp, world, dense_dp, expert_dp };
// What a collective step moves, where the graph builder's data bindings need
// to know more than "the buffer the step before wrote" (the simulator and
// the closed form time every step alike).
enum class CollData : std::uint8_t {
  current,     // the buffer the step before wrote
  route,       // the gate's routing records (expert, slot, weight per choice), gathered over MP
  token_rows,  // each MP member's token rows, gathered into all S: the MP-AllGather after I-Order;
               // on MP-Split before the gate, its adjoint, which gathers the rows of dx
  gate_grad,   // the gate weights' gradient, summed over MP
};

// fp8 layers (Dims::fp8): whether a collective step moves fp8 rows. The token rows on their
// way to the experts travel in fp8 with one fp32 scale per 128 elements: the dispatch in the
// forward pass and, in the backward pass, the combine's adjoint (the output gradient before
// the experts' fc2), as DeepSeek-V3 does (arXiv 2412.19437 section 3.3.3, "Low-Precision
// Communication": "we quantize the activation before MoE up-projections into FP8 and then
// apply dispatch components ... A similar strategy is applied to the activation gradient
// before MoE down-projections. For both the forward and backward combine components, we
// retain them in BF16"). So: an AlltoAll, AllGather or SAA of the current buffer before the
// pass's experts op; reductions, the routing records and everything after the experts stay bf16.
bool fp8_wire(const Dims& d, MoeStep kind, CollData data, bool experts_seen);
// The bytes of `elems` elements on the wire: fp8 rows are an element a byte plus a 4-byte
// scale per 128 (M is a multiple of 128 in an fp8 layer: make_dims), rounded up; else
// elems * d.dtype_bytes.
inline std::uint64_t wire_bytes(const Dims& d, std::uint64_t elems, bool fp8) {
  return fp8 ? elems + (elems + 31) / 32 : elems * static_cast<std::uint64_t>(d.dtype_bytes);
}

// One step of a schedule, in elements (times dtype bytes for collectives).
struct MoeOp {
  MoeStep kind;
  bool backward = false;
  std::int64_t tokens = 0;  // gate/order/iorder: tokens processed
  std::int64_t elems = 0;   // buffer elements: order output, iorder input, expert input rows*M,
                            // collective size (nccl-tests convention), saa input per rank
  GroupKind group = GroupKind::ep;
  // rs_then: ReduceScatter over ESP/MP of `elems`, then `then` (a2a or saa) of elems/G, in `chunks`
  MoeStep then = MoeStep::a2a;
  int chunks = 1;
  // kernel: one compute kernel given directly (dense transformer parts)
  OpKind kernel_op = OpKind::elementwise;
  std::uint64_t flops = 0, bytes = 0;
  std::array<std::int64_t, 4> shape{};  // kernel gemm: m, n, k, batch (0 = unknown)
  // iorder: independent blocks of tokens and slots (the gathered [G, E, T, M]
  // buffer of G members, each combining its own S/G tokens): one batched einsum.
  int blocks = 1;
  // experts: one ESP AllReduce of its output rows after each local expert
  // (forward), of its input gradient (backward): DeepSpeed-MoE with expert sharding.
  bool allreduce_each = false;
  CollData data = CollData::current;  // collectives and views
  // What task and collective names show (the builder branches on kind and
  // data, never on this). A literal: op lists are built a million times a
  // second by the model.
  const char* label = "";
};

std::vector<MoeOp> forward_ops(const LayerSpec& s, const Dims& d, const ScheduleOptions& o);
std::vector<MoeOp> backward_ops(const std::vector<MoeOp>& fwd, const LayerSpec& s, const Dims& d,
                                const ScheduleOptions& o);

// Task graphs on all P ranks (streams compute, comm, rs), with data bindings
// (buffers, CPU kernels) that executors use and the simulator ignores:
// the forward pass alone; the backward pass alone (its forward replayed
// without tasks to set up buffers); both in one graph, for execution.
// GraphData::timing_only leaves the bindings out (no buffers, task inputs,
// outputs, kernels or arguments, no collective buffer names): the same tasks,
// names, streams, dependencies, sizes and collectives, for the simulator alone.
enum class GraphData { bound, timing_only };
TaskGraph build_graph(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                      GraphData data = GraphData::bound);
TaskGraph build_backward_graph(const std::vector<MoeOp>& fwd, const std::vector<MoeOp>& bwd, const LayerSpec& s,
                               const Dims& d, const ScheduleOptions& o, GraphData data = GraphData::bound);
TaskGraph build_training_graph(const std::vector<MoeOp>& fwd, const std::vector<MoeOp>& bwd, const LayerSpec& s,
                               const Dims& d, const ScheduleOptions& o);

// Alpha-beta parameters of the closed form (docs/parm.md, "Closed form").
// The closed form's collective costs. With a topology (alpha_beta_from_topology
// sets it), each collective is timed by the cost form of the very plan the
// simulator runs on the layer's groups (sim/coll/collective_cost.hpp): route
// latencies, per-round link loads, the critical path; so the closed form and
// the simulator differ only by overlap and contention across collectives.
// Without one, the paper's ring forms over the two alpha-beta pairs below.
struct BoundHandles {
  struct Key {
    const CollectiveCosts* costs = nullptr;
    int P = 0, G = 0, n_ep = 0;
    std::string a2a_algo, saa_algo;
    bool block_gather = false;  // the block's AllGather and ReduceScatter bound too (the AllGather dispatcher)
    auto operator<=>(const Key&) const = default;
  };
  using Handles = std::array<const BoundCollective*, 8>;
  // The first kFixed keys in an array read without a lock: an entry is
  // written once, under `mu`, before `count` is raised past it (release),
  // and read only below `count` (acquire). Later keys go in `more`, under `mu`.
  static constexpr int kFixed = 16;
  struct Entry {
    Key key;
    Handles live{};
  };
  std::array<Entry, kFixed> fixed;
  std::atomic<int> count{0};
  std::mutex mu;
  std::map<Key, Handles> more;
  // The handles of `key`, or false.
  bool find(const Key& key, Handles& out) {
    const int n = count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i)
      if (fixed[i].key == key) {
        out = fixed[i].live;
        return true;
      }
    if (n < kFixed) return false;
    std::lock_guard lk(mu);
    auto it = more.find(key);
    if (it == more.end()) return false;
    out = it->second;
    return true;
  }
  void add(Key key, const Handles& live) {
    std::lock_guard lk(mu);
    const int n = count.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i)
      if (fixed[i].key == key) return;  // another thread was first
    if (n < kFixed) {
      fixed[n] = Entry{std::move(key), live};
      count.store(n + 1, std::memory_order_release);
    } else {
      more.emplace(std::move(key), live);
    }
  }
};

struct AlphaBeta {
  double alpha_intra = 0, beta_intra = 0;  // seconds, seconds per byte
  double alpha_inter = 0, beta_inter = 0;  // beta_inter already times GPUs per NIC
  // Measured collectives replace these forms where an entry matches (op, group size, link).
  const Calibration* calibration = nullptr;
  const Topology* topo = nullptr;
  std::shared_ptr<const CollectiveCosts> costs;  // bound to *topo
  // The closed form's bound collectives per layer shape and algorithms
  // (closed_form.cpp), shared by the threads that evaluate with this model.
  std::shared_ptr<BoundHandles> handles;
};
// ws: the workspace its collectives' forms are kept in (the caller's; the
// model is then for that workspace's thread only, and must not outlive it);
// null: one of its own, and the model may be shared by threads. symmetry:
// whether its collectives' cost forms may be built on the representatives of
// a server shift (FormSymmetry, sim/coll/collective_cost.hpp; the same forms
// either way); `--no-symmetry` turns it off.
AlphaBeta alpha_beta_from_topology(const Topology& t, Workspace* ws = nullptr, bool symmetry = true);

struct ModelTime {
  double forward_s = 0, backward_s = 0;
  double total() const { return forward_s + backward_s; }
};
// Closed form of a schedule; the compute ops use the same roofline as the simulator.
double model_time(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                  const AlphaBeta& ab, const GpuProfile& gpu);
ModelTime model_layer(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, const AlphaBeta& ab,
                      const GpuProfile& gpu);

}  // namespace parmsim::moe
