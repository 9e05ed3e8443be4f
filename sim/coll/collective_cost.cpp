#include "sim/coll/collective_cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "sim/coll/nccl_model.hpp"
#include "sim/core/error.hpp"

namespace parmsim {
namespace {

// Plans are built at this size, so ceil rounding of per-transfer bytes is
// below 1e-9 relative and the per-byte slopes are exact for practical purposes.
constexpr std::uint64_t kRefBytes = 1ULL << 40;

using Envelope = std::vector<CostLine>;

bool near(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

// Reduces `v` to its upper envelope on n >= 0: slopes strictly increasing,
// intercepts strictly decreasing (lines equal to 1e-12 relative merged).
void prune(Envelope& v) {
  if (v.size() <= 1) return;
  std::sort(v.begin(), v.end(), [](const CostLine& a, const CostLine& b) {
    return a.beta != b.beta ? a.beta < b.beta : a.alpha > b.alpha;
  });
  std::size_t k = 0;  // v[0, k) is the envelope so far
  for (std::size_t i = 0; i < v.size(); ++i) {
    const CostLine l = v[i];
    bool dominated = false;
    while (k > 0) {
      const CostLine& t = v[k - 1];
      // l.beta >= t.beta: t is never above l on n >= 0 when l.alpha >= t.alpha.
      if (l.alpha >= t.alpha || near(l.alpha, t.alpha)) {
        --k;
        continue;
      }
      if (near(l.beta, t.beta)) {  // same slope, lower intercept
        dominated = true;
        break;
      }
      if (k >= 2) {
        const CostLine& u = v[k - 2];
        // t is useless when l overtakes u no later than t does.
        const double x_ul = (u.alpha - l.alpha) / (l.beta - u.beta);
        const double x_ut = (u.alpha - t.alpha) / (t.beta - u.beta);
        if (x_ul <= x_ut) {
          --k;
          continue;
        }
      }
      break;
    }
    if (!dominated) v[k++] = l;
  }
  v.resize(k);
}

struct Csr {
  std::vector<int> start, list;
  void build(std::size_t keys, const std::vector<std::pair<int, int>>& pairs) {
    start.assign(keys + 1, 0);
    for (const auto& kv : pairs) ++start[kv.first + 1];
    for (std::size_t k = 0; k < keys; ++k) start[k + 1] += start[k];
    list.resize(pairs.size());
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (const auto& [k, v] : pairs) list[fill[k]++] = v;
  }
  int size(int k) const { return start[k + 1] - start[k]; }
  const int* begin(int k) const { return list.data() + start[k]; }
  const int* end(int k) const { return list.data() + start[k + 1]; }
};

void mix(std::uint64_t& h, std::uint64_t v) {
  // splitmix64 of (h ^ v): order-dependent and well spread.
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  h = z ^ (z >> 31);
}
void mix(std::uint64_t& h, const std::string& s) {
  // FNV-1a over the bytes, then one avalanche: the strings are short names.
  std::uint64_t f = 0xcbf29ce484222325ULL ^ s.size();
  for (unsigned char ch : s) f = (f ^ ch) * 0x100000001b3ULL;
  mix(h, f);
}

// ---- the cache ----

// The transfers each step of `p` sends or receives (a transfer within one step listed twice).
Csr xfers_by_step(const CollPlan& p) {
  std::vector<std::pair<int, int>> touch;
  touch.reserve(2 * p.xfers.size());
  for (int x = 0; x < static_cast<int>(p.xfers.size()); ++x) {
    touch.emplace_back(p.xfers[x].send_step, x);
    touch.emplace_back(p.xfers[x].recv_step, x);
  }
  Csr c;
  c.build(static_cast<int>(p.steps.size()), touch);
  return c;
}

struct Entry {
  CollOp op;
  std::string algo, proto;
  int channels;
  std::vector<int> group;
  int inner, window;
  Concurrent k;
  std::uint64_t topo;
  std::shared_ptr<const CostForm> form;
};

std::uint64_t key_hash(const Collective& c, const std::string& algo, std::uint64_t topo, Concurrent k) {
  std::uint64_t h = topo;
  mix(h, static_cast<std::uint64_t>(k.copies));
  mix(h, static_cast<std::uint64_t>(k.stride));
  mix(h, static_cast<std::uint64_t>(c.op));
  mix(h, algo);
  mix(h, c.proto);
  mix(h, static_cast<std::uint64_t>(c.channels));
  mix(h, static_cast<std::uint64_t>(c.inner));
  mix(h, static_cast<std::uint64_t>(c.window));
  // The group: FNV-1a over pairs of ranks (cheap; hashed on every lookup), then one avalanche.
  std::uint64_t f = 0xcbf29ce484222325ULL ^ c.group.size();
  const std::size_t n = c.group.size();
  std::size_t i = 0;
  for (; i + 1 < n; i += 2)
    f = (f ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.group[i])) << 32 |
              static_cast<std::uint32_t>(c.group[i + 1]))) *
        0x100000001b3ULL;
  if (i < n) f = (f ^ static_cast<std::uint32_t>(c.group[i])) * 0x100000001b3ULL;
  mix(h, f);
  return h;
}

// This floor's cost-form part of a Workspace: cost forms, NCCL's view of
// groups, and a scratch collective.
struct FormCache : Workspace::Part {
  static constexpr Workspace::Slot kSlot = Workspace::kForms;
  static constexpr std::size_t kMax = 1 << 16;  // cleared when full: a sweep's working set is far smaller
  std::unordered_multimap<std::uint64_t, Entry> map;
  struct SysEntry {
    std::uint64_t topo;
    std::vector<int> group;
    std::shared_ptr<const NcclSystem> sys;
  };
  std::unordered_multimap<std::uint64_t, SysEntry> systems;
  std::uint64_t fp_topo = 0, fp = 0;  // the last topology's (Topology::id) fingerprint (shared_nccl_system)
  // Assigned, not constructed: it keeps its buffers, so the closed form's
  // lookups allocate nothing.
  Collective scratch;
  bool symmetry = true;  // FormSymmetry::on for the forms built here
};

bool matches(const Entry& e, const Collective& c, const std::string& algo, std::uint64_t topo, Concurrent k) {
  return e.k.copies == k.copies && e.k.stride == k.stride && e.op == c.op && e.inner == c.inner &&
         e.window == c.window && e.topo == topo && e.algo == algo && e.proto == c.proto && e.channels == c.channels &&
         e.group == c.group;
}

std::shared_ptr<const CostForm> cached_form(const Collective& c, const Topology& topo, std::uint64_t tkey, Concurrent k,
                                            Workspace& ws) {
  if (c.op == CollOp::alltoallv) return std::make_shared<const CostForm>(make_cost_form(c, topo, k, ws));
  const std::string algo = c.algo.empty() ? default_algorithm(c.op) : c.algo;
  const std::uint64_t h = key_hash(c, algo, tkey, k);
  {
    FormCache& C = ws.get<FormCache>();
    auto [a, b] = C.map.equal_range(h);
    for (auto it = a; it != b; ++it)
      if (matches(it->second, c, algo, tkey, k)) return it->second.form;
  }
  auto form = std::make_shared<const CostForm>(make_cost_form(c, topo, k, ws));
  FormCache& C = ws.get<FormCache>();
  if (C.map.size() >= FormCache::kMax) C.map.clear();
  C.map.emplace(h, Entry{c.op, algo, c.proto, c.channels, c.group, c.inner, c.window, k, tkey, form});
  return form;
}

// NCCL's view of a group on a topology, cached (it costs a route lookup per member).
std::shared_ptr<const NcclSystem> cached_system(const Collective& c, const Topology& topo, std::uint64_t tkey,
                                                Workspace& ws) {
  Collective k;
  k.group = c.group;
  const std::uint64_t h = key_hash(k, "", tkey, {});
  {
    FormCache& C = ws.get<FormCache>();
    auto [a, b] = C.systems.equal_range(h);
    for (auto it = a; it != b; ++it)
      if (it->second.topo == tkey && it->second.group == c.group) return it->second.sys;
  }
  auto sys = std::make_shared<const NcclSystem>(nccl_system(c.group, topo, ws));
  FormCache& C = ws.get<FormCache>();
  if (C.systems.size() >= FormCache::kMax) C.systems.clear();
  C.systems.emplace(h, FormCache::SysEntry{tkey, c.group, sys});
  return sys;
}

// What NCCL's tuner is asked for c: the algorithm and protocol c forces
// (none: NCCL's choice); nullopt when c does not run one of NCCL's tuned algorithms.
struct NcclAsk {
  std::optional<NcclAlgo> algo;
  std::optional<NcclProto> proto;
};
std::optional<NcclAsk> nccl_ask(const Collective& c) {
  if (!nccl_tuned(c.op)) return std::nullopt;
  const std::string algo = c.algo.empty() ? default_algorithm(c.op) : c.algo;
  NcclAlgo forced{};
  const bool named = parse_nccl_algo(algo, &forced);
  if (algo != "auto" && !named) return std::nullopt;
  NcclAsk ask;
  if (named) ask.algo = forced;
  if (!c.proto.empty()) {
    NcclProto p;
    if (!parse_nccl_proto(c.proto, &p))
      throw UserError(fmt::format("collective '{}': unknown protocol '{}'; known: ll, ll128, simple", c.name, c.proto));
    ask.proto = p;
  }
  return ask;
}

// f() with c's name put before the message of a UserError it throws.
template <class F>
auto naming(const Collective& c, F&& f) {
  try {
    return f();
  } catch (const UserError& e) {
    rethrow_with(e, fmt::format("collective '{}': {}", c.name, e.what()));
  }
}

// The collective whose links' form times NCCL's choice e: c with e's algorithm, protocol and channels.
void set_choice(Collective& f, const NcclEstimate& e) {
  f.algo = to_string(e.algo);
  f.proto = to_string(e.proto);
  f.channels = e.channels;
}

// Seconds for NCCL's choice e at n bytes: the model's latency plus the slower
// of the links' time (`links`, from a form built without latency) and the model's bandwidth.
double nccl_seconds(const NcclEstimate& e, double links, double n) {
  return e.run_lat_us() * 1e-6 + std::max(links, n / (e.run_bw() * 1e9));
}

// NCCL's pick for c at n bytes, when c runs one of NCCL's tuned algorithms.
std::optional<NcclEstimate> nccl_at(const Collective& c, const Topology& topo, std::uint64_t tkey, double n,
                                    Workspace& ws) {
  const auto ask = nccl_ask(c);
  if (!ask) return std::nullopt;
  return naming(c,
                [&] { return nccl_choose(c.op, *cached_system(c, topo, tkey, ws), n, ask->algo, ask->proto, c.channels); });
}

// Seconds for c at n bytes: NCCL's algorithms as the model's latency plus the
// slower of the links' time (the form, built without latency) and the model's
// bandwidth; every other algorithm from its form.
double timed(const Collective& c, const Topology& topo, std::uint64_t tkey, double n, Concurrent k, Workspace& ws) {
  if (auto e = nccl_at(c, topo, tkey, n, ws)) {
    Collective& f = ws.get<FormCache>().scratch;
    f = c;
    set_choice(f, *e);
    return nccl_seconds(*e, cached_form(f, topo, tkey, k, ws)->time_s(n), n);
  }
  if (c.op == CollOp::alltoallv) return cached_form(c, topo, tkey, k, ws)->time_s(1.0);
  return cached_form(c, topo, tkey, k, ws)->time_s(n);
}

// make_cost_form on the representatives of a server shift (FormSymmetry):
// fills f and returns true when a shift is proved, else returns false with f
// untouched. `plan` is the plan make_cost_form times (latencies already
// zeroed for NCCL's algorithms), `depth` its steps' depths.
//
// Why it gives the general path's form bit for bit. The shift s maps every
// member m to pi[m], every step to the step at its place among pi[m]'s
// (plan_maps_onto), every transfer to one of the same bytes and latency, and
// (shift_route_ok, or the route table's check in node_shift) every route to
// the image of its links, each of the same bandwidth. Its powers form a
// group of order K that moves every rank, so every orbit of transfers has K
// transfers, exactly one of them sent from the first R = s.gpus ranks.
//  - Loads. A round's load on link l is the same as on its image, so on an
//    orbit O of links each carries 1/|O| of the orbit's total, which is K
//    times what the representatives' transfers put on O: load(l) = sum over
//    those transfers' links l' in O of bytes x K/|O| (NodeShift::weight).
//    Summed as integers; every partial sum of the general path's doubles is
//    an integer no larger, so below 2^53 both are exact and equal.
//  - Lines. A transfer's line is its latency and max over its links of
//    load / bandwidth: equal for a transfer and its images.
//  - The step DAG. By induction in topological order, a step's ready and
//    complete envelopes equal its image's: each is prune() of the same
//    multiset of lines (its dependencies' and transfers' images), and prune
//    depends on the multiset only (it sorts first; equal lines are
//    indistinguishable). So every step takes its representative's (the step
//    at its place among its member's representative's), and only the
//    representatives' steps are walked, in an order where each comes after
//    the representatives it reads (the DAG's levels are kept by the shift,
//    so that order exists; were it not found, the general path runs).
//  - The envelope. The sinks' envelopes are their representatives', each K
//    times; prune of a multiset with copies equals prune of one of each (a
//    copy of the last line kept pops it and ends where it ended).
//
// It works on the plan's representatives' part (compact_plan, or make_rep_plan
// built without the full plan): their steps, and the transfers they send,
// each received by its receiving step's representative. The transfers a
// representative step receives from another member are, one to one, images
// of the part's transfers that name it as receiving step (shift the transfer
// back until its sender is a representative; the shifts move every rank, so
// exactly one power does), with the same line and the same representatives
// at both ends: so each step reads the same multiset of lines and envelopes
// as in the full plan.
//
// Concurrent copies (`copies`: each copy's collective and its representatives'
// part under the same shift, each copy's group mapped onto itself): their
// transfers of a round load the links as in the general path, which adds
// each copy's transfers of the same depth; on a link's orbit, a copy's load
// is its representatives' times the weight, as for the collective itself.
using RepCopy = std::pair<const Collective*, const CollPlan*>;
// Depth of each step of a representatives' part (its dependencies are its own
// member's, earlier); false if one is not earlier.
bool rep_depths(const CollPlan& q, std::vector<int>& depth) {
  const int Sr = static_cast<int>(q.steps.size());
  depth.assign(Sr, 0);
  for (int s = 0; s < Sr; ++s)
    for (int d : q.steps[s].deps)
      if (d >= 0) {
        if (d >= s) return false;
        depth[s] = std::max(depth[s], depth[d] + 1);
      }
  return true;
}
bool form_on_reps(const Collective& c, const CollPlan& q, NodeShift& sh, double scale, const Topology& topo,
                  Workspace& ws, CostForm& f, const std::vector<RepCopy>& copies = {}) {
  const int Sr = static_cast<int>(q.steps.size()), Xq = static_cast<int>(q.xfers.size());
  if (Sr == 0 || Xq == 0) return false;
  std::vector<int> depth;
  if (!rep_depths(q, depth)) return false;
  // Each copy's transfers by the depth of their sending step.
  std::vector<std::vector<std::vector<int>>> copy_at(copies.size());
  for (std::size_t j = 0; j < copies.size(); ++j) {
    const CollPlan& e = *copies[j].second;
    std::vector<int> dj;
    if (!rep_depths(e, dj)) return false;
    for (std::size_t x = 0; x < e.xfers.size(); ++x) {
      const int d = dj[e.xfers[x].send_step];
      if (static_cast<int>(copy_at[j].size()) <= d) copy_at[j].resize(d + 1);
      copy_at[j][d].push_back(static_cast<int>(x));
    }
  }
  // A transfer between two steps of the full plan (not one step to itself).
  auto two_steps = [](const CollXfer& xf) { return xf.src != xf.dst || xf.send_step != xf.recv_step; };
  // The transfers each representative step sends or receives (CSR).
  const Csr step_need = xfers_by_step(q);
  // Routes: the representatives' checked against the shift.
  Route scratch;
  auto routes_follow = [&](const Collective& col, const CollPlan& plan) {
    if (sh.all_routes_ok) return true;
    for (const CollXfer& xf : plan.xfers) {
      if (xf.route >= 0) continue;
      const int a = col.group[xf.src], b = col.group[xf.dst];
      auto ok = [&](int u, int v) {
        const std::uint64_t key = static_cast<std::uint64_t>(static_cast<std::uint32_t>(u)) << 32 | static_cast<std::uint32_t>(v);
        if (sh.pairs_ok.count(key)) return true;
        if (!topo.shift_route_ok(u, v, sh, ws)) return false;
        sh.pairs_ok.insert(key);
        return true;
      };
      if (xf.via >= 0 ? !ok(a, xf.via) || !ok(xf.via, b) : !ok(a, b)) return false;
    }
    return true;
  };
  if (!routes_follow(c, q)) return false;
  for (const auto& [cj, pj] : copies)
    if (!routes_follow(*cj, *pj)) return false;
  // Rounds: transfers by the depth of the sending step (a counting sort); per
  // round the representatives' loads on link orbits, then each transfer's line.
  int max_depth = 0;
  for (const CollXfer& xf : q.xfers) max_depth = std::max(max_depth, depth[xf.send_step]);
  std::vector<int> order(Xq);
  {
    std::vector<int> start(static_cast<std::size_t>(max_depth) + 2, 0);
    for (const CollXfer& xf : q.xfers) ++start[depth[xf.send_step] + 1];
    for (int dd = 0; dd <= max_depth; ++dd) start[dd + 1] += start[dd];
    for (int i = 0; i < Xq; ++i) order[start[depth[q.xfers[i].send_step]]++] = i;
  }
  constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
  std::vector<std::uint64_t> load(topo.num_links(), 0);
  std::vector<int> touched;
  std::vector<CostLine> line(Xq);
  int rounds = 0;
  for (int lo = 0; lo < Xq;) {
    const int d = depth[q.xfers[order[lo]].send_step];
    int hi = lo;
    while (hi < Xq && depth[q.xfers[order[hi]].send_step] == d) ++hi;
    ++rounds;
    auto add = [&](const Collective& col, const CollPlan& plan, const CollXfer& xf) {
      if (xf.bytes > kExact) return false;
      const Route& r = xfer_route(plan, xf, col.group, topo, scratch, ws);
      for (int l : r.links) {
        const std::uint64_t w = static_cast<std::uint64_t>(sh.weight[l]);
        std::uint64_t& v = load[sh.rep[l]];
        if (xf.bytes != 0 && w > (kExact - v) / xf.bytes) return false;
        if (v == 0) touched.push_back(sh.rep[l]);
        v += xf.bytes * w;
      }
      return true;
    };
    for (int i = lo; i < hi; ++i)
      if (!add(c, q, q.xfers[order[i]])) return false;
    for (std::size_t j = 0; j < copies.size(); ++j)
      if (d < static_cast<int>(copy_at[j].size()))
        for (int x : copy_at[j][d])
          if (!add(*copies[j].first, *copies[j].second, copies[j].second->xfers[x])) return false;
    for (int i = lo; i < hi; ++i) {
      const CollXfer& xf = q.xfers[order[i]];
      const Route& r = xfer_route(q, xf, c.group, topo, scratch, ws);
      double t = 0.0;
      for (int l : r.links)
        t = std::max(t, static_cast<double>(load[sh.rep[l]]) * (1.0 / static_cast<double>(topo.link(l).bandwidth)));
      line[order[i]] = {r.latency.to_seconds(), t / scale};
    }
    for (int l : touched) load[l] = 0;
    touched.clear();
    lo = hi;
  }
  // The representatives' DAG: node 2i is step i ready, 2i+1 complete. An
  // edge from each node whose envelope another's reads.
  const int V = 2 * Sr;
  std::vector<std::pair<int, int>> succ;
  for (int i = 0; i < Sr; ++i) {
    for (int d : q.steps[i].deps)
      if (d >= 0) succ.emplace_back(2 * d + 1, 2 * i);
    succ.emplace_back(2 * i, 2 * i + 1);
    for (const int* it = step_need.begin(i); it != step_need.end(i); ++it) {
      const CollXfer& xf = q.xfers[*it];
      succ.emplace_back(2 * xf.send_step, 2 * i + 1);
      if (two_steps(xf)) succ.emplace_back(2 * xf.recv_step, 2 * i + 1);
    }
  }
  Csr out;
  out.build(V, succ);
  std::vector<int> indeg(V, 0);
  for (const auto& e : succ) ++indeg[e.second];
  succ = {};
  std::vector<int> queue;
  queue.reserve(V);
  for (int v = 0; v < V; ++v)
    if (indeg[v] == 0) queue.push_back(v);
  std::vector<Envelope> val(V);
  Envelope tmp;
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    const int v = queue[qi];
    const int i = v / 2;
    tmp.clear();
    if (v % 2 == 0) {
      for (int d : q.steps[i].deps)
        if (d >= 0) {
          const Envelope& e = val[2 * d + 1];
          tmp.insert(tmp.end(), e.begin(), e.end());
        }
      if (tmp.empty()) tmp.push_back({0.0, 0.0});
    } else {
      tmp = val[2 * i];
      for (const int* it = step_need.begin(i); it != step_need.end(i); ++it) {
        const CollXfer& xf = q.xfers[*it];
        const std::size_t at = tmp.size();
        const Envelope& a = val[2 * xf.send_step];
        tmp.insert(tmp.end(), a.begin(), a.end());
        if (two_steps(xf)) {
          const Envelope& b = val[2 * xf.recv_step];
          tmp.insert(tmp.end(), b.begin(), b.end());
        }
        const CostLine& ln = line[*it];
        for (std::size_t k = at; k < tmp.size(); ++k) tmp[k].alpha += ln.alpha, tmp[k].beta += ln.beta;
      }
    }
    prune(tmp);
    val[v] = tmp;
    for (const int* it = out.begin(v); it != out.end(v); ++it)
      if (--indeg[*it] == 0) queue.push_back(*it);
  }
  if (static_cast<int>(queue.size()) != V) return false;
  // Sinks: steps no step depends on (a step and its images alike).
  std::vector<char> sink(Sr, 1);
  for (const CollStep& st : q.steps)
    for (int d : st.deps)
      if (d >= 0) sink[d] = 0;
  f.envelope.clear();
  for (int i = 0; i < Sr; ++i)
    if (sink[i]) f.envelope.insert(f.envelope.end(), val[2 * i + 1].begin(), val[2 * i + 1].end());
  prune(f.envelope);
  f.rounds = rounds;
  f.symmetry = sh.order;
  return true;
}

// The smallest server shift that maps c's group onto itself (as a set; null
// if none, or a rank repeats or lies outside the topology).
std::optional<NodeShift> group_shift(const Collective& c, const Topology& topo, std::vector<int>& pi,
                                     const std::function<bool(const NodeShift&, const std::vector<int>&)>& accept) {
  const int P = topo.num_gpus(), N = topo.num_nodes(), M = static_cast<int>(c.group.size());
  if (N < 2) return std::nullopt;
  std::vector<int> member_of(P, -1);
  for (int m = 0; m < M; ++m) {
    const int r = c.group[m];
    if (r < 0 || r >= P || member_of[r] >= 0) return std::nullopt;
    member_of[r] = m;
  }
  pi.resize(M);
  for (int nodes = 1; nodes < N; ++nodes) {
    if (N % nodes != 0) continue;
    const int R = nodes * topo.gpus_per_node();
    bool closed = true;
    for (int m = 0; m < M && closed; ++m) {
      pi[m] = member_of[(c.group[m] + R) % P];
      closed = pi[m] >= 0;
    }
    if (!closed) continue;
    std::optional<NodeShift> s = topo.node_shift(nodes);
    if (s && accept(*s, pi)) return s;
  }
  return std::nullopt;
}

// make_cost_form on the representatives from the full plan: the smallest
// shift that maps the group and the plan onto themselves (plan_maps_onto, the
// engine's check 4), then the plan's representatives' part.
bool symmetric_form(const Collective& c, const CollPlan& plan, double scale, const Topology& topo, Workspace& ws,
                    CostForm& f) {
  if (plan.steps.empty() || plan.xfers.empty()) return false;
  const int P = topo.num_gpus();
  std::vector<int> pi;
  std::optional<NodeShift> sh = group_shift(
      c, topo, pi, [&](const NodeShift& s, const std::vector<int>& m) { return plan_maps_onto(plan, plan, m, s, P); });
  if (!sh) return false;
  return form_on_reps(c, compact_plan(plan, c.group, sh->gpus, P), *sh, scale, topo, ws, f);
}

// The same without the full plan (make_rep_plan), where its builder's
// symmetry is proved on the inputs at the smallest shift that maps the group
// onto itself. False (f untouched) where not, or where the full plan has
// fewer than min_transfers transfers: the caller then takes the full plan.
// (Where make_rep_plan proves a shift, plan_maps_onto holds for it: both
// paths take the same shift.)
//
// Concurrent copies: each copy's group must be mapped onto itself by that
// shift and its part built the same way (else false); they load the links
// (form_on_reps), the form times the first.
bool symmetric_form_direct(const Collective& ref, double scale, std::size_t min_transfers, Concurrent conc,
                           const Topology& topo, Workspace& ws, CostForm& f) {
  std::vector<int> pi;
  bool first = true;
  std::optional<CollPlan> q;
  std::optional<NodeShift> sh = group_shift(ref, topo, pi, [&](const NodeShift& s, const std::vector<int>&) {
    if (!first) return false;
    first = false;
    q = make_rep_plan(ref, topo, s, ws);
    return q.has_value();
  });
  if (!sh || q->barrier) return false;
  const std::size_t X = q->xfers.size() * static_cast<std::size_t>(sh->order);
  if (X < min_transfers) return false;
  std::vector<Collective> copy_c;
  std::vector<CollPlan> copy_q;
  copy_c.reserve(conc.copies);
  copy_q.reserve(conc.copies);
  for (int j = 1; j < conc.copies; ++j) {
    Collective cj = ref;
    for (int& r : cj.group) r += j * conc.stride;
    std::optional<CollPlan> qj = make_rep_plan(cj, topo, *sh, ws);  // its own group closed (a rotation)
    if (!qj || qj->xfers.size() != q->xfers.size()) return false;
    copy_c.push_back(std::move(cj));
    copy_q.push_back(std::move(*qj));
  }
  std::vector<RepCopy> copies;
  for (std::size_t j = 0; j < copy_c.size(); ++j) copies.emplace_back(&copy_c[j], &copy_q[j]);
  if (!form_on_reps(ref, *q, *sh, scale, topo, ws, f, copies)) return false;
  f.transfers = X;
  return true;
}

}  // namespace

CostForm make_cost_form(const Collective& c, const Topology& topo, Concurrent conc) {
  Workspace ws;
  return make_cost_form(c, topo, conc, ws);
}

void set_form_symmetry(Workspace& ws, bool on) { ws.get<FormCache>().symmetry = on; }

CostForm make_cost_form(const Collective& c, const Topology& topo, Concurrent conc, Workspace& ws) {
  return make_cost_form(c, topo, conc, ws, FormSymmetry{ws.get<FormCache>().symmetry});
}

CostForm make_cost_form(const Collective& c, const Topology& topo, Concurrent conc, Workspace& ws, FormSymmetry sym) {
  for (int j = 1; j < conc.copies; ++j)
    for (int r : c.group)
      if (r + j * conc.stride < 0 || r + j * conc.stride >= topo.num_gpus())
        throw UserError(fmt::format("collective '{}': concurrent copy {} (stride {}) names rank {}, outside the {} GPUs",
                                    c.name, j, conc.stride, r + j * conc.stride, topo.num_gpus()));
  CostForm f;
  const int p = static_cast<int>(c.group.size());
  if (p < 2) {
    f.trivial = true;
    return f;
  }
  double scale = 1.0;
  if (sym.on && c.op != CollOp::alltoallv) {
    Collective ref = c;
    ref.bytes = kRefBytes;
    if (symmetric_form_direct(ref, static_cast<double>(kRefBytes), sym.min_transfers, conc, topo, ws, f)) return f;
  }
  CollPlan plan;
  if (c.op == CollOp::alltoallv) {
    plan = make_plan(c, topo, ws);
  } else {
    Collective ref = c;
    ref.bytes = kRefBytes;
    scale = static_cast<double>(kRefBytes);
    plan = make_plan(ref, topo, ws);
  }
  // NCCL's algorithms: the form holds the links' time only; the callers add
  // the model's latency and bandwidth floor at the actual size.
  if (plan.barrier)
    for (Time& l : plan.latencies) l = Time{};
  // The concurrent copies run the same algorithm on shifted groups.
  std::vector<Collective> copy_c;
  std::vector<CollPlan> copy_plan;
  for (int j = 1; j < conc.copies; ++j) {
    Collective cj = c;
    if (c.op != CollOp::alltoallv) cj.bytes = kRefBytes;
    for (int& r : cj.group) r += j * conc.stride;
    copy_plan.push_back(make_plan(cj, topo, ws));
    if (copy_plan.back().xfers.size() != plan.xfers.size())
      throw InternalError(fmt::format("collective '{}': concurrent copy {} has another plan", c.name, j));
    copy_c.push_back(std::move(cj));
  }
  const int S = static_cast<int>(plan.steps.size());
  const int X = static_cast<int>(plan.xfers.size());
  f.transfers = plan.xfers.size();
  if (X == 0) {
    f.trivial = true;
    return f;
  }

  // Depth of every step in the DAG (deps precede their steps in every plan).
  std::vector<int> depth(S, 0);
  for (int s = 0; s < S; ++s)
    for (int d : plan.steps[s].deps)
      if (d >= 0) {
        if (d >= s) throw InternalError(fmt::format("collective '{}': step {} depends on later step {}", c.name, s, d));
        depth[s] = std::max(depth[s], depth[d] + 1);
      }

  if (sym.on && conc.copies == 1 && c.op != CollOp::alltoallv && plan.xfers.size() >= sym.min_transfers &&
      symmetric_form(c, plan, scale, topo, ws, f))
    return f;

  // Routes (copied: above kRouteTableGpus the workspace reuses one buffer).
  std::vector<int> arena, off(X + 1, 0);
  std::vector<double> lat(X);
  Route scratch;
  for (int x = 0; x < X; ++x) {
    const CollXfer& xf = plan.xfers[x];
    const Route& r = xfer_route(plan, xf, c.group, topo, scratch, ws);
    lat[x] = r.latency.to_seconds();
    arena.insert(arena.end(), r.links.begin(), r.links.end());
    off[x + 1] = static_cast<int>(arena.size());
  }

  // Transfers by round; each round's link loads give each transfer's slope.
  // By the depth of the sending step, ties in transfer order: a counting
  // sort (the order std::stable_sort gives, without its n log n on the
  // million transfers of a 1024-GPU AlltoAll).
  std::vector<int> order(X);
  {
    int max_depth = 0;
    for (int dd : depth) max_depth = std::max(max_depth, dd);
    std::vector<int> start(static_cast<std::size_t>(max_depth) + 2, 0);
    for (int x = 0; x < X; ++x) ++start[depth[plan.xfers[x].send_step] + 1];
    for (int dd = 0; dd <= max_depth; ++dd) start[dd + 1] += start[dd];
    for (int x = 0; x < X; ++x) order[start[depth[plan.xfers[x].send_step]]++] = x;
  }
  std::vector<double> load(topo.num_links(), 0.0), inv_bw(topo.num_links());
  for (int l = 0; l < topo.num_links(); ++l) inv_bw[l] = 1.0 / static_cast<double>(topo.link(l).bandwidth);
  std::vector<CostLine> line(X);
  std::vector<int> touched;
  for (int lo = 0; lo < X;) {
    const int d = depth[plan.xfers[order[lo]].send_step];
    int hi = lo;
    while (hi < X && depth[plan.xfers[order[hi]].send_step] == d) ++hi;
    ++f.rounds;
    for (int i = lo; i < hi; ++i) {
      const int x = order[i];
      for (int k = off[x]; k < off[x + 1]; ++k) load[arena[k]] += static_cast<double>(plan.xfers[x].bytes);
    }
    // The concurrent copies' transfers of this round load their own routes.
    for (int j = 1; j < conc.copies; ++j)
      for (int i = lo; i < hi; ++i) {
        const CollPlan& pj = copy_plan[j - 1];
        const Route& r = xfer_route(pj, pj.xfers[order[i]], copy_c[j - 1].group, topo, scratch, ws);
        for (int l : r.links) {
          load[l] += static_cast<double>(pj.xfers[order[i]].bytes);
          touched.push_back(l);
        }
      }
    for (int i = lo; i < hi; ++i) {
      const int x = order[i];
      double t = 0.0;
      for (int k = off[x]; k < off[x + 1]; ++k) t = std::max(t, load[arena[k]] * inv_bw[arena[k]]);
      line[x] = {lat[x], t / scale};
    }
    for (int i = lo; i < hi; ++i)
      for (int k = off[order[i]]; k < off[order[i] + 1]; ++k) load[arena[k]] = 0.0;
    for (int l : touched) load[l] = 0.0;
    touched.clear();
    lo = hi;
  }

  // Critical path over nodes R(s) = 2s (ready) and F(s) = 2s+1 (complete).
  std::vector<std::pair<int, int>> succ;
  const Csr step_xfers = xfers_by_step(plan);
  const int V = 2 * S;
  for (int s = 0; s < S; ++s) {
    for (int d : plan.steps[s].deps)
      if (d >= 0) succ.emplace_back(2 * d + 1, 2 * s);
    succ.emplace_back(2 * s, 2 * s + 1);
  }
  for (int x = 0; x < X; ++x) {
    const CollXfer& xf = plan.xfers[x];
    succ.emplace_back(2 * xf.send_step, 2 * xf.recv_step + 1);
    succ.emplace_back(2 * xf.recv_step, 2 * xf.send_step + 1);
  }
  Csr out;
  out.build(V, succ);
  std::vector<int> indeg(V, 0);
  for (const auto& e : succ) ++indeg[e.second];
  std::vector<int> queue;
  queue.reserve(V);
  for (int v = 0; v < V; ++v)
    if (indeg[v] == 0) queue.push_back(v);
  std::vector<Envelope> val(V);
  Envelope tmp;
  std::vector<char> sink(S, 1);
  for (int s = 0; s < S; ++s)
    for (int d : plan.steps[s].deps)
      if (d >= 0) sink[d] = 0;
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    const int v = queue[qi];
    const int s = v / 2;
    tmp.clear();
    if (v % 2 == 0) {
      for (int d : plan.steps[s].deps)
        if (d >= 0) tmp.insert(tmp.end(), val[2 * d + 1].begin(), val[2 * d + 1].end());
      if (tmp.empty()) tmp.push_back({0.0, 0.0});
    } else {
      tmp = val[2 * s];
      for (const int* it = step_xfers.begin(s); it != step_xfers.end(s); ++it) {
        const CollXfer& xf = plan.xfers[*it];
        const std::size_t at = tmp.size();
        tmp.insert(tmp.end(), val[2 * xf.send_step].begin(), val[2 * xf.send_step].end());
        if (xf.recv_step != xf.send_step)
          tmp.insert(tmp.end(), val[2 * xf.recv_step].begin(), val[2 * xf.recv_step].end());
        for (std::size_t k = at; k < tmp.size(); ++k) tmp[k].alpha += line[*it].alpha, tmp[k].beta += line[*it].beta;
      }
    }
    prune(tmp);
    val[v] = tmp;
    for (const int* it = out.begin(v); it != out.end(v); ++it)
      if (--indeg[*it] == 0) queue.push_back(*it);
  }
  if (static_cast<int>(queue.size()) != V)
    throw InternalError(fmt::format("collective '{}': the plan's steps wait on each other in a cycle", c.name));
  for (int s = 0; s < S; ++s)
    if (sink[s]) f.envelope.insert(f.envelope.end(), val[2 * s + 1].begin(), val[2 * s + 1].end());
  prune(f.envelope);
  return f;
}

std::uint64_t topology_fingerprint(const Topology& t) {
  std::uint64_t h = 0x7061726d73696dULL;
  mix(h, t.name());
  mix(h, t.gpu_model());
  mix(h, static_cast<std::uint64_t>(t.gpus_per_node()));
  mix(h, static_cast<std::uint64_t>(t.num_gpus()));
  mix(h, static_cast<std::uint64_t>(t.num_devices()));
  mix(h, static_cast<std::uint64_t>(t.num_links()));
  mix(h, static_cast<std::uint64_t>(t.hints().nvls) << 1 | static_cast<std::uint64_t>(t.hints().amd_cpu));
  mix(h, static_cast<std::uint64_t>(t.nics_per_node()));
  mix(h, static_cast<std::uint64_t>(std::llround(t.hints().launch_us * 1e6)));
  mix(h, static_cast<std::uint64_t>(std::llround(t.hints().net_latency_us * 1e6)));
  if (t.hints().plugin_latency_us > 0) mix(h, static_cast<std::uint64_t>(std::llround(t.hints().plugin_latency_us * 1e6)));
  // The platform's NCCL settings (mixed only when set: the default keys stay as they were).
  const CollectiveHints& nh = t.hints();
  if (nh.protocols != 7 || nh.nvls_chunksize > 0 || nh.nvlstree_max_chunksize > 0 || nh.buffsize > 0) {
    mix(h, 0x4e43434c00ULL | nh.protocols);
    mix(h, static_cast<std::uint64_t>(nh.nvls_chunksize));
    mix(h, static_cast<std::uint64_t>(nh.nvlstree_max_chunksize));
    mix(h, static_cast<std::uint64_t>(nh.buffsize));
  }
  // p2p and gdr change routes, not links (mixed only when off: the default keys stay as they were).
  if (!t.hints().p2p || !t.hints().gdr)
    mix(h, 0x5032500000ULL | static_cast<std::uint64_t>(t.hints().p2p) << 1 | static_cast<std::uint64_t>(t.hints().gdr));
  // Every link: FNV-1a over 64-bit words (cheap; called per free-function
  // lookup), then one avalanche.
  std::uint64_t f = 0xcbf29ce484222325ULL;
  auto word = [&f](std::uint64_t v) { f = (f ^ v) * 0x100000001b3ULL; };
  const auto& g = t.graph();
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    const Link& l = g[*it];
    word(static_cast<std::uint64_t>(l.id) << 40 ^ static_cast<std::uint64_t>(boost::source(*it, g)) << 20 ^
         boost::target(*it, g));
    word(l.bandwidth);
    word(static_cast<std::uint64_t>(l.latency.count_ps()));
  }
  mix(h, f);
  return h;
}

namespace {
// Plans kept in a workspace (one per thread: no lock).
struct PlanEntry {
  Collective key;  // the plan's inputs (name and data bindings left empty)
  std::uint64_t topo;
  std::shared_ptr<const CollPlan> plan;
  int rep_gpus = 0;  // > 0: the representatives' part under a shift of these GPUs (shared_rep_plan)
};
struct PlanCache : Workspace::Part {
  static constexpr Workspace::Slot kSlot = Workspace::kPlans;
  std::unordered_multimap<std::uint64_t, PlanEntry> map;
  std::size_t bytes = 0;  // about what the kept plans hold
  // Cleared when full. On 128 layers of the paper grid (8 and 32 GPUs), 4 MiB
  // kept nearly every reuse 16 MiB did (instructions within 0.2 %); 1 MiB
  // gave back 1.3 % of the 8 % that sharing plans saves.
  static constexpr std::size_t kMaxBytes = std::size_t{4} << 20;
};

std::uint64_t plan_hash(const Collective& c, std::uint64_t topo) {
  std::uint64_t h = topo;
  mix(h, static_cast<std::uint64_t>(c.op));
  mix(h, c.bytes);
  mix(h, c.algo);
  mix(h, c.proto);
  mix(h, static_cast<std::uint64_t>(c.channels) << 32 ^ static_cast<std::uint32_t>(c.window));
  mix(h, static_cast<std::uint64_t>(c.inner));
  std::uint64_t f = 0xcbf29ce484222325ULL ^ c.group.size();
  for (int r : c.group) f = (f ^ static_cast<std::uint32_t>(r)) * 0x100000001b3ULL;
  for (const auto& row : c.matrix)
    for (std::uint64_t v : row) f = (f ^ v) * 0x100000001b3ULL;
  mix(h, f);
  return h;
}
bool same_plan_inputs(const Collective& a, const Collective& b) {
  return a.op == b.op && a.bytes == b.bytes && a.channels == b.channels && a.window == b.window &&
         a.inner == b.inner && a.algo == b.algo && a.proto == b.proto && a.group == b.group &&
         a.matrix == b.matrix;
}
std::size_t plan_bytes(const CollPlan& p) {
  std::size_t n = sizeof(CollPlan) + p.steps.size() * sizeof(CollStep) + p.xfers.size() * sizeof(CollXfer) +
                  p.latencies.size() * sizeof(Time) + p.choice.size();
  for (const auto& r : p.routes) n += sizeof(r) + r.size() * sizeof(int);
  return n;
}
// The plan cache's copy of what a plan depends on (same_plan_inputs compares these).
Collective plan_key(const Collective& c) {
  Collective key;
  key.op = c.op;
  key.group = c.group;
  key.bytes = c.bytes;
  key.matrix = c.matrix;
  key.algo = c.algo;
  key.proto = c.proto;
  key.channels = c.channels;
  key.window = c.window;
  key.inner = c.inner;
  return key;
}
}  // namespace

std::shared_ptr<const CollPlan> shared_plan(const Collective& c, const Topology& topo, std::uint64_t topo_key,
                                            Workspace& ws) {
  PlanCache& C = ws.get<PlanCache>();
  const std::uint64_t h = plan_hash(c, topo_key);
  auto [a, b] = C.map.equal_range(h);
  for (auto it = a; it != b; ++it)
    if (it->second.topo == topo_key && it->second.rep_gpus == 0 && same_plan_inputs(it->second.key, c))
      return it->second.plan;
  // A plan above the limit (kept alone, after a clear) is dropped before the
  // next is built, not after: two such plans (a 1024-GPU SAA's are 360 MB
  // each) are never held by the cache at once.
  if (C.bytes > PlanCache::kMaxBytes) C.map.clear(), C.bytes = 0;
  auto plan = std::make_shared<const CollPlan>(make_plan(c, topo, ws));
  const std::size_t n = plan_bytes(*plan);
  if (C.bytes + n > PlanCache::kMaxBytes) C.map.clear(), C.bytes = 0;
  C.map.emplace(h, PlanEntry{plan_key(c), topo_key, plan});
  C.bytes += n;
  return plan;
}
std::shared_ptr<const CollPlan> shared_rep_plan(const Collective& c, const Topology& topo, std::uint64_t topo_key,
                                                const NodeShift& sh, Workspace& ws) {
  PlanCache& C = ws.get<PlanCache>();
  std::uint64_t h = plan_hash(c, topo_key);
  mix(h, static_cast<std::uint64_t>(sh.gpus));
  auto [a, b] = C.map.equal_range(h);
  for (auto it = a; it != b; ++it)
    if (it->second.topo == topo_key && it->second.rep_gpus == sh.gpus && same_plan_inputs(it->second.key, c))
      return it->second.plan;
  if (C.bytes > PlanCache::kMaxBytes) C.map.clear(), C.bytes = 0;
  std::optional<CollPlan> q = make_rep_plan(c, topo, sh, ws);
  if (!q) return nullptr;
  auto plan = std::make_shared<const CollPlan>(std::move(*q));
  const std::size_t n = plan_bytes(*plan);
  if (C.bytes + n > PlanCache::kMaxBytes) C.map.clear(), C.bytes = 0;
  C.map.emplace(h, PlanEntry{plan_key(c), topo_key, plan, sh.gpus});
  C.bytes += n;
  return plan;
}
std::shared_ptr<const NcclSystem> shared_nccl_system(const std::vector<int>& group, const Topology& topo, Workspace& ws) {
  Collective k;
  k.group = group;
  FormCache& C = ws.get<FormCache>();
  if (C.fp_topo != topo.id() || topo.id() == 0) C.fp = topology_fingerprint(topo), C.fp_topo = topo.id();
  return cached_system(k, topo, C.fp, ws);
}
std::size_t plan_cache_size(Workspace& ws) { return ws.get<PlanCache>().map.size(); }

std::shared_ptr<const CostForm> collective_cost_form(const Collective& c, const Topology& topo, Workspace& ws) {
  return cached_form(c, topo, topology_fingerprint(topo), {}, ws);
}

double collective_time_s(const Collective& c, const Topology& topo, Workspace& ws) {
  return collective_time_s(c, topo, static_cast<double>(c.bytes), ws);
}

double collective_time_s(const Collective& c, const Topology& topo, double bytes, Workspace& ws) {
  if (c.group.size() < 2) return 0.0;
  if (c.op != CollOp::alltoallv && !(bytes > 0)) return 0.0;
  return timed(c, topo, topology_fingerprint(topo), bytes, {}, ws);
}

double collective_time_s(const Collective& c, const Topology& topo, double bytes) {
  Workspace ws;
  return collective_time_s(c, topo, bytes, ws);
}

double collective_time_s(const Collective& c, const Topology& topo) {
  Workspace ws;
  return collective_time_s(c, topo, static_cast<double>(c.bytes), ws);
}

// ---- bound collectives ----

struct BoundCollective::Impl {
  Collective c;  // without bytes, matrix or data bindings
  Concurrent k;
  const Topology* topo = nullptr;
  std::uint64_t tkey = 0;
  CollectiveCosts::Shared* shared = nullptr;  // the owner's workspace, for resolution
  std::mutex mu;                     // guards resolution and `keep`
  std::atomic<bool> ready{false};    // the fields below are set (release / acquire)
  bool nccl = false;                 // NCCL's tuner decides (tuner, pair_form); else `form`
  std::optional<NcclTuner> tuner;
  std::shared_ptr<const CostForm> form;
  // The links' form of each of the tuner's pairs, built the first time the pair is chosen.
  std::array<std::atomic<const CostForm*>, NcclTuner::kMaxPairs> pair_form{};
  std::vector<std::shared_ptr<const CostForm>> keep;  // owns what pair_form points to

  // nccl_at's checks and choices, done once.
  void resolve() {
    std::lock_guard lk(mu);
    if (ready.load(std::memory_order_relaxed)) return;
    std::lock_guard wk(shared->mu);
    if (const auto ask = nccl_ask(c)) {
      naming(c, [&] {
        tuner.emplace(c.op, *cached_system(c, *topo, tkey, *shared->ws), ask->algo, ask->proto, c.channels);
      });
      nccl = true;
    }
    if (!nccl) form = cached_form(c, *topo, tkey, k, *shared->ws);
    ready.store(true, std::memory_order_release);
  }

  const CostForm& pair(int i, const NcclEstimate& e) {
    if (const CostForm* f = pair_form[i].load(std::memory_order_acquire)) return *f;
    std::lock_guard lk(mu);
    if (const CostForm* f = pair_form[i].load(std::memory_order_relaxed)) return *f;
    Collective f = c;
    set_choice(f, e);
    std::lock_guard wk(shared->mu);
    keep.push_back(cached_form(f, *topo, tkey, k, *shared->ws));
    pair_form[i].store(keep.back().get(), std::memory_order_release);
    return *keep.back();
  }
};

BoundCollective::BoundCollective(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), pair_form_(impl_->pair_form.data()) {}
BoundCollective::~BoundCollective() = default;

double BoundCollective::resolve_and_time_s(double n) const {
  Impl& m = *impl_;
  // collective_time_s's early returns, then timed()'s arithmetic.
  if (m.c.group.size() < 2 || !(n > 0)) return 0.0;
  if (!m.ready.load(std::memory_order_acquire)) {
    m.resolve();
    // From now on time_s costs the form, or NCCL's choice and its pair's
    // form, inline: the same early return for n <= 0, the same arithmetic.
    if (!m.nccl)
      form_.store(m.form.get(), std::memory_order_release);
    else
      tuner_.store(&*m.tuner, std::memory_order_release);
  }
  if (!m.nccl) return m.form->time_s(n);
  int i = 0;
  const NcclEstimate e = m.tuner->choose(n, &i);
  return nccl_seconds(e, m.pair(i, e).time_s(n), n);
}

struct CollectiveCosts::Bound {
  std::mutex mu;
  std::unordered_multimap<std::uint64_t, std::unique_ptr<BoundCollective>> map;
};

CollectiveCosts::CollectiveCosts(const Topology& topo, Workspace* ws, bool symmetry)
    : topo_(topo), key_(topology_fingerprint(topo)), shared_(std::make_unique<Shared>()), bound_(std::make_unique<Bound>()) {
  if (ws) shared_->ws = ws;
  set_form_symmetry(*shared_->ws, symmetry);
}
CollectiveCosts::~CollectiveCosts() = default;

const BoundCollective& CollectiveCosts::bound(const Collective& c, Concurrent k) const {
  if (c.op == CollOp::alltoallv)
    throw UserError(fmt::format("collective '{}': an alltoallv cannot be bound (its form depends on its matrix)", c.name));
  std::uint64_t h = key_hash(c, c.algo, key_, k);
  mix(h, c.name);
  std::lock_guard lk(bound_->mu);
  auto [a, b] = bound_->map.equal_range(h);
  for (auto it = a; it != b; ++it) {
    const Collective& e = it->second->impl_->c;
    const Concurrent& ek = it->second->impl_->k;
    if (ek.copies == k.copies && ek.stride == k.stride && e.op == c.op && e.inner == c.inner &&
        e.window == c.window && e.algo == c.algo && e.proto == c.proto && e.channels == c.channels &&
        e.group == c.group && e.name == c.name)
      return *it->second;
  }
  auto impl = std::make_unique<BoundCollective::Impl>();
  impl->c.name = c.name;
  impl->c.op = c.op;
  impl->c.group = c.group;
  impl->c.algo = c.algo;
  impl->c.proto = c.proto;
  impl->c.channels = c.channels;
  impl->c.window = c.window;
  impl->c.inner = c.inner;
  impl->k = k;
  impl->topo = &topo_;
  impl->tkey = key_;
  impl->shared = shared_.get();
  auto it = bound_->map.emplace(h, std::unique_ptr<BoundCollective>(new BoundCollective(std::move(impl))));
  return *it->second;
}

double collective_time_s(const Collective& c, const Topology& topo, double bytes, Concurrent k, Workspace& ws) {
  if (c.group.size() < 2) return 0.0;
  if (c.op != CollOp::alltoallv && !(bytes > 0)) return 0.0;
  return timed(c, topo, topology_fingerprint(topo), bytes, k, ws);
}

std::size_t collective_cost_cache_size(Workspace& ws) { return ws.get<FormCache>().map.size(); }

}  // namespace parmsim
