// Peak device memory per schedule (sim/moe/memory.hpp, docs/memory.md).
#include <catch2/catch.hpp>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/memory.hpp"
#include "sim/topo/topology_io.hpp"

using namespace parmsim;
using namespace parmsim::moe;

namespace {

Topology topo(const std::string& name, const std::vector<std::string>& over = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", over);
}

MemoryPeak peak(const LayerSpec& s, int P, int gpn, const std::string& schedule) {
  const Dims d = make_dims(s, P, gpn);
  const auto ops = forward_ops(s, d, preset(schedule));
  return peak_memory(ops, s, d);
}

}  // namespace

TEST_CASE("a small baseline layer's peak memory, term by term", "[memory]") {
  // One GPU (P=1, mp=1 -> G=1, N_EP=1), fp32 (b=4), B=1, L=8 -> S=8, M=4, H=8, E=2, k=1, f=1:
  // capacity C = ceil(1*1*8/2) = 4. The baseline's forward list: gate, order (D = E*C*M = 32
  // elements), AlltoAll(32), experts(32), AlltoAll(32), I-Order. [S, E, C] = 8*2*4 = 64 elements.
  //   weights W = E_local*2*M*(H/G)*4 + M*E*4 = 2*2*4*8*4 + 4*2*4 = 512 + 32 = 544
  //   input   X = S*M*4 = 128
  // Forward (live = W + X + saved + forward-only + current buffer + what the op makes):
  //   gate:    combine_weights 64*4 = 256 (saved: fp32 layer), dispatch_mask 64*1 = 64 (forward
  //            only), no top-2 temporaries: 544+128+256+64 = 992
  //   order:   out D*4 = 128, the mask cast 64*4 = 256 (saved): 544+128+256+64+128+256 = 1376
  //   a2a:     in 128 + out 128: 544+128+512+64+128+128 = 1504
  //   experts: in 128 (saved), fc1 and activation outputs 2*8 rows*8*4 = 512 (saved), the
  //            experts' outputs 128 and torch.cat's 128: 544+128+512+64+128+128+128+512 = 2144
  //   a2a:     544+128+1152+64+128+128 = 2144; I-Order: 544+128+1152+64+128+128 = 2144
  // Backward (live = 2W + X + saved + pending + output gradient + input gradient + scratch):
  //   saved at the end of the forward: 256 + 256 + 128 + 512 + 128 (I-Order's input) = 1280
  //   I-Order: 1088+128+1280+128+128, plus the combine weights' fp32 gradient 256 = 3008
  //   a2a:     1088+128+1152+256+128+128 = 2880
  //   experts: 1088+128+1152+256+128+128, plus one expert's two gradients 2*4*8*4 = 256 -> 3136
  //   then less (saved drops to 512, then 256).
  LayerSpec s;
  s.B = 1, s.L = 8, s.M = 4, s.H = 8, s.E = 2, s.k = 1, s.f = 1.0, s.mp = 1;
  const MemoryPeak p = peak(s, 1, 1, "baseline");
  CHECK(p.weights == 544);
  CHECK(p.grads == 544);
  CHECK(p.input == 128);
  CHECK(p.forward == 2144);
  CHECK(p.backward == 3136);
  CHECK(p.peak() == 3136);
}

TEST_CASE("an 11 GiB card: the paper grid's top end fits, twice its tokens do not", "[memory]") {
  // parm-32gpu: 32 RTX 2080 Ti (11 GiB = 11'811'160'064 bytes), mp=4 -> G=4, N_EP=8, E_local=4.
  const Topology t = topo("parm-32gpu");
  REQUIRE(t.gpu_memory() == 11'811'160'064ULL);
  LayerSpec s;
  s.B = 8, s.L = 2048, s.M = 1024, s.H = 4096, s.E = 32, s.k = 2, s.f = 1.2, s.mp = 4, s.dtype = DType::fp32;
  // S = 16384, C = ceil(2*1.2*16384/32) = ceil(1228.8) = 1229, [S, E, C] = 16384*32*1229 = 644'349'952
  // elements. The baseline's gate holds combine1_sec, combine2_sec and their sum (fp32) and the
  // bool mask at once: 13 * 644'349'952 = 8'376'549'376 bytes, plus W = 4*2*1024*1024*4 + 1024*32*4 =
  // 33'685'504 and X = 16384*1024*4 = 67'108'864: 8'477'343'744 in the forward pass.
  // Backward, at the experts: 2W 67'371'008 + X 67'108'864 + saved (combine weights and the dispatch
  // mask's cast, 2 * 2'577'399'808, the experts' input D*4 = 32*1229*1024*4 = 161'087'488, fc1 and
  // activation outputs 2*39'328*1024*4 = 322'174'976) 5'638'062'080 + the pending fp32 combine-weights
  // gradient 2'577'399'808 + output and input gradients 2 * 161'087'488 + one expert's two
  // gradients 2*(39'328/4)*1024*4 = 80'543'744 = 8'752'660'480 bytes (8.15 GiB): it fits 11 GiB.
  const MemoryPeak base = peak(s, 32, 4, "baseline");
  CHECK(base.forward == 8'477'343'744ULL);
  CHECK(base.peak() == 8'752'660'480ULL);
  // Parm gates S/G = 4096 tokens with capacity ceil(2*1.2*4096/32) = 308: its [S/G, E, C] tensors
  // are 4096*32*308 = 40'370'176 elements, 16 times fewer (S2's combine, G blocks on all S tokens,
  // 16384*32*308 = 161'480'704, 4 times fewer): both need less than the baseline.
  CHECK(peak(s, 32, 4, "s1").peak() < base.peak());
  CHECK(peak(s, 32, 4, "s2").peak() < base.peak());
  const LayerRun run{t, s, "analytical"};
  CHECK(run_schedule(run, preset("baseline")).fits);
  // B=16: S = 32768, C = ceil(2457.6) = 2458, one fp32 [S, E, C] tensor alone is
  // 32768*32*2458*4 = 10'309'599'232 bytes; the gate's 13 bytes an element are 33'506'197'504 > 11 GiB.
  s.B = 16;
  const ScheduleResult big = run_schedule(LayerRun{t, s, "analytical"}, preset("baseline"));
  CHECK_FALSE(big.fits);
  CHECK(big.peak_memory_bytes >= 33'506'197'504ULL);
  // A what-if card of 48 GiB (51'539'607'552 bytes) takes it.
  const Topology wide = topo("parm-32gpu", {"gpu_memory=48GiB"});
  CHECK(wide.gpu_memory() == 51'539'607'552ULL);
  CHECK(run_schedule(LayerRun{wide, s, "analytical"}, preset("baseline")).fits == (big.peak_memory_bytes <= 51'539'607'552ULL));
}

TEST_CASE("gpu_memory must be a size above zero, named by file and key", "[memory][errors]") {
  const std::string head = "name: t\ngpu: h100\nnodes: 1\n";
  const std::string rest =
      "node:\n  gpus: 2\n  devices: [{name: sw, kind: nvswitch}]\n"
      "  links: [{a: [gpu0, gpu1], b: sw, bandwidth: 100GBps, latency: 1us}]\n";
  CHECK_THROWS_WITH(parse_topology_text(head + "gpu_memory: 0GiB\n" + rest, "zero.yaml"),
                    Catch::Contains("zero.yaml:4") && Catch::Contains("gpu_memory") && Catch::Contains("above 0"));
  // A bare 0 is refused too (sizes need a unit), at the same place.
  CHECK_THROWS_WITH(parse_topology_text(head + "gpu_memory: 0\n" + rest, "bare.yaml"),
                    Catch::Contains("bare.yaml:4") && Catch::Contains("gpu_memory"));
  CHECK_THROWS_WITH(parse_topology_text(head + "gpu_memory: -1GiB\n" + rest, "neg.yaml"),
                    Catch::Contains("neg.yaml:4") && Catch::Contains("gpu_memory"));
  const Topology ok = parse_topology_text(head + "gpu_memory: 24GiB\n" + rest, "ok.yaml");
  CHECK(ok.gpu_memory() == 24ULL << 30);
  // Without the key, the profile's: h100 80 GiB.
  CHECK(parse_topology_text(head + rest, "p.yaml").gpu_memory() == 80ULL << 30);
}
