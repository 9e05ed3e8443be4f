#include "sim/engine/simulator.hpp"

#include <fmt/format.h>

#include <atomic>
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
  std::shared_ptr<const CollPlan> plan;  // shared with other simulations of the workspace (shared_plan)
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

class Engine {
 public:
  Engine(const TaskGraph& g, const Topology& topo, const SimOptions& opt, Workspace& ws)
      : g_(g),
        topo_(topo),
        gpu_(gpu_profile(topo.gpu_model())),
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
    // Plans first, to size the pools; then each collective's arrays are
    // carved from them (the pools never grow after that).
    std::size_t ints = 0, chars = 0, u64s = 0;
    const std::uint64_t topo_key = C > 0 ? topology_fingerprint(topo) : 0;
    for (int c = 0; c < C; ++c) {
      CollState& s = coll_[c];
      s.plan = shared_plan(g.collective(c), topo, topo_key, ws);
      if (opt.calibration) {
        const Collective& col = g.collective(c);
        bool inter = false;
        for (int r : col.group) inter = inter || !topo.same_node(r, col.group[0]);
        s.calibrated = opt.calibration->find(col.op, static_cast<int>(col.group.size()), inter);
      }
      const std::size_t S = s.plan->steps.size(), X = s.plan->xfers.size(), M = g.collective(c).group.size();
      std::size_t deps = 0;
      for (const CollStep& st : s.plan->steps) deps += st.num_deps();
      // step_deps_left, step_xfers_left (S each), member_steps_left,
      // member_in_left (M each); CSR starts (S+1, S+1, M+1) and lists (2X,
      // deps, S).
      ints += 2 * S + 2 * M + (S + 1) + (S + 1) + (M + 1) + 2 * X + deps + S;
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
      CollState& s = coll_[c];
      const std::size_t S = s.plan->steps.size(), X = s.plan->xfers.size(), M = g.collective(c).group.size();
      s.members = static_cast<int>(M);
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
      for (const CollXfer& xf : s.plan->xfers) {
        s.step_xfers_left[xf.send_step]++;
        s.step_xfers_left[xf.recv_step]++;
        s.member_sent[xf.src] += xf.bytes;
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
      s.step_xfers = csr(S, 2 * X, [&xfers](auto&& add) {
        for (std::size_t x = 0; x < xfers.size(); ++x) {
          add(xfers[x].send_step, static_cast<int>(x));
          add(xfers[x].recv_step, static_cast<int>(x));
        }
      });
    }
    member_index_.resize(g.tasks().size(), -1);
    for (int c = 0; c < C; ++c) {
      const auto& parts = g.parts(c);
      for (std::size_t m = 0; m < parts.size(); ++m) member_index_[parts[m]] = static_cast<int>(m);
    }
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
      if (preds_left_[t] == 0) ready_.push_back(t);
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
    for (int t = 0; t < N; ++t) left += !done_[t];
    if (left > 0) report_stuck(left);
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
      if (++s.entered_count == s.members) {
        const Collective& col = g_.collective(tc);
        for (const CollXfer& xf : s.plan->xfers)
          (topo_.same_node(col.group[xf.src], col.group[xf.dst]) ? res_.intra_node_bytes : res_.inter_node_bytes) +=
              xf.bytes;
        const Time end = now_ + s.calibrated->time(col.bytes);
        for (int part : g_.parts(tc)) events_.push(end, part);
      }
      return;
    }
    if (s.plan->barrier) {
      // Nothing moves before every member has entered; then all start together.
      if (++s.entered_count < s.members) return;
      const auto& parts = g_.parts(tc);
      for (std::size_t mm = 0; mm < parts.size(); ++mm) {
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
    for (int x : s.step_xfers.of(st)) {
      const CollXfer& xf = s.plan->xfers[x];
      if (s.xfer_started[x] || !s.step_ready[xf.send_step] || !s.step_ready[xf.recv_step]) continue;
      s.xfer_started[x] = 1;
      const Collective& col = g_.collective(c);
      const int src = col.group[xf.src], dst = col.group[xf.dst];
      (topo_.same_node(src, dst) ? res_.intra_node_bytes : res_.inter_node_bytes) += xf.bytes;
      ++res_.transfers;
      const std::uint64_t fid = flow_ids_.size();
      flow_ids_.emplace_back(c, x);
      net_->start(fid, xfer_route_view(*s.plan, xf, col.group, topo_, route_, ws_), xf.bytes, now_, xfer_cap(*s.plan, xf));
    }
  }

  void xfer_done(std::uint64_t fid) {
    const auto [c, x] = flow_ids_[fid];
    const CollXfer& xf = coll_[c].plan->xfers[x];
    --coll_[c].member_in_left[xf.dst];
    for (int st : {xf.send_step, xf.recv_step})
      if (--coll_[c].step_xfers_left[st] == 0) step_done(c, st);
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
      if (--preds_left_[s] == 0) ready_.push_back(s);
  }

  void report_stuck(int left) {
    std::string msg = fmt::format("simulation stuck: {} task(s) never finished; blocked:", left);
    int shown = 0;
    for (const Task& t : g_.tasks()) {
      if (done_[t.id] || shown >= 10) continue;
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

}  // namespace

namespace {
std::atomic<SimulationObserver> g_observer{nullptr};
}  // namespace

void set_simulation_observer(SimulationObserver f) { g_observer.store(f); }

SimResult simulate(const TaskGraph& g, const Topology& topo, const SimOptions& opt, Workspace& ws) {
  if (opt.calibration)
    if (const SimulationObserver f = g_observer.load()) f(g, topo, opt);
  return Engine(g, topo, opt, ws).run();
}

SimResult simulate(const TaskGraph& g, const Topology& topo, const SimOptions& opt) {
  Workspace ws;
  return simulate(g, topo, opt, ws);
}

}  // namespace parmsim
