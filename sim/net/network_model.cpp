#include "sim/net/network_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <set>

#include "sim/core/error.hpp"
#include "sim/core/event_queue.hpp"
#include "sim/net/maxmin.hpp"

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
  void start(std::uint64_t id, const Route& r, std::uint64_t bytes, Time now, double cap) override {
    if (bytes == 0 || r.links.empty()) {
      done_.push(now + r.latency, id);
      return;
    }
    std::uint64_t rate = r.bottleneck;
    if (cap > 0 && cap < static_cast<double>(rate)) rate = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(cap));
    const auto w = static_cast<std::uint32_t>(xfers_.size());
    xfers_.push_back(Xfer{id, r.links, r.latency, duration_for(bytes, rate), rate});
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

class FlowModel final : public NetworkModel {
 public:
  explicit FlowModel(const Topology& topo) : capacity_(topo.num_links()) {
    for (int l = 0; l < topo.num_links(); ++l) capacity_[l] = static_cast<double>(topo.link(l).bandwidth);
  }
  std::string name() const override { return "flow"; }

  void start(std::uint64_t id, const Route& r, std::uint64_t bytes, Time now, double cap) override {
    // The data phase begins once the route's latency has passed.
    const auto off = static_cast<std::uint32_t>(arena_.size());
    arena_.insert(arena_.end(), r.links.begin(), r.links.end());
    pending_.push(now + r.latency, Flow{id, off, static_cast<std::uint32_t>(r.links.size()), static_cast<double>(bytes),
                                        0.0, Time::max(), seq_++, cap});
  }

  std::optional<Time> next_completion() override {
    if (dirty_) solve();
    Time t = Time::max();
    if (!pending_.empty()) t = pending_.top().time;
    if (next_finish_ < t) t = next_finish_;
    if (t == Time::max()) return std::nullopt;
    return t;
  }

  void complete(Time t, std::vector<std::uint64_t>* done) override {
    if (dirty_) solve();
    // Progress every active flow to t; those whose finish time is t are done.
    const double dt = (t - now_).to_seconds();
    std::size_t keep = 0;
    for (std::size_t i = 0; i < active_.size(); ++i) {
      Flow& f = active_[i];
      if (f.finish <= t) {
        done_buf_.push_back(std::move(f));
        continue;
      }
      f.remaining -= f.rate * dt;
      if (f.remaining < 0) f.remaining = 0;
      if (keep != i) active_[keep] = f;
      ++keep;
    }
    active_.resize(keep);
    now_ = t;
    bool changed = !done_buf_.empty();
    // Flows whose latency has passed join; empty ones complete at once.
    while (!pending_.empty() && pending_.top().time == t) {
      Flow f = pending_.pop().payload;
      if (f.remaining <= 0 || f.len == 0)
        done_buf_.push_back(std::move(f));
      else
        active_.push_back(std::move(f)), changed = true;
    }
    std::sort(done_buf_.begin(), done_buf_.end(), [](const Flow& a, const Flow& b) { return a.seq < b.seq; });
    for (const Flow& f : done_buf_) done->push_back(f.id);
    done_buf_.clear();
    if (changed) dirty_ = true;
  }

  std::size_t in_flight() const override { return active_.size() + pending_.size(); }

 private:
  struct Flow {
    std::uint64_t id;
    std::uint32_t off, len;  // route links: arena_[off, off + len)
    double remaining;        // bytes
    double rate;             // bytes/s
    Time finish;             // when `remaining` reaches zero at `rate`, rounded up
    std::uint64_t seq;
    double cap;  // bytes/s, 0 = none
  };

  void solve() {
    dirty_ = false;
    next_finish_ = Time::max();
    if (active_.empty()) return;
    // Keep flows in start order so the solver sees the same input every run.
    std::sort(active_.begin(), active_.end(), [](const Flow& a, const Flow& b) { return a.seq < b.seq; });
    paths_.clear();
    caps_.clear();
    bool capped = false;
    for (const Flow& f : active_) {
      paths_.emplace_back(arena_.data() + f.off, f.len);
      caps_.push_back(f.cap);
      capped = capped || f.cap > 0;
    }
    max_min_rates(capacity_, paths_, capped ? std::span<const double>(caps_) : std::span<const double>(), scratch_,
                  rates_);
    const std::vector<double>& rates = rates_;
    for (std::size_t i = 0; i < active_.size(); ++i) {
      Flow& f = active_[i];
      // A share of zero can only come from rounding on an exhausted link.
      f.rate = std::max(rates[i], 1.0);
      f.finish = now_ + duration_for_rate(f.remaining, f.rate);
      next_finish_ = std::min(next_finish_, f.finish);
    }
  }

  std::vector<double> capacity_;
  std::vector<int> arena_;                   // route links of every flow, appended at start
  std::vector<std::span<const int>> paths_;  // solver input and scratch, reused
  MaxMinScratch scratch_;
  std::vector<double> rates_, caps_;
  EventQueue<Flow> pending_;
  std::vector<Flow> active_, done_buf_;
  Time now_;
  Time next_finish_ = Time::max();
  bool dirty_ = false;
  std::uint64_t seq_ = 0;
};

}  // namespace

const std::vector<std::pair<std::string, std::string>>& network_models() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"analytical",
       "alpha-beta per transfer (latency + bytes / bottleneck bandwidth), never slowed: a transfer waits until "
       "every link of its route has its rate free; each GPU port sends in issue order"},
      {"flow", "max-min fair sharing of every link among the flows crossing it, re-solved on every start/finish"}};
  return m;
}

std::unique_ptr<NetworkModel> make_network(const std::string& name, const Topology& topo) {
  if (name == "analytical") return std::make_unique<Analytical>(topo);
  if (name == "flow") return std::make_unique<FlowModel>(topo);
  throw ParmError(fmt::format("unknown network model '{}': expected analytical or flow", name));
}

}  // namespace parmsim
