#pragma once
// The caches and scratch memory of one thread's simulations, held by whoever
// runs them (a sweep worker, a CLI command, a test, a benchmark) and passed
// down by reference. Nothing in it changes a result: a fresh Workspace gives
// the same output, bit for bit, only later (tests/test_workspace.cpp).
//
// Each floor of sim/ keeps its own part here, created on first use; this
// floor knows the parts' slots, not their types, so the floors above keep
// their types to themselves (docs/architecture.md, "Caches"):
//   routes   sim/topo   hop distances and routes of topologies above
//                       Topology::kRouteTableGpus, and a walk's scratch
//   plans    sim/coll   collective plans (shared_plan) and a scratch collective
//   forms    sim/coll   cost forms and NCCL's view of groups
//   rates    sim/net    max-min rates by the set of flows (RateMemo)
//   engine   sim/engine the memory of the engine's per-collective state
//   symmetry sim/engine the server shifts and plan maps the engine's symmetry checked
// A Workspace is not thread-safe: one per thread.
#include <array>
#include <memory>

namespace parmsim {

class Workspace {
 public:
  enum Slot { kRoutes, kPlans, kForms, kRates, kEngine, kSymmetry, kSlots };
  // A part's type derives from Part and names its slot: `static constexpr Workspace::Slot kSlot`.
  struct Part {
    virtual ~Part() = default;
  };

  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <class T>
  T& get() {
    std::unique_ptr<Part>& p = parts_[T::kSlot];
    if (!p) p = std::make_unique<T>();
    return static_cast<T&>(*p);
  }
  // Whether the part of this slot exists (tests).
  bool has(Slot s) const { return parts_[s] != nullptr; }
  // Drops every part: the next use starts cold (tests and benchmarks).
  void clear() {
    for (auto& p : parts_) p.reset();
  }

 private:
  std::array<std::unique_ptr<Part>, kSlots> parts_;
};

}  // namespace parmsim
