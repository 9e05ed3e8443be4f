#include "sim/engine/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <tuple>
#include <unordered_map>
#include <deque>
#include <utility>
#include <string_view>
#include <span>

#include "sim/calib/calibration.hpp"
#include "sim/coll/collective_cost.hpp"
#include "sim/coll/collective_plan.hpp"
#include "sim/compute/gemm_model.hpp"
#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/event_queue.hpp"
#include "sim/net/network_model.hpp"

namespace parmsim {
namespace {

// Compressed adjacency over a pool: the items of key k are
// list[start[k] .. start[k+1]).
struct Csr {
  const int* start = nullptr;
  const int* list = nullptr;
  std::span<const int> of(int k) const { return {list + start[k], list + start[k + 1]}; }
};

// One collective's plan and run state. The state arrays of every collective
// are carved from three pools (Pools below; a graph has dozens of
// collectives: no allocations per collective for them).
struct CollState {
  // Shared with other simulations of the workspace (shared_plan); or, with
  // symmetry, for a collective with members on and off the representatives,
  // its representatives' part (compact: Engine::compact_plan).
  std::shared_ptr<const CollPlan> plan;
  bool compact = false;
  Csr step_xfers;    // xfers touching each step
  Csr step_succ;     // steps depending on each step
  Csr member_steps;  // steps of each member
  int* step_deps_left = nullptr;
  int* step_xfers_left = nullptr;
  int* member_steps_left = nullptr;
  int* member_in_left = nullptr;  // transfers addressed to each member not yet arrived
  char* step_ready = nullptr;
  char* xfer_started = nullptr;
  char* entered = nullptr;
  std::uint64_t* member_sent = nullptr;
  int members = 0;
  const CalibratedCollective* calibrated = nullptr;  // timed as a whole when set
  int entered_count = 0;
  // With symmetry: the members simulated (on ranks [0, R)), each member's
  // representative, and per transfer the representative of its receiving
  // step (-1: a transfer not simulated, its sender not a representative).
  int rep_members = 0;
  std::vector<int> member_rep, qrecv, qstart, qlist;
};

// The pools of CollState's arrays: this floor's part of a Workspace, kept
// from one simulation to the next (allocated afresh each simulation they were slower than the small
// vectors they replace (measured: one layer, all schedules, 6.9 to 8.2 ms),
// most likely because freeing large blocks makes malloc consolidate its
// lists of small free chunks.
struct Pools : Workspace::Part {
  static constexpr Workspace::Slot kSlot = Workspace::kEngine;
  std::vector<int> ints, fill;  // the collectives' int arrays; scratch for building a CSR
  std::vector<char> chars;
  std::vector<std::uint64_t> u64;
  bool busy = false;  // an engine holds them
};

// What the engine's symmetry has checked (its part of a Workspace): each
// topology's server shifts (null: not a symmetry), and which pairs of plans
// map onto each other under which member map. Entries hold weak pointers to
// their plans, so an entry outlives no plan it names.
struct SymmetryCache : Workspace::Part {
  static constexpr Workspace::Slot kSlot = Workspace::kSymmetry;
  static constexpr std::size_t kMaxShifts = 64, kMaxChecks = 4096;
  struct Shift {
    std::uint64_t topo;
    int nodes;
    std::shared_ptr<NodeShift> shift;
  };
  std::vector<Shift> shifts;
  struct Check {
    std::weak_ptr<const CollPlan> a, b;
    std::weak_ptr<NodeShift> shift;
    std::vector<int> pi;
    bool ok;
  };
  struct PairHash {
    std::size_t operator()(const std::pair<const CollPlan*, const CollPlan*>& k) const {
      return std::hash<const void*>()(k.first) * 31 + std::hash<const void*>()(k.second);
    }
  };
  std::unordered_multimap<std::pair<const CollPlan*, const CollPlan*>, Check, PairHash> checks;
  std::shared_ptr<NodeShift> shift(const Topology& t, std::uint64_t topo_key, int nodes);
  bool plans_map(const std::shared_ptr<const CollPlan>& a, const std::shared_ptr<const CollPlan>& b,
                 const std::vector<int>& pi, const std::shared_ptr<NodeShift>& sh, int P);
};

// Thrown when a flow's route turns out not to follow the symmetry (checked as
// flows start): the simulation starts again rank by rank.
struct SymmetryBroken {};

class Engine {
 public:
  Engine(const TaskGraph& g, const Topology& topo, const SimOptions& opt, Workspace& ws)
      : g_(g),
        topo_(topo),
        gpu_(topo.gpu()),
        rates_(gpu_),
        ws_(ws),
        net_(make_network(opt.network, topo, &ws)),
        cal_(opt.calibration),
        pools_(ws.get<Pools>().busy ? own_pools_ : ws.get<Pools>()) {
    if (g.num_ranks() > topo.num_gpus())
      throw UserError(fmt::format("the task graph has {} ranks but topology '{}' has only {} GPUs", g.num_ranks(),
                                  topo.name(), topo.num_gpus()));
    const int C = static_cast<int>(g.collectives().size());
    coll_.resize(C);
    // Plans first; then which collectives run (with symmetry, those with a
    // member on the representatives), to size the pools; then each running
    // collective's arrays are carved from them (the pools never grow after that).
    const std::uint64_t topo_key = C > 0 ? topology_fingerprint(topo) : 0;
    topo_key_ = topo_key;
    // With symmetry tried, find_symmetry takes the plans one at a time (and
    // keeps a large one only as its representatives' part); else here, in order.
    const bool try_symmetry = opt.symmetry && net_->name() == "flow" && C > 0;
    for (int c = 0; c < C; ++c) {
      CollState& s = coll_[c];
      if (!try_symmetry) s.plan = shared_plan(g.collective(c), topo, topo_key, ws);
      s.members = static_cast<int>(g.collective(c).group.size());
      s.rep_members = s.members;
      if (opt.calibration) {
        const Collective& col = g.collective(c);
        bool inter = false;
        for (int r : col.group) inter = inter || !topo.same_node(r, col.group[0]);
        s.calibrated = opt.calibration->find(col.op, static_cast<int>(col.group.size()), inter);
      }
    }
    member_index_.resize(g.tasks().size(), -1);
    for (int c = 0; c < C; ++c) {
      const auto& parts = g.parts(c);
      for (std::size_t m = 0; m < parts.size(); ++m) member_index_[parts[m]] = static_cast<int>(m);
    }
    if (try_symmetry) {
      try {
        find_symmetry(topo_key);
      } catch (...) {
        // A plan that throws: no symmetry; the loop below takes the plans in
        // order and throws the first collective's error, as without symmetry.
        q_ = Quotient{};
      }
      for (int c = 0; c < C; ++c) {
        CollState& s = coll_[c];
        if (q_.order == 1 && s.compact) s.plan = nullptr, s.compact = false;
        if (!s.plan) s.plan = shared_plan(g.collective(c), topo, topo_key, ws);
      }
    }
    auto runs = [this](int c) {
      if (q_.order == 1) return true;
      for (int r : g_.collective(c).group)
        if (r < q_.R) return true;
      return false;
    };
    std::size_t ints = 0, chars = 0, u64s = 0;
    for (int c = 0; c < C; ++c) {
      if (!runs(c)) continue;
      const CollState& s = coll_[c];
      const std::size_t S = s.plan->steps.size(), X = s.plan->xfers.size(), M = g.collective(c).group.size();
      std::size_t deps = 0;
      for (const CollStep& st : s.plan->steps) deps += st.num_deps();
      // step_deps_left, step_xfers_left (S each), member_steps_left,
      // member_in_left (M each); CSR starts (S+1, S+1, M+1) and lists (2X,
      // deps, S).
      ints += 2 * S + 2 * M + (S + 1) + (S + 1) + (M + 1) + (q_.order == 1 ? 2 * X : 0) + deps + S;
      chars += S + X + M;
      u64s += M;
    }
    pools_.ints.assign(ints, 0);
    pools_.chars.assign(chars, 0);
    pools_.u64.assign(u64s, 0);
    int* ip = pools_.ints.data();
    char* cp = pools_.chars.data();
    std::uint64_t* up = pools_.u64.data();
    auto take_ints = [&ip](std::size_t n) { return std::exchange(ip, ip + n); };
    auto take_chars = [&cp](std::size_t n) { return std::exchange(cp, cp + n); };
    // A CSR from a key count, filled by `each(add)` calling add(key, item).
    auto csr = [&](std::size_t keys, std::size_t items, auto&& each) {
      int* start = take_ints(keys + 1);
      int* list = take_ints(items);
      each([start](int k, int) { ++start[k + 1]; });
      for (std::size_t k = 0; k < keys; ++k) start[k + 1] += start[k];
      auto& fill = pools_.fill;
      fill.assign(start, start + keys);
      each([&fill, list](int k, int v) { list[fill[k]++] = v; });
      return Csr{start, list};
    };
    for (int c = 0; c < C; ++c) {
      if (!runs(c)) continue;
      CollState& s = coll_[c];
      const std::size_t S = s.plan->steps.size(), X = s.plan->xfers.size(), M = g.collective(c).group.size();
      s.step_deps_left = take_ints(S);
      s.step_xfers_left = take_ints(S);
      s.member_steps_left = take_ints(M);
      s.member_in_left = take_ints(M);
      s.step_ready = take_chars(S);
      s.xfer_started = take_chars(X);
      s.entered = take_chars(M);
      s.member_sent = std::exchange(up, up + M);
      std::size_t deps = 0;
      for (std::size_t i = 0; i < S; ++i) {
        const CollStep& st = s.plan->steps[i];
        s.step_deps_left[i] = st.num_deps();
        deps += st.num_deps();
        ++s.member_steps_left[st.member];
      }
      // With symmetry setup_symmetry counts these for the representatives' transfers only.
      if (q_.order == 1)
        for (const CollXfer& xf : s.plan->xfers) {
          s.step_xfers_left[xf.send_step]++;
          s.step_xfers_left[xf.recv_step]++;
          s.member_sent[xf.src] += moved_bytes(xf);
          ++s.member_in_left[xf.dst];
        }
      const auto& steps = s.plan->steps;
      const auto& xfers = s.plan->xfers;
      s.step_succ = csr(S, deps, [&steps](auto&& add) {
        for (std::size_t i = 0; i < steps.size(); ++i)
          for (int d : steps[i].deps)
            if (d >= 0) add(d, static_cast<int>(i));
      });
      s.member_steps = csr(M, S, [&steps](auto&& add) {
        for (std::size_t i = 0; i < steps.size(); ++i) add(steps[i].member, static_cast<int>(i));
      });
      if (q_.order == 1)  // with symmetry: qstart/qlist instead (setup_symmetry)
        s.step_xfers = csr(S, 2 * X, [&xfers](auto&& add) {
          for (std::size_t x = 0; x < xfers.size(); ++x) {
            add(xfers[x].send_step, static_cast<int>(x));
            add(xfers[x].recv_step, static_cast<int>(x));
          }
        });
    }
    if (q_.order > 1) setup_symmetry();
    pools_.busy = true;  // last: a constructor that throws has not taken them
  }

  ~Engine() { pools_.busy = false; }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  SimResult run() {
    const int N = static_cast<int>(g_.tasks().size());
    preds_left_.resize(N);
    for (int t = 0; t < N; ++t) preds_left_[t] = g_.num_predecessors(t);
    res_.trace.resize(N);
    started_.assign(N, 0);
    done_.assign(N, 0);
    for (int t = 0; t < N; ++t) res_.trace[t].task = t;
    for (int t = 0; t < N; ++t)
      if (preds_left_[t] == 0 && simulated(t)) ready_.push_back(t);
    try {
      drain();
      std::vector<std::uint64_t> finished;
      while (true) {
        const std::optional<Time> tn = net_->next_completion();
        if (!tn && events_.empty()) break;
        ++res_.events;
        if (tn && (events_.empty() || *tn <= events_.top().time)) {
          now_ = *tn;
          finished.clear();
          net_->complete(now_, &finished);
          for (std::uint64_t f : finished) xfer_done(f);
        } else {
          auto e = events_.pop();
          now_ = e.time;
          task_done(e.payload);
        }
        drain();
      }
    } catch (const TimeOverflow& e) {
      // A cause already named (a calibration file's entry): say when, and keep it.
      if (!e.cause().empty())
        throw TimeOverflow(fmt::format("simulate: at t = {:.3f} us, {}", now_.to_us(), e.what()), e.cause());
      // Else a time past 2^63 ps (about 106 days) comes from the graph's sizes against the
      // topology's rates: say when, and what to look at. Still a TimeOverflow: the command
      // running the simulation adds the option, key or row it came from.
      throw TimeOverflow(fmt::format("simulate: at t = {:.3f} us, {}: a task or transfer would end past 2^63 ps "
                                    "(about 106 days); check the graph's bytes, flops and alltoallv matrix against "
                                    "the topology's bandwidths",
                                    now_.to_us(), e.what()));
    }
    int left = 0;
    for (int t = 0; t < N; ++t) left += !done_[t] && simulated(t);
    if (left > 0) report_stuck(left);
    if (q_.order > 1) {
      // Every other rank's row is its representative's.
      for (int t = 0; t < N; ++t)
        if (!simulated(t)) {
          const int r = q_.task_rep[t];
          res_.trace[t] = res_.trace[r];
          res_.trace[t].task = t;
          done_[t] = 1;
        }
      res_.symmetry = q_.order;
    }
    res_.makespan = now_;
    return std::move(res_);
  }

 private:
  void drain() {
    while (!ready_.empty()) {
      const int t = ready_.front();
      ready_.pop_front();
      start_task(t);
    }
  }

  void start_task(int id) {
    const Task& t = g_.task(id);
    started_[id] = 1;
    res_.trace[id].start = now_;
    if (t.is_compute()) {
      const ComputeTask& c = t.compute();
      res_.trace[id].bytes = c.bytes;
      res_.trace[id].flops = c.flops;
      events_.push(now_ + kernel_duration(c), id);
      return;
    }
    const int tc = t.collective();
    CollState& s = coll_[tc];
    const int m = member_index_[id];
    res_.trace[id].bytes = s.member_sent[m];
    s.entered[m] = 1;
    if (s.calibrated) {
      // Measured as a whole: it starts when the last member arrives and ends for all together.
      if (++s.entered_count == s.rep_members) {
        const Collective& col = g_.collective(tc);
        // Every transfer, as if each ran (a representative's stand for the others).
        for (const CollXfer& xf : s.plan->xfers)
          if (s.qrecv.empty() || s.qrecv[&xf - s.plan->xfers.data()] >= 0)
            (topo_.same_node(col.group[xf.src], col.group[xf.dst]) ? res_.intra_node_bytes : res_.inter_node_bytes) +=
                moved_bytes(xf) * static_cast<std::uint64_t>(q_.order);
        const Time end = now_ + s.calibrated->time(col.bytes);
        for (int part : g_.parts(tc))
          if (simulated(part)) events_.push(end, part);
      }
      return;
    }
    if (s.plan->barrier) {
      // Nothing moves before every member has entered; then all start together.
      if (++s.entered_count < s.rep_members) return;
      const auto& parts = g_.parts(tc);
      for (std::size_t mm = 0; mm < parts.size(); ++mm) {
        if (!simulated(parts[mm])) continue;
        if (s.member_steps_left[mm] == 0) {
          task_done(parts[mm]);
          continue;
        }
        for (int st : s.member_steps.of(static_cast<int>(mm)))
          if (s.step_deps_left[st] == 0) step_ready(tc, st);
      }
      return;
    }
    if (s.member_steps_left[m] == 0) {
      task_done(id);
      return;
    }
    for (int st : s.member_steps.of(m))
      if (s.step_deps_left[st] == 0) step_ready(tc, st);
  }

  // A compute task's duration. The P ranks' copies of one kernel follow each
  // other in task order, so the last result is kept and reused while the
  // kernel's costed fields are the same (compute_time is a pure function of them).
  Time kernel_duration(const ComputeTask& t) {
    KernelMemo& m = memo_;
    if (!(m.valid && m.op == t.op && m.flops == t.flops && m.bytes == t.bytes && m.dtype == t.dtype &&
          m.launches == t.launches && m.host_wait == t.host_wait && m.kernel == t.kernel && m.shape == t.shape)) {
      const Time k = compute_time(rates_, t.op, t.flops, t.bytes, t.dtype, cal_, g_.kernel_name(t.kernel),
                                  {t.shape.data(), t.shape.size()});
      m.valid = true;
      m.op = t.op;
      m.flops = t.flops;
      m.bytes = t.bytes;
      m.dtype = t.dtype;
      m.launches = t.launches;
      m.host_wait = t.host_wait;
      m.kernel = t.kernel;
      m.shape = t.shape;
      m.duration = with_launches(gpu_, k, t.launches, t.host_wait);
    }
    return m.duration;
  }

  // A step becomes ready exactly once: when its member has entered and its
  // dependencies are complete. Both start_task (on entry) and step_done (on a
  // dependency's completion) may find it so, and a step with no transfers
  // completes at once, so without this guard its successors and its member's
  // step count would be decremented twice and the member could finish before
  // the bytes addressed to it arrived.
  void step_ready(int c, int st) {
    CollState& s = coll_[c];
    if (s.step_ready[st]) return;
    s.step_ready[st] = 1;
    if (s.step_xfers_left[st] == 0) {
      step_done(c, st);
      return;
    }
    if (q_.order > 1) return step_ready_sym(c, st);
    for (int x : s.step_xfers.of(st)) {
      const CollXfer& xf = s.plan->xfers[x];
      if (s.xfer_started[x] || !s.step_ready[xf.send_step] || !s.step_ready[xf.recv_step]) continue;
      s.xfer_started[x] = 1;
      const Collective& col = g_.collective(c);
      const int src = col.group[xf.src], dst = col.group[xf.dst];
      (topo_.same_node(src, dst) ? res_.intra_node_bytes : res_.inter_node_bytes) += moved_bytes(xf);
      ++res_.transfers;
      const std::uint64_t fid = flow_ids_.size();
      flow_ids_.emplace_back(c, x);
      net_->start(fid, xfer_route_view(*s.plan, xf, col.group, topo_, route_, ws_), xf.bytes, now_, xfer_cap(*s.plan, xf));
    }
  }

  // step_ready with symmetry: the transfers sent by this representative step
  // and those whose receiving step's representative it is; each starts as one
  // flow standing for its orbit, on its route's link orbits (a link orbit of
  // n links, crossed once, counts order / n times: NodeShift::weight).
  void step_ready_sym(int c, int st) {
    CollState& s = coll_[c];
    for (int i = s.qstart[st]; i < s.qstart[st + 1]; ++i) {
      const int x = s.qlist[i];
      const CollXfer& xf = s.plan->xfers[x];
      if (s.xfer_started[x] || !s.step_ready[xf.send_step] || !s.step_ready[s.qrecv[x]]) continue;
      s.xfer_started[x] = 1;
      const Collective& col = g_.collective(c);
      const int src = col.group[xf.src], dst = col.group[xf.dst];
      (topo_.same_node(src, dst) ? res_.intra_node_bytes : res_.inter_node_bytes) +=
          moved_bytes(xf) * static_cast<std::uint64_t>(q_.order);
      res_.transfers += static_cast<std::uint64_t>(q_.order);
      const std::uint64_t fid = flow_ids_.size();
      flow_ids_.emplace_back(c, x);
      if (!q_.shift->all_routes_ok && xf.route < 0) {
        if (xf.via >= 0) {
          check_route(src, xf.via);
          check_route(xf.via, dst);
        } else {
          check_route(src, dst);
        }
      }
      const RouteView v = xfer_route_view(*s.plan, xf, col.group, topo_, route_, ws_);
      wroute_.clear();
      for (int l : v.links)
        for (int k = 0; k < q_.shift->weight[l]; ++k) wroute_.push_back(q_.shift->rep[l]);
      std::sort(wroute_.begin(), wroute_.end());
      net_->start(fid, RouteView(wroute_, v.latency, v.bottleneck), xf.bytes, now_, xfer_cap(*s.plan, xf));
    }
  }

  void xfer_done(std::uint64_t fid) {
    const auto [c, x] = flow_ids_[fid];
    const CollState& s = coll_[c];
    const CollXfer& xf = s.plan->xfers[x];
    const bool sym = !s.qrecv.empty();
    --s.member_in_left[sym ? s.member_rep[xf.dst] : xf.dst];
    for (int st : {xf.send_step, sym ? s.qrecv[x] : xf.recv_step})
      if (--s.step_xfers_left[st] == 0) step_done(c, st);
  }

  void step_done(int c, int st) {
    CollState& s = coll_[c];
    for (int nx : s.step_succ.of(st))
      if (--s.step_deps_left[nx] == 0 && s.entered[s.plan->steps[nx].member]) step_ready(c, nx);
    const int m = s.plan->steps[st].member;
    if (--s.member_steps_left[m] == 0) {
      // Checked on every simulated graph: a member leaves a collective only
      // after every byte addressed to it has arrived.
      if (s.member_in_left[m] != 0)
        throw InternalError(fmt::format("member {} of collective '{}' finished with {} transfer(s) to it in flight",
                                    m, g_.collective(c).name, s.member_in_left[m]));
      task_done(g_.parts(c)[m]);
    }
  }

  void task_done(int id) {
    done_[id] = 1;
    res_.trace[id].end = now_;
    for (int s : g_.successors(id))
      if (simulated(s) && --preds_left_[s] == 0) ready_.push_back(s);
    if (q_.order > 1)
      for (int k = q_.xs_start[id]; k < q_.xs_start[id + 1]; ++k)
        if (--preds_left_[q_.xs_list[k]] == 0) ready_.push_back(q_.xs_list[k]);
  }

  void report_stuck(int left) {
    std::string msg = fmt::format("simulation stuck: {} task(s) never finished; blocked:", left);
    int shown = 0;
    for (const Task& t : g_.tasks()) {
      if (done_[t.id] || !simulated(t.id) || shown >= 10) continue;
      ++shown;
      msg += fmt::format("\n  '{}' (rank {}, stream {}): ", t.name, t.rank, g_.streams(t.rank)[t.stream]);
      if (!started_[t.id]) {
        std::string waits;
        for (int d : t.deps)
          if (!done_[d]) waits += fmt::format(" '{}'", g_.task(d).name);
        msg += waits.empty() ? "waits for the task before it on its stream" : "waits for" + waits;
      } else if (!t.is_compute()) {
        const Collective& c = g_.collective(t.collective());
        std::string missing;
        const CollState& s = coll_[t.collective()];
        for (std::size_t m = 0; m < c.group.size(); ++m)
          if (!s.entered[m]) missing += fmt::format(" {}", c.group[m]);
        msg += fmt::format("in collective '{}', waiting for ranks{} to join it", c.name, missing);
      }
    }
    throw UserError(msg);
  }

  const TaskGraph& g_;
  const Topology& topo_;
  const GpuProfile& gpu_;
  const ComputeRates rates_;  // gpu_'s, worked out once for every kernel
  Workspace& ws_;  // plans, routes, rate memo and pools, kept for the next simulation
  std::unique_ptr<NetworkModel> net_;
  const Calibration* cal_;
  Pools own_pools_;  // when the workspace's are taken
  Pools& pools_;
  std::vector<CollState> coll_;
  std::vector<int> member_index_, preds_left_;
  std::vector<char> started_, done_;
  std::vector<std::pair<int, int>> flow_ids_;
  Route route_;  // scratch for xfer_route
  std::vector<int> wroute_;  // scratch: a flow's route as link orbits (symmetry)
  // Symmetry (order > 1): ranks [0, R) are simulated; every task's
  // representative; per representative task, the representatives among the
  // successors of its images (CSR).
  struct Quotient {
    int order = 1, R = 0;
    std::shared_ptr<NodeShift> shift;  // the workspace's (SymmetryCache)
    std::vector<int> task_rep, xs_start, xs_list;
  } q_;
  bool simulated(int t) const { return q_.order == 1 || g_.task(t).rank < q_.R; }
  void find_symmetry(std::uint64_t topo_key);
  // Whether the routes from a to b and from their images are images of each
  // other (Topology::shift_route_ok; each pair once per shift); else the
  // simulation starts again without symmetry.
  void check_route(int a, int b) {
    NodeShift& sh = *q_.shift;
    const std::uint64_t key = static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32 | static_cast<std::uint32_t>(b);
    if (sh.pairs_ok.count(key)) return;
    if (!topo_.shift_route_ok(a, b, sh, ws_)) {
      sh.broken = true;  // the workspace's later simulations do not try it again
      throw SymmetryBroken{};
    }
    sh.pairs_ok.insert(key);
  }
  void setup_symmetry();
  // The plan of collective c as shared_plan gives it (again, if it was compacted).
  void full_plan(int c) {
    CollState& s = coll_[c];
    if (s.plan && !s.compact) return;
    s.plan = nullptr;  // first: the plan cache may then drop a large plan before building this one
    s.plan = shared_plan(g_.collective(c), topo_, topo_key_, ws_);
    s.compact = false;
  }
  void compact_plan(int c, int R);
  std::uint64_t topo_key_ = 0;
  struct KernelMemo {
    bool valid = false;
    OpKind op{};
    std::uint64_t flops = 0, bytes = 0;
    DType dtype{};
    int launches = 0;
    Time host_wait;
    KernelId kernel = kNoKernel;
    boost::container::small_vector<std::int64_t, 4> shape;
    Time duration;
  } memo_;
  std::deque<int> ready_;
  EventQueue<int> events_;
  Time now_;
  SimResult res_;
};


// Finds the smallest shift of servers that maps the topology, its routes,
// the task graph and every collective's plan onto themselves (each checked
// in full: a symmetry is used only where it is exact; routes as flows start,
// step_ready_sym), and sets q_ for it. Leaves q_.order at 1 (every rank
// simulated) when there is none. What it checks is kept in the workspace
// (SymmetryCache), so a sweep's simulations on one topology check each
// shift and each pair of plans once.
void Engine::find_symmetry(std::uint64_t topo_key) {
  const int P = topo_.num_gpus(), N = topo_.num_nodes(), T = static_cast<int>(g_.tasks().size());
  const int C = static_cast<int>(coll_.size());
  if (g_.num_ranks() != P || N < 2 || T == 0) return;
  SymmetryCache& cache = ws_.get<SymmetryCache>();
  // Tasks by rank, in id order, and each task's place on its rank.
  std::vector<int> rank_start(P + 1, 0), rank_list(T), pos(T);
  for (const Task& t : g_.tasks()) ++rank_start[t.rank + 1];
  for (int r = 0; r < P; ++r) rank_start[r + 1] += rank_start[r];
  {
    std::vector<int> fill(rank_start.begin(), rank_start.end() - 1);
    for (const Task& t : g_.tasks()) {
      pos[t.id] = fill[t.rank] - rank_start[t.rank];
      rank_list[fill[t.rank]++] = t.id;
    }
  }
  std::vector<int> gamma(C), member_at(P, -1);
  std::vector<std::vector<int>> pi(C);
  for (int shift_nodes = 1; shift_nodes < N; ++shift_nodes) {
    if (N % shift_nodes != 0) continue;
    const std::shared_ptr<NodeShift> sh = cache.shift(topo_, topo_key, shift_nodes);
    if (!sh || sh->broken) continue;
    const int R = sh->gpus;
    auto image = [&](int t) {  // the task's image under one shift
      const int r = (g_.task(t).rank + R) % P;
      return rank_list[rank_start[r] + pos[t]];
    };
    // The graph: rank r's i-th task and rank r + R's i-th task alike, their
    // dependencies images of each other, and each collective's members
    // mapped onto another's (gamma) by a member map (pi).
    bool ok = true;
    for (int r = 0; r < P && ok; ++r)
      ok = rank_start[r + 1] - rank_start[r] == rank_start[(r + R) % P + 1] - rank_start[(r + R) % P];
    std::fill(gamma.begin(), gamma.end(), -1);
    for (int c = 0; c < C && ok; ++c) pi[c].assign(coll_[c].members, -1);
    for (int t = 0; t < T && ok; ++t) {
      const Task& a = g_.task(t);
      const Task& b = g_.task(image(t));
      if (a.stream != b.stream || a.is_compute() != b.is_compute() || a.deps.size() != b.deps.size()) {
        ok = false;
        break;
      }
      for (std::size_t k = 0; k < a.deps.size() && ok; ++k) ok = image(a.deps[k]) == b.deps[k];
      if (!ok) break;
      if (a.is_compute()) {
        const ComputeTask &x = a.compute(), &y = b.compute();
        ok = x.op == y.op && x.flops == y.flops && x.bytes == y.bytes && x.dtype == y.dtype &&
             x.launches == y.launches && x.host_wait == y.host_wait && x.kernel == y.kernel && x.shape == y.shape;
        continue;
      }
      const int c = a.collective(), c2 = b.collective();
      const int m = member_index_[t], m2 = member_index_[image(t)];
      if (gamma[c] >= 0 && gamma[c] != c2) ok = false;
      gamma[c] = c2;
      if (pi[c][m] >= 0 && pi[c][m] != m2) ok = false;
      pi[c][m] = m2;
    }
    // Whether the graph's member map of c is the shift's on its ranks (make_rep_plan's).
    auto graph_map_is_shift = [&](int c, int R) {
      const Collective& col = g_.collective(c);
      for (std::size_t m = 0; m < col.group.size(); ++m) member_at[col.group[m]] = static_cast<int>(m);
      bool same = true;
      for (std::size_t m = 0; m < col.group.size() && same; ++m) same = pi[c][m] == member_at[(col.group[m] + R) % P];
      for (int r : col.group) member_at[r] = -1;
      return same;
    };
    // Collectives: on representatives only, or mapped onto themselves; the
    // image's plan the member map's image of the plan.
    for (int c = 0; c < C && ok; ++c) {
      const Collective& ca = g_.collective(c);
      if (gamma[c] < 0) continue;  // no task takes part (cannot be: every collective has parts)
      const Collective& cb = g_.collective(gamma[c]);
      int reps = 0;
      for (int r : ca.group) reps += r < R;
      const bool spans = reps > 0 && reps < static_cast<int>(ca.group.size());
      ok = (gamma[c] == c || !spans) && ca.op == cb.op && ca.bytes == cb.bytes && ca.group.size() == cb.group.size() &&
           (coll_[c].calibrated == nullptr) == (coll_[gamma[c]].calibrated == nullptr);
      if (!ok) break;
      // Members on and off the representatives, a plan equivariant under the
      // shift by construction (make_rep_plan proves it on the inputs, with
      // the member map the graph gives): its representatives' part is built
      // directly, never the full plan.
      if (spans && graph_map_is_shift(c, R))
        if (auto q = shared_rep_plan(ca, topo_, topo_key, *sh, ws_)) {
          coll_[c].plan = std::move(q);
          coll_[c].compact = true;
          continue;
        }
      full_plan(c);
      full_plan(gamma[c]);
      ok = cache.plans_map(coll_[c].plan, coll_[gamma[c]].plan, pi[c], sh, P);
      // Members on and off the representatives: mapped onto itself, and from
      // here on only its representatives' part is kept (setup_symmetry and
      // the run read no other).
      if (ok && spans) compact_plan(c, R);
    }
    if (!ok) continue;
    q_.order = sh->order;
    q_.R = R;
    q_.shift = sh;
    q_.task_rep.resize(T);
    for (int t = 0; t < T; ++t) q_.task_rep[t] = rank_list[rank_start[g_.task(t).rank % R] + pos[t]];
    return;
  }
}

// The representatives' part of collective c's plan, which a shift of R ranks
// maps onto itself (checked): parmsim::compact_plan. Every order the engine
// iterates in (steps, transfers, members' steps) is the full plan's,
// restricted, and setup_symmetry reads nothing else (each transfer's
// receiving step is what its qrecv would name): the simulation is the same
// to the picosecond.
void Engine::compact_plan(int c, int R) {
  CollState& s = coll_[c];
  s.plan = std::make_shared<const CollPlan>(parmsim::compact_plan(*s.plan, g_.collective(c).group, R, topo_.num_gpus()));
  s.compact = true;
}

// With symmetry: the successors of other ranks' tasks that are
// representatives (they finish with their own representatives); per running
// collective, each member's representative, and the transfers each
// representative step starts or waits for (qstart/qlist), each receiving
// step taken to its representative (qrecv).
void Engine::setup_symmetry() {
  const int T = static_cast<int>(g_.tasks().size()), R = q_.R, C = static_cast<int>(coll_.size());
  q_.xs_start.assign(T + 1, 0);
  std::vector<std::pair<int, int>> xs;
  for (const Task& t : g_.tasks())
    if (t.rank >= R)
      for (int d : g_.successors(t.id))
        if (g_.task(d).rank < R) xs.emplace_back(q_.task_rep[t.id], d);
  std::sort(xs.begin(), xs.end());
  for (const auto& [a, b] : xs) ++q_.xs_start[a + 1];
  for (int t = 0; t < T; ++t) q_.xs_start[t + 1] += q_.xs_start[t];
  q_.xs_list.resize(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) q_.xs_list[i] = xs[i].second;
  std::vector<int> member_of(topo_.num_gpus(), -1);
  for (int c = 0; c < C; ++c) {
    CollState& s = coll_[c];
    const Collective& col = g_.collective(c);
    const int M = s.members;
    s.rep_members = 0;
    for (int m = 0; m < M; ++m) s.rep_members += col.group[m] < R;
    if (s.rep_members == 0) continue;  // not run: its images run on the representatives
    for (int m = 0; m < M; ++m) member_of[col.group[m]] = m;
    s.member_rep.resize(M);
    for (int m = 0; m < M; ++m) s.member_rep[m] = member_of[col.group[m] % R];
    for (int m = 0; m < M; ++m) member_of[col.group[m]] = -1;
    const auto& xfers = s.plan->xfers;
    const std::size_t S = s.plan->steps.size();
    // A step's place among its member's steps: its representative is the
    // step at that place among its member's representative's.
    std::vector<int> place(S);
    for (int m = 0; m < M; ++m) {
      const auto steps = s.member_steps.of(m);
      for (std::size_t i = 0; i < steps.size(); ++i) place[steps[i]] = static_cast<int>(i);
    }
    s.qrecv.assign(xfers.size(), -1);
    s.qstart.assign(S + 1, 0);
    // The counts start at 0 (the constructor left them for this). Bytes sent
    // are read as a member's task starts: representatives' only.
    for (std::size_t x = 0; x < xfers.size(); ++x) {
      const CollXfer& xf = xfers[x];
      if (col.group[xf.src] >= R) continue;
      s.member_sent[xf.src] += moved_bytes(xf);
      const int rs = s.member_steps.of(s.member_rep[s.plan->steps[xf.recv_step].member])[place[xf.recv_step]];
      s.qrecv[x] = rs;
      ++s.qstart[xf.send_step + 1];
      ++s.qstart[rs + 1];
      ++s.step_xfers_left[xf.send_step];
      ++s.step_xfers_left[rs];
      ++s.member_in_left[s.member_rep[xf.dst]];
    }
    for (std::size_t i = 0; i < S; ++i) s.qstart[i + 1] += s.qstart[i];
    s.qlist.resize(s.qstart[S]);
    std::vector<int> fill(s.qstart.begin(), s.qstart.end() - 1);
    for (std::size_t x = 0; x < xfers.size(); ++x) {
      if (s.qrecv[x] < 0) continue;
      s.qlist[fill[xfers[x].send_step]++] = static_cast<int>(x);
      s.qlist[fill[s.qrecv[x]]++] = static_cast<int>(x);
    }
  }
}

std::shared_ptr<NodeShift> SymmetryCache::shift(const Topology& t, std::uint64_t topo_key, int nodes) {
  for (const Shift& s : shifts)
    if (s.topo == topo_key && s.nodes == nodes) return s.shift;
  if (shifts.size() >= kMaxShifts) shifts.clear();
  std::optional<NodeShift> found = t.node_shift(nodes);
  shifts.push_back({topo_key, nodes, found ? std::make_shared<NodeShift>(std::move(*found)) : nullptr});
  return shifts.back().shift;
}

bool SymmetryCache::plans_map(const std::shared_ptr<const CollPlan>& a, const std::shared_ptr<const CollPlan>& b,
                              const std::vector<int>& pi, const std::shared_ptr<NodeShift>& sh, int P) {
  const auto key = std::make_pair(a.get(), b.get());
  auto [lo, hi] = checks.equal_range(key);
  for (auto it = lo; it != hi; ++it)
    if (it->second.shift.lock() == sh && it->second.a.lock() == a && it->second.b.lock() == b && it->second.pi == pi)
      return it->second.ok;
  if (checks.size() >= kMaxChecks) checks.clear();
  const bool ok = plan_maps_onto(*a, *b, pi, *sh, P);
  checks.emplace(key, Check{a, b, sh, pi, ok});
  return ok;
}
}  // namespace

namespace {
std::atomic<SimulationObserver> g_observer{nullptr};
}  // namespace

void set_simulation_observer(SimulationObserver f) { g_observer.store(f); }

SimResult simulate(const TaskGraph& g, const Topology& topo, const SimOptions& opt, Workspace& ws) {
  if (opt.calibration)
    if (const SimulationObserver f = g_observer.load()) f(g, topo, opt);
  try {
    return Engine(g, topo, opt, ws).run();
  } catch (const SymmetryBroken&) {
    SimOptions rank_by_rank = opt;
    rank_by_rank.symmetry = false;
    return Engine(g, topo, rank_by_rank, ws).run();
  }
}

SimResult simulate(const TaskGraph& g, const Topology& topo, const SimOptions& opt) {
  Workspace ws;
  return simulate(g, topo, opt, ws);
}

}  // namespace parmsim
