// parmsim collective | simulate | topology
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "sim/calib/calibration.hpp"
#include "cli/common.hpp"
#include "sim/coll/collective_plan.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/graph/algorithms.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/engine/trace_writer.hpp"
#include "sim/io/output.hpp"
#include "sim/moe/resources.hpp"
#include "sim/net/network_model.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

namespace {

std::string network_help() {
  std::string s = "network model:";
  for (const NetworkModelInfo& m : network_models()) s += fmt::format("\n  {}: {}", m.name, m.help);
  return s;
}

struct TopoArgs {
  std::string file;
  std::string set;
  std::string calibration;
  std::string overlay;
  void add(CLI::App* c) {
    c->add_option("--topology,-t", file, "topology YAML file (see topologies/)")->required()->check(CLI::ExistingFile);
    add_topo_set_option(c, set);
    add_overlay_option(c, overlay);
    add_calibration_option(c, calibration);
  }
  Topology load() const { return load_topology(file, split_assignments(set, "--topo-set"), load_overlay_arg(overlay)); }
};

}  // namespace

void add_collective(CLI::App& app) {
  auto* c = app.add_subcommand("collective", "simulate one collective over message sizes (an nccl-tests-like table)");
  struct Args {
    TopoArgs topo;
    std::string op = "allreduce", bytes = "1MiB:256MiB", algo = "auto", proto, network = "flow", gpus = "all";
    int inner = 0, window = 0, channels = 0;
    bool json = false;
    std::string max_memory;
  };
  auto a = std::make_shared<Args>();
  a->topo.add(c);
  add_max_memory_option(c, a->max_memory);
  c->add_option("--op", a->op, "alltoall | allgather | reducescatter | allreduce | sendrecv | saa")
      ->capture_default_str();
  c->add_option("--bytes,-b", a->bytes, "sizes: 1MiB,64MiB or FROM:TO (doubling); nccl-tests' size convention")
      ->capture_default_str();
  c->add_option("--algo", a->algo,
                algorithm_help())
      ->capture_default_str();
  c->add_option("--proto", a->proto, "NCCL protocol for ring/tree/nvls: ll | ll128 | simple (default: NCCL's choice)");
  c->add_option("--channels", a->channels, "NCCL channels (rings or trees) for ring/tree/nvls (default: NCCL's count)")
      ->check(int_in(1, 64));
  c->add_option("--network,-n", a->network, network_help())->capture_default_str();
  c->add_option("--gpus", a->gpus, "group: all, 0-7, 0,8,16 (sendrecv: the first sends to the second)")
      ->capture_default_str();
  c->add_option("--inner", a->inner, "saa: inner AllGather group size (default, 0: GPUs per node)")
      ->check(int_in(0, 1048576));
  c->add_option("--window", a->window, "direct: peers in flight at once (0 = all)")
      ->capture_default_str()
      ->check(int_in(0, 1048576));
  c->add_flag("--json", a->json, "print a JSON list of {bytes, time_us, algbw_GBps, busbw_GBps, algorithm}");
  c->callback([a, c] {
    Collective proto;
    if (!parse_coll_op(a->op, &proto.op) || proto.op == CollOp::alltoallv)
      throw UserError(
          fmt::format("--op: expected alltoall, allgather, reducescatter, allreduce, sendrecv or saa, got "
                      "'{}' (alltoallv needs a byte matrix: use `parmsim simulate` with a graph file)",
                      a->op));
    // Options that would be ignored are refused.
    if (c->count("--inner") > 0 && proto.op != CollOp::saa)
      throw UserError(fmt::format("--inner: only --op saa takes an inner group size, not --op {}", a->op));
    if (c->count("--window") > 0)
      if (const std::string why = window_unused(proto.op, a->algo); !why.empty())
        throw UserError(fmt::format("--window: {} (--algo direct, p2p or hierarchical)", why));
    check_network_option(a->network);
    const Topology topo = a->topo.load();
    const auto cal = load_calibration_arg(a->topo.calibration);
    proto.group = parse_ranks(a->gpus, topo.num_gpus());
    proto.algo = a->algo == "auto" ? "" : a->algo;
    proto.proto = a->proto;
    proto.channels = a->channels;
    proto.window = a->window;
    proto.name = a->op;
    if (proto.op == CollOp::sendrecv && proto.group.size() != 2)
      throw UserError("--gpus: sendrecv needs exactly two GPUs (sender,receiver)");
    if (proto.op == CollOp::saa) proto.inner = a->inner > 0 ? a->inner : topo.gpus_per_node();
    const int p = static_cast<int>(proto.group.size());
    if (p < 2) throw UserError("--gpus: a collective needs at least two GPUs");
    const std::vector<std::uint64_t> sizes = parse_sizes(a->bytes, "--bytes");
    make_network(a->network, topo);  // rejects an unknown model before any output
    check_estimate("collective: the simulation", moe::estimate_collective(proto), a->max_memory,
                   "use fewer GPUs or smaller groups, or raise --max-memory");
    // A time past 2^63 ps at one of the sizes: the option's value is the cause (a calibration entry, when it
    // is, is named inside).
    auto sized = [&](std::uint64_t bytes, auto&& f) {
      try {
        return f();
      } catch (const TimeOverflow& e) {
        throw TimeOverflow(fmt::format("--bytes {}: {}", bytes, e.what()),
                           e.cause().empty() ? fmt::format("--bytes {}", bytes) : e.cause());
      }
    };
    Workspace ws;  // plans and routes shared by the sizes' simulations
    {
      Collective probe = proto;  // rejects an unknown or inapplicable algorithm before any output
      probe.bytes = sizes.empty() ? 1 : sizes.front();
      sized(probe.bytes, [&] { return make_plan(probe, topo, ws); });
    }
    nlohmann::json out = nlohmann::json::array();
    if (!a->json)
      fmt::print("# {} over {} GPUs of {} ({} network, algorithm {})\n# {:>14} {:>14} {:>12} {:>12}  {}\n", a->op, p,
                 topo.name(), a->network, a->algo, "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                 "algorithm/protocol/channels");
    for (std::uint64_t bytes : sizes) {
      int max_rank = 0;
      for (int r : proto.group) max_rank = std::max(max_rank, r);
      TaskGraphBuilder b(max_rank + 1);
      b.add_stream_all("comm");
      Collective c = proto;
      c.bytes = bytes;
      b.add_collective_tasks(c, "comm", a->op);
      const TaskGraph g = std::move(b).build();
      SimOptions so;
      so.network = a->network;
      so.calibration = cal.get();
      const SimResult r = sized(bytes, [&] { return simulate(g, topo, so, ws); });
      const double s = r.makespan.to_seconds();
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      const double busbw = algbw * busbw_factor(proto.op, p);
      const std::string ran = sized(bytes, [&] { return resolved_choice(c, topo, ws); });
      if (a->json)
        out.push_back({{"bytes", bytes},
                       {"time_us", r.makespan.to_us()},
                       {"algbw_GBps", algbw},
                       {"busbw_GBps", busbw},
                       {"algorithm", ran}});
      else
        fmt::print("  {:>14} {:>14.3f} {:>12.2f} {:>12.2f}  {}\n", bytes, r.makespan.to_us(), algbw, busbw, ran);
    }
    if (a->json) std::cout << out.dump(1) << "\n";
  });
}

void add_simulate(CLI::App& app) {
  auto* c = app.add_subcommand("simulate", "simulate a task graph file (YAML or JSON) on a topology");
  struct Args {
    TopoArgs topo;
    std::string graph, network = "flow", trace, csv, max_memory;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  a->topo.add(c);
  add_max_memory_option(c, a->max_memory);
  c->add_option("--graph,-g", a->graph, "task graph file (format: docs/task-graph.md)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--network,-n", a->network, network_help())->capture_default_str();
  c->add_option("--trace", a->trace, "write a Chrome/Perfetto trace JSON here");
  c->add_option("--csv", a->csv, "write the per-task trace CSV here");
  c->add_flag("--json", a->json, "print the summary as JSON");
  c->callback([a] {
    check_network_option(a->network);
    const Topology topo = a->topo.load();
    const TaskGraph g = load_task_graph(a->graph);
    check_estimate("simulate: the simulation", moe::estimate_graph(g), a->max_memory,
                   "use fewer GPUs or smaller groups, or raise --max-memory");
    const auto cal = load_calibration_arg(a->topo.calibration);
    SimOptions so;
    so.network = a->network;
    so.calibration = cal.get();
    const SimResult r = simulate(g, topo, so);
    if (!a->trace.empty()) write_atomically(a->trace, [&](std::ostream& os) { write_chrome_trace(os, g, r); });
    if (!a->csv.empty()) write_atomically(a->csv, [&](std::ostream& os) { write_trace_csv(os, g, r); });
    if (a->json) {
      nlohmann::json j = {{"makespan_us", r.makespan.to_us()},
                          {"makespan_ps", r.makespan.count_ps()},
                          {"tasks", g.tasks().size()},
                          {"transfers", r.transfers},
                          {"intra_node_bytes", r.intra_node_bytes},
                          {"inter_node_bytes", r.inter_node_bytes}};
      std::cout << j.dump(1) << "\n";
      return;
    }
    fmt::print("graph        {} ({} ranks, {} tasks, {} collectives)\n", a->graph, g.num_ranks(), g.tasks().size(),
               g.collectives().size());
    fmt::print("topology     {} ({} GPUs, {} per node, gpu {})\n", topo.name(), topo.num_gpus(), topo.gpus_per_node(),
               topo.gpu_model());
    fmt::print("network      {}\n", a->network);
    fmt::print("makespan     {} us\n", us_exact(r.makespan));
    fmt::print("transfers    {} ({} intra-node, {} inter-node)\n", r.transfers, units::format_bytes(r.intra_node_bytes),
               units::format_bytes(r.inter_node_bytes));
    std::vector<Time> busy(g.num_ranks());
    for (const TraceRow& row : r.trace) busy[g.task(row.task).rank] += row.end - row.start;
    fmt::print("{:>6} {:>14}\n", "rank", "busy_us");
    for (int rk = 0; rk < g.num_ranks(); ++rk) fmt::print("{:>6} {:>14.3f}\n", rk, busy[rk].to_us());
  });
}

void add_topology(CLI::App& app) {
  auto* c = app.add_subcommand("topology", "load a topology, check it, and describe it (devices, links, routes)");
  struct Args {
    TopoArgs topo;
    int src = -1, dst = -1;
  };
  auto a = std::make_shared<Args>();
  a->topo.add(c);
  c->add_option("--route", a->src, "print the route from this GPU ...")->check(int_in(0, 2147483647));
  c->add_option("--to", a->dst, "... to this GPU")->check(int_in(0, 2147483647));
  c->callback([a] {
    if ((a->src >= 0) != (a->dst >= 0)) throw UserError("--route/--to: give both, the source and the destination GPU");
    if (a->src >= 0 && a->src == a->dst)
      throw UserError(fmt::format("--route/--to: two different GPUs (a GPU has no route to itself), got {} and {}",
                                  a->src, a->dst));
    const Topology t = a->topo.load();
    std::map<std::string, int> kinds;
    for (int v = 0; v < t.num_devices(); ++v) kinds[to_string(t.device(v).kind)]++;
    fmt::print("topology {}: {} GPUs ({}) in {} nodes of {}; {} directed links; {:.1f} KiB in memory\n", t.name(),
               t.num_gpus(), t.gpu_model(), t.num_nodes(), t.gpus_per_node(), t.num_links(),
               static_cast<double>(t.footprint_bytes()) / 1024);
    for (const auto& [k, n] : kinds) fmt::print("  {:<16} {}\n", k, n);
    if (a->src >= 0 || a->dst >= 0) {
      if (a->src < 0 || a->dst < 0 || a->src >= t.num_gpus() || a->dst >= t.num_gpus())
        throw UserError(fmt::format("--route/--to: need two GPU ids below {}", t.num_gpus()));
      const Route r = t.route(a->src, a->dst);
      fmt::print("route {} -> {}: {} hops, latency {}, bottleneck {:.2f} GB/s\n", a->src, a->dst, r.links.size(),
                 format_time(r.latency), static_cast<double>(r.bottleneck) / 1e9);
      for (int l : r.links)
        fmt::print("  {:<32} {:>10.2f} GB/s {}\n", t.link_name(l), static_cast<double>(t.link(l).bandwidth) / 1e9,
                   format_time(t.link(l).latency));
    }
  });
}

void add_subcommands(CLI::App& app) {
  add_collective(app);
  add_simulate(app);
  add_topology(app);
  add_layer(app);
  add_sweep(app);
  add_model(app);
  add_exec(app);
  add_calibrate(app);
  add_compare(app);
  add_moe_dispatch(app);
}

}  // namespace parmsim::cli
