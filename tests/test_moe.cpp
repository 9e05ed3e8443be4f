#include <catch2/catch.hpp>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer_kernels.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}

LayerSpec paper_layer() {
  LayerSpec s;  // B=4, L=512, M=1024, H=4096, E=32, k=2, f=1.2, mp=4
  return s;
}

std::vector<const MoeOp*> of_kind(const std::vector<MoeOp>& ops, MoeStep k) {
  std::vector<const MoeOp*> v;
  for (const auto& o : ops)
    if (o.kind == k) v.push_back(&o);
  return v;
}

}  // namespace

TEST_CASE("ranks map to MP, EP and ESP groups as in docs/parm.md", "[moe][groups]") {
  const Groups g = make_groups(32, 4);
  CHECK(g.n_ep == 8);
  CHECK(g.mp.size() == 8);
  CHECK(g.ep.size() == 4);
  CHECK(g.mp[1] == std::vector<int>{4, 5, 6, 7});                    // G consecutive ranks
  CHECK(g.ep[2] == std::vector<int>{2, 6, 10, 14, 18, 22, 26, 30});  // stride G
  for (int r = 0; r < 32; ++r) {
    CHECK(g.mp[g.mp_of[r]][r % 4] == r);
    CHECK(g.ep[g.ep_of[r]][r / 4] == r);
  }
  CHECK_THROWS_WITH(make_groups(32, 5), Catch::Contains("mp=5 must divide"));
}

TEST_CASE("message sizes follow the sizes of docs/parm.md", "[moe][sizes]") {
  // B=4, L=512 -> S = 2048 tokens; k=2, f=1, E=32, M=1024, mp=G=4, P=32.
  // Baseline T = k f S / E = 2*2048/32 = 128; D = E T M = 32*128*1024 = 4194304.
  // Parm T = k f (S/G) / E = 2*512/32 = 32; D/G = 32*32*1024 = 1048576. O = S M = 2097152.
  LayerSpec s = paper_layer();
  s.f = 1.0;
  const Dims d = make_dims(s, 32, 4);
  CHECK(d.T_base == 128);
  CHECK(d.T_parm == 32);
  const auto base = forward_ops(s, d, preset("baseline"));
  for (const MoeOp* o : of_kind(base, MoeStep::a2a)) CHECK(o->elems == 4194304);
  CHECK(of_kind(base, MoeStep::a2a).size() == 2);
  // DeepSpeed-MoE 0.14.4 with expert sharding: no separate AllReduce op; the
  // experts op AllReduces each local expert's rows over ESP: E_l = 32/8 = 4
  // experts of D/4 = 1048576 elements each.
  CHECK(of_kind(base, MoeStep::ar).empty());
  CHECK(of_kind(base, MoeStep::experts).at(0)->allreduce_each);
  CHECK(expert_repeats(s, d) == 4);
  CHECK(expert_elems(*of_kind(base, MoeStep::experts).at(0), s, d) == 1048576);
  LayerSpec lean = s;
  lean.ds_moe = DsMoe::lean;  // the earlier idealised baseline: one AllReduce of D
  CHECK(of_kind(forward_ops(lean, d, preset("baseline")), MoeStep::ar).at(0)->elems == 4194304);

  const auto s1 = forward_ops(s, d, preset("s1"));
  CHECK(of_kind(s1, MoeStep::a2a).at(0)->elems == 1048576);      // dispatch D/G
  CHECK(of_kind(s1, MoeStep::ag).at(0)->elems == 4194304);       // ESP-AllGather to D
  CHECK(of_kind(s1, MoeStep::rs_then).at(0)->elems == 4194304);  // ESP-ReduceScatter of D, then AlltoAll of D/G
  CHECK(of_kind(s1, MoeStep::ag).at(1)->elems == 2097152);       // MP-AllGather of O
  CHECK(of_kind(s1, MoeStep::gate).at(0)->tokens == 512);        // gate on S/G
  // Backward of S1: the MP-AllGather becomes a slice, MP-Split an AllGather of O.
  const auto s1b = backward_ops(s1, s, d, preset("s1"));
  CHECK(s1b.front().kind == MoeStep::mp_gather_free);
  CHECK(s1b.back().kind == MoeStep::ag);
  CHECK(s1b.back().elems == 2097152);

  const auto s2 = forward_ops(s, d, preset("s2"));
  CHECK(of_kind(s2, MoeStep::saa).at(0)->elems == 1048576);  // SAA input D/G per rank
  CHECK(of_kind(s2, MoeStep::rs_then).at(0)->then == MoeStep::saa);
  CHECK(of_kind(s2, MoeStep::iorder).at(0)->tokens == 2048);  // I-Order on all S tokens
  const auto s2b = backward_ops(s2, s, d, preset("s2"));
  CHECK(of_kind(s2b, MoeStep::saa).size() == 1);      // combine adjoint: AlltoAll + ESP-AllGather
  CHECK(of_kind(s2b, MoeStep::rs_then).size() == 1);  // dispatch adjoint: RS -> AlltoAll
}

TEST_CASE("simulated bytes: S1 sends G times fewer inter-node bytes than the baseline", "[moe][sizes]") {
  const Topology t = topo("parm-32gpu");
  LayerSpec s = paper_layer();
  s.f = 1.0;
  const LayerRun run{t, s, "flow"};
  const ScheduleResult b = run_schedule(run, preset("baseline"));
  const ScheduleResult r1 = run_schedule(run, preset("s1"));
  // Baseline, forward + backward: 4 AlltoAlls of D*4 B = 16777216 B per rank, 7/8 of it
  // to other nodes, 32 ranks: 4 * 32 * 16777216 * 7/8 = 1879048192 B.
  CHECK(b.inter_node_bytes == 1879048192ULL);
  CHECK(r1.inter_node_bytes * 4 == b.inter_node_bytes);
  // Baseline intra-node: 2 ring AllReduces of 16777216 B over 4 ranks: each rank sends
  // 2 * 3/4 * 16777216 = 25165824 B per AllReduce; 2 * 32 * 25165824 = 1610612736 B.
  CHECK(b.intra_node_bytes == 1610612736ULL);
}

TEST_CASE("under the analytical network the baseline and S1 match the closed form", "[moe][model]") {
  // 4 DGX H100 nodes, mp = 8: every EP peer is on another node over its own rail NIC,
  // so nothing shares a link and the closed form has no approximation left.
  const Topology t = topo("dgx-h100", {"nodes=4"});
  for (const char* dt : {"fp32", "bf16"}) {
    LayerSpec s = paper_layer();
    s.mp = 8;
    s.dtype = parse_dtype(dt);
    const LayerRun run{t, s, "analytical"};
    for (const char* name : {"baseline", "s1"}) {
      INFO(name << " " << dt);
      // Pairwise AlltoAll: one transfer per GPU port at a time. (The default,
      // NCCL's grouped send/recv, sends to every peer at once; the analytical
      // network then queues them behind each other on the receivers' NICs,
      // which the closed form, sharing each round's links, does not.)
      ScheduleOptions o = preset(name);
      o.a2a_algo = "pairwise";
      const ScheduleResult r = run_schedule(run, o);
      // Each transfer and kernel rounds up to the picosecond: allow 1 ns in all.
      CHECK(std::abs(r.forward.to_seconds() - r.model_forward_s) < 1e-9);
      CHECK(std::abs(r.backward.to_seconds() - r.model_backward_s) < 1e-9);
    }
  }
}

TEST_CASE("S2 is never faster than its inter-node or its intra-node traffic allows", "[moe][model]") {
  const Topology t = topo("parm-32gpu");
  for (const char* net : {"flow", "analytical"}) {
    const LayerRun run{t, paper_layer(), net};
    const ScheduleResult r = run_schedule(run, preset("s2"));
    // Inter-node: all bytes leave through 8 NICs of 12.5 GB/s.
    const double inter_s = static_cast<double>(r.inter_node_bytes) / (8 * 12.5e9);
    // Intra-node: all bytes enter GPUs through 32 links of 13 GB/s.
    const double intra_s = static_cast<double>(r.intra_node_bytes) / (32 * 13e9);
    INFO(net);
    CHECK(r.total().to_seconds() >= std::max(inter_s, intra_s));
  }
}

TEST_CASE("with very fast intra-node links S1 and S2 converge", "[moe][model]") {
  // 4 nodes of 4 GPUs on a 100 TB/s NVSwitch, one 100 Gb/s NIC each. With free
  // intra-node traffic, S2's fused AllGathers cost nothing and S1's are free too;
  // both reduce to the same AlltoAlls.
  const std::string text = R"(name: fast-intra
gpu: h100
nodes: 4
node:
  gpus: 4
  devices: [{name: nvs, kind: nvswitch}, {name: nic0, kind: nic}]
  links:
    - {a: [gpu0, gpu1, gpu2, gpu3], b: nvs, bandwidth: 100TBps, latency: 1ps}
    - {a: [gpu0, gpu1, gpu2, gpu3], b: nic0, bandwidth: 100TBps, latency: 1ps}
fabric: {kind: switch, bandwidth: 100Gbps, latency: 1us}
)";
  const Topology fast = parse_topology_text(text, "fast.yaml");
  LayerSpec s = paper_layer();
  s.E = 16;
  const LayerRun run{fast, s, "flow"};
  const double t1 = run_schedule(run, preset("s1")).total().to_seconds();
  const double t2 = run_schedule(run, preset("s2")).total().to_seconds();
  // Beyond their shared traffic, S2's four SAAs (dispatch and combine, forward
  // and backward) each run W = P = 16 rounds of NCCL send/recv in sequence,
  // 15 of them across nodes at NCCL's p2p latency (8.4 + 14 = 22.4 us), where
  // S1's AlltoAlls send to every peer at once: at most 4 x 15 x 22.4 us = 1.344 ms apart.
  CHECK(std::abs(t1 - t2) < 0.05 * t1 + 4 * 15 * 22.4e-6);
  // On the paper's PCIe cluster they differ by far more.
  const LayerRun paper{topo("parm-32gpu"), paper_layer(), "flow"};
  // There S2's gathers are not free: it moves more intra-node bytes than S1
  // (the released SAA's world AlltoAll also sends (G-1)/P of D/G to node peers).
  const ScheduleResult p1 = run_schedule(paper, preset("s1")), p2 = run_schedule(paper, preset("s2"));
  CHECK(p2.intra_node_bytes > p1.intra_node_bytes);
  CHECK(p2.inter_node_bytes == p1.inter_node_bytes);
}

TEST_CASE("S1 and S2 beat the baseline on the paper's 32-GPU cluster", "[moe]") {
  const Topology t = topo("parm-32gpu");
  for (const char* net : {"flow", "analytical"}) {
    INFO(net);
    const LayerRun run{t, paper_layer(), net};
    const Time b = run_schedule(run, preset("baseline")).total();
    CHECK(run_schedule(run, preset("s1")).total() < b);
    CHECK(run_schedule(run, preset("s2")).total() < b);
  }
}

TEST_CASE("the automatic choice picks the schedule with the smaller closed form", "[moe][model]") {
  const Topology t = topo("parm-32gpu");
  const LayerSpec s = paper_layer();
  const Dims d = make_dims(s, 32, 4);
  const AlphaBeta ab = alpha_beta_from_topology(t);
  // beta_inter: the 100 Gb/s NIC (12.5 GB/s) shared by 4 GPUs -> 4 / 12.5e9 s/B.
  CHECK(ab.beta_inter == Approx(4.0 / 12.5e9));
  CHECK(ab.alpha_inter == Approx(5e-6));
  CHECK(ab.beta_intra == Approx(1.0 / 13e9));
  const GpuProfile& gpu = gpu_profile("rtx2080ti");
  const double t1 = model_layer(s, d, preset("s1"), ab, gpu).total();
  const double t2 = model_layer(s, d, preset("s2"), ab, gpu).total();
  CHECK(auto_choice(s, d, ab, gpu) == (t2 < t1 ? "s2" : "s1"));
  // A layer with a tiny dispatch buffer and a huge expert count per round makes S2's
  // W rounds of latency dominate: S1 wins there.
  LayerSpec small = s;
  small.B = 1;
  small.L = 64;
  small.M = 64;
  small.H = 256;
  const Dims ds = make_dims(small, 32, 4);
  CHECK(auto_choice(small, ds, ab, gpu) == "s1");
}

TEST_CASE("impossible layers are rejected with the reason", "[moe][errors]") {
  auto dims = [](const std::string& kv, int P = 32, int gpn = 4) {
    LayerSpec s;
    ScheduleOptions o = preset("s1");
    std::vector<std::string> v;
    std::size_t st = 0;
    while (true) {
      const auto c = kv.find(',', st);
      v.push_back(kv.substr(st, c - st));
      if (c == std::string::npos) break;
      st = c + 1;
    }
    apply_assignments(&s, &o, v, "--set");
    return make_dims(s, P, gpn);
  };
  CHECK_THROWS_WITH(dims("E=12"), Catch::Contains("E=12 experts must be divisible by the expert-parallel size"));
  CHECK_THROWS_WITH(dims("mp=3"), Catch::Contains("mp=3 must divide the GPUs of a node (4)"));
  CHECK_THROWS_WITH(dims("mp=4", 30, 4), Catch::Contains("must divide the number of GPUs P=30"));
  CHECK_THROWS_WITH(dims("B=1,L=8,k=1,f=1e-12"), Catch::Contains("capacity of zero tokens"));
  CHECK_THROWS_WITH(dims("B=1,L=2"), Catch::Contains("must be divisible by mp=4"));
  CHECK_THROWS_WITH(dims("k=40"), Catch::Contains("exceeds the number of experts"));
  CHECK_THROWS_WITH(dims("Q=1"), Catch::Contains("unknown layer key 'Q'"));
  CHECK_THROWS_WITH(dims("B=-4"), Catch::Contains("key 'B': expected an integer >= 1"));
  CHECK_THROWS_WITH(dims("f=abc"), Catch::Contains("capacity factor"));
  CHECK_THROWS_WITH(dims("dtype=fp4"), Catch::Contains("unknown dtype 'fp4': expected fp32, fp16, bf16 or fp8"));
  CHECK_THROWS_WITH(dims("split=sideways"), Catch::Contains("before_gate or after_order"));
  CHECK_THROWS_WITH(preset("s3"), Catch::Contains("unknown schedule 's3'"));
}

TEST_CASE("every searched option combination builds and simulates", "[moe][search]") {
  const Topology t = topo("parm-32gpu");
  const LayerRun run{t, paper_layer(), "flow"};
  const Time s1 = run_schedule(run, preset("s1")).total();
  Time best = Time::max();
  for (const ScheduleOptions& o : search_space()) {
    INFO(o.describe());
    const ScheduleResult r = run_schedule(run, o);
    CHECK(r.total() > Time::zero());
    // Every Parm variant moves the same inter-node bytes as S1 (D/G per AlltoAll).
    CHECK(r.inter_node_bytes == run_schedule(run, preset("s1")).inter_node_bytes);
    best = std::min(best, r.total());
  }
  CHECK(search_space().size() == 30);  // 2 splits x 2 gathers x fusions x 3 chunk counts, less the invalid
  CHECK(best <= s1);                   // S1 is in the space
}

TEST_CASE("with one MP member S1 and S2 are the baseline", "[moe][model]") {
  // mp = 1: no MP-Split, no ESP, the SAA has one inner member; S1 and S2 move
  // the same bytes through the same kernels as DeepSpeed-MoE (docs/parm.md). Within
  // 3% in the simulator and in the closed form.
  const Topology t = topo("parm-32gpu-p2p");
  LayerSpec s = paper_layer();
  s.mp = 1;
  const Dims d = make_dims(s, 32, 4);
  const AlphaBeta ab = alpha_beta_from_topology(t);
  const GpuProfile& gpu = gpu_profile("rtx2080ti");
  for (const char* net : {"flow", "analytical"}) {
    INFO(net);
    const LayerRun run{t, s, net};
    const ScheduleResult b = run_schedule(run, preset("baseline"));
    // S2's four SAAs (one inner member) run W = 32 rounds of NCCL send/recv in
    // sequence, 31 across nodes at 22.4 us (8.4 base + 14 network hop), where
    // the baseline's AlltoAlls send to every peer at once: S2 may exceed the
    // baseline by up to 4 x 31 x 22.4 us = 2.7776 ms of latency.
    const double slack = 4 * 31 * 22.4e-6;
    for (const char* name : {"s1", "s2"}) {
      INFO(name);
      const ScheduleResult r = run_schedule(run, preset(name));
      const double extra = std::string(name) == "s2" ? slack : 0.0;
      CHECK(r.total().to_seconds() >= b.total().to_seconds() * 0.97);
      CHECK(r.total().to_seconds() <= b.total().to_seconds() * 1.03 + extra);
      CHECK(r.inter_node_bytes == b.inter_node_bytes);
      const double mb = model_layer(s, d, preset("baseline"), ab, gpu).total();
      const double mr = model_layer(s, d, preset(name), ab, gpu).total();
      CHECK(mr >= mb * 0.97);
      CHECK(mr <= mb * 1.03 + extra);
    }
  }
}

TEST_CASE("DeepSpeed-MoE's dispatch and combine are dense einsums", "[moe][kernels]") {
  // S = 2048, E = 32, k = 2, f = 1: T_base = 2*2048/32 = 128; M = 1024, b = 4 (fp32).
  LayerSpec s = paper_layer();
  s.f = 1.0;
  const Dims d = make_dims(s, 32, 4);
  const auto base = forward_ops(s, d, preset("baseline"));
  const MoeOp& order = *std::find_if(base.begin(), base.end(), [](const MoeOp& o) { return o.kind == MoeStep::order; });
  const auto ks = kernels(order, s, d);
  // einsum("sec,sm->ecm"): [E*C, S] x [S, M] = 2 * 2048 * 32 * 128 * 1024 = 17179869184 FLOPs.
  REQUIRE(ks.size() == 2);
  CHECK(ks[1].op == OpKind::gemm);
  CHECK(ks[1].flops == 17179869184ULL);
  CHECK(ks[1].shape == std::array<std::int64_t, 4>{4096, 1024, 2048, 1});
  // The gate: fp32 GEMM [S, M] x [M, E] = 2 * 2048 * 1024 * 32 = 134217728 FLOPs, and one host sync.
  const auto gk = kernels(base.front(), s, d);
  CHECK(gk[1].flops == 134217728ULL);
  CHECK(gk[1].dtype == DType::fp32);
  CHECK(gk.back().host_wait == Time::ns(kHostSyncNs));
  // The index dispatch moves rows instead: (S*M + E*C*M) * 4 bytes, no FLOPs.
  LayerSpec idx = s;
  idx.dispatch = Dispatch::index;
  const auto ik = kernels(order, idx, d);
  REQUIRE(ik.size() == 1);
  CHECK(ik[0].flops == 0);
  CHECK(ik[0].bytes == (2048ULL * 1024 + 32ULL * 128 * 1024) * 4);
  // S2 combines G = 4 blocks of S/G = 512 tokens against their own E*T_parm slots
  // (T_parm = 2*512/32 = 32): batch 4 of [512, 32*32] x [32*32, 1024].
  const auto s2 = forward_ops(s, d, preset("s2"));
  const MoeOp& io = *std::find_if(s2.begin(), s2.end(), [](const MoeOp& o) { return o.kind == MoeStep::iorder; });
  CHECK(io.blocks == 4);
  const auto iok = kernels(io, s, d);
  CHECK(iok[1].shape == std::array<std::int64_t, 4>{512, 1024, 1024, 4});
  CHECK(iok[1].flops == 2ULL * 512 * 1024 * 1024 * 4);
}

TEST_CASE("DeepSpeed-MoE 0.14.5 drops the MP duplicates before each AlltoAll", "[moe][sizes]") {
  // Paper layer with f = 1: D = 4194304 (see "message sizes"); G = 4.
  LayerSpec s = paper_layer();
  s.f = 1.0;
  s.ds_moe = DsMoe::v0_14_5;
  const Dims d = make_dims(s, 32, 4);
  const auto f = forward_ops(s, d, preset("baseline"));
  // Two AlltoAlls of D/G = 1048576 (v0.14.4: D), two AllGathers over MP back to D.
  CHECK(of_kind(f, MoeStep::a2a).size() == 2);
  for (const MoeOp* o : of_kind(f, MoeStep::a2a)) CHECK(o->elems == 1048576);
  CHECK(of_kind(f, MoeStep::ag).size() == 2);
  for (const MoeOp* o : of_kind(f, MoeStep::ag)) CHECK(o->elems == 4194304);
  // Backward: the gathers' adjoints are free narrows, the drops' are AllGathers.
  const auto b = backward_ops(f, s, d, preset("baseline"));
  CHECK(of_kind(b, MoeStep::mp_gather_free).size() == 2);
  CHECK(of_kind(b, MoeStep::ag).size() == 2);
  // The simulator moves a quarter of 0.14.4's inter-node bytes.
  const Topology t = topo("parm-32gpu");
  LayerSpec old = s;
  old.ds_moe = DsMoe::v0_14_4;
  const std::uint64_t x5 = run_schedule(LayerRun{t, s, "flow"}, preset("baseline")).inter_node_bytes;
  const std::uint64_t x4 = run_schedule(LayerRun{t, old, "flow"}, preset("baseline")).inter_node_bytes;
  CHECK(x5 * 4 == x4);
}

TEST_CASE("layers whose counts would pass 2^60 are refused, naming the keys", "[moe][errors][overflow]") {
  auto dims = [](const std::vector<std::string>& kv) {
    LayerSpec s;
    ScheduleOptions o = preset("s1");
    apply_assignments(&s, &o, kv, "--set");
    return make_dims(s, 32, 4);
  };
  // 2^32 x 2^32 wrapped the 64-bit FLOP count and printed a plausible time.
  CHECK_THROWS_WITH(dims({"M=4294967296", "H=4294967296"}),
                    Catch::Contains("keys 'M', 'H'") && Catch::Contains("overflows"));
  CHECK_THROWS_WITH(dims({"B=9223372036854775807"}), Catch::Contains("keys 'B', 'L'"));
  CHECK_THROWS_WITH(dims({"B=9223372036854775808"}),
                    Catch::Contains("key 'B': expected an integer in [1, 9223372036854775807]"));
  CHECK_THROWS_WITH(dims({"f=1e20"}), Catch::Contains("'f'") && Catch::Contains("the capacity"));
  CHECK_THROWS_WITH(dims({"f=inf"}), Catch::Contains("capacity factor > 0"));
  CHECK_THROWS_WITH(dims({"M=1099511627776"}), Catch::Contains("'M'") && Catch::Contains("overflows"));
  CHECK_THROWS_WITH(dims({"B=65536", "L=65536", "E=64"}), Catch::Contains("the gate's masks"));
  CHECK_THROWS_WITH(dims({"E=2097152"}), Catch::Contains("key 'E': expected an integer in [1, 1048576]"));
  // Keys stored as int no longer truncate: 2^32 + 4 was mp=4.
  CHECK_THROWS_WITH(dims({"mp=4294967300"}), Catch::Contains("key 'mp': expected an integer in [1, 65536]"));
  CHECK_THROWS_WITH(dims({"chunks=1000000"}), Catch::Contains("key 'chunks': expected an integer in [1, 1024]"));
  // Specs built in code (not through set_key) and clusters of no GPU.
  CHECK_THROWS_WITH(make_dims(paper_layer(), 0, 0), Catch::Contains("at least one GPU"));
  LayerSpec e = paper_layer();
  e.E = std::int64_t{1} << 40;
  CHECK_THROWS_WITH(make_dims(e, 32, 4), Catch::Contains("key 'E'"));

  // Just inside the bound: every count the schedules form is exact.
  LayerSpec s = paper_layer();
  s.M = std::int64_t{1} << 24;
  s.H = std::int64_t{1} << 22;
  const Dims d = make_dims(s, 32, 4);
  for (const std::string& name : preset_names()) {
    const ScheduleOptions o = preset(name);
    auto ops = forward_ops(s, d, o);
    const auto bwd = backward_ops(ops, s, d, o);
    ops.insert(ops.end(), bwd.begin(), bwd.end());
    for (const MoeOp& op : ops) {
      CHECK(op.elems >= 0);
      for (const Kernel& k : kernels(op, s, d)) {
        CHECK(k.flops < (std::uint64_t{1} << 63));
        CHECK(k.bytes < (std::uint64_t{1} << 63));
        if (k.op != OpKind::gemm) continue;
        long double want = 2;
        for (std::int64_t x : k.shape) want *= static_cast<long double>(x);
        if (op.backward && s.ds_moe == DsMoe::lean) continue;
        CHECK(static_cast<long double>(k.flops) == want);
      }
    }
  }
}

TEST_CASE("the closed form times what the simulator runs", "[moe][model]") {
  // Baseline and S1 are chains without overlap: the closed form (the same
  // kernels, each collective by the cost form of its plan with the layer's
  // concurrent groups) must equal the flow simulation; S2 overlaps its two
  // streams, which only the simulator sees, so it may differ, but not by 10%.
  for (const char* name : {"parm-32gpu", "pcie-8gpu"}) {
    INFO(name);
    const Topology t = topo(name);
    for (int mp : {2, 4}) {
      LayerSpec s = paper_layer();
      s.mp = mp;
      s.E = t.num_gpus();
      const LayerRun run{t, s, "flow"};
      for (const char* sched : {"baseline", "s1", "s2"}) {
        INFO(sched << " mp=" << mp);
        const ScheduleResult r = run_schedule(run, preset(sched));
        const double sim = r.total().to_seconds(), model = r.model_total_s();
        if (std::string(sched) == "s2")
          CHECK(std::abs(model / sim - 1) < 0.10);
        else
          CHECK(model == Approx(sim).epsilon(0.005));
      }
    }
  }
}

TEST_CASE("a timing-only graph simulates exactly as the graph with data bindings", "[moe][graph]") {
  // run_schedule simulates graphs built without data bindings; the executors'
  // graphs carry them. Same tasks, names, dependencies and collectives: the
  // simulations must agree to the picosecond, task by task.
  const Topology t = topo("parm-32gpu");
  const LayerSpec s = paper_layer();
  const Dims d = make_dims(s, t.num_gpus(), t.gpus_per_node());
  for (const char* name : {"baseline", "s1", "s2"}) {
    const ScheduleOptions o = preset(name);
    const auto f = forward_ops(s, d, o);
    const auto b = backward_ops(f, s, d, o);
    const TaskGraph bound[] = {build_graph(f, s, d, o), build_backward_graph(f, b, s, d, o)};
    const TaskGraph timing[] = {build_graph(f, s, d, o, GraphData::timing_only),
                                build_backward_graph(f, b, s, d, o, GraphData::timing_only)};
    for (int pass = 0; pass < 2; ++pass) {
      const TaskGraph &gb = bound[pass], &gt = timing[pass];
      CHECK_FALSE(gb.buffers().empty());
      CHECK(gt.buffers().empty());
      REQUIRE(gt.tasks().size() == gb.tasks().size());
      for (std::size_t i = 0; i < gt.tasks().size(); ++i) {
        REQUIRE(gt.task(static_cast<int>(i)).name == gb.task(static_cast<int>(i)).name);
        CHECK(gt.task(static_cast<int>(i)).inputs.empty());
      }
      const SimResult rb = simulate(gb, t, {"flow"}), rt = simulate(gt, t, {"flow"});
      CHECK(rt.makespan == rb.makespan);
      REQUIRE(rt.trace.size() == rb.trace.size());
      for (std::size_t i = 0; i < rt.trace.size(); ++i) {
        CHECK(rt.trace[i].start == rb.trace[i].start);
        CHECK(rt.trace[i].end == rb.trace[i].end);
      }
    }
  }
}
