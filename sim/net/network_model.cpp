#include "sim/net/network_model.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/core/error.hpp"
#include "sim/core/event_queue.hpp"
#include "sim/net/maxmin.hpp"

namespace parmsim {
namespace {

class Analytical final : public NetworkModel {
 public:
  std::string name() const override { return "analytical"; }
  void start(std::uint64_t id, const Route& r, std::uint64_t bytes, Time now) override {
    Time d = r.latency;
    if (bytes > 0 && !r.links.empty()) d += duration_for(bytes, r.bottleneck);
    q_.push(now + d, id);
  }
  std::optional<Time> next_completion() override {
    if (q_.empty()) return std::nullopt;
    return q_.top().time;
  }
  void complete(Time t, std::vector<std::uint64_t>* done) override {
    while (!q_.empty() && q_.top().time == t) done->push_back(q_.pop().payload);
  }
  std::size_t in_flight() const override { return q_.size(); }

 private:
  EventQueue<std::uint64_t> q_;
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
      {"analytical", "latency + bytes / bottleneck bandwidth per transfer; no contention (the paper's model)"},
      {"flow", "max-min fair sharing of every link among the flows crossing it, re-solved on every start/finish"}};
  return m;
}

std::unique_ptr<NetworkModel> make_network(const std::string& name, const Topology& topo) {
  if (name == "analytical") return std::make_unique<Analytical>();
  if (name == "flow") return std::make_unique<FlowModel>(topo);
  throw ParmError(fmt::format("unknown network model '{}': expected analytical or flow", name));
}

}  // namespace parmsim
