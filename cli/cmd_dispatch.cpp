// parmsim moe-dispatch: one MoE token dispatch and combine, timed on a topology
// as DeepEP's tests time them.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/common.hpp"
#include "sim/moe/dispatch.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

namespace {

std::string gbps_text(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); }
nlohmann::json gbps_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

}  // namespace

void add_moe_dispatch(CLI::App& app) {
  std::string kernels;
  for (const moe::Dispatcher& d : moe::dispatchers()) kernels += fmt::format("\n  {}: {}", d.name, d.help);
  auto* c = app.add_subcommand(
      "moe-dispatch",
      "time one MoE token dispatch and combine (DeepEP normal or low-latency kernels, or an NCCL AlltoAllv) on a "
      "topology's flow network; prints the times and the RDMA and NVLink bandwidths as DeepEP's tests define them "
      "(docs/moe-dispatch.md)");
  struct Args {
    std::string topo, set, kernel, dispatch_dtype = "bf16", combine_dtype = "bf16", load = "uniform";
    int ranks = 0, tokens = 0, hidden = 0, experts = 0, topk = 0, topk_groups = 0, sms = moe::kDeepepTestSms;
    std::uint64_t seed = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  c->add_option("--topology,-t", a->topo, "topology YAML file (see topologies/)")->required()->check(CLI::ExistingFile);
  add_topo_set_option(c, a->set);
  c->add_option("--ranks", a->ranks, "expert-parallel ranks: the topology's GPUs 0 .. N-1")->required()->check(int_in(1, 65536));
  c->add_option("--tokens", a->tokens, "tokens per rank entering dispatch")->required()->check(int_in(1, 1 << 20));
  c->add_option("--hidden", a->hidden, "hidden size (elements per token)")->required()->check(int_in(1, 1 << 20));
  c->add_option("--experts", a->experts, "experts in all (a multiple of --ranks)")->required()->check(int_in(1, 1 << 20));
  c->add_option("--topk", a->topk, "experts per token")->required()->check(int_in(1, 1024));
  c->add_option("--topk-groups", a->topk_groups,
                "node-limited routing: each token's experts come from its best N nodes (DeepEP nodes of up to 8 "
                "GPUs); 0: no limit")
      ->capture_default_str()
      ->check(int_in(0, 65536));
  c->add_option("--sms", a->sms,
                "SMs DeepEP's normal kernels run on (Buffer.set_num_sms; even: half send, half receive or forward); "
                "DeepEP's tests use 24")
      ->capture_default_str()
      ->check(int_in(2, 1024));
  c->add_option("--dispatch-dtype", a->dispatch_dtype, "fp8 | bf16 (fp8: e4m3 with a float32 scale per 128 elements)")
      ->capture_default_str();
  c->add_option("--combine-dtype", a->combine_dtype, "bf16 (fp8 is accepted where the GPU has it)")->capture_default_str();
  c->add_option("--load", a->load,
                "dropless routing's load model: uniform (DeepEP's tests), zipf:EXPONENT (expert of popularity rank i "
                "weighted 1/i^EXPONENT, ranks dealt to experts by the seed) or a histogram FILE (one count per expert)")
      ->capture_default_str();
  c->add_option("--kernel", a->kernel, "the dispatcher:" + kernels)->required();
  c->add_option("--seed", a->seed, "routing seed (the same seed, the same tokens and times)")
      ->capture_default_str()
      ->check(uint64_any());
  c->add_flag("--json", a->json,
              "print JSON: dispatch_us, combine_us, dispatch_rdma_GBps, dispatch_nvl_GBps, combine_rdma_GBps, "
              "combine_nvl_GBps (null where the kernel's test defines none), with the byte counts");
  c->callback([a] {
    const moe::Dispatcher& d = moe::find_dispatcher(a->kernel);
    moe::DispatchSpec s;
    s.ranks = a->ranks;
    s.tokens = a->tokens;
    s.hidden = a->hidden;
    s.experts = a->experts;
    s.topk = a->topk;
    s.topk_groups = a->topk_groups;
    s.sms = a->sms;
    s.dispatch_dtype = moe::parse_wire_dtype(a->dispatch_dtype, "--dispatch-dtype");
    s.combine_dtype = moe::parse_wire_dtype(a->combine_dtype, "--combine-dtype");
    s.seed = a->seed;
    s.load = moe::parse_load_model(a->load, "--load");
    const Topology topo = load_topology(a->topo, split_assignments(a->set, "--topo-set"));
    Workspace ws;
    const moe::DispatchResult r = moe::simulate_dispatch(topo, s, d, ws);
    const int group = moe::dispatch_group(s, topo);
    if (a->json) {
      nlohmann::json j = {{"kernel", r.kernel},
                          {"topology", topo.name()},
                          {"ranks", s.ranks},
                          {"nodes", r.nodes},
                          {"tokens", s.tokens},
                          {"hidden", s.hidden},
                          {"experts", s.experts},
                          {"topk", s.topk},
                          {"topk_groups", s.topk_groups},
                          {"sms", s.sms},
                          {"dispatch_dtype", moe::to_string(s.dispatch_dtype)},
                          {"combine_dtype", moe::to_string(s.combine_dtype)},
                          {"seed", s.seed},
                          {"load", s.load.text},
                          {"dispatch_us", r.dispatch.to_us()},
                          {"combine_us", r.combine.to_us()},
                          {"dispatch_rdma_GBps", gbps_json(r.dispatch_rdma_GBps)},
                          {"dispatch_nvl_GBps", gbps_json(r.dispatch_nvl_GBps)},
                          {"combine_rdma_GBps", gbps_json(r.combine_rdma_GBps)},
                          {"combine_nvl_GBps", gbps_json(r.combine_nvl_GBps)},
                          {"dispatch_rdma_bytes", gbps_json(r.dispatch_rdma_bytes)},
                          {"dispatch_nvl_bytes", gbps_json(r.dispatch_nvl_bytes)},
                          {"combine_rdma_bytes", gbps_json(r.combine_rdma_bytes)},
                          {"combine_nvl_bytes", gbps_json(r.combine_nvl_bytes)},
                          {"wire_rdma_bytes", r.wire_rdma_bytes},
                          {"wire_nvl_bytes", r.wire_nvl_bytes},
                          {"transfers", r.transfers},
                          {"max_expert_tokens", r.max_expert_tokens},
                          {"mean_expert_tokens", r.mean_expert_tokens},
                          {"expert_max_over_mean", r.expert_imbalance},
                          {"max_rank_tokens", r.max_rank_tokens},
                          {"mean_rank_tokens", r.mean_rank_tokens},
                          {"rank_max_over_mean", r.rank_imbalance}};
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("moe-dispatch {} on {} ({} GPUs): {} ranks = {} node{} of {}, {} tokens/rank, hidden {}, {} experts, "
               "top-{}{}, {} dispatch, {} combine, {} load, seed {}\n",
               r.kernel, topo.name(), topo.gpu_model(), s.ranks, r.nodes, r.nodes == 1 ? "" : "s", group, s.tokens,
               s.hidden, s.experts, s.topk,
               s.topk_groups > 0 && s.topk_groups < r.nodes ? fmt::format(" from {} nodes", s.topk_groups) : "",
               moe::to_string(s.dispatch_dtype), moe::to_string(s.combine_dtype), s.load.text, s.seed);
    fmt::print("{:<9} {:>10} {:>11} {:>11}\n", "", "time_us", "RDMA_GBps", "NVL_GBps");
    fmt::print("{:<9} {:>10.1f} {:>11} {:>11}\n", "dispatch", r.dispatch.to_us(), gbps_text(r.dispatch_rdma_GBps),
               gbps_text(r.dispatch_nvl_GBps));
    fmt::print("{:<9} {:>10.1f} {:>11} {:>11}\n", "combine", r.combine.to_us(), gbps_text(r.combine_rdma_GBps),
               gbps_text(r.combine_nvl_GBps));
    fmt::print("bandwidths: rank 0's bytes as DeepEP's tests count them over the time; dispatch moved {:.1f} MB "
               "through NICs and {:.1f} MB within nodes (all ranks, {} transfers)\n",
               static_cast<double>(r.wire_rdma_bytes) / 1e6, static_cast<double>(r.wire_nvl_bytes) / 1e6,
               r.transfers);
    fmt::print("load: tokens per expert max {} / mean {:.1f} = {:.2f}; per rank max {} / mean {:.1f} = {:.2f}\n",
               r.max_expert_tokens, r.mean_expert_tokens, r.expert_imbalance, r.max_rank_tokens, r.mean_rank_tokens,
               r.rank_imbalance);
  });
}

}  // namespace parmsim::cli
