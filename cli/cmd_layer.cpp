// parmsim layer
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "cli/coverage.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/engine/trace_writer.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/dispatch.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/resources.hpp"
#include "sim/moe/sensitivity.hpp"
#include "sim/net/network_model.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

namespace {

// Bytes as GiB with two decimals: peak memory is rarely a whole number of MiB.
std::string gib(std::uint64_t b) { return fmt::format("{:.2f}GiB", static_cast<double>(b) / (1ULL << 30)); }

}  // namespace

void add_layer(CLI::App& app) {
  auto* c = app.add_subcommand("layer", "predict one MoE layer (forward + backward) under baseline, S1 and S2");
  c->footer(moe::layer_keys_help() + R"(
P is the topology's GPUs, G = mp the model-parallel (and expert-sharding) group inside a node,
N_EP = P / G the expert-parallel group; each GPU holds E / N_EP experts, each split G ways.
The baseline: )" + moe::baseline_system(moe::LayerSpec{}) + R"( unless the keys say otherwise.

Output, per schedule (forward + backward of one layer):
  forward_us, backward_us, total_us   simulated times; speedup: the baseline's total over this one
  model_us                            the closed form (alpha-beta) of the same op lists
  intra/GPU, inter/GPU                bytes each GPU sends inside its node / to other nodes (all GPUs' / P)
  exposed_us                          rank 0's compute stream idle: communication it did not hide
  peak_memory, fits                   device memory per GPU over forward + backward, against the GPU's
  critical path by phase              each pass's critical path cut into gate, order (tokens into expert
                                      slots), experts, iorder (the combine), host, and each collective
                                      by kind; a row adds up to total_us; comm_us: the collectives' share
--json gives the same per schedule (schedules.NAME.phases: phase -> us of the critical path).)");
  struct Args {
    std::string topo, topo_set, overlay, set, layer_file, schedule = "all", network = "flow", trace, calibration;
    std::string trace_ranks = "auto";
    bool search = false, json = false, sensitivity = false, estimate = false, no_symmetry = false;
    std::vector<std::string> vary;
    std::string max_memory;
  };
  auto a = std::make_shared<Args>();
  c->add_option("--topology,-t", a->topo, "topology YAML file")->required()->check(CLI::ExistingFile);
  add_topo_set_option(c, a->topo_set);
  add_overlay_option(c, a->overlay);
  c->add_option("--layer", a->layer_file, "YAML file of layer keys (see --help-config, section layer)")
      ->check(CLI::ExistingFile);
  c->add_option("--set,-s", a->set,
                fmt::format("layer keys {}; schedule options {} (each explained by --help-config, section layer); "
                            "e.g. B=4,L=512,M=1024,H=4096,E=32,k=2,f=1.2,mp=4",
                            moe::layer_key_names(moe::KeyScope::layer), moe::layer_key_names(moe::KeyScope::schedule)));
  c->add_option("--schedule", a->schedule, moe::schedule_choices({"auto", "all"}, " | ", " | "))->capture_default_str();
  c->add_option("--network,-n", a->network, network_model_names(" | ", " | "))->capture_default_str();
  add_calibration_option(c, a->calibration);
  c->add_option("--trace", a->trace,
                "write one trace of every schedule run, forward and backward (each pass a process of its own, the "
                "backward pass after the forward), to FILE: Chrome/Perfetto JSON, or CSV when FILE ends in .csv");
  c->add_option("--trace-ranks", a->trace_ranks,
                "with --trace: all (every rank), classes (one rank per class of symmetric ranks, the ranks the "
                "simulation ran; each stands for its class, and the trace says so) or auto (all up to 256 GPUs, "
                "classes above)")
      ->check(CLI::IsMember({"all", "classes", "auto"}))
      ->capture_default_str();
  c->add_flag("--search", a->search, "try every combination of the builder's options and report the best");
  c->add_flag("--json", a->json, "print JSON instead of tables");
  c->add_flag("--sensitivity", a->sensitivity,
              "vary each uncertain input over its sourced range, one at a time (link efficiencies, NCCL's "
              "per-operation latency, the modelling choices saa, dispatch, ds_moe and S2's gather), and report auto's "
              "speedup over the baseline at each end and whether auto's choice or the simulator's S1/S2 winner flips");
  c->add_option("--vary", a->vary,
                "with --sensitivity: KEY=LOW:HIGH, a topology key's range (replaces its default range or adds one), "
                "e.g. link_efficiency.network=0.6:1.0 or nccl.launch=0us:50us; repeatable");
  c->add_flag("--estimate", a->estimate,
              "print what simulating each schedule will take (tasks, transfers, events, memory, time), estimated "
              "from the layer's shape without building its graphs, and exit");
  add_max_memory_option(c, a->max_memory);
  add_no_symmetry_option(c, a->no_symmetry);
  c->callback([a] {
    if (!a->vary.empty() && !a->sensitivity)
      throw UserError("--vary: needs --sensitivity (it sets a range --sensitivity varies)");
    check_network_option(a->network);
    if (a->schedule != "all" && a->schedule != "auto" && !moe::is_preset(a->schedule))
      throw UserError(fmt::format("--schedule: unknown schedule '{}': expected {}", a->schedule,
                                  moe::schedule_choices({"auto", "all"}, ", ", " or ")));
    const Topology topo = load_topology(a->topo, split_assignments(a->topo_set, "--topo-set"), load_overlay_arg(a->overlay));
    moe::LayerSpec spec;
    moe::ScheduleKeys keys;
    if (!a->layer_file.empty()) {
      for (const auto& [kv, where] : moe::layer_file_keys(YamlReader::load_file(a->layer_file)))
        moe::apply_keys(&spec, &keys, {kv}, where);
    }
    moe::apply_keys(&spec, &keys, split_assignments(a->set, "--set"), "--set");
    if (keys.shaped && a->schedule == "baseline")
      throw UserError(fmt::format("--set: {} shape the Parm schedules; --schedule baseline would ignore them",
                                  moe::parm_shaping_key_names()));
    const moe::Dims dims = moe::make_dims(spec, topo.num_gpus(), topo.gpus_per_node());
    const GpuProfile& gpu = topo.gpu();
    gpu.peak(spec.dtype);  // rejects an unsupported dtype up front
    // The schedules to simulate, as far as known before the closed form runs
    // (auto: baseline and both of S1, S2, whichever it picks).
    std::vector<std::string> est_names;
    if (a->schedule == "all" || a->schedule == "auto")
      est_names = a->schedule == "all" ? moe::preset_names() : std::vector<std::string>{"baseline", "s1", "s2"};
    else if (a->schedule == "baseline")
      est_names = {"baseline"};
    else
      est_names = {"baseline", a->schedule};
    // What the simulation will take, before anything is built: refused above
    // --max-memory, announced when long. The schedules' plans stay cached
    // together, so their estimates add up.
    // With symmetry (the flow network, not --no-symmetry), the transfers and
    // flows of the representatives only.
    {
      const int order = moe::layer_symmetry_order(spec, dims, moe::symmetry_order(topo, a->network, !a->no_symmetry));
      moe::SimCost all;
      std::vector<std::pair<std::string, moe::SimCost>> each;
      for (const std::string& n : est_names) {
        each.emplace_back(n, moe::with_symmetry(moe::estimate_schedule(spec, dims, moe::schedule_options(n, keys)), order));
        all += each.back().second;
      }
      if (a->estimate) {
        for (const auto& [n, e] : each)
          fmt::print("{:<10} {:>12.4g} tasks {:>12.4g} transfers {:>12.4g} events {:>10.2f} GiB {:>10.1f} s\n", n,
                     e.tasks, e.transfers, e.events, e.bytes / (1u << 30), e.seconds);
        fmt::print("all        {}\n", moe::describe(all));
        return;
      }
      check_estimate(fmt::format("layer: simulating {} on {} GPUs", fmt::join(est_names, ", "), dims.P), all,
                     a->max_memory,
                     "simulate fewer schedules (--schedule s1) or GPUs (--topo-set nodes=N), or raise --max-memory; "
                     "`parmsim layer --estimate` prints each schedule's share");
    }
    const auto cal = load_calibration_arg(a->calibration);
    moe::AlphaBeta ab = moe::alpha_beta_from_topology(topo, nullptr, !a->no_symmetry);
    ab.calibration = cal.get();
    // A time past 2^63 ps comes from the layer's keys against the topology's rates: name them (a calibration
    // entry, when it is the cause, is named inside).
    auto keyed = [&](auto&& f) {
      try {
        return f();
      } catch (const TimeOverflow& e) {
        const std::string layer = fmt::format("layer {}", moe::spec_string(spec));
        throw TimeOverflow(fmt::format("{}: {}", layer, e.what()), e.cause().empty() ? layer : e.cause());
      }
    };
    const std::string chosen = keyed([&] { return moe::auto_choice(spec, dims, ab, gpu); });
    make_network(a->network, topo);

    std::vector<std::string> names;
    if (a->schedule == "all")
      names = moe::preset_names();
    else if (a->schedule == "auto")
      names = {"baseline", chosen};
    else {
      moe::preset(a->schedule);  // validates
      names = {a->schedule};
      if (a->schedule != "baseline") names.insert(names.begin(), "baseline");
    }
    if (!a->trace.empty()) {
      // Before simulating: the trace file can be written and is no input.
      struct stat st {};
      if (::stat(a->trace.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw UserError(fmt::format("--trace: '{}' is a directory; give a file name", a->trace));
      check_outputs({{"--trace", a->trace}}, {{"the topology file", a->topo},
                                              {"the --layer file", a->layer_file},
                                              {"the calibration file", a->calibration}});
    }
    Workspace ws;  // plans, routes and pools shared by the schedules' simulations
    moe::LayerRun run{topo, spec, a->network, cal.get(), &ab, &ws};
    run.symmetry = !a->no_symmetry;
    run.phases = true;
    std::vector<moe::ScheduleResult> results;
    std::string trace_classes;  // what the trace holds when not every rank
    // Each schedule's graphs and simulations, kept for the trace.
    std::vector<TaskGraph> graphs;
    std::vector<SimResult> sims;
    for (const std::string& n : names) {
      const moe::ScheduleOptions o = moe::schedule_options(n, keys);
      SimResult fr, br;
      TaskGraph fg, bg;
      const CoverageLabel label(n);  // what --calibration's report says ran these collectives
      const bool traced = !a->trace.empty();
      results.push_back(keyed([&] {
        return traced ? moe::run_schedule(run, o, &fr, &fg, &br, &bg) : moe::run_schedule(run, o);
      }));
      if (traced) {
        graphs.push_back(std::move(fg));
        graphs.push_back(std::move(bg));
        sims.push_back(std::move(fr));
        sims.push_back(std::move(br));
      }
    }
    if (!a->trace.empty()) {
      std::vector<TracePart> parts;
      // Above the route table's 256 GPUs a trace of every rank grows with P (45 MB for 1024 GPUs):
      // auto writes the ranks the simulation ran, one per class, there.
      const bool classes =
          a->trace_ranks == "classes" || (a->trace_ranks == "auto" && topo.num_gpus() > Topology::kRouteTableGpus);
      for (std::size_t i = 0; i < names.size(); ++i)
        for (std::size_t pass = 0; pass < 2; ++pass) {
          const TaskGraph& g = graphs[2 * i + pass];
          const SimResult& r = sims[2 * i + pass];
          parts.push_back({names[i], pass ? "backward" : "forward", &g, &r,
                           pass ? sims[2 * i].makespan : Time::zero(), classes ? representative_ranks(g, r) : 0});
          if (classes && r.symmetry > 1) trace_classes = fmt::format(
              "ranks 0-{} of {}, one per class of symmetric ranks (--trace-ranks all for every rank)",
              representative_ranks(g, r) - 1, g.num_ranks());
        }
      // .csv: the per-task trace CSV; anything else: Chrome/Perfetto JSON.
      const bool csv = a->trace.size() > 4 && a->trace.substr(a->trace.size() - 4) == ".csv";
      write_atomically(a->trace, [&](std::ostream& os) {
        if (csv)
          write_trace_csv(os, parts);
        else
          write_chrome_trace(os, parts);
      });
    }
    const Time base = results.front().total();
    // The simulator's own pick between S1 and S2 (when both ran).
    std::string sim_pick;
    const moe::ScheduleResult *r1 = nullptr, *r2 = nullptr;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "s1") r1 = &results[i];
      if (names[i] == "s2") r2 = &results[i];
    }
    if (r1 && r2) sim_pick = r2->total() < r1->total() ? "s2" : "s1";

    std::optional<moe::ScheduleResult> best;
    std::size_t tried = 0;
    if (a->search) {
      moe::LayerRun plain = run;
      plain.phases = false;
      for (moe::ScheduleOptions o : moe::search_space()) {
        o.a2a_algo = keys.parm.a2a_algo;
        const moe::ScheduleResult r = moe::run_schedule(plain, o);
        ++tried;
        if (!best || r.total() < best->total()) best = r;
      }
    }

    std::optional<moe::Sensitivity> sens;
    if (a->sensitivity) {
      std::vector<moe::SensitivityInput> inputs = moe::default_sensitivity_inputs(topo);
      for (const std::string& v : a->vary) {
        moe::SensitivityInput in = moe::parse_vary(v, "--vary");
        auto same = [&](const moe::SensitivityInput& x) { return x.parameter == in.parameter; };
        if (auto it = std::find_if(inputs.begin(), inputs.end(), same); it != inputs.end())
          *it = in;
        else
          inputs.push_back(in);
      }
      const std::vector<std::string> base_set = split_assignments(a->topo_set, "--topo-set");
      const std::vector<std::string> overlay = load_overlay_arg(a->overlay);
      // The varied key goes last of the overlay (which may add maps the file lacks, as
      // nccl: for nccl.launch), and a --topo-set of the same key gives way to it.
      auto load = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> set, over = overlay;
        for (const std::string& x : base_set) {
          const std::string key = x.substr(0, x.find('='));
          bool varied = false;
          for (const std::string& e : extra) varied = varied || e.substr(0, e.find('=')) == key;
          if (!varied) set.push_back(x);
        }
        over.insert(over.end(), extra.begin(), extra.end());
        return load_topology(a->topo, set, over);
      };
      sens = moe::layer_sensitivity(load, spec, keys, inputs, a->network);
    }

    const std::shared_ptr<const moe::LayerLoad> drawn = spec.load ? moe::draw_layer_load(spec, dims) : nullptr;
    if (a->json) {
      nlohmann::json j;
      j["topology"] = topo.name();
      j["network"] = a->network;
      j["layer"] = moe::spec_string(spec);
      j["baseline_system"] = moe::baseline_system(spec);
      j["P"] = dims.P;
      j["G"] = dims.G;
      j["N_EP"] = dims.n_ep;
      // With `ep` given, the layout as Megatron-Core names it (docs/parm.md, "Layouts").
      if (spec.ep > 0) j["layout"] = {{"tp", dims.G}, {"etp", dims.G}, {"ep", dims.n_ep}, {"dp", dims.dp}};
      // With `load`, the routing the layer simulated (docs/moe-costs.md, "Dropless routing").
      if (drawn)
        j["load"] = {{"model", spec.load->text},
                     {"seed", spec.seed},
                     {"expert_imbalance", drawn->expert_imbalance},
                     {"max_expert_tokens", drawn->max_expert_rows},
                     {"mean_expert_tokens", drawn->mean_expert_rows},
                     {"rank_imbalance", drawn->rank_imbalance},
                     {"max_rank_tokens", drawn->max_rank_rows},
                     {"mean_rank_tokens", drawn->mean_rank_rows}};
      // Group-limited routing (docs/moe-costs.md): the limit and the selections that cross nodes.
      if (drawn && spec.topk_groups > 0) {
        j["load"]["expert_groups"] = spec.expert_groups;
        j["load"]["topk_groups"] = spec.topk_groups;
        j["load"]["inter_node_selections"] = moe::inter_node_share(*drawn, dims, topo.gpus_per_node());
      }
      if (!a->trace.empty()) j["trace"] = a->trace;
      if (!trace_classes.empty()) j["trace_ranks"] = trace_classes;
      nlohmann::json sch = nlohmann::json::object();
      for (std::size_t i = 0; i < names.size(); ++i) {
        const auto& r = results[i];
        nlohmann::json phases = nlohmann::json::object();
        for (std::size_t p = 0; p < moe::kPhases; ++p)
          phases[std::string(moe::to_string(static_cast<moe::Phase>(p)))] = r.phases.t[p].to_us();
        sch[names[i]] = {{"forward_us", r.forward.to_us()},
                         {"backward_us", r.backward.to_us()},
                         {"total_us", r.total().to_us()},
                         {"model_us", r.model_total_s() * 1e6},
                         {"model_forward_us", r.model_forward_s * 1e6},
                         {"model_backward_us", r.model_backward_s * 1e6},
                         {"speedup_vs_baseline", base.to_seconds() / r.total().to_seconds()},
                         {"intra_node_bytes", r.intra_node_bytes},
                         {"inter_node_bytes", r.inter_node_bytes},
                         {"intra_node_bytes_per_gpu", r.intra_node_bytes / static_cast<std::uint64_t>(dims.P)},
                         {"inter_node_bytes_per_gpu", r.inter_node_bytes / static_cast<std::uint64_t>(dims.P)},
                         {"compute_us", r.compute_rank0.to_us()},
                         {"exposed_comm_us", r.exposed_comm().to_us()},
                         {"phases", phases},
                         {"critical_comm_us", r.phases.communication().to_us()},
                         {"host_us", r.host_rank0.to_us()},
                         {"peak_memory_bytes", r.peak_memory_bytes},
                         {"fits", r.fits},
                         {"options", r.options.describe()}};
      }
      j["schedules"] = sch;
      j["gpu_memory_bytes"] = topo.gpu_memory();
      j["auto"] = chosen;
      if (!sim_pick.empty()) j["simulator_pick"] = sim_pick;
      if (best) {
        j["search"] = {{"tried", tried},
                       {"best_options", best->options.describe()},
                       {"best_total_us", best->total().to_us()},
                       {"best_peak_memory_bytes", best->peak_memory_bytes},
                       {"best_fits", best->fits},
                       {"gain_vs_s1", r1 ? r1->total().to_seconds() / best->total().to_seconds() : 0.0},
                       {"gain_vs_s2", r2 ? r2->total().to_seconds() / best->total().to_seconds() : 0.0}};
      }
      if (sens) {
        j["sensitivity_nominal"] = {{"speedup", sens->nominal.speedup},
                                    {"auto", sens->nominal.choice},
                                    {"simulator_pick", sens->nominal.winner}};
        nlohmann::json rows = nlohmann::json::array();
        for (const moe::SensitivityRow& r : sens->rows)
          rows.push_back({{"parameter", r.input.parameter},
                          {"low", r.input.low.empty() ? "as given" : r.input.low},
                          {"high", r.input.high.empty() ? "as given" : r.input.high},
                          {"speedup_low", r.low.speedup},
                          {"speedup_high", r.high.speedup},
                          {"auto_low", r.low.choice},
                          {"auto_high", r.high.choice},
                          {"simulator_pick_low", r.low.winner},
                          {"simulator_pick_high", r.high.winner},
                          {"flips", r.flips},
                          {"simulator_pick_flips", r.winner_flips},
                          {"source", r.input.source}});
        j["sensitivity"] = rows;
      }
      std::cout << j.dump(1) << "\n";
      return;
    }
    fmt::print("layer {} on {} (P={}, G=mp={}, N_EP={}, {} GPUs), {} network\n", moe::spec_string(spec), topo.name(),
               dims.P, dims.G, dims.n_ep, topo.gpu_model(), a->network);
    if (spec.ep > 0)
      fmt::print("layout (Megatron-Core, ranks in order tp-ep-dp): tp={} etp={} ep={} dp={}: {} {}-GPU expert-parallel "
                 "block{}\n",
                 dims.G, dims.G, dims.n_ep, dims.dp, dims.dp, dims.G * dims.n_ep, dims.dp > 1 ? "s" : "");
    if (drawn)
      fmt::print("load {} (seed {}), dropless: tokens per expert max/mean {:.3f} ({} / {:.1f}), per EP rank max/mean "
                 "{:.3f} ({} / {:.1f})\n",
                 spec.load->text, spec.seed, drawn->expert_imbalance, drawn->max_expert_rows, drawn->mean_expert_rows,
                 drawn->rank_imbalance, drawn->max_rank_rows, drawn->mean_rank_rows);
    if (drawn && spec.topk_groups > 0)
      fmt::print("group-limited: each token's {} experts from at most {} of {} groups of {}; {:.1f}% of the selections "
                 "go to another node (one copy each: the AlltoAll does not merge a token's copies per node)\n",
                 spec.k, spec.topk_groups, spec.expert_groups, spec.E / spec.expert_groups,
                 100 * moe::inter_node_share(*drawn, dims, topo.gpus_per_node()));
    fmt::print("baseline: {}\n", moe::baseline_system(spec));
    fmt::print("tokens/GPU S={}, capacity T={} (baseline) / {} (Parm, per S/G), experts/EP rank {}\n", dims.S,
               dims.T_base, dims.T_parm, dims.E_local);
    fmt::print("GPU memory {} per GPU{}\n", gib(topo.gpu_memory()),
               topo.gpu_memory() == gpu.memory_bytes ? " (the GPU profile's)" : " (topology key gpu_memory)");
    fmt::print("{:<10} {:>12} {:>12} {:>12} {:>8} {:>12} {:>11} {:>11} {:>12} {:>11} {:>4}\n", "schedule",
               "forward_us", "backward_us", "total_us", "speedup", "model_us", "intra/GPU", "inter/GPU", "exposed_us",
               "peak_memory", "fits");
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& r = results[i];
      fmt::print("{:<10} {:>12.1f} {:>12.1f} {:>12.1f} {:>7.2f}x {:>12.1f} {:>11} {:>11} {:>12.1f} {:>11} {:>4}\n",
                 r.options.name == "custom" ? names[i] : r.options.name, r.forward.to_us(), r.backward.to_us(),
                 r.total().to_us(), base.to_seconds() / r.total().to_seconds(), r.model_total_s() * 1e6,
                 units::format_bytes(r.intra_node_bytes / static_cast<std::uint64_t>(dims.P)),
                 units::format_bytes(r.inter_node_bytes / static_cast<std::uint64_t>(dims.P)),
                 r.exposed_comm().to_us(), gib(r.peak_memory_bytes), r.fits ? "yes" : "no");
    }
    // Where the time goes: the critical path of each pass cut into phases (the columns some schedule has).
    {
      std::vector<std::size_t> cols;
      for (std::size_t p = 0; p < moe::kPhases; ++p)
        for (const auto& r : results)
          if (r.phases.t[p] > Time::zero()) {
            cols.push_back(p);
            break;
          }
      fmt::print("critical path by phase, us (forward + backward; a row adds up to total_us; comm_us: the "
                 "collectives' share, communication nothing hid):\n{:<10}",
                 "schedule");
      auto width = [](std::size_t p) { return std::max<std::size_t>(9, moe::to_string(static_cast<moe::Phase>(p)).size()); };
      for (std::size_t p : cols) fmt::print(" {:>{}}", moe::to_string(static_cast<moe::Phase>(p)), width(p));
      fmt::print(" {:>9}\n", "comm_us");
      for (std::size_t i = 0; i < names.size(); ++i) {
        const auto& r = results[i];
        fmt::print("{:<10}", r.options.name == "custom" ? names[i] : r.options.name);
        for (std::size_t p : cols) fmt::print(" {:>{}.1f}", r.phases.t[p].to_us(), width(p));
        fmt::print(" {:>9.1f}\n", r.phases.communication().to_us());
      }
    }
    if (spec.host_op > Time::zero())
      for (std::size_t i = 0; i < names.size(); ++i) {
        const auto& r = results[i];
        fmt::print("host {:<8} rank 0's host issues for {:.1f} us, its GPU computes for {:.1f} us{}\n", names[i],
                   r.host_rank0.to_us(), r.compute_rank0.to_us(),
                   r.host_rank0 > r.compute_rank0 ? ": launch-bound" : "");
      }
    fmt::print("auto (alpha-beta model) picks {}", chosen);
    if (!sim_pick.empty())
      fmt::print("; the simulator finds {} faster: {}\n", sim_pick, sim_pick == chosen ? "agrees" : "DISAGREES");
    else
      fmt::print("\n");
    if (best) {
      fmt::print("search: {} option combinations; best {} at {:.1f} us, peak memory {}{}", tried,
                 best->options.describe(), best->total().to_us(), gib(best->peak_memory_bytes),
                 best->fits ? "" : " (does not fit)");
      if (r1) fmt::print(", {:.3f}x vs s1", r1->total().to_seconds() / best->total().to_seconds());
      if (r2) fmt::print(", {:.3f}x vs s2", r2->total().to_seconds() / best->total().to_seconds());
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == chosen)
          fmt::print(", {:.3f}x vs auto", results[i].total().to_seconds() / best->total().to_seconds());
      fmt::print("\n");
    }
    if (!a->trace.empty())
      fmt::print("trace: {} ({}; forward and backward{})\n", a->trace, fmt::join(names, ", "),
                 trace_classes.empty() ? "" : "; " + trace_classes);
    if (sens) {
      fmt::print("\nsensitivity: auto's speedup over the baseline, each input at the ends of its range, the rest as "
                 "given (nominal {:.2f}x; auto picks {}, the simulator finds {} faster)\n",
                 sens->nominal.speedup, sens->nominal.choice, sens->nominal.winner);
      fmt::print("{:<24} {:>12} {:>34} {:>10} {:>10} {:>9} {:>9}  {}\n", "parameter", "low", "high", "speedup_lo",
                 "speedup_hi", "auto", "faster", "flips");
      for (const moe::SensitivityRow& r : sens->rows) {
        const std::string flips = r.flips && r.winner_flips ? "auto, simulator"
                                  : r.flips                 ? "auto"
                                  : r.winner_flips          ? "simulator"
                                                            : "-";
        fmt::print("{:<24} {:>12} {:>34} {:>9.2f}x {:>9.2f}x {:>9} {:>9}  {}\n", r.input.parameter,
                   r.input.low.empty() ? "as given" : r.input.low, r.input.high.empty() ? "as given" : r.input.high,
                   r.low.speedup, r.high.speedup, r.low.choice + "/" + r.high.choice,
                   r.low.winner + "/" + r.high.winner, flips);
      }
    }
  });
}

}  // namespace parmsim::cli
