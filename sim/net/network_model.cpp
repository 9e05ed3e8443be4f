#include "sim/net/network_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <type_traits>
#include <limits>
#include <set>

#include "sim/core/error.hpp"
#include "sim/core/registry.hpp"
#include "sim/core/event_queue.hpp"
#include "sim/net/maxmin.hpp"
#include "sim/net/rate_memo.hpp"

namespace parmsim {
namespace {

// Each transfer costs its route latency plus bytes over the route's
// bottleneck bandwidth, as in an alpha-beta model, and never runs slower:
// there is no bandwidth sharing. Instead a transfer reserves its bottleneck
// rate on every link of its route while it transmits, and starts only when
// every link has that much unreserved (a link may carry several transfers
// whose rates fit its capacity). Transfers leave a GPU through a port (the
// first link of the route) in the order they were issued; ports are
// independent, so NVLink and NIC traffic of one GPU proceed side by side.
// Latency is propagation, not occupancy: k transfers that each fill one NIC
// cost alpha + k * bytes * beta, the paper's "beta times GPUs per NIC".
class Analytical final : public NetworkModel {
 public:
  explicit Analytical(const Topology& topo) : used_(topo.num_links(), 0), port_(topo.num_links()) {
    for (int l = 0; l < topo.num_links(); ++l) capacity_.push_back(topo.link(l).bandwidth);
  }
  std::string name() const override { return "analytical"; }
  void start(std::uint64_t id, const RouteView& r, std::uint64_t bytes, Time now, double cap) override {
    if (bytes == 0 || r.links.empty()) {
      done_.push(now + r.latency, id);
      return;
    }
    std::uint64_t rate = r.bottleneck;
    if (cap > 0 && cap < static_cast<double>(rate)) rate = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(cap));
    const auto w = static_cast<std::uint32_t>(xfers_.size());
    xfers_.push_back(Xfer{id, {r.links.begin(), r.links.end()}, r.latency, duration_for(bytes, rate), rate});
    const int port = r.links.front();
    if (port_[port].empty()) busy_ports_.insert(port);
    port_[port].push_back(w);
    drain(port, now);
  }
  std::optional<Time> next_completion() override {
    Time t = Time::max();
    if (!done_.empty()) t = done_.top().time;
    if (!wake_.empty() && wake_.top().time < t) t = wake_.top().time;
    if (t == Time::max()) return std::nullopt;
    return t;
  }
  void complete(Time t, std::vector<std::uint64_t>* done) override {
    bool freed = false;
    while (!wake_.empty() && wake_.top().time <= t) {
      Xfer& x = xfers_[wake_.pop().payload];
      for (int l : x.links) used_[l] -= x.rate;
      std::vector<int>().swap(x.links);
      freed = true;
    }
    if (freed) {
      const std::vector<int> ports(busy_ports_.begin(), busy_ports_.end());
      for (int p : ports) drain(p, t);
    }
    while (!done_.empty() && done_.top().time == t) done->push_back(done_.pop().payload);
  }
  std::size_t in_flight() const override { return done_.size(); }

 private:
  struct Xfer {
    std::uint64_t id;
    std::vector<int> links;
    Time latency, tx;
    std::uint64_t rate;
  };
  // Starts the transfers at the head of a port's queue while they fit.
  void drain(int port, Time now) {
    auto& q = port_[port];
    while (!q.empty()) {
      Xfer& x = xfers_[q.front()];
      for (int l : x.links)
        if (used_[l] + x.rate > capacity_[l]) return;
      for (int l : x.links) used_[l] += x.rate;
      const Time end_tx = now + x.tx;
      wake_.push(end_tx, q.front());
      done_.push(end_tx + x.latency, x.id);
      q.pop_front();
    }
    busy_ports_.erase(port);
  }
  std::vector<std::uint64_t> capacity_, used_;
  std::vector<std::deque<std::uint32_t>> port_;
  std::set<int> busy_ports_;  // ports with waiting transfers, in link id order
  std::vector<Xfer> xfers_;
  EventQueue<std::uint64_t> done_;
  EventQueue<std::uint32_t> wake_;
};

// Flows waiting out their route latency, taken in the order of an event
// queue keyed by (due time, start order). The engine starts flows at its
// current time, which never decreases, so the flows of one latency fall due
// in start order: each latency keeps a queue of its own (a lane) and the
// next flow is the earliest head among the lanes, ties to the earlier start.
// A route has one of a few latencies (one per kind of path), so a push or
// pop costs O(lanes) instead of a heap's O(log flows). A flow that would
// fall due before the last of its lane (a caller starting flows out of time
// order), and latencies beyond the first kLanes, wait in a heap that takes
// part in the same choice, so the order is the event queue's for any input.
class PendingFlows {
 public:
  void push(Time due, Time latency, std::uint64_t seq, std::uint32_t slot) {
    ++size_;
    best_ = kUnknown;
    const Entry e{due, seq, slot};
    if (hint_ < lanes_.size() && lanes_[hint_].latency == latency) return append(hint_, e);
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      if (lanes_[i].latency == latency) {
        hint_ = i;
        return append(i, e);
      }
    if (lanes_.size() < kLanes) {
      hint_ = lanes_.size();
      lanes_.push_back(Lane{latency, {e}, 0});
      return;
    }
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  // The due time of the next flow; the queue must not be empty.
  Time next_time() {
    find_best();
    return best_ == kHeap ? heap_.front().due : lanes_[best_].head_entry().due;
  }
  // Takes the next flow's slot; the queue must not be empty.
  std::uint32_t pop() {
    find_best();
    --size_;
    std::uint32_t slot;
    if (best_ == kHeap) {
      slot = heap_.front().slot;
      std::pop_heap(heap_.begin(), heap_.end(), later);
      heap_.pop_back();
    } else {
      Lane& l = lanes_[best_];
      slot = l.q[l.head++].slot;
      if (l.head == l.q.size()) {
        l.q.clear(), l.head = 0;
      } else if (l.head >= 1024 && 2 * l.head >= l.q.size()) {
        l.q.erase(l.q.begin(), l.q.begin() + static_cast<std::ptrdiff_t>(l.head)), l.head = 0;
      }
    }
    best_ = kUnknown;
    return slot;
  }

 private:
  struct Entry {
    Time due;
    std::uint64_t seq;  // start order
    std::uint32_t slot;
  };
  struct Lane {
    Time latency;
    std::vector<Entry> q;  // from q[head], by start order and so by due time
    std::size_t head = 0;
    const Entry& head_entry() const { return q[head]; }
    bool waiting() const { return head < q.size(); }
  };
  static bool before(const Entry& a, const Entry& b) { return a.due != b.due ? a.due < b.due : a.seq < b.seq; }
  // Into lane i when it stays in (due, start) order (starts come in seq
  // order, so due not before the lane's last suffices), else into the heap.
  void append(std::size_t i, const Entry& e) {
    Lane& l = lanes_[i];
    if (!l.waiting() || l.q.back().due <= e.due) return l.q.push_back(e);
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  static bool later(const Entry& a, const Entry& b) { return before(b, a); }
  void find_best() {
    if (best_ != kUnknown) return;
    const Entry* e = heap_.empty() ? nullptr : &heap_.front();
    best_ = kHeap;
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      if (lanes_[i].waiting() && (!e || before(lanes_[i].head_entry(), *e))) e = &lanes_[i].head_entry(), best_ = i;
  }
  static constexpr std::size_t kLanes = 16;
  static constexpr std::size_t kUnknown = SIZE_MAX, kHeap = SIZE_MAX - 1;
  std::vector<Lane> lanes_;
  std::vector<Entry> heap_;  // min-heap by (due, seq): the latencies without a lane
  std::size_t size_ = 0, hint_ = 0, best_ = kUnknown;
};

// Max-min fair sharing, re-solved incrementally. Flows are linked to the
// links they cross; a start or finish marks its links dirty, and the next
// solve re-solves only the connected components (flows joined by shared
// links) that hold a dirty link: max-min shares of one component do not
// depend on any other, so the rest keep their rates and completion times. A
// transfer that shares no link is a component of its own and costs O(route).
// All starts and finishes at one time are solved together. A flow's
// remaining bytes are brought up to date only when its rate changes, and its
// completion waits in a heap (stale entries are skipped by version).
class FlowModel final : public NetworkModel {
 public:
  FlowModel(const Topology& topo, Workspace* ws)
      : capacity_(topo.num_links()), on_link_(topo.num_links()), live_on_(topo.num_links(), 0), link_dirty_(topo.num_links(), 0),
        link_seen_(topo.num_links(), 0), local_(topo.num_links(), 0) {
    for (int l = 0; l < topo.num_links(); ++l) capacity_[l] = static_cast<double>(topo.link(l).bandwidth);
    if (ws) memo_ = rate_memo_for(capacity_, *ws);
  }
  std::string name() const override { return "flow"; }

  void start(std::uint64_t id, const RouteView& r, std::uint64_t bytes, Time now, double cap) override {
    // The data phase begins once the route's latency has passed.
    std::uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(flows_.size());
      flows_.emplace_back();
      flow_seen_.push_back(0);
    }
    Flow& f = flows_[slot];
    // Kept across reuse: finish_ and the links' member lists may hold the slot's old entries.
    const std::uint32_t version = f.version, gen = f.gen + 1;
    f = Flow{};
    f.version = version;
    f.gen = gen;
    f.id = id;
    f.seq = seq_++;
    f.remaining = static_cast<double>(bytes);
    f.cap = cap;
    f.off = static_cast<std::uint32_t>(arena_.size());
    if (r.links.size() > UINT16_MAX)
      throw UserError(fmt::format("flow model: a route of {} links (at most {})", r.links.size(), UINT16_MAX));
    f.len = static_cast<std::uint16_t>(r.links.size());
    arena_.insert(arena_.end(), r.links.begin(), r.links.end());
    live_links_ += f.len;
    pending_.push(now + r.latency, r.latency, f.seq, slot);
  }

  std::optional<Time> next_completion() override {
    if (changed_) solve();
    Time t = Time::max();
    if (!pending_.empty()) t = pending_.next_time();
    const Time fin = next_finish();
    if (fin < t) t = fin;
    if (t == Time::max()) return std::nullopt;
    return t;
  }

  void complete(Time t, std::vector<std::uint64_t>* done) override {
    if (changed_) solve();
    now_ = t;
    // Flows whose completion time is t leave their links.
    auto finish = [&](std::uint32_t slot) {
      Flow& f = flows_[slot];
      leave_links(f);
      f.state = State::done;
      done_buf_.push_back({f.seq, slot});
      --active_;
      const std::uint32_t moved = act_.back();  // off the active list: swap with the last
      act_[f.act_pos] = moved;
      flows_[moved].act_pos = f.act_pos;
      act_.pop_back();
    };
    if (heap_mode_) {
      while (next_finish() <= t) {
        std::pop_heap(finish_.begin(), finish_.end(), later);
        const std::uint32_t slot = finish_.back().slot;
        finish_.pop_back();
        finish(slot);
      }
    } else if (global_next_ <= t) {
      // Compacted in order (not swapped from the end), so the active list
      // stays close to start order and the finished flows come out sorted
      // by it, as they are reported, without the sort below.
      std::size_t keep = 0;
      for (std::size_t i = 0; i < act_.size(); ++i) {
        const std::uint32_t slot = act_[i];
        Flow& f = flows_[slot];
        if (f.finish <= t) {
          leave_links(f);
          f.state = State::done;
          done_buf_.push_back({f.seq, slot});
          --active_;
        } else {
          f.act_pos = static_cast<std::uint32_t>(keep);
          act_[keep++] = slot;
        }
      }
      act_.resize(keep);
    }
    // Flows whose latency has passed join; empty ones complete at once.
    while (!pending_.empty() && pending_.next_time() == t) {
      const std::uint32_t slot = pending_.pop();
      Flow& f = flows_[slot];
      if (f.remaining <= 0 || f.len == 0) {
        f.state = State::done;
        done_buf_.push_back({f.seq, slot});
        continue;
      }
      f.state = State::active;
      f.last = t;
      ++active_;
      f.act_pos = static_cast<std::uint32_t>(act_.size());
      act_.push_back(slot);
      if (!members_) {
        changed_ = true;  // all mark() records without member lists
        continue;
      }
      for (std::uint32_t i = 0; i < f.len; ++i) {
        const int l = arena_[f.off + i];
        on_link_[l].push_back(Member{slot, f.gen});
        ++live_on_[l];
        mark(l);
      }
    }
    // By start order (often already so: skip the sort then).
    if (!std::is_sorted(done_buf_.begin(), done_buf_.end())) std::sort(done_buf_.begin(), done_buf_.end());
    for (const auto& [seq, slot] : done_buf_) {
      done->push_back(flows_[slot].id);
      live_links_ -= flows_[slot].len;
      flows_[slot].state = State::free;
      free_.push_back(slot);
    }
    done_buf_.clear();
    // The route arena only grows; compact it once most of it is dead.
    if (arena_.size() > 4096 && arena_.size() > 4 * live_links_) compact();
  }

  std::size_t in_flight() const override { return active_ + pending_.size(); }

 private:
  enum class State : std::uint8_t { free, pending, active, done };
  struct Flow {
    std::uint64_t id = 0, seq = 0;
    std::uint32_t off = 0;           // route links: arena_[off, off + len)
    std::uint32_t version = 0;       // of its entry in finish_
    std::uint32_t act_pos = 0;       // index in act_ while active
    std::uint32_t gen = 0;           // how many flows the slot has held
    std::uint32_t path = RateMemo::kNone;  // its (route, cap) id in memo_
    std::uint16_t len = 0;
    State state = State::pending;
    double remaining = 0;  // bytes at `last`
    double rate = 0;       // bytes/s
    double cap = 0;        // bytes/s, 0 = none
    Time last;             // when `remaining` was brought up to date
    Time finish;           // when `remaining` reaches zero at `rate`, rounded up
  };
  // A million in flight (1024 GPUs' AlltoAll): each byte here is a MiB.
  static_assert(sizeof(Flow) <= 80);
  struct Member {
    std::uint32_t slot, gen;  // flow slot, and the slot's generation when the flow joined
  };
  struct Finish {  // a completion time; the order among equal times is irrelevant (done is sorted by seq)
    Time time;
    std::uint32_t slot, version;
  };

  bool current(const Finish& e) const {
    const Flow& f = flows_[e.slot];
    return f.state == State::active && f.version == e.version;
  }
  static bool later(const Finish& a, const Finish& b) { return b.time < a.time; }
  Time next_finish() {
    if (!heap_mode_) return global_next_;
    while (!finish_.empty()) {
      if (current(finish_.front())) return finish_.front().time;
      std::pop_heap(finish_.begin(), finish_.end(), later);  // superseded by a later solve, or the flow has gone
      finish_.pop_back();
    }
    return Time::max();
  }
  // A start or finish on link l. Which links changed matters only to the
  // component search, which needs the member lists: without them the next
  // solve is global and only needs to know that something changed.
  void mark(int l) {
    changed_ = true;
    if (members_ && !link_dirty_[l]) link_dirty_[l] = 1, dirty_.push_back(l);
  }
  // A member is live while its flow is active and its slot not reused.
  bool live(const Member& m) const {
    const Flow& f = flows_[m.slot];
    return f.state == State::active && f.gen == m.gen;
  }
  // A flow leaves link l: its member entry stays until the list is more than
  // half dead, then the list is compacted (amortised O(1) per leave, and no
  // index into the list to keep per hop).
  void leave(int l) {
    mark(l);
    if (!members_) return;
    --live_on_[l];
    auto& v = on_link_[l];
    if (v.size() > 16 && v.size() > 2 * live_on_[l]) std::erase_if(v, [this](const Member& m) { return !live(m); });
  }
  // Flow f leaves every link of its route (without member lists, all that
  // records is that something changed).
  void leave_links(const Flow& f) {
    if (!members_) {
      changed_ = true;
      return;
    }
    for (std::uint32_t i = 0; i < f.len; ++i) leave(arena_[f.off + i]);
  }
  void compact() {
    std::vector<int> arena;
    arena.reserve(2 * live_links_);
    for (Flow& f : flows_) {
      if (f.state == State::free) continue;
      const auto off = static_cast<std::uint32_t>(arena.size());
      arena.insert(arena.end(), arena_.begin() + f.off, arena_.begin() + f.off + f.len);
      f.off = off;
    }
    arena_.swap(arena);
  }

  // Max-min over the flows of comp_flows_ (whole components).
  void solve_shared() {
    // The solver sees the links in id order, so its tie-breaks (and so its
    // arithmetic) are those of one global solve. The order of the flows does
    // not matter: the flows fixed in one round all get the same share.
    std::sort(comp_links_.begin(), comp_links_.end());
    cap_local_.resize(comp_links_.size());
    for (std::size_t i = 0; i < comp_links_.size(); ++i) {
      local_[comp_links_[i]] = static_cast<int>(i);
      cap_local_[i] = capacity_[comp_links_[i]];
    }
    path_arena_.clear();
    caps_.clear();
    bool capped = false;
    for (std::uint32_t slot : comp_flows_) {
      const Flow& f = flows_[slot];
      for (std::uint32_t i = 0; i < f.len; ++i) path_arena_.push_back(local_[arena_[f.off + i]]);
      caps_.push_back(f.cap);
      capped = capped || f.cap > 0;
    }
    paths_.clear();
    std::size_t o = 0;
    for (std::uint32_t slot : comp_flows_) {
      paths_.emplace_back(path_arena_.data() + o, flows_[slot].len);
      o += flows_[slot].len;
    }
    max_min_rates(cap_local_, paths_, capped ? std::span<const double>(caps_) : std::span<const double>(), scratch_,
                  rates_);
    for (std::size_t i = 0; i < comp_flows_.size(); ++i) set_rate(comp_flows_[i], rates_[i]);
  }
  // Gives a flow its new rate; a changed rate brings its bytes up to date and
  // queues its new completion time.
  void set_rate(std::uint32_t slot, double share) {
    Flow& f = flows_[slot];
    // A share of zero can only come from rounding on an exhausted link.
    const double rate = std::max(share, 1.0);
    if (rate == f.rate) return;  // unchanged: its completion stands (a new flow has rate 0)
    f.remaining -= f.rate * (now_ - f.last).to_seconds();
    if (f.remaining < 0) f.remaining = 0;
    f.last = now_;
    f.rate = rate;
    ++f.version;
    f.finish = now_ + duration_for_rate(f.remaining, f.rate);
    if (heap_mode_) fresh_.push_back(Finish{f.finish, slot, f.version});
  }

  // Re-solves the components that hold a dirty link.
  void solve() {
    changed_ = false;
    comp_links_.clear();
    comp_flows_.clear();
    const bool recorded = members_;  // whether dirty_ holds every link changed since the last solve
    // The member lists serve the component search only, which runs above
    // kDenseFlows active flows: below half of that they are no longer kept,
    // and above it they are rebuilt from the active flows (the order of a
    // list's members does not matter: a component is a set).
    if (act_.size() > kDenseFlows && !members_) {
      for (auto& v : on_link_) v.clear();
      std::fill(live_on_.begin(), live_on_.end(), 0);
      for (std::uint32_t slot : act_) {
        const Flow& f = flows_[slot];
        for (std::uint32_t i = 0; i < f.len; ++i) {
          on_link_[arena_[f.off + i]].push_back(Member{slot, f.gen});
          ++live_on_[arena_[f.off + i]];
        }
      }
      members_ = true;
    } else if (members_ && act_.size() <= kDenseFlows / 2) {
      members_ = false;
    }
    bool global = act_.size() <= kDenseFlows || !recorded;
    if (!global && global_hint_ > 0) global = true, --global_hint_;
    if (!global) {
      // The flows on the dirty links alone are half of them: the search would
      // reach at least that many, so go global at once.
      std::size_t reached = 0;
      for (int l : dirty_) reached += live_on_[l];
      global = 2 * reached >= act_.size();
    }
    if (global) {
      // Few flows, or a recent change reached most of them: one solve over
      // all of them on the topology's link ids costs less than finding the
      // components (the same rates: max-min keeps components apart, and ties
      // go to the lowest link id either way).
      for (int l : dirty_) link_dirty_[l] = 0;
      dirty_.clear();
      comp_flows_.assign(act_.begin(), act_.end());
      // Completions are found by a scan of the flows, as cheap as the solve.
      heap_mode_ = false;
      finish_.clear();
      global_next_ = Time::max();
      if (!comp_flows_.empty()) {
        // The rates of a set of flows solved before (sim/net/rate_memo.hpp),
        // or a solve, remembered.
        const bool memo = memo_ && comp_flows_.size() <= RateMemo::kMaxFlows;
        if (!memo || !memo_->find(path_ids(), rates_)) {
          paths_.clear();
          caps_.clear();
          bool capped = false;
          for (std::uint32_t slot : comp_flows_) {
            const Flow& f = flows_[slot];
            paths_.emplace_back(arena_.data() + f.off, f.len);
            caps_.push_back(f.cap);
            capped = capped || f.cap > 0;
          }
          max_min_rates(capacity_, paths_, capped ? std::span<const double>(caps_) : std::span<const double>(),
                        scratch_, rates_);
          if (memo) memo_->insert(ids_, rates_);
        }
        for (std::size_t i = 0; i < comp_flows_.size(); ++i) {
          set_rate(comp_flows_[i], rates_[i]);
          global_next_ = std::min(global_next_, flows_[comp_flows_[i]].finish);
        }
      }
      fresh_.clear();
      return;
    }
    if (!heap_mode_) {
      // Leaving global mode: every active flow's completion goes in the heap.
      heap_mode_ = true;
      finish_.clear();
      for (std::uint32_t slot : act_) finish_.push_back(Finish{flows_[slot].finish, slot, flows_[slot].version});
      std::make_heap(finish_.begin(), finish_.end(), later);
    }
    ++epoch_;
    std::size_t singles = 0;
    // Breadth-first over links and flows from each dirty link, one component
    // at a time. A flow alone on its links gets the rate of its slowest link
    // (or its cap) without the solver; the other components are solved
    // together in one call (max-min keeps disjoint components apart).
    for (int l : dirty_) {
      link_dirty_[l] = 0;
      if (link_seen_[l] == epoch_) continue;
      link_seen_[l] = epoch_;
      const std::size_t links0 = comp_links_.size(), flows0 = comp_flows_.size();
      comp_links_.push_back(l);
      for (std::size_t q = links0; q < comp_links_.size(); ++q) {
        for (const Member& m : on_link_[comp_links_[q]]) {
          if (flow_seen_[m.slot] == epoch_ || !live(m)) continue;
          flow_seen_[m.slot] = epoch_;
          comp_flows_.push_back(m.slot);
          const Flow& f = flows_[m.slot];
          for (std::uint32_t i = 0; i < f.len; ++i) {
            const int l2 = arena_[f.off + i];
            if (link_seen_[l2] != epoch_) link_seen_[l2] = epoch_, comp_links_.push_back(l2);
          }
        }
      }
      if (comp_flows_.size() - flows0 == 1) {
        const std::uint32_t slot = comp_flows_.back();
        const Flow& f = flows_[slot];
        // A link listed n times in a row carries n of the flow's copies (a
        // flow standing for a symmetric orbit, sim/engine/simulator.cpp):
        // its share is capacity / n, as the solver would give.
        double rate = std::numeric_limits<double>::infinity();
        for (std::uint32_t i = 0; i < f.len;) {
          const int l = arena_[f.off + i];
          std::uint32_t n = 1;
          while (i + n < f.len && arena_[f.off + i + n] == l) ++n;
          rate = std::min(rate, n == 1 ? capacity_[l] : capacity_[l] / n);
          i += n;
        }
        if (f.cap > 0 && f.cap < rate) rate = f.cap;
        set_rate(slot, rate);
        ++singles;
        comp_flows_.pop_back();
        comp_links_.resize(links0);
      }
    }
    dirty_.clear();
    // Most flows were reached: the next solves go global (cheaper than the
    // search) until the hint runs out and the search looks again, twice as
    // late each time it finds the same (up to 4096 solves later).
    if (2 * (comp_flows_.size() + singles) >= act_.size()) {
      hint_len_ = std::min(2 * hint_len_, 4096);
      global_hint_ = hint_len_;
    } else {
      hint_len_ = 8;
    }
    if (!comp_flows_.empty()) solve_shared();
    queue_finishes();
  }
  // The memo's path id of each flow of comp_flows_, in ids_ (interned on a
  // flow's first memo lookup; again if the memo started afresh meanwhile).
  // An id of an earlier epoch (the memo started afresh since) is given
  // again; the memo refuses such ids, so this only keeps the hits coming.
  std::span<const std::uint32_t> path_ids() {
    while (true) {
      const std::uint64_t epoch = memo_->epoch();
      ids_.clear();
      for (std::uint32_t slot : comp_flows_) {
        Flow& f = flows_[slot];
        if (!memo_->current(f.path)) f.path = memo_->path_id({arena_.data() + f.off, f.len}, f.cap);
        ids_.push_back(f.path);
      }
      if (memo_->epoch() == epoch) return ids_;
    }
  }
  void queue_finishes() {
    // Few new completions: push them. Many: drop the stale entries and heapify
    // once (linear, where as many pushes would cost n log n).
    if (fresh_.size() * 4 < finish_.size()) {
      for (const Finish& e : fresh_) {
        finish_.push_back(e);
        std::push_heap(finish_.begin(), finish_.end(), later);
      }
    } else {
      std::erase_if(finish_, [this](const Finish& e) { return !current(e); });
      finish_.insert(finish_.end(), fresh_.begin(), fresh_.end());
      std::make_heap(finish_.begin(), finish_.end(), later);
    }
    fresh_.clear();
  }

  std::vector<double> capacity_;
  std::shared_ptr<RateMemo> memo_;            // null: every global solve is solved
  std::vector<std::uint32_t> ids_;            // path ids of comp_flows_
  std::vector<std::vector<Member>> on_link_;  // flows crossing each link (some may have left)
  std::vector<std::uint32_t> live_on_;        // how many of them are active
  bool members_ = false;                      // whether on_link_ and live_on_ are kept (see solve)
  bool changed_ = false;          // a flow started or finished since the last solve
  std::vector<char> link_dirty_;  // with members_: the links it happened on
  std::vector<int> dirty_;
  std::vector<std::uint64_t> link_seen_, flow_seen_;
  std::uint64_t epoch_ = 0;
  std::vector<int> local_;  // link id -> index in the component being solved
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> done_buf_;  // (seq, slot) of the flows completing now
  std::vector<int> arena_;          // route links of every flow
  std::size_t live_links_ = 0, active_ = 0;
  std::vector<std::uint32_t> act_;  // active flow slots, in no particular order
  // Up to this many active flows, a solve covers all of them at once
  // (measured on a 32-GPU layer: cheaper than the component search).
  static constexpr std::size_t kDenseFlows = 2048;
  int global_hint_ = 0, hint_len_ = 8;
  // Global solves scan the flows for their completions (global_next_: the
  // earliest); component solves keep them in the heap finish_.
  bool heap_mode_ = false;
  Time global_next_ = Time::max();
  // Solver input and scratch, reused.
  std::vector<int> comp_links_, path_arena_;
  std::vector<std::uint32_t> comp_flows_;
  std::vector<double> cap_local_, caps_, rates_;
  std::vector<std::span<const int>> paths_;
  MaxMinScratch scratch_;
  PendingFlows pending_;
  std::vector<Finish> finish_, fresh_;  // min-heap by time; entries of superseded rates are skipped
  Time now_;
  std::uint64_t seq_ = 0;
};

}  // namespace

namespace {
template <typename Model>
std::unique_ptr<NetworkModel> make_model(const Topology& topo, Workspace* ws) {
  if constexpr (std::is_constructible_v<Model, const Topology&, Workspace*>)
    return std::make_unique<Model>(topo, ws);
  else
    return std::make_unique<Model>(topo);
}
constexpr std::array<NetworkModelInfo, 2> kModels = {{
    {"analytical",
     "alpha-beta per transfer (latency + bytes / bottleneck bandwidth), never slowed: a transfer waits until "
     "every link of its route has its rate free; each GPU port sends in issue order",
     make_model<Analytical>},
    {"flow", "max-min fair sharing of every link among the flows crossing it, re-solved on every start/finish",
     make_model<FlowModel>},
}};
}  // namespace

std::span<const NetworkModelInfo> network_models() { return kModels; }

bool is_network_model(std::string_view name) { return find_named(network_models(), name) != nullptr; }

std::string network_model_names(std::string_view sep, std::string_view last) {
  return join_names(names_of(network_models()), sep, last);
}

std::unique_ptr<NetworkModel> make_network(const std::string& name, const Topology& topo, Workspace* ws) {
  if (const NetworkModelInfo* m = find_named(network_models(), name)) return m->make(topo, ws);
  throw UserError(fmt::format("unknown network model '{}': expected {}", name, network_model_names(", ", " or ")));
}

}  // namespace parmsim
