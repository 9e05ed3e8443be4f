// Hand-derived figures that kill mutants scripts/mutation.sh (or a reviewer)
// found surviving: each expected value is worked out in the comment above it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "sim/calib/calibration.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

// The closed form without a topology (the paper's alpha-beta forms): intra-node
// 1 us + 1 ns/B, inter-node 10 us + 10 ns/B (the alphas differ, so EP groups
// count as inter-node).
AlphaBeta paper_ab() {
  AlphaBeta ab;
  ab.alpha_intra = 1e-6;
  ab.beta_intra = 1e-9;
  ab.alpha_inter = 10e-6;
  ab.beta_inter = 10e-9;
  return ab;
}

double closed_form(const MoeOp& op, int P, int G, const Calibration* cal = nullptr) {
  LayerSpec s;
  s.mp = G;
  Dims d;
  d.P = P;
  d.G = G;
  d.n_ep = P / G;
  d.dtype_bytes = 4;
  const ScheduleOptions o = preset("s2");
  AlphaBeta ab = paper_ab();
  ab.calibration = cal;
  return model_time({op}, s, d, o, ab, gpu_profile("h100"));
}

}  // namespace

TEST_CASE("S2's fused AlltoAll+AllGather in closed form, by hand", "[numbers][moe][model]") {
  MoeOp op{MoeStep::saa};
  op.elems = 1'000'000;  // 4e6 bytes per rank
  // P = 8, G = 2: W = N_EP = 4 rounds of chunk 1e6 B. One round's AlltoAll
  // tx = 10 us + 1e6 x 10 ns = 10.010 ms; its gather to the G - 1 = 1 node peer
  // tg = 1 us + 1 x 1e6 x 1 ns = 1.001 ms. Gather i ends at max(i tx, end of i-1) + tg:
  // 1.001, 11.011, 21.021, 31.031 ms; the layer waits for max(31.031, 3 tx = 30.030).
  CHECK(closed_form(op, 8, 2) == Approx(31.031e-3).epsilon(1e-12));
  // P = 8, G = 4: W = 2 rounds of 2e6 B: tx = 10 us + 2e6 x 10 ns = 20.010 ms,
  // tg = 1 us + 3 x 2e6 x 1 ns = 6.001 ms: gathers end at 6.001, 26.011 ms.
  CHECK(closed_form(op, 8, 4) == Approx(26.011e-3).epsilon(1e-12));
  // Gathers slower than the AlltoAll rounds queue behind each other: P = 64, G = 32,
  // W = 2 rounds of 2e6 B, tx = 20.010 ms, tg = 1 us + 31 x 2e6 x 1 ns = 62.001 ms:
  // gathers end at 62.001 and max(20.010, 62.001) + 62.001 = 124.002 ms.
  CHECK(closed_form(op, 64, 32) == Approx(124.002e-3).epsilon(1e-12));
}

TEST_CASE("a ReduceScatter pipelined into S2's SAA in chunks, closed form by hand", "[numbers][moe][model]") {
  MoeOp op{MoeStep::rs_then};
  op.elems = 2'000'000;  // 8e6 bytes
  op.then = MoeStep::saa;
  op.chunks = 2;
  // P = 8, G = 2, two chunks of 4e6 B. ReduceScatter of a chunk over G = 2 (ring form):
  // t1 = (2 - 1) x 1 us + 4e6 x 1/2 x 1 ns = 2.001 ms. The SAA of its 4e6 / G = 2e6 B:
  // W = 4 rounds of 5e5 B, tx = 10 us + 5 ms = 5.010 ms, tg = 1 us + 0.5 ms = 0.501 ms,
  // gathers end at 0.501, 5.511, 10.521, 15.531 ms: t2 = 15.531 ms. Two stages, two
  // chunks: t1 + max(t1, t2) + t2 = 2.001 + 15.531 + 15.531 = 33.063 ms (without the
  // overlap it would be 2 (t1 + t2) = 35.064 ms).
  CHECK(closed_form(op, 8, 2) == Approx(33.063e-3).epsilon(1e-12));
  op.chunks = 1;
  // One chunk: rs(8e6) = 1 us + 4 ms = 4.001 ms; SAA of 4e6 B = 31.031 ms (above): 35.032 ms.
  CHECK(closed_form(op, 8, 2) == Approx(35.032e-3).epsilon(1e-12));
}

TEST_CASE("calibrated kernel tables: log-log between points, the fitted line outside", "[numbers][calib]") {
  KernelTable k;
  k.points = {{1e6, 10e-6}, {1e8, 1e-3}};
  k.alpha = 5e-6;
  k.beta = 1e-11;
  // x = 1e7 is halfway between 1e6 and 1e8 in log x: t = sqrt(10e-6 x 1e-3) = 100 us.
  CHECK(k.time(1e7).to_us() == Approx(100.0).epsilon(1e-9));
  // x = 1e6 x 10^0.5, a quarter of the way in log x: t = 10 us x (1000 / 10)^0.25 = 31.6227766 us
  // (rounded to the picosecond).
  CHECK(k.time(1e6 * std::pow(10.0, 0.5)).to_us() == Approx(31.6227766017).epsilon(1e-7));
  CHECK(k.time(1e8).to_us() == Approx(1000.0).epsilon(1e-12));
  // Beyond the points, the line: 5 us + 1e9 x 1e-11 s = 10.005 ms; below, 5 us + 1e5 x 1e-11 s = 6 us.
  CHECK(k.time(1e9).to_us() == Approx(10'005.0).epsilon(1e-12));
  CHECK(k.time(1e5).to_us() == Approx(6.0).epsilon(1e-9));
}

TEST_CASE("model: the data-parallel gradient AllReduce is that AllReduce, simulated on its own", "[numbers][model]") {
  const Topology topo = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  ModelSpec m = load_model_spec(std::string(PARMSIM_SOURCE_DIR) + "/experiments/bert-moe.yaml");
  m.grad_bucket = 0;  // one AllReduce after the backward pass
  const auto it = run_model(m, topo);
  // 20593536 dense gradient elements per MP rank (derived in test_model.cpp), fp32:
  // 82374144 bytes, AllReduced over each of the G = 4 EP groups {g, g + 4, ..., g + 28}
  // at once (they share the nodes' NICs), NCCL's choice, flow network.
  TaskGraphBuilder b(32);
  b.add_stream_all("comm");
  for (int g = 0; g < 4; ++g) {
    Collective c;
    c.op = CollOp::allreduce;
    c.bytes = 20593536ULL * 4;
    for (int r = g; r < 32; r += 4) c.group.push_back(r);
    c.name = "dp" + std::to_string(g);
    b.add_collective_tasks(c, "comm", c.name);
  }
  const Time alone = simulate(std::move(b).build(), topo, SimOptions{"flow"}).makespan;
  REQUIRE(it.size() == 3);
  for (const auto& r : it) {
    CAPTURE(r.schedule);
    CHECK(r.grad_sync.allreduce == alone);
    CHECK(r.grad_sync.exposed() == alone);
  }
}

TEST_CASE("NCCL's estimates for every algorithm and protocol on one 8 x H100 node, by hand", "[numbers][nccl]") {
  // One DGX H100: the ring/tree graph has 12 channels of 30 GB/s (tests/test_nccl.cpp), so the
  // raw bus bandwidth is 360 GB/s; n = 8 ranks, N = 1 node, Hopper (docs/collectives.md, section 3).
  // Each hop is max(NCCL's constant, the topology's GPU -> NVSwitch -> GPU route, 2 x 0.7 = 1.4 us).
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  std::vector<int> g = {0, 1, 2, 3, 4, 5, 6, 7};
  const NcclSystem s = nccl_system(g, t);
  const auto est = [&](NcclAlgo a, NcclProto p) {
    const auto e = nccl_estimate(CollOp::allreduce, s, a, p, 0, 1 << 30);
    REQUIRE(e.has_value());
    return *e;
  };
  // Ring Simple: 360 x 8/14 = 205.714 GB/s; 8.4 + 14 steps x 3.4 = 56.0 us.
  CHECK(est(NcclAlgo::ring, NcclProto::simple).bw_GBps == Approx(360.0 * 8 / 14));
  CHECK(est(NcclAlgo::ring, NcclProto::simple).lat_us == Approx(56.0));
  // Ring LL128: min(360 x 0.92 = 331.2, 12 x 36.7 = 440.4) x 8/14 = 189.257; 14.0 + 14 x 1.9 = 40.6 us.
  CHECK(est(NcclAlgo::ring, NcclProto::ll128).bw_GBps == Approx(331.2 * 8 / 14));
  CHECK(est(NcclAlgo::ring, NcclProto::ll128).lat_us == Approx(40.6));
  // Tree Simple: min(360 x 0.92, 12 x 38.7 = 464.4) = 331.2, x 1/2 = 165.6; 8.4 + 2 x 7 x 4.0 = 64.4 us.
  CHECK(est(NcclAlgo::tree, NcclProto::simple).bw_GBps == Approx(165.6));
  CHECK(est(NcclAlgo::tree, NcclProto::simple).lat_us == Approx(64.4));
  // Tree LL128 (one node: x 7/9): min(331.2 x 7/9 = 257.6, 12 x 36.7 = 440.4), x 1/2 = 128.8;
  // 14.0 + 2 x 7 x max(1.25, 0.4) = 31.5 us.
  CHECK(est(NcclAlgo::tree, NcclProto::ll128).bw_GBps == Approx(128.8));
  CHECK(est(NcclAlgo::tree, NcclProto::ll128).lat_us == Approx(31.5));
  // Tree LL: min(331.2 / 3.8 = 87.158, llMax 141), x 1/2 = 43.579; 6.8 + 2 x 7 x max(0.6, 0.4) = 15.2 us.
  CHECK(est(NcclAlgo::tree, NcclProto::ll).bw_GBps == Approx(331.2 / 3.8 / 2));
  CHECK(est(NcclAlgo::tree, NcclProto::ll).lat_us == Approx(15.2));
}

TEST_CASE("NCCL's tree AllReduce on two Blackwell nodes is capped per channel", "[numbers][nccl]") {
  // Two DGX-like nodes of B200 (dgx-h100 with gpu=b200): 8 channels (one ring per NIC). The tree
  // AllReduce's bus bandwidth is min(channels x speed x 0.92, channels x perChMaxTree[Blackwell][2
  // nodes] = 8 x 42.8 = 342.4); NVLink5's speed makes the cap bind. Each NIC shares its PCIe switch
  // with one GPU, so NCCL's tree is the plain pattern (tuning.cc line 336: x 0.85), then x 1/2:
  // 342.4 x 0.85 / 2 = 145.52 GB/s.
  const Topology t =
      load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2", "gpu=b200"});
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  const NcclSystem s = nccl_system(g, t);
  const NcclGraph r = nccl_ring_graph(s);
  REQUIRE(r.channels == 8);
  REQUIRE(r.bw_intra * 0.92 > 42.8);  // the cap binds
  const auto e = nccl_estimate(CollOp::allreduce, s, NcclAlgo::tree, NcclProto::simple, 0, 1 << 30);
  REQUIRE(e.has_value());
  REQUIRE(s.tree_pattern_simple);
  CHECK(e->bw_GBps == Approx(8 * 42.8 * 0.85 / 2));
}

TEST_CASE("the closed form takes a measured collective for groups of two", "[numbers][moe][model][calib]") {
  // An MP AllGather over G = 2 of 1e6 elements (4e6 B). Without a calibration, the ring
  // form: (2 - 1) x 1 us + 4e6 x 1/2 x 1 ns = 2.001 ms. With a measured AllGather of 2
  // ranks inside a node, 5 us + 4e6 B / 1 GB/s = 4.005 ms.
  MoeOp op{MoeStep::ag};
  op.group = GroupKind::mp;
  op.elems = 1'000'000;
  CHECK(closed_form(op, 8, 2) == Approx(2.001e-3).epsilon(1e-12));
  Calibration cal;
  CalibratedCollective c;
  c.op = CollOp::allgather;
  c.ranks = 2;
  c.inter = false;
  c.alpha = Time::us(5);
  c.bandwidth = 1'000'000'000;
  cal.collectives.push_back(c);
  CHECK(closed_form(op, 8, 2, &cal) == Approx(4.005e-3).epsilon(1e-12));
}

TEST_CASE("NCCL's tree LL latency over PCIe nodes, by hand", "[numbers][nccl]") {
  // parm-32gpu: 8 nodes of 4 GPUs on PCIe, one NIC each. Tree LL AllReduce over all 32. Hops: NCCL's PCIe
  // 1.0 or the topology's GPU -> switch -> CPU -> switch -> GPU (no P2P), 4 x 0.5 = 2.0 us; NCCL's network
  // 5.0 or GPU -> switch -> CPU -> NIC -> switch -> NIC -> CPU -> switch -> GPU (no GDR),
  // 6 x 0.5 + 2 x 1 = 5.0 us. Base 6.8 + 2 ((32/8 - 1) x 2.0 + log2 8 x 5.0) = 6.8 + 2 (6 + 15) = 48.8 us.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  std::vector<int> g;
  for (int r = 0; r < 32; ++r) g.push_back(r);
  const auto e = nccl_estimate(CollOp::allreduce, nccl_system(g, t), NcclAlgo::tree, NcclProto::ll, 0, 1024);
  REQUIRE(e.has_value());
  CHECK(e->lat_us == Approx(48.8));
}

TEST_CASE("NCCL's tree AllReduce across two nodes moves its data up and down both trees", "[numbers][nccl]") {
  // Two DGX H100, 16 ranks, tree Simple (no protocol overhead), 1 GiB. Between the two nodes each
  // of the two trees has one edge, spread over the 8 rails: half the data per tree, 1/8 per
  // rail, reduced up (child -> parent) and broadcast down (parent -> child):
  // 2 trees x 8 rails x 2 directions x 2^30 / 2 / 8 B = 2^31 B across nodes.
  const Topology t =
      load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2"});
  TaskGraphBuilder b(16);
  b.add_stream_all("comm");
  Collective c;
  c.name = "c";
  c.op = CollOp::allreduce;
  c.bytes = 1ULL << 30;
  c.algo = "tree";
  c.proto = "simple";
  for (int r = 0; r < 16; ++r) c.group.push_back(r);
  b.add_collective_tasks(c, "comm", "c");
  const SimResult r = simulate(std::move(b).build(), t, SimOptions{"flow"});
  CHECK(r.inter_node_bytes == (1ULL << 31));
}

TEST_CASE("model: a dense GEMM's FLOPs are 2 m n k (seen through a calibrated kernel table)", "[numbers][model][calib]") {
  // BERT-MoE's QKV projection: [S, M] x [M, 3M/G] with S = B L = 8 x 512 = 4096, M = 768, G = 4:
  // 2 x 4096 x 576 x 768 = 3623878656 FLOPs. A calibration table for "qkv_gemm" that costs 1 ns per
  // FLOP (no points: the line) makes the attention block's forward pass 3.624 s plus its other
  // kernels and its MP AllReduce (milliseconds).
  const Topology topo = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  const ModelSpec m = load_model_spec(std::string(PARMSIM_SOURCE_DIR) + "/experiments/bert-moe.yaml");
  Calibration cal;
  KernelTable k;
  k.name = "qkv_gemm";
  k.op = OpKind::gemm;
  k.dtype = DType::fp32;
  k.alpha = 0;
  k.beta = 1e-9;
  cal.kernels.push_back(k);
  const auto it = run_model(m, topo, &cal);
  REQUIRE(!it.empty());
  const Component& attn = it[0].parts[1];
  REQUIRE(attn.name == "attention");
  const double flops = 2.0 * 4096 * 576 * 768;
  CHECK(attn.forward.to_seconds() >= flops * 1e-9);
  CHECK(attn.forward.to_seconds() <= flops * 1e-9 + 0.05);
}

TEST_CASE("textbook ring AllGather: chunks of ceil(S / p) bytes", "[numbers][coll]") {
  // 9 bytes over one DGX H100's 8 GPUs: each rank forwards p - 1 = 7 chunks of ceil(9 / 8) = 2 B,
  // 8 x 7 x 2 = 112 B in all (17 bytes: ceil(17 / 8) = 3 B, 168 B).
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  for (const auto& [bytes, moved] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{9, 112}, {17, 168}}) {
    TaskGraphBuilder b(8);
    b.add_stream_all("comm");
    Collective c;
    c.name = "c";
    c.op = CollOp::allgather;
    c.bytes = bytes;
    c.algo = "flat_ring";
    for (int r = 0; r < 8; ++r) c.group.push_back(r);
    b.add_collective_tasks(c, "comm", "c");
    const SimResult r = simulate(std::move(b).build(), t, SimOptions{"analytical"});
    CAPTURE(bytes);
    CHECK(r.intra_node_bytes == moved);
  }
}

TEST_CASE("NCCL's tree AllReduce on four Blackwell nodes is capped per channel", "[numbers][nccl]") {
  // Beyond two nodes the tree runs at the network speed per channel, capped at perChMaxTree
  // [Blackwell][3+ nodes] = 24 GB/s: the 48 GB/s rails make the cap bind, so the bus bandwidth is
  // channels x 24, x 0.85 for the plain tree pattern (one GPU per NIC switch, tuning.cc line 336),
  // and the algorithm bandwidth half of it.
  const Topology t =
      load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=4", "gpu=b200"});
  std::vector<int> g;
  for (int r = 0; r < 32; ++r) g.push_back(r);
  const NcclSystem s = nccl_system(g, t);
  const NcclGraph r = nccl_ring_graph(s);
  REQUIRE(r.bw_inter * 0.92 > 24.0);  // the cap binds
  const auto e = nccl_estimate(CollOp::allreduce, s, NcclAlgo::tree, NcclProto::simple, 0, 1 << 30);
  REQUIRE(e.has_value());
  CHECK(e->bw_GBps == Approx(r.channels * 24.0 * 0.85 / 2));
}

TEST_CASE("NCCL's channel speed across nodes is a rung of the GPU generation's ladder", "[numbers][nccl]") {
  // Two B200 nodes whose rails run at 23 GB/s (184 Gb/s): Blackwell's inter-node ladder
  // (search.cc) is 96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, ...; the top rung at most 23 is 22.
  // A ring AllReduce over the 16 GPUs then runs 8 channels x 22 GB/s, x 16/30 = 93.867 GB/s.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml",
                                   {"nodes=2", "gpu=b200", "fabric.bandwidth=184Gbps"});
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  const NcclSystem s = nccl_system(g, t);
  const NcclGraph r = nccl_ring_graph(s);
  CHECK(r.channels == 8);
  CHECK(r.bw_inter == Approx(22.0));
  const auto e = nccl_estimate(CollOp::allreduce, s, NcclAlgo::ring, NcclProto::simple, 0, 1 << 30);
  REQUIRE(e.has_value());
  CHECK(e->bw_GBps == Approx(8 * 22.0 * 16 / 30));
}

TEST_CASE("GPU profiles carry their sources' figures", "[numbers][gemm]") {
  // A100 SXM4 (the profile's cited sources): 108 SMs; 19.5 FP32, 156 TF32, 312 FP16, 312 BF16
  // TFLOP/s peak; cuBLAS sustains 19.18 FP32, 258.74 FP16, 264.53 BF16 TFLOP/s.
  const GpuProfile& a = gpu_profile("a100");
  CHECK(a.sm_count == 108);
  CHECK(a.peak_fp32 == 19.5e12);
  CHECK(a.peak_tf32 == 156e12);
  CHECK(a.peak_fp16 == 312e12);
  CHECK(a.peak_bf16 == 312e12);
  CHECK(a.sustained_fp32 == 19.18e12);
  CHECK(a.sustained_fp16 == 258.74e12);
  CHECK(a.sustained_bf16 == 264.53e12);
}

TEST_CASE("NCCL's ring latency across two nodes: intra hops at least the network overhead", "[numbers][nccl]") {
  // Two DGX H100 (n = 16, N = 2), ring LL AllReduce: nsteps = 2 (n - 1) = 30, of which 2 (N - 1) = 2
  // cross the network at 2.7 us; the other 28 cost max(NVLink hop 0.6, network overhead 1.0 (Intel))
  // = 1.0: 6.6 + 28 x 1.0 + 2 x 2.7 = 40.0 us, with NCCL's tables alone (the machine's hops left out).
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2"});
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  NcclSystem s = nccl_system(g, t);
  const auto m = nccl_estimate(CollOp::allreduce, s, NcclAlgo::ring, NcclProto::ll, 0, 1024);
  s.intra_hop_us = s.inter_hop_us = 0;
  const auto e = nccl_estimate(CollOp::allreduce, s, NcclAlgo::ring, NcclProto::ll, 0, 1024);
  REQUIRE(e.has_value());
  CHECK(e->lat_us == Approx(40.0));
  // The topology's hops: NVLink 2 x 0.2 = 0.4 us, below the 1.0 us network overhead that bounds an
  // intra-node step across nodes; network 4 us, above NCCL's 2.7: 6.6 + 28 x 1.0 + 2 x 4.0 = 42.6 us.
  REQUIRE(m.has_value());
  CHECK(m->lat_us == Approx(42.6));
}

TEST_CASE("hierarchical AlltoAll: half of every send buffer crosses to the other node", "[numbers][coll]") {
  // Two DGX H100, 16 ranks, 16 MiB per rank: each rank's data for the 8 ranks of the other node,
  // 8 MiB, crosses once (gathered per rail): 16 x 8 MiB = 128 MiB across nodes.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2"});
  TaskGraphBuilder b(16);
  b.add_stream_all("comm");
  Collective c;
  c.name = "c";
  c.op = CollOp::alltoall;
  c.bytes = 16ULL << 20;
  c.algo = "hierarchical";
  for (int r = 0; r < 16; ++r) c.group.push_back(r);
  b.add_collective_tasks(c, "comm", "c");
  const SimResult r = simulate(std::move(b).build(), t, SimOptions{"analytical"});
  CHECK(r.inter_node_bytes == 128ULL << 20);
}

TEST_CASE("NCCL's ring Simple latency across two nodes, by hand", "[numbers][nccl]") {
  // Two DGX H100, ring Simple AllReduce of 1 KiB (4 B per runtime channel and rank: below 64, no
  // x1.4): the 28 intra steps cost max(NVLink Simple hop 3.4, network overhead 1.0 x 3) = 3.4, the
  // 2 network steps 14.0: 8.4 + 28 x 3.4 + 2 x 14.0 = 131.6 us.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2"});
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  const auto e = nccl_estimate(CollOp::allreduce, nccl_system(g, t), NcclAlgo::ring, NcclProto::simple, 0, 1024);
  REQUIRE(e.has_value());
  CHECK(e->lat_us == Approx(131.6));
}

TEST_CASE("NCCL's tree LL128 across two nodes: x 120/128, then the per-channel cap", "[numbers][nccl]") {
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  auto at = [&](const char* nic) {
    return nccl_system(g, load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-a100.yaml",
                                        {"nodes=2", std::string("fabric.bandwidth=") + nic}));
  };
  // Two DGX A100 on a 50 Gb/s (6.25 GB/s) fabric: the ring's channel speed is the pre-Hopper ladder's
  // rung 6, 8 channels; the tree's intra speed climbs 7, 9, 10, 12 (= 2 x 6; 8 x 12 = 96 <= 240) and
  // 2-node trees are costed at it. Tree AllReduce: min(8 x 12 x 0.92 = 88.32, 8 x 23.6 = 188.8) = 88.32;
  // LL128 across nodes: min(88.32 x 120/128 = 82.8, 8 x 20 = 160) = 82.8; x 1/2 = 41.4 GB/s.
  const NcclSystem s50 = at("50Gbps");
  REQUIRE(nccl_ring_graph(s50).channels == 8);
  REQUIRE(nccl_ring_graph(s50).bw_intra == Approx(6.0));
  REQUIRE(nccl_tree_graph(s50).bw_intra == Approx(12.0));
  const auto e50 = nccl_estimate(CollOp::allreduce, s50, NcclAlgo::tree, NcclProto::ll128, 0, 1 << 30);
  REQUIRE(e50.has_value());
  CHECK(e50->bw_GBps == Approx(41.4));
  // On 100 Gb/s (12.5 GB/s): ring rung 12, tree intra 24 (15, 18, 20, 24 = 2 x 12): min(8 x 24 x 0.92 =
  // 176.64, 188.8) = 176.64; LL128: min(176.64 x 120/128 = 165.6, 8 x 20 = 160) = 160, the per-channel
  // cap; x 1/2 = 80 GB/s.
  const NcclSystem s100 = at("100Gbps");
  REQUIRE(nccl_ring_graph(s100).bw_intra == Approx(12.0));
  REQUIRE(nccl_tree_graph(s100).bw_intra == Approx(24.0));
  const auto e100 = nccl_estimate(CollOp::allreduce, s100, NcclAlgo::tree, NcclProto::ll128, 0, 1 << 30);
  REQUIRE(e100.has_value());
  CHECK(e100->bw_GBps == Approx(80.0));
}

TEST_CASE("a layer with no experts or no choices is refused", "[numbers][moe][errors]") {
  LayerSpec s;
  s.k = 0;
  CHECK_THROWS_WITH(make_dims(s, 32, 4), Catch::Contains("must be at least 1"));
  s.k = 2;
  s.E = 0;
  CHECK_THROWS_WITH(make_dims(s, 32, 4), Catch::Contains("must be at least 1"));
}

TEST_CASE("a calibration file's kernel table: every point read, log-log between them", "[numbers][calib]") {
  const std::string path = (std::filesystem::temp_directory_path() / "parmsim-numbers-kernels.yaml").string();
  {
    std::ofstream f(path);
    f << "kernels:\n  - {name: k1, op: gemm, dtype: fp32, points_us: [[1000000, 10], [100000000, 1000]]}\n";
  }
  const Calibration cal = load_calibration(path);
  std::remove(path.c_str());
  const KernelTable* k = cal.kernel("k1", DType::fp32);
  REQUIRE(k != nullptr);
  REQUIRE(k->points.size() == 2);
  // x = 1e7: halfway in log x between (1e6, 10 us) and (1e8, 1000 us): sqrt(10 x 1000) = 100 us.
  CHECK(k->time(1e7).to_us() == Approx(100.0).epsilon(1e-9));
  CHECK(k->time(1e6).to_us() == Approx(10.0).epsilon(1e-9));
}

TEST_CASE("the lean baseline's backward: the ESP AllReduce follows the experts, in place", "[numbers][moe]") {
  // Forward (ds_moe=lean): ..., AlltoAll, experts, AllReduce_ESP(D), AlltoAll, ... The AllReduce's
  // adjoint is the identity and fc1's input gradient needs one after the experts: the backward
  // list keeps AlltoAll, experts, AllReduce, AlltoAll in that order (the pair swapped, nothing else).
  LayerSpec s;
  s.ds_moe = DsMoe::lean;
  const Dims d = make_dims(s, 32, 4);
  const ScheduleOptions o = preset("baseline");
  const auto fwd = forward_ops(s, d, o);
  const auto bwd = backward_ops(fwd, s, d, o);
  int seen = 0;
  for (std::size_t i = 0; i < bwd.size(); ++i)
    if (bwd[i].kind == MoeStep::ar && bwd[i].group == GroupKind::esp) {
      ++seen;
      REQUIRE(i >= 2);
      REQUIRE(i + 1 < bwd.size());
      CHECK(bwd[i - 1].kind == MoeStep::experts);
      CHECK(bwd[i - 2].kind == MoeStep::a2a);
      CHECK(bwd[i + 1].kind == MoeStep::a2a);
    }
  CHECK(seen == 1);
}

TEST_CASE("NCCL's tree correction factors scale the tree's bandwidth by size", "[numbers][nccl]") {
  // treeCorrectionFactor[LL] (tuning.cc) at log2(bytes / 64) = 18, 19, 20 (16, 32, 64 MiB): 0.9, 1.0,
  // 1.0; everything else about a tree LL AllReduce on two DGX H100 is the same at these sizes.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {"nodes=2"});
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  const NcclSystem s = nccl_system(g, t);
  const auto bw = [&](std::uint64_t bytes) {
    const auto e = nccl_estimate(CollOp::allreduce, s, NcclAlgo::tree, NcclProto::ll, 0, bytes);
    REQUIRE(e.has_value());
    return e->bw_GBps;
  };
  CHECK(bw(32 << 20) / bw(16 << 20) == Approx(1.0 / 0.9));
  CHECK(bw(64 << 20) / bw(32 << 20) == Approx(1.0));
}

TEST_CASE("NCCL's inter-node channel speed on Hopper: the ladder's top rung at most the rail", "[numbers][nccl]") {
  // Two DGX H100 on a 256 Gb/s (32 GB/s) rail fabric: Hopper's inter-node ladder is 48, 45, 42,
  // 40, 30, 24, ...; the top rung at most 32 is 30.
  const Topology t = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml",
                                   {"nodes=2", "fabric.bandwidth=256Gbps"});
  std::vector<int> g;
  for (int r = 0; r < 16; ++r) g.push_back(r);
  CHECK(nccl_ring_graph(nccl_system(g, t)).bw_inter == Approx(30.0));
}

TEST_CASE("layer --set assigns every builder option it names", "[numbers][moe]") {
  // Each option set away from the s1 preset's value reads back as set (and names the schedule custom).
  LayerSpec s;
  ScheduleOptions o = preset("s1");
  apply_assignments(&s, &o,
                    {"fuse_dispatch=" + std::string(o.fuse_dispatch ? "0" : "1"),
                     "fuse_combine=" + std::string(o.fuse_combine ? "0" : "1"), "chunks=4"},
                    "--set");
  const ScheduleOptions p = preset("s1");
  CHECK(o.fuse_dispatch != p.fuse_dispatch);
  CHECK(o.fuse_combine != p.fuse_combine);
  CHECK(o.chunks == 4);
  CHECK(o.name == "custom");
}

