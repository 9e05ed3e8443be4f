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
