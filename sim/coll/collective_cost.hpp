#pragma once
// The closed-form time of one collective, derived from the plan the
// simulator runs (make_plan), so that closed-form models and simulations
// cost collectives the same way.
//
// Derivation, for a plan on a topology:
//   rounds     a transfer's round is the depth of its send step in the step
//              DAG (0 for a step without dependencies, else 1 + the deepest
//              dependency). For ring, direct (with window), pairwise,
//              hierarchical and sendrecv this is the position along the
//              member's chain; for SAA, AlltoAll round i and the gather of
//              chunk i-1 share round i, as they start together.
//   transfer   the load on each link in a round is the sum of the bytes of
//              that round's transfers crossing it; a transfer takes its route
//              latency + max over its links of (link load / link bandwidth),
//              what both network models give when a round's transfers start
//              together (`analytical` serializes a shared link, `flow`
//              shares it).
//   collective the critical path of the step DAG with transfers so timed,
//              every member entering at 0: a step is ready when its
//              dependencies are complete, a transfer starts when its send and
//              receive steps are ready, a step completes when its transfers
//              are. For the chain algorithms this is the sum over rounds of
//              the slowest transfer; for SAA it overlaps the AlltoAll chain
//              with the gather chain.
// Every transfer's bytes are proportional to the collective's byte size n
// (up to ceil rounding), so each transfer is alpha + beta * n and the
// critical path is a maximum of such lines (convex in n). The form keeps that
// upper envelope, built once per (op, algorithm, group, inner, window,
// topology) from a plan at a large reference size, and evaluates any n in a
// few nanoseconds. AlltoAllv is the exception: its bytes come from the matrix,
// so its form is built from the actual matrix (n scales it; n = 1 is the
// matrix as given) and is never cached.
//
// This knows nothing of MoE: it costs a Collective on a Topology.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "sim/coll/collective_plan.hpp"
#include "sim/coll/nccl_model.hpp"

namespace parmsim {

struct CostLine {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per byte of the collective's size n
  double at(double n) const { return alpha + beta * n; }
};

struct CostForm {
  // Upper envelope on n >= 0: slopes increasing, intercepts decreasing.
  std::vector<CostLine> envelope;
  bool trivial = false;  // fewer than two members, or no transfers: always 0
  int rounds = 0;        // distinct transfer rounds in the plan
  std::size_t transfers = 0;
  int symmetry = 1;      // > 1: built on the representatives of a server shift of this order (FormSymmetry)
  // Seconds for a collective of n bytes (Collective::bytes convention); 0 for n <= 0.
  double time_s(double n) const {
    if (trivial || !(n > 0)) return 0.0;
    double t = 0.0;
    for (const CostLine& l : envelope) t = std::max(t, l.at(n));
    return t;
  }
};

// Copies of a collective that run at the same time on other ranks: copy j
// (1 <= j < copies) is the same plan on the group's ranks + j * stride (the
// MoE layer's G EP groups, or its N_EP MP groups, all run at once). Their
// transfers load the same links in the same rounds; the form times copy 0.
struct Concurrent {
  int copies = 1;
  int stride = 0;
};

// Whether make_cost_form may work on one class of symmetric members for all:
// where a shift of s servers (Topology::node_shift) maps the group, the plan
// (plan_maps_onto) and the routes (Topology::shift_route_ok) onto themselves,
// only the transfers sent or received by the members on the first s servers
// are routed and timed, and only their steps walked: every other transfer
// and step is an image of one of them, with the same line and envelope. The
// form is the same, bit for bit (link loads are summed exactly, as integers,
// and must stay below 2^53, where the general path's double sums are exact
// too); anything not proved takes the general path. Used only for plans of
// at least `min_transfers` transfers without concurrent copies.
struct FormSymmetry {
  bool on = true;
  std::size_t min_transfers = std::size_t{1} << 16;
};

// Builds the form from a fresh plan (no cache of forms; routes above
// Topology::kRouteTableGpus from ws's). Throws UserError as make_plan does.
// The first uses ws's symmetry setting (set_form_symmetry; on by default).
CostForm make_cost_form(const Collective& c, const Topology& topo, Concurrent k, Workspace& ws);
CostForm make_cost_form(const Collective& c, const Topology& topo, Concurrent k, Workspace& ws, FormSymmetry sym);
// Whether the forms built in ws may use symmetry (FormSymmetry; `--no-symmetry` turns it off).
void set_form_symmetry(Workspace& ws, bool on);
CostForm make_cost_form(const Collective& c, const Topology& topo, Concurrent k = {});  // a fresh workspace

// The form for c's (op, resolved algorithm, group, inner, window) on topo,
// kept in ws; c.bytes is ignored (except for alltoallv, whose form is built
// fresh and not kept). The returned form is immutable and stays valid while
// the caller holds it.
std::shared_ptr<const CostForm> collective_cost_form(const Collective& c, const Topology& topo, Workspace& ws);

// Seconds for c on topo at `bytes` (Collective::bytes convention; c.bytes
// where not given), with k's concurrent copies: the general path. NCCL's
// tuned ops as NCCL's choice at that size (the model's latency plus the
// slower of the links' form and the model's bandwidth); every other op by
// its cost form. 0 for zero bytes or fewer than two members. AlltoAllv: the
// matrix as given (c.bytes and `bytes` are ignored). Forms and NCCL's view
// of each group are kept in ws.
double collective_time_s(const Collective& c, const Topology& topo, double bytes, Concurrent k, Workspace& ws);
double collective_time_s(const Collective& c, const Topology& topo, double bytes, Workspace& ws);
double collective_time_s(const Collective& c, const Topology& topo, Workspace& ws);
// The same with a fresh workspace (a caller that asks once).
double collective_time_s(const Collective& c, const Topology& topo, double bytes);
double collective_time_s(const Collective& c, const Topology& topo);

// One collective resolved on one topology, for timing at many sizes: the
// compiled form of collective_time_s(c, topo, n, k, ws), equal to it bit for
// bit (tests/test_bound_collective.cpp), without the lookups. For NCCL's tuned ops it holds NCCL's system and tuner
// (NcclTuner: the pairs' size-independent terms) and the cost form of each
// pair it has chosen so far; for the others, the cost form. Everything is
// resolved on first use with n > 0 (so a collective that is never timed,
// or only at 0 bytes, never builds a plan or throws), and a resolution that
// throws is retried, and throws again, on the next call. Thread-safe.
// Not for alltoallv (its form depends on the matrix): CollectiveCosts::bound
// refuses it.
class BoundCollective {
 public:
  double time_s(double n) const {
    // Resolved to one form (not NCCL's tuner, two members or more): inline.
    if (const CostForm* f = form_.load(std::memory_order_acquire)) return f->time_s(n);
    // Resolved to NCCL's tuner, and the chosen pair's form already built:
    // resolve_and_time_s's arithmetic, inline.
    if (const NcclTuner* t = tuner_.load(std::memory_order_acquire); t && n > 0) {
      int i = 0;
      const NcclEstimate e = t->choose(n, &i);
      if (const CostForm* f = pair_form_[i].load(std::memory_order_acquire))
        return e.run_lat_us() * 1e-6 + std::max(f->time_s(n), n / (e.run_bw() * 1e9));
    }
    return resolve_and_time_s(n);
  }
  ~BoundCollective();
  struct Impl;

 private:
  friend class CollectiveCosts;
  explicit BoundCollective(std::unique_ptr<Impl> impl);
  double resolve_and_time_s(double n) const;  // everything else, and the first use
  std::unique_ptr<Impl> impl_;
  // Impl::form once resolved, when the collective has two members or more
  // and NCCL's tuner does not decide; else null. Set with release.
  mutable std::atomic<const CostForm*> form_{nullptr};
  // Impl's tuner once resolved, when the collective has two members or more
  // and NCCL's tuner decides; else null. Set with release.
  mutable std::atomic<const NcclTuner*> tuner_{nullptr};
  // Impl::pair_form: the links' form of each of the tuner's pairs, once built.
  const std::atomic<const CostForm*>* pair_form_ = nullptr;
};

// The bound collectives of one topology: fingerprints it once (the free
// functions above do so on every call, O(links)), for loops that cost many
// collectives on one topology, from any number of threads. Its collectives
// resolve (once each, under a lock) in a workspace of its own, or in `ws`
// when given: then it shares ws's forms, and must be used only where ws is
// (one thread), and not outlive it. Holds a reference: topo must outlive it.
class CollectiveCosts {
 public:
  // `symmetry`: set_form_symmetry on the workspace its forms are built in.
  explicit CollectiveCosts(const Topology& topo, Workspace* ws = nullptr, bool symmetry = true);
  // c (its op, algorithm, protocol, channels, group, inner, window and name;
  // not its bytes) with `k`, bound: the same object for the same collective
  // for the life of this object. Thread-safe. Throws UserError for alltoallv.
  const BoundCollective& bound(const Collective& c, Concurrent k = {}) const;

  CollectiveCosts(const CollectiveCosts&) = delete;
  CollectiveCosts& operator=(const CollectiveCosts&) = delete;
  ~CollectiveCosts();

  struct Shared {
    std::mutex mu;  // guards *ws
    Workspace own;
    Workspace* ws = &own;
  };

 private:
  const Topology& topo_;
  std::uint64_t key_;
  std::unique_ptr<Shared> shared_;
  struct Bound;
  std::unique_ptr<Bound> bound_;
};

// A hash of everything in a topology that routes and link costs depend on
// (name, sizes, every link's ends, bandwidth and latency): the cache's key.
std::uint64_t topology_fingerprint(const Topology& topo);

// make_plan(c, topo, ws), shared: plans are kept in ws, keyed by
// `topo_key` (topology_fingerprint(topo)) and every field of c a plan
// depends on (op, group, bytes, matrix, algo, proto, channels, window,
// inner; not the name or the data bindings). The simulator takes
// its plans here, so that the forward and backward passes, the schedules
// of one layer and the layers of a sweep that move the same bytes between
// the same ranks plan each collective once. A plan that throws is not kept.
std::shared_ptr<const CollPlan> shared_plan(const Collective& c, const Topology& topo, std::uint64_t topo_key,
                                            Workspace& ws);

// make_rep_plan(c, topo, sh, ws), shared the same way (keyed also by the
// shift's GPUs); null where make_rep_plan gives none (not kept).
std::shared_ptr<const CollPlan> shared_rep_plan(const Collective& c, const Topology& topo, std::uint64_t topo_key,
                                                const NodeShift& sh, Workspace& ws);

// nccl_system(group, topo, ws), kept in ws with the forms' (the plans of one
// group ask for it once: above Topology::kRouteTableGpus it routes between
// every server's GPUs).
std::shared_ptr<const NcclSystem> shared_nccl_system(const std::vector<int>& group, const Topology& topo, Workspace& ws);

// What ws keeps, for tests: cost forms, and plans (shared_plan). Workspace::clear drops them.
std::size_t collective_cost_cache_size(Workspace& ws);
std::size_t plan_cache_size(Workspace& ws);

}  // namespace parmsim
