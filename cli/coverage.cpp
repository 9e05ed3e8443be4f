#include "cli/coverage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "sim/calib/calibration.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/engine/simulator.hpp"

namespace parmsim::cli {

namespace {

// A table line without the padding of an empty last column.
std::string row_line(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s + "\n";
}

// "768KiB", "1.5MiB", "16GiB": three significant digits, binary units.
std::string short_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.3g}{}", b, unit[u]);
}

std::string sizes_text(const CollectiveUse& u) {
  const std::string n = u.sizes.size() >= CollectiveUse::kMaxSizes ? fmt::format("{}+", u.sizes.size())
                                                                   : fmt::format("{}", u.sizes.size());
  if (u.min == u.max) return fmt::format("1 size: {}", short_bytes(static_cast<double>(u.min)));
  return fmt::format("{} sizes: {}..{}", n, short_bytes(static_cast<double>(u.min)),
                     short_bytes(static_cast<double>(u.max)));
}

std::string labels_text(const std::set<std::string>& labels) {
  std::string s;
  for (const std::string& l : labels) s += (s.empty() ? "" : ", ") + l;
  return s;
}

const char* link_of(bool inter) {
  return inter ? "inter" : "intra";
}

// The recording every simulation with the watched calibration adds to.
struct Watch {
  std::mutex mu;
  std::shared_ptr<const Calibration> cal;
  CollectiveUses uses;
  bool active = false;
};
Watch& watch() {
  static Watch w;
  return w;
}
thread_local std::string t_label;

void observe(const TaskGraph& g, const Topology& topo, const SimOptions& opt) {
  Watch& w = watch();
  // Collected apart, then merged under the lock (a sweep's threads simulate at once).
  CollectiveUses one;
  one.add(g, topo, opt.calibration, t_label);
  const std::lock_guard<std::mutex> lock(w.mu);
  if (!w.active) return;
  w.uses.graphs += one.graphs;
  for (auto& [k, u] : one.collectives) {
    CollectiveUse& m = w.uses.collectives[k];
    m.calls += u.calls;
    m.beyond += u.beyond;
    m.min = std::min(m.min, u.min);
    m.max = std::max(m.max, u.max);
    for (std::uint64_t s : u.sizes)
      if (m.sizes.size() < CollectiveUse::kMaxSizes) m.sizes.insert(s);
    m.labels.insert(u.labels.begin(), u.labels.end());
  }
  for (const auto& [k, n] : one.kernels_measured) w.uses.kernels_measured[k] += n;
  for (const auto& [k, n] : one.kernels_modelled) w.uses.kernels_modelled[k] += n;
}

}  // namespace

std::string CollectivePlacement::where() const {
  if (per_node.size() == 1) return fmt::format("1 node x {}", per_node[0]);
  const bool even = std::all_of(per_node.begin(), per_node.end(), [&](int n) { return n == per_node[0]; });
  if (even) return fmt::format("{} nodes x {}", per_node.size(), per_node[0]);
  std::string s = fmt::format("{} nodes: ", per_node.size());
  for (std::size_t i = 0; i < per_node.size(); ++i) s += fmt::format("{}{}", i ? "+" : "", per_node[i]);
  return s;
}

void CollectiveUses::add(const TaskGraph& g, const Topology& topo, const Calibration* cal, const std::string& label) {
  ++graphs;
  std::map<int, int> by_node;
  for (const Collective& c : g.collectives()) {
    if (c.group.size() < 2) continue;  // moves nothing, times nothing
    by_node.clear();
    for (int r : c.group) ++by_node[topo.node_of(r)];
    CollectivePlacement k{c.op, static_cast<int>(c.group.size()), {}};
    for (const auto& [n, count] : by_node) k.per_node.push_back(count);
    CollectiveUse& u = collectives[k];
    ++u.calls;
    u.min = std::min(u.min, c.bytes);
    u.max = std::max(u.max, c.bytes);
    if (u.sizes.size() < CollectiveUse::kMaxSizes) u.sizes.insert(c.bytes);
    if (!label.empty()) u.labels.insert(label);
    if (cal)
      if (const CalibratedCollective* e = cal->find(c.op, k.ranks, k.inter()))
        if (e->points.size() < 2 || static_cast<double>(c.bytes) < e->points.front().first ||
            static_cast<double>(c.bytes) > e->points.back().first)
          ++u.beyond;
  }
  if (cal && !cal->kernels.empty())
    for (const Task& t : g.tasks()) {
      if (!t.is_compute() || t.compute().op == OpKind::host) continue;
      const ComputeTask& c = t.compute();
      const std::string_view kind = g.kernel_name(c.kernel);
      const std::string key = fmt::format("{} ({})", kind, to_string(c.dtype));
      ++(cal->kernel(kind, c.dtype) ? kernels_measured : kernels_modelled)[key];
    }
}

void coverage_watch(std::shared_ptr<const Calibration> cal) {
  if (!cal) return;
  Watch& w = watch();
  {
    const std::lock_guard<std::mutex> lock(w.mu);
    w.cal = std::move(cal);
    w.uses = {};
    w.active = true;
  }
  set_simulation_observer(&observe);
}

void coverage_cancel() {
  Watch& w = watch();
  const std::lock_guard<std::mutex> lock(w.mu);
  w.active = false;
}

CoverageLabel::CoverageLabel(std::string label) : previous_(std::exchange(t_label, std::move(label))) {}
CoverageLabel::~CoverageLabel() {
  t_label = std::move(previous_);
}

void coverage_finish(const CLI::App& app) {
  Watch& w = watch();
  std::string text;
  {
    const std::lock_guard<std::mutex> lock(w.mu);
    if (!w.active || !w.cal || w.uses.graphs == 0) return;
    w.active = false;
    text = coverage_report(w.uses, *w.cal);
  }
  bool to_stderr = false;
  for (const CLI::App* sub : app.get_subcommands()) {
    const CLI::Option* json = sub->get_option_no_throw("--json");
    to_stderr = to_stderr || sub->get_name() == "sweep" || (json && json->count() > 0);
  }
  std::fputs(text.c_str(), to_stderr ? stderr : stdout);
}

std::string coverage_report(const CollectiveUses& uses, const Calibration& cal) {
  // Calibrated or not is a property of (op, ranks, link): the entry that matches.
  int kinds = 0, timed = 0;
  std::set<const CalibratedCollective*> used;
  {
    std::set<std::tuple<CollOp, int, bool>> seen;
    for (const auto& [k, u] : uses.collectives)
      if (seen.emplace(k.op, k.ranks, k.inter()).second) {
        ++kinds;
        if (const CalibratedCollective* e = cal.find(k.op, k.ranks, k.inter())) ++timed, used.insert(e);
      }
  }
  bool labels = false;
  for (const auto& [k, u] : uses.collectives) labels = labels || !u.labels.empty();
  std::string s;
  if (uses.collectives.empty()) {
    s += fmt::format(
        "calibration {}: this run has no collective of 2 or more ranks; none of its {} collective "
        "entries was used\n",
        cal.file, cal.collectives.size());
  } else {
    s += fmt::format(
        "calibration {}: {} of the {} collective kinds (op, ranks, link) this run simulated {} timed "
        "from it, {} modelled\n",
        cal.file, timed, kinds, timed == 1 ? "was" : "were", kinds - timed);
    s += row_line(fmt::format("  {:<10} {:<13} {:>5} {:<5} {:<13} {:>6}  {:<26}{}", "timed by", "op", "ranks", "link",
                              "placement", "calls", "sizes", labels ? "  used by" : ""));
    for (const auto& [k, u] : uses.collectives) {
      const CalibratedCollective* e = cal.find(k.op, k.ranks, k.inter());
      s += row_line(fmt::format("  {:<10} {:<13} {:>5} {:<5} {:<13} {:>6}  {:<26}{}", e ? "measured" : "model",
                                to_string(k.op), k.ranks, link_of(k.inter()), k.where(), u.calls, sizes_text(u),
                                labels ? "  " + labels_text(u.labels) : ""));
      if (e) {
        const std::string span = e->points.size() >= 2
                                     ? fmt::format("its measured {}..{}", short_bytes(e->points.front().first),
                                                   short_bytes(e->points.back().first))
                                     : std::string("no measured points");
        s += fmt::format("  {:<10} from {}; {}\n", "", e->where.empty() ? cal.file : e->where,
                         u.beyond == 0
                             ? fmt::format("every size within {} (interpolated)", span)
                             : fmt::format("{} of {} calls outside {}: its alpha-beta line", u.beyond, u.calls, span));
      }
    }
  }
  for (const CalibratedCollective& e : cal.collectives)
    if (!used.count(&e))
      s += fmt::format(
          "  unused entry {}: no collective of this run has its op, group size and link{}\n",
          e.where.empty() ? fmt::format("{} over {} ranks, {}", to_string(e.op), e.ranks, link_of(e.inter)) : e.where,
          labels ? " (a layer's collectives run over N_EP or G ranks, not all of its GPUs)" : "");
  if (timed < kinds)
    s += "  the modelled ones: `parmsim calibrate --plan -t TOPOLOGY --set LAYER_KEYS` prints the nccl-tests runs "
         "that would measure them\n";
  if (!cal.kernels.empty()) {
    std::uint64_t m = 0, n = 0;
    for (const auto& [k, c] : uses.kernels_measured) m += c;
    for (const auto& [k, c] : uses.kernels_modelled) n += c;
    std::string names;
    for (const auto& [k, c] : uses.kernels_measured) names += (names.empty() ? "" : ", ") + k;
    s += fmt::format("kernels: {} of {} task kinds ({} of {} tasks) timed from the calibration's tables{}{}\n",
                     uses.kernels_measured.size(), uses.kernels_measured.size() + uses.kernels_modelled.size(), m,
                     m + n, names.empty() ? "" : ": ", names);
  }
  return s;
}

namespace {

// nccl-tests' program for an op; "" when none runs it.
const char* nccl_tests_program(CollOp op) {
  switch (op) {
    case CollOp::allreduce:
      return "all_reduce_perf";
    case CollOp::allgather:
      return "all_gather_perf";
    case CollOp::reducescatter:
      return "reduce_scatter_perf";
    case CollOp::alltoall:
      return "alltoall_perf";
    case CollOp::sendrecv:
      return "sendrecv_perf";
    case CollOp::alltoallv:
    case CollOp::saa:
      return "";
  }
  return "";
}

// A size as nccl-tests' -b/-e read it (K, M, G: powers of 1024).
std::string nccl_tests_size(std::uint64_t b) {
  if (b >= (1ULL << 30) && b % (1ULL << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (1ULL << 20) && b % (1ULL << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= (1ULL << 10) && b % (1ULL << 10) == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

std::uint64_t pow2_at_most(std::uint64_t b) {
  std::uint64_t p = 1;
  while (p <= b / 2) p *= 2;
  return p;
}
std::uint64_t pow2_at_least(std::uint64_t b) {
  std::uint64_t p = 1;
  while (p < b && p < (1ULL << 62)) p *= 2;
  return p;
}

}  // namespace

std::string nccl_tests_plan(const CollectiveUses& uses, DType dtype) {
  const char* type = dtype == DType::fp16 ? "half" : dtype == DType::bf16 ? "bfloat16" : "float";
  std::string s;
  bool labels = false;
  for (const auto& [k, u] : uses.collectives) labels = labels || !u.labels.empty();
  s += row_line(fmt::format("  {:<13} {:>5} {:<5} {:<13} {:>6}  {:<26}{}", "op", "ranks", "link", "placement", "calls",
                            "sizes", labels ? "  used by" : ""));
  for (const auto& [k, u] : uses.collectives)
    s += row_line(fmt::format("  {:<13} {:>5} {:<5} {:<13} {:>6}  {:<26}{}", to_string(k.op), k.ranks,
                              link_of(k.inter()), k.where(), u.calls, sizes_text(u),
                              labels ? "  " + labels_text(u.labels) : ""));
  s += "\nnccl-tests runs that would measure them (nccl-tests' build/ folder; HOSTn: your hosts, each with the "
       "GPUs shown):\n";
  std::map<std::tuple<CollOp, int, bool>, int> placements;  // one calibration entry per (op, ranks, link)
  for (const auto& [k, u] : uses.collectives) ++placements[{k.op, k.ranks, k.inter()}];
  for (const auto& [k, u] : uses.collectives) {
    const char* prog = nccl_tests_program(k.op);
    s += fmt::format("  # {} over {} ranks, {}, {}{}\n", to_string(k.op), k.ranks, k.where(), sizes_text(u),
                     labels ? " (" + labels_text(u.labels) + ")" : "");
    if (!*prog) {
      s += fmt::format("  #   no nccl-tests program runs {}: {}; it stays modelled\n", to_string(k.op),
                       k.op == CollOp::saa ? "Parm's fused AlltoAll + AllGather (`calibrate --backend cuda` measures "
                                             "the layer's kernels and collectives on a GPU instead)"
                                           : "an uneven AlltoAll (alltoall_perf runs the even one)");
      continue;
    }
    // Sizes bracketing the used ones, doubling, and at least 3 (calibrate fits a curve to 3 or more).
    std::uint64_t lo = pow2_at_most(std::max<std::uint64_t>(u.min, 8)), hi = pow2_at_least(std::max(u.max, lo));
    while (hi / lo < 4 && lo > 8) lo /= 2;
    while (hi / lo < 4) hi *= 2;
    const std::string sizes = fmt::format("-b {} -e {} -f 2 -d {}", nccl_tests_size(lo), nccl_tests_size(hi), type);
    if (!k.inter()) {
      s += fmt::format("  ./build/{} {} -g {}\n", prog, sizes, k.ranks);
    } else {
      std::string hosts;
      for (std::size_t i = 0; i < k.per_node.size(); ++i)
        hosts += fmt::format("{}HOST{}:{}", i ? "," : "", i, k.per_node[i]);
      s += fmt::format("  mpirun -np {} -H {} ./build/{} {} -g 1\n", k.ranks, hosts, prog, sizes);
    }
    if (placements[{k.op, k.ranks, k.inter()}] > 1)
      s += fmt::format(
          "  #   a calibration holds one entry per (op, ranks, link): the {} placements of {} over {} "
          "ranks ({}) share it; import the one that matters most\n",
          placements[{k.op, k.ranks, k.inter()}], to_string(k.op), k.ranks, link_of(k.inter()));
  }
  return s;
}

}  // namespace parmsim::cli
