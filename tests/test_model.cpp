#include <catch2/catch.hpp>

#include <map>

#include "sim/moe/model.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

// AllReduce times by bucket size, given by hand; a size not listed fails the test.
struct FakeAllReduce {
  std::map<std::int64_t, Time> times;
  std::vector<std::int64_t> asked;
  Time operator()(std::int64_t elems) {
    asked.push_back(elems);
    const auto it = times.find(elems);
    REQUIRE(it != times.end());
    return it->second;
  }
};

GradSync timeline(const std::vector<BackwardStep>& steps, std::int64_t bucket, FakeAllReduce& ar) {
  return grad_sync_timeline(steps, bucket, [&](std::int64_t e) { return ar(e); });
}

// Three layers' backward passes (last layer first), 10 us each, 4 gradient elements each.
const std::vector<BackwardStep> kThree = {{Time::us(10), 4}, {Time::us(10), 4}, {Time::us(10), 4}};

ModelSpec bert(std::int64_t grad_bucket) {
  ModelSpec m = load_model_spec(std::string(PARMSIM_SOURCE_DIR) + "/experiments/bert-moe.yaml");
  m.grad_bucket = grad_bucket;
  return m;
}

Time part(const IterationResult& r, const std::string& name) {
  for (const Component& c : r.parts)
    if (c.name == name) return (c.forward + c.backward) * c.count;
  FAIL("no component " << name);
  return Time::zero();
}

}  // namespace

TEST_CASE("bucketed gradient AllReduce: three layers, two buckets, by hand", "[model][grad_sync]") {
  // Bucket of 8 elements. Layer 3 ends at 10 us (4 elements), layer 2 at 20 us
  // (8: the bucket is full) -> bucket 1 = {3, 2}, ready at 20, AllReduce(8) =
  // 15 us on the comm stream from 20 to 35, behind layer 1's backward (20..30)
  // and 5 us past it. Bucket 2 = {1}, ready at 30, but the comm stream is busy
  // until 35: AllReduce(4) = 7 us from 35 to 42. Compute ends at 30, the
  // iteration's backward at 42: 12 us exposed, 22 - 12 = 10 us hidden.
  FakeAllReduce ar{{{8, Time::us(15)}, {4, Time::us(7)}}};
  const GradSync g = timeline(kThree, 8, ar);
  CHECK(ar.asked == std::vector<std::int64_t>{8, 4});
  CHECK(g.bucket_elems == std::vector<std::int64_t>{8, 4});
  CHECK(g.compute == Time::us(30));
  CHECK(g.allreduce == Time::us(22));
  CHECK(g.end == Time::us(42));
  CHECK(g.exposed() == Time::us(12));
  CHECK(g.hidden() == Time::us(10));
}

TEST_CASE("bucketed gradient AllReduce: one bucket per layer", "[model][grad_sync]") {
  // Buckets of 4: ready at 10, 20, 30 us. A fast AllReduce(4) = 7 us runs
  // 10..17, 20..27, 30..37: only the last is exposed (7 us).
  FakeAllReduce fast{{{4, Time::us(7)}}};
  const GradSync g = timeline(kThree, 4, fast);
  CHECK(g.buckets() == 3);
  CHECK(g.end == Time::us(37));
  CHECK(g.exposed() == Time::us(7));
  // A slow one, 12 us, queues: 10..22, 22..34, 34..46: 16 us exposed.
  FakeAllReduce slow{{{4, Time::us(12)}}};
  const GradSync s = timeline(kThree, 4, slow);
  CHECK(s.end == Time::us(46));
  CHECK(s.exposed() == Time::us(16));
  CHECK(s.hidden() == Time::us(20));
  // A layer with more gradients than the bucket is a bucket alone (as DeepSpeed reduces an
  // oversized parameter by itself): buckets of 3 give the same three AllReduces of 4.
  FakeAllReduce fast3{{{4, Time::us(7)}}};
  CHECK(timeline(kThree, 3, fast3).bucket_elems == std::vector<std::int64_t>{4, 4, 4});
}

TEST_CASE("bucketed gradient AllReduce: steps without gradients only move the clock", "[model][grad_sync]") {
  // Output head first (5 us, no gradients here), then the three layers: bucket 1 ready
  // at 25, AllReduce(8) 25..40; bucket 2 ready at 35, AllReduce(4) 40..47; compute ends at 35.
  std::vector<BackwardStep> steps = {{Time::us(5), 0}};
  steps.insert(steps.end(), kThree.begin(), kThree.end());
  FakeAllReduce ar{{{8, Time::us(15)}, {4, Time::us(7)}}};
  const GradSync g = timeline(steps, 8, ar);
  CHECK(g.compute == Time::us(35));
  CHECK(g.end == Time::us(47));
  CHECK(g.exposed() == Time::us(12));
}

TEST_CASE("grad_bucket none: one AllReduce of everything after the backward pass", "[model][grad_sync]") {
  FakeAllReduce ar{{{12, Time::us(25)}}};
  const GradSync g = timeline(kThree, 0, ar);
  CHECK(ar.asked == std::vector<std::int64_t>{12});
  CHECK(g.end == Time::us(30 + 25));
  CHECK(g.exposed() == Time::us(25));
  CHECK(g.hidden() == Time::zero());
  FakeAllReduce none{};
  const GradSync z = timeline({{Time::us(10), 0}}, 0, none);  // no data-parallel gradients
  CHECK(z.buckets() == 0);
  CHECK(z.end == Time::us(10));
}

TEST_CASE("bucketed gradient AllReduce: bounds, on many random-ish cases", "[model][grad_sync]") {
  // max(compute, all AllReduces) <= end <= compute + all AllReduces, for any bucket size.
  std::vector<BackwardStep> steps;
  std::int64_t total = 0;
  for (int i = 0; i < 25; ++i) {
    steps.push_back({Time::us(3 + (i * 7) % 11), (i * 13) % 9});
    total += steps.back().grad_elems;
  }
  for (std::int64_t bucket : {0, 1, 2, 5, 8, 17, 40, 1000}) {
    const GradSync g = grad_sync_timeline(steps, bucket, [](std::int64_t e) { return Time::us(4 + 2 * e); });
    CAPTURE(bucket);
    CHECK(g.end >= std::max(g.compute, g.allreduce));
    CHECK(g.end <= g.compute + g.allreduce);
    std::int64_t sum = 0;
    for (std::int64_t e : g.bucket_elems) {
      CHECK((bucket <= 0 || e <= std::max<std::int64_t>(bucket, 8)));  // 8: the largest step
      sum += e;
    }
    CHECK(sum == total);
  }
}

TEST_CASE("BERT-MoE iteration: the gradient AllReduce against the backward pass", "[model][grad_sync]") {
  const Topology topo = load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  // Dense (data-parallel) gradient elements per MP rank, M=768, H=3072, G=4, E=32, V=30522, L=512:
  //   attention 4*768*768/4 + 4*768 = 592896 per block, dense FFN 2*768*3072/4 = 1179648,
  //   MoE gate 768*32 = 24576, embeddings 30522*768/4 + 512*768 = 6253440;
  //   12*592896 + 6*1179648 + 6*24576 + 6253440 = 20593536.
  const std::int64_t all = 20593536;
  const auto none = run_model(bert(0), topo);
  const auto ds = run_model(bert(ModelSpec::kDeepSpeedReduceBucketSize), topo);
  // DDP's 25 MiB of fp32. Backward order: blocks 11 (MoE) .. 0, FFN/MoE before attention, then the
  // embeddings. Filling 6553600: blocks 11..7 and block 7's attention = 5397504 (block 6's FFN would
  // overflow); blocks 6..2 = 6552576 (block 1's gate would overflow); blocks 1..0 = 2390016; then the
  // embeddings alone, 6253440.
  const auto ddp = run_model(bert(6553600), topo);
  REQUIRE(none.size() == 3);
  for (std::size_t i = 0; i < none.size(); ++i) {
    CAPTURE(none[i].schedule);
    const GradSync& n = none[i].grad_sync;
    CHECK(n.bucket_elems == std::vector<std::int64_t>{all});
    CHECK(n.hidden() == Time::zero());
    // The backward compute stream is the backward components, end to end.
    CHECK(n.compute == part(none[i], "embedding_and_head") - none[i].parts[0].forward +
                           (none[i].parts[1].backward * none[i].parts[1].count) +
                           (none[i].parts[2].backward * none[i].parts[2].count) +
                           (none[i].parts[3].backward * none[i].parts[3].count));
    // none: the un-overlapped sum, exactly.
    Time sum;
    for (const Component& c : none[i].parts)
      if (c.name != "dp_grad_allreduce") sum += (c.forward + c.backward) * c.count;
    CHECK(none[i].total() == sum + n.allreduce);
    CHECK(part(none[i], "dp_grad_allreduce") == n.allreduce);

    // DeepSpeed's 5e8 holds everything: one bucket, ready when the backward pass ends.
    CHECK(ds[i].grad_sync.bucket_elems == std::vector<std::int64_t>{all});
    CHECK(ds[i].total() == none[i].total());

    const GradSync& g = ddp[i].grad_sync;
    CHECK(g.bucket_elems == std::vector<std::int64_t>{5397504, 6552576, 2390016, 6253440});
    CHECK(g.compute == n.compute);
    CHECK(ddp[i].total() - part(ddp[i], "dp_grad_allreduce") == none[i].total() - n.allreduce);
    CHECK(ddp[i].total() <= none[i].total());
    CHECK(g.end >= std::max(g.compute, g.allreduce));
    CHECK(g.end <= g.compute + g.allreduce);
    CHECK(g.hidden() > Time::zero());
  }
}

TEST_CASE("1F1B: (m + p - 1) slots of the slowest stage, by hand", "[model][pipeline]") {
  // m = 4 micro-batches on p = 3 stages, F = 10 us, B = 20 us, one P2P send 1 us:
  // slot = 10 + 20 + 2 x 1 = 32 us; steady 4 x 30 = 120, P2P 4 x 2 x 1 = 8, bubble 2 x 32 = 64;
  // 120 + 8 + 64 = 192 = (4 + 3 - 1) x 32.
  const PipelineTime t = one_f_one_b(4, 3, Time::us(10), Time::us(20), Time::us(1));
  CHECK(t.slot == Time::us(32));
  CHECK(t.steady == Time::us(120));
  CHECK(t.p2p == Time::us(8));
  CHECK(t.bubble == Time::us(64));
  CHECK(t.total() == Time::us(192));
  // One stage: no bubble and nothing to send, m x (F + B).
  const PipelineTime one = one_f_one_b(2, 1, Time::us(10), Time::us(20), Time::us(5));
  CHECK(one.total() == Time::us(60));
  CHECK(one.bubble == Time::zero());
  CHECK(one.p2p == Time::zero());
}

TEST_CASE("MLA FLOPs by hand", "[model][mla]") {
  // A small case: M = 8, hl = 2 heads, L = 4, no query latent, rkv = 4, dn = 2, dr = 1, dv = 3.
  // wq 8 x 2*(2+1) = 48, wkv_a 8 x (4+1) = 40, wkv_b 4 x 2*(2+3) = 40, wo 2*3 x 8 = 48: 176 multiply-adds,
  // 352 FLOPs per token. Scores 4 x 4 x 2 heads x 3 = 96 and context 4 x 4 x 2 x 3 = 96: 2 x 192 = 384.
  const AttentionFlops a = mla_flops(8, 2, 4, MlaDims{0, 4, 2, 1, 3});
  CHECK(a.projections_per_token == 352);
  CHECK(a.core_per_sequence == 384);
  // DeepSeek-V3 (config_671B.json: dim 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
  // qk_nope 128, qk_rope 64, v_head 128), one rank (no TP):
  //   wq_a 7168 x 1536 = 11010048, wq_b 1536 x 128*192 = 37748736, wkv_a 7168 x 576 = 4128768,
  //   wkv_b 512 x 128*256 = 16777216, wo 128*128 x 7168 = 117440512: 187105280 multiply-adds,
  //   374210560 FLOPs per token; at L = 4096: 2 x 4096^2 x 128 x (192 + 128) = 1374389534720.
  const AttentionFlops v3 = mla_flops(7168, 128, 4096, MlaDims{1536, 512, 128, 64, 128});
  CHECK(v3.projections_per_token == 374210560ULL);
  CHECK(v3.core_per_sequence == 1374389534720ULL);
}

namespace {
// A small DeepSeek-like pipelined spec on 4 nodes of DGX H100: 6 blocks (the first dense),
// MLA, pp 2 (16 GPUs a stage), EP 8 (two expert-parallel blocks per stage), 8 sequences.
const char* kSmallPipeline = R"(name: small-pp
topology: topologies/dgx-h100.yaml
topology_set: {nodes: 4}
layers: 6
first_dense: 1
moe_every: 1
heads: 8
attention: mla
q_lora_rank: 64
kv_lora_rank: 32
qk_nope_head_dim: 16
qk_rope_head_dim: 8
v_head_dim: 16
vocab: 1000
hidden: 256
ffn: 128
dense_ffn: 512
shared_ffn: 128
glu: true
seq: 128
batch: 1
E: 16
k: 2
f: 1.0
mp: 1
ep: 8
dtype: bf16
pp: 2
global_batch: 64
mtp_depth: 1
)";
}  // namespace

TEST_CASE("MLA ops carry the hand-derived FLOPs, backward twice forward", "[model][mla]") {
  const ModelSpec m = parse_model_spec_text(kSmallPipeline, std::string(PARMSIM_SOURCE_DIR) + "/x.yaml");
  const Topology topo = load_topology(m.topology_file, {"nodes=2"});
  const LayerSpec s = model_layer(m, topo);
  const Dims d = make_dims(s, topo.num_gpus(), topo.gpus_per_node());
  auto gemm_flops = [](const std::vector<MoeOp>& ops) {
    std::uint64_t f = 0;
    for (const MoeOp& o : ops)
      if (o.kind == MoeStep::kernel && o.kernel_op == OpKind::gemm) f += o.flops;
    return f;
  };
  // Per token: 2 x (256*64 + 64*8*24 + 256*40 + 32*8*32 + 8*16*256)
  //   = 2 x (16384 + 12288 + 10240 + 8192 + 32768) = 2 x 79872 = 159744;
  // per sequence of 128: 2 x 128^2 x 8 x 24 + 2 x 128^2 x 8 x 16 = 10485760.
  const AttentionFlops a = mla_flops(256, 8, 128, m.mla);
  REQUIRE(a.projections_per_token == 159744);
  REQUIRE(a.core_per_sequence == 10485760);
  const std::uint64_t fwd = gemm_flops(model_attention_ops(m, s, d, false));
  CHECK(fwd == 128 * 159744 + 1 * 10485760);
  CHECK(gemm_flops(model_attention_ops(m, s, d, true)) == 2 * fwd);
  // Its weights: 79872 (the projections) + RMSNorms 256 + 64 + 32.
  CHECK(model_attention_params(m, s, d) == 79872 + 256 + 64 + 32);
}

TEST_CASE("pipeline stages and refusals", "[model][pipeline]") {
  ModelSpec m;
  m.layers = 61;
  m.pp = 16;
  CHECK_THROWS_WITH(pipeline_stages(m), Catch::Contains("pp=16 to split layers=61"));
  m.first_stage_layers = 4;
  m.last_stage_layers = 1;
  const std::vector<Stage> st = pipeline_stages(m);
  REQUIRE(st.size() == 16);
  CHECK(st[0].first_block == 0);
  CHECK(st[0].blocks == 4);
  CHECK(st[14].first_block == 56);
  CHECK(st[14].blocks == 4);
  CHECK(st[15].first_block == 60);
  CHECK(st[15].blocks == 1);
  m.first_stage_layers = 5;  // 61 - 5 - 1 = 55 over 14 stages
  CHECK_THROWS_WITH(pipeline_stages(m), Catch::Contains("55 block(s) left over 14 stage(s)"));
  // Stages are whole nodes: 16 stages of 2040 GPUs, or of 264 nodes, do not split.
  m.pp_where = "spec.yaml:3:5";
  const std::string h800 = std::string(PARMSIM_SOURCE_DIR) + "/topologies/h800-cluster.yaml";
  CHECK_THROWS_WITH(stage_nodes_override(m, load_topology(h800, {"nodes=255"}), 1),
                    Catch::Contains("spec.yaml:3:5: key 'pp'") && Catch::Contains("2040 GPUs"));
  CHECK_THROWS_WITH(stage_nodes_override(m, load_topology(h800, {"nodes=264"}), 1), Catch::Contains("whole nodes"));
  CHECK(stage_nodes_override(m, load_topology(h800), 2) == std::vector<std::string>{"nodes=32"});
}

TEST_CASE("pipelined iteration: 1F1B of the slowest stage, simulated P2P", "[model][pipeline]") {
  const ModelSpec m = parse_model_spec_text(kSmallPipeline, std::string(PARMSIM_SOURCE_DIR) + "/x.yaml");
  const Topology full = load_topology(m.topology_file, {"nodes=4"});
  const Topology stage = load_topology(m.topology_file, {"nodes=4", stage_nodes_override(m, full, 1)[0]});
  const Topology pair = load_topology(m.topology_file, {"nodes=4", stage_nodes_override(m, full, 2)[0]});
  REQUIRE(stage.num_gpus() == 16);
  const auto res = run_model(m, stage, nullptr, &pair);
  REQUIRE(res.size() == 3);
  for (const IterationResult& r : res) {
    CAPTURE(r.schedule);
    const PipelineResult& p = r.pipeline;
    // 64 sequences over 16 replicas (16 GPUs a stage, mp 1) of batch 1: 4 micro-batches.
    CHECK(p.micro_batches == 4);
    REQUIRE(p.stage_times.size() == 2);
    CHECK(p.stage_times[0].stage.blocks == 3);
    // One send: 128 x 256 x 2 B = 65536 B from each GPU to the same GPU of the next stage, two nodes
    // on: through its 400 Gb/s NIC (50 GB/s) at least 65536 / 50e3 = 1.31 us, and the route's latency.
    CHECK(p.p2p.to_us() >= 65536 / 50e3);
    CHECK(p.p2p.to_us() <= 50.0);
    const StageTime& a = p.stage_times[0];
    const StageTime& b = p.stage_times[1];
    // The last stage holds the head and the MTP module (an MoE block and the head again) beside its 3 MoE blocks.
    CHECK(b.forward > a.forward);
    CHECK(p.slowest == 1);
    const Time slot = b.forward + b.backward + p.p2p * 2;
    CHECK(p.time.slot == slot);
    // (m + p - 1) slots, and the most exposed gradient AllReduce.
    CHECK(r.total() == slot * (4 + 2 - 1) + r.grad_sync.exposed());
    CHECK(r.total() == p.time.total() + r.grad_sync.exposed());
    CHECK(r.grad_sync.exposed() == std::max(a.grad_sync.exposed(), b.grad_sync.exposed()));
    // The MoE layer's phases add up to one MoE layer, forward and backward.
    Time moe;
    for (const Component& c : b.parts)
      if (c.name == "moe_layer") moe = c.forward + c.backward;
    CHECK(p.moe_phases.total() == moe);
  }
}

TEST_CASE("DualPipe's bubble by hand (Table 2, F&B = F + B)", "[model][pipeline]") {
  // m = 8 micro-batches on p = 4 stages, F = 10 us, B = 20 us, W = 5 us, P2P 1 us:
  // bubble (4/2 - 1) x (10 + 2 x 20 - 3 x 5 + 2 x 1) = 37; steady 8 x 30 = 240; P2P 8 x 2 = 16; 293 in all.
  const PipelineTime t = dualpipe(8, 4, Time::us(10), Time::us(20), Time::us(5), Time::us(1));
  CHECK(t.bubble == Time::us(37));
  CHECK(t.steady == Time::us(240));
  CHECK(t.p2p == Time::us(16));
  CHECK(t.total() == Time::us(293));
  // Below 1F1B's bubble, (4 - 1) x 32 = 96, on the same stage times.
  CHECK(t.bubble < one_f_one_b(8, 4, Time::us(10), Time::us(20), Time::us(1)).bubble);
  // Two stages: no bubble at all (PP/2 - 1 = 0).
  CHECK(dualpipe(4, 2, Time::us(10), Time::us(20), Time::us(5), Time::us(1)).bubble == Time::zero());
  // DualPipe's own checks: even pp, even micro-batches, at least 2 x pp.
  CHECK_THROWS(dualpipe(6, 3, Time::us(10), Time::us(20), Time::us(5), Time::us(1)));
  CHECK_THROWS(dualpipe(6, 4, Time::us(10), Time::us(20), Time::us(5), Time::us(1)));
}

TEST_CASE("pipelined iteration under DualPipe: W and the refusals", "[model][pipeline]") {
  const std::string spec = std::string(kSmallPipeline) + "pipeline_schedule: dualpipe\n";
  const ModelSpec m = parse_model_spec_text(spec, std::string(PARMSIM_SOURCE_DIR) + "/x.yaml");
  const Topology full = load_topology(m.topology_file, {"nodes=4"});
  const Topology stage = load_topology(m.topology_file, {"nodes=4", stage_nodes_override(m, full, 1)[0]});
  const Topology pair = load_topology(m.topology_file, {"nodes=4", stage_nodes_override(m, full, 2)[0]});
  // 64 sequences over 16 replicas: 4 micro-batches = 2 x pp, even: DualPipe runs.
  const auto res = run_model(m, stage, nullptr, &pair);
  for (const IterationResult& r : res) {
    CAPTURE(r.schedule);
    const PipelineResult& p = r.pipeline;
    const StageTime& z = p.stage_times[static_cast<std::size_t>(p.slowest)];
    // W is a part of the backward pass; with pp = 2 the bubble is (2/2 - 1) x ... = 0.
    CHECK(z.weight_grad > Time::zero());
    CHECK(z.weight_grad < z.backward);
    CHECK(p.time.bubble == Time::zero());
    CHECK(r.total() == (z.forward + z.backward + p.p2p * 2) * 4 + r.grad_sync.exposed());
  }
  // 32 sequences: 2 micro-batches, fewer than 2 x pp.
  std::string few = spec;
  few.replace(few.find("global_batch: 64"), 16, "global_batch: 32");
  CHECK_THROWS_WITH(run_model(parse_model_spec_text(few, std::string(PARMSIM_SOURCE_DIR) + "/x.yaml"), stage, nullptr,
                              &pair),
                    Catch::Contains("key 'pipeline_schedule'") && Catch::Contains("at least 2 x pp = 4"));
  // An odd pp: refused when the spec is read.
  std::string odd = spec;
  odd.replace(odd.find("pp: 2"), 5, "pp: 3");
  odd.replace(odd.find("layers: 6"), 9, "layers: 9");
  CHECK_THROWS_WITH(parse_model_spec_text(odd, "odd.yaml"),
                    Catch::Contains("key 'pipeline_schedule'") && Catch::Contains("an even pp"));
}
