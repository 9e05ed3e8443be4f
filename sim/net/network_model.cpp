#include "sim/net/network_model.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/core/error.hpp"
#include "sim/core/event_queue.hpp"
#include "sim/net/maxmin.hpp"

namespace parmsim {
namespace {

// Each transfer costs its route latency plus bytes over the route's
// bottleneck bandwidth, as in an alpha-beta model. There is no bandwidth
// sharing: a link transmits one transfer at a time, for bytes / bottleneck,
// and a transfer starts once every link of its route is free. Waiting
// transfers are served in the order they were issued, and a later one never
// takes a link that an earlier waiting one needs (per-link FIFO). Latency
// overlaps with other transfers' transmission (it is propagation, not
// occupancy), so k transfers through one NIC cost alpha + k * bytes * beta.
class Analytical final : public NetworkModel {
 public:
  explicit Analytical(const Topology& topo) : link_free_(topo.num_links()), claim_(topo.num_links(), 0) {}
  std::string name() const override { return "analytical"; }
  void start(std::uint64_t id, const Route& r, std::uint64_t bytes, Time now) override {
    if (bytes == 0 || r.links.empty()) {
      done_.push(now + r.latency, id);
      return;
    }
    waiting_.push_back(Waiting{id, r, duration_for(bytes, r.bottleneck)});
    wake_.push(now, 0);
  }
  std::optional<Time> next_completion() override {
    Time t = Time::max();
    if (!done_.empty()) t = done_.top().time;
    if (!wake_.empty() && wake_.top().time < t) t = wake_.top().time;
    if (t == Time::max()) return std::nullopt;
    return t;
  }
  void complete(Time t, std::vector<std::uint64_t>* done) override {
    bool woke = false;
    while (!wake_.empty() && wake_.top().time <= t) wake_.pop(), woke = true;
    if (woke) admit(t);
    while (!done_.empty() && done_.top().time == t) done->push_back(done_.pop().payload);
  }
  std::size_t in_flight() const override { return done_.size() + waiting_.size(); }

 private:
  struct Waiting {
    std::uint64_t id;
    Route route;
    Time tx;
  };
  void admit(Time now) {
    ++epoch_;
    std::size_t keep = 0;
    for (std::size_t i = 0; i < waiting_.size(); ++i) {
      Waiting& w = waiting_[i];
      bool ok = true;
      for (int l : w.route.links) ok = ok && link_free_[l] <= now && claim_[l] != epoch_;
      if (ok) {
        const Time end_tx = now + w.tx;
        for (int l : w.route.links) link_free_[l] = end_tx;
        done_.push(end_tx + w.route.latency, w.id);
        wake_.push(end_tx, 0);
        continue;
      }
      for (int l : w.route.links) claim_[l] = epoch_;
      if (keep != i) waiting_[keep] = std::move(w);
      ++keep;
    }
    waiting_.resize(keep);
  }
  std::vector<Time> link_free_;
  std::vector<std::uint64_t> claim_;
  std::uint64_t epoch_ = 0;
  std::vector<Waiting> waiting_;
  EventQueue<std::uint64_t> done_;
  EventQueue<int> wake_;
};

class FlowModel final : public NetworkModel {
 public:
  explicit FlowModel(const Topology& topo) : capacity_(topo.num_links()) {
    for (int l = 0; l < topo.num_links(); ++l) capacity_[l] = static_cast<double>(topo.link(l).bandwidth);
  }
  std::string name() const override { return "flow"; }

  void start(std::uint64_t id, const Route& r, std::uint64_t bytes, Time now) override {
    // The data phase begins once the route's latency has passed.
    pending_.push(now + r.latency, Flow{id, r.links, static_cast<double>(bytes), 0.0, Time::max(), seq_++});
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
      if (keep != i) active_[keep] = std::move(f);  // no self-move: it would empty `links`
      ++keep;
    }
    active_.resize(keep);
    now_ = t;
    bool changed = !done_buf_.empty();
    // Flows whose latency has passed join; empty ones complete at once.
    while (!pending_.empty() && pending_.top().time == t) {
      Flow f = pending_.pop().payload;
      if (f.remaining <= 0 || f.links.empty())
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
    std::vector<int> links;
    double remaining;  // bytes
    double rate;       // bytes/s
    Time finish;       // when `remaining` reaches zero at `rate`, rounded up
    std::uint64_t seq;
  };

  void solve() {
    dirty_ = false;
    next_finish_ = Time::max();
    if (active_.empty()) return;
    // Keep flows in start order so the solver sees the same input every run.
    std::sort(active_.begin(), active_.end(), [](const Flow& a, const Flow& b) { return a.seq < b.seq; });
    std::vector<const std::vector<int>*> paths;
    paths.reserve(active_.size());
    for (const Flow& f : active_) paths.push_back(&f.links);
    const std::vector<double> rates = max_min_rates(capacity_, paths);
    for (std::size_t i = 0; i < active_.size(); ++i) {
      Flow& f = active_[i];
      // A share of zero can only come from rounding on an exhausted link.
      f.rate = std::max(rates[i], 1.0);
      f.finish = now_ + duration_for_rate(f.remaining, f.rate);
      next_finish_ = std::min(next_finish_, f.finish);
    }
  }

  std::vector<double> capacity_;
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
       "alpha-beta per transfer (latency + bytes / bottleneck bandwidth); no bandwidth sharing: a link sends one "
       "transfer at a time, in issue order"},
      {"flow", "max-min fair sharing of every link among the flows crossing it, re-solved on every start/finish"}};
  return m;
}

std::unique_ptr<NetworkModel> make_network(const std::string& name, const Topology& topo) {
  if (name == "analytical") return std::make_unique<Analytical>(topo);
  if (name == "flow") return std::make_unique<FlowModel>(topo);
  throw ParmError(fmt::format("unknown network model '{}': expected analytical or flow", name));
}

}  // namespace parmsim
