#include "sim/coll/collective_plan.hpp"

#include <fmt/format.h>

#include <functional>
#include <cmath>
#include <map>
#include <optional>

#include "sim/coll/collective_cost.hpp"
#include "sim/coll/nccl_model.hpp"
#include "sim/graph/algorithms.hpp"
#include "sim/core/error.hpp"

namespace parmsim {

std::string default_algorithm(CollOp op) {
  return op == CollOp::saa ? "released" : "auto";
}

RouteView xfer_route_view(const CollPlan& plan, const CollXfer& x, const std::vector<int>& group, const Topology& topo,
                          Route& scratch, Workspace& ws) {
  RouteView v;
  if (x.route >= 0) {
    const std::vector<int>& links = plan.routes[x.route];
    v.links = links;
    v.bottleneck = UINT64_MAX;
    for (int l : links) {
      v.latency += topo.link(l).latency;
      v.bottleneck = std::min(v.bottleneck, topo.link(l).bandwidth);
    }
  } else if (x.via >= 0) {
    // Copied before the second lookup: on a large topology the routes come
    // from the workspace's small cache, where one lookup may evict the other.
    const Route& a = topo.route(group[x.src], x.via, ws);
    scratch.links = a.links;
    const Time latency = a.latency;
    const std::uint64_t bottleneck = a.bottleneck;
    const Route& b = topo.route(x.via, group[x.dst], ws);
    scratch.links.insert(scratch.links.end(), b.links.begin(), b.links.end());
    v = RouteView(scratch.links, latency + b.latency, std::min(bottleneck, b.bottleneck));
  } else {
    v = topo.route(group[x.src], group[x.dst], ws);
  }
  if (x.lat >= 0) v.latency = plan.latencies[x.lat];
  return v;
}

const Route& xfer_route(const CollPlan& plan, const CollXfer& x, const std::vector<int>& group, const Topology& topo,
                        Route& scratch, Workspace& ws) {
  if (x.route < 0 && x.via < 0 && x.lat < 0) return topo.route(group[x.src], group[x.dst], ws);  // the topology's own
  const RouteView v = xfer_route_view(plan, x, group, topo, scratch, ws);
  if (v.links.data() != scratch.links.data()) scratch.links.assign(v.links.begin(), v.links.end());
  scratch.latency = v.latency;
  scratch.bottleneck = v.bottleneck;
  return scratch;
}

// (the header says what is compared; the engine's symmetry and the cost forms' use it)
bool plan_maps_onto(const CollPlan& pa, const CollPlan& pb, const std::vector<int>& pi, const NodeShift& sh, int P) {
  if (pa.steps.size() != pb.steps.size() || pa.xfers.size() != pb.xfers.size() || pa.barrier != pb.barrier ||
      pa.min_duration != pb.min_duration)
    return false;
  const int M = static_cast<int>(pi.size());
  for (int m : pi)
    if (m < 0 || m >= M) return false;
  // Each plan's steps by member, in order.
  auto by_member = [M](const CollPlan& p, std::vector<int>& start, std::vector<int>& list) {
    start.assign(M + 1, 0);
    for (const CollStep& st : p.steps) {
      if (st.member < 0 || st.member >= M) return false;
      ++start[st.member + 1];
    }
    for (int m = 0; m < M; ++m) start[m + 1] += start[m];
    list.resize(p.steps.size());
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < p.steps.size(); ++i) list[fill[p.steps[i].member]++] = static_cast<int>(i);
    return true;
  };
  std::vector<int> as, al, bs_own, bl_own;
  if (!by_member(pa, as, al)) return false;
  // A plan against itself (a collective its shift maps onto itself) is listed once.
  const bool self = &pa == &pb;
  if (!self && !by_member(pb, bs_own, bl_own)) return false;
  const std::vector<int>& bs = self ? as : bs_own;
  const std::vector<int>& bl = self ? al : bl_own;
  std::vector<int> sm(pa.steps.size(), -1);
  for (int m = 0; m < M; ++m) {
    if (as[m + 1] - as[m] != bs[pi[m] + 1] - bs[pi[m]]) return false;
    for (int i = 0; i < as[m + 1] - as[m]; ++i) sm[al[as[m] + i]] = bl[bs[pi[m]] + i];
  }
  for (std::size_t st = 0; st < pa.steps.size(); ++st) {
    const CollStep &x = pa.steps[st], &y = pb.steps[sm[st]];
    for (int k = 0; k < 2; ++k) {
      if ((x.deps[k] < 0) != (y.deps[k] < 0)) return false;
      if (x.deps[k] < 0) continue;
      if (pa.steps[x.deps[k]].member != x.member || sm[x.deps[k]] != y.deps[k]) return false;
    }
  }
  // b's transfers by sending step.
  std::vector<int> start(pb.steps.size() + 1, 0), list(pb.xfers.size());
  for (const CollXfer& y : pb.xfers) ++start[y.send_step + 1];
  for (std::size_t i = 0; i < pb.steps.size(); ++i) start[i + 1] += start[i];
  {
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < pb.xfers.size(); ++i) list[fill[pb.xfers[i].send_step]++] = static_cast<int>(i);
  }
  // Transfers between the same two steps (NVLS's up and down) pair in plan order.
  std::vector<char> taken(pb.xfers.size(), 0);
  for (const CollXfer& x : pa.xfers) {
    const int s2 = sm[x.send_step], r2 = sm[x.recv_step];
    const CollXfer* y = nullptr;
    for (int i = start[s2]; i < start[s2 + 1] && !y; ++i)
      if (!taken[list[i]] && pb.xfers[list[i]].recv_step == r2) y = &pb.xfers[list[i]], taken[list[i]] = 1;
    if (!y || y->src != pi[x.src] || y->dst != pi[x.dst] || y->bytes != x.bytes || y->moved != x.moved) return false;
    if ((x.lat < 0) != (y->lat < 0) || (x.lat >= 0 && pa.latencies[x.lat] != pb.latencies[y->lat])) return false;
    if ((x.via < 0) != (y->via < 0) || (x.via >= 0 && y->via != sh.shift_gpu(x.via, P))) return false;
    if ((x.route < 0) != (y->route < 0)) return false;
    if (x.route >= 0) {
      const auto &ra = pa.routes[x.route], &rb = pb.routes[y->route];
      if (ra.size() != rb.size()) return false;
      for (std::size_t i = 0; i < ra.size(); ++i)
        if (sh.link[ra[i]] != rb[i]) return false;
    }
  }
  return true;
}

// (the header says what is kept; the argument that the engine and the cost
// forms read nothing else is at Engine::compact_plan and symmetric_form)
CollPlan compact_plan(const CollPlan& p, const std::vector<int>& group, int R, int P) {
  const int M = static_cast<int>(group.size()), S = static_cast<int>(p.steps.size());
  std::vector<int> member_of(P, -1), mrep(M), place(S), cid(S, -1), count(M, 0);
  for (int m = 0; m < M; ++m) member_of[group[m]] = m;
  for (int m = 0; m < M; ++m) mrep[m] = member_of[group[m] % R];
  CollPlan q;
  int kept = 0;
  for (int st = 0; st < S; ++st) {
    const CollStep& x = p.steps[st];
    place[st] = count[x.member]++;
    if (group[x.member] < R) cid[st] = kept++;
  }
  q.steps.reserve(kept);
  for (int st = 0; st < S; ++st) {
    if (cid[st] < 0) continue;
    CollStep y = p.steps[st];
    for (int& d : y.deps)
      if (d >= 0) d = cid[d];  // on a step of its own member (plan_maps_onto): kept
    q.steps.push_back(y);
  }
  // The compact steps of each member, by place.
  std::vector<int> start(M + 1, 0), list(q.steps.size());
  for (const CollStep& x : q.steps) ++start[x.member + 1];
  for (int m = 0; m < M; ++m) start[m + 1] += start[m];
  {
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < q.steps.size(); ++i) list[fill[q.steps[i].member]++] = static_cast<int>(i);
  }
  std::size_t sent = 0;
  for (const CollXfer& x : p.xfers) sent += group[x.src] < R;
  q.xfers.reserve(sent);
  for (const CollXfer& x : p.xfers) {
    if (group[x.src] >= R) continue;
    CollXfer y = x;
    y.send_step = cid[x.send_step];
    const int rm = mrep[p.steps[x.recv_step].member];
    y.recv_step = list[start[rm] + place[x.recv_step]];
    q.xfers.push_back(y);
  }
  q.routes = p.routes;
  q.latencies = p.latencies;
  q.barrier = p.barrier;
  q.min_duration = p.min_duration;
  q.choice = p.choice;
  return q;
}

double xfer_cap(const CollPlan& plan, const CollXfer& x) {
  if (plan.min_duration <= Time{}) return 0.0;
  return static_cast<double>(x.bytes) / plan.min_duration.to_seconds();
}

double busbw_factor(CollOp op, int p) {
  switch (op) {
    case CollOp::allreduce:
      return 2.0 * (p - 1) / p;
    case CollOp::sendrecv:
      return 1.0;
    default:
      return static_cast<double>(p - 1) / p;
  }
}

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

class Builder {
 public:
  explicit Builder(int members) : last_(members, -1) {}
  int step(int member) {
    CollStep s;
    s.member = member;
    if (last_[member] >= 0) s.add_dep(last_[member]);
    plan_.steps.push_back(std::move(s));
    return last_[member] = static_cast<int>(plan_.steps.size()) - 1;
  }
  void xfer(int src, int dst, std::uint64_t bytes, int ss, int rs) {
    if (bytes == 0 || src == dst) return;
    plan_.xfers.push_back({src, dst, bytes, ss, rs});
  }
  int last(int m) const { return last_[m]; }
  void set_last(int m, int s) { last_[m] = s; }
  // Room for a plan whose size is known (no copies as it grows: an SAA over
  // 1024 GPUs has 8.4 million transfers).
  void reserve(std::size_t steps, std::size_t xfers) {
    plan_.steps.reserve(steps);
    plan_.xfers.reserve(xfers);
  }
  CollPlan take() { return std::move(plan_); }

  // k-member ring over `ring` (member indices): `nsteps` steps of `chunk` bytes.
  void ring(const std::vector<int>& ring, int nsteps, std::uint64_t chunk) {
    const int k = static_cast<int>(ring.size());
    if (k < 2) return;
    for (int j = 0; j < nsteps; ++j) {
      std::vector<int> s(k);
      for (int i = 0; i < k; ++i) s[i] = step(ring[i]);
      for (int i = 0; i < k; ++i) xfer(ring[i], ring[(i + 1) % k], chunk, s[i], s[(i + 1) % k]);
    }
  }
  // Rounds over `ms`; round r covers peer offsets [1 + r*w, min(k-1, (r+1)*w)].
  // bytes(a, b) = bytes from position a to position b.
  void rounds(const std::vector<int>& ms, int window, const std::function<std::uint64_t(int, int)>& bytes) {
    const int k = static_cast<int>(ms.size());
    if (k < 2) return;
    const int w = window <= 0 ? k - 1 : std::min(window, k - 1);
    for (int lo = 1; lo <= k - 1; lo += w) {
      const int hi = std::min(k - 1, lo + w - 1);
      std::vector<int> s(k);
      for (int i = 0; i < k; ++i) s[i] = step(ms[i]);
      for (int i = 0; i < k; ++i)
        for (int off = lo; off <= hi; ++off) {
          const int j = (i + off) % k;
          xfer(ms[i], ms[j], bytes(i, j), s[i], s[j]);
        }
    }
  }

 private:
  CollPlan plan_;
  std::vector<int> last_;
};

// Members grouped by node, in group order; every node must hold the same count.
std::vector<std::vector<int>> by_node(const Collective& c, const Topology& topo) {
  std::map<int, std::vector<int>> m;
  for (std::size_t i = 0; i < c.group.size(); ++i) m[topo.node_of(c.group[i])].push_back(static_cast<int>(i));
  std::vector<std::vector<int>> out;
  for (auto& [node, v] : m) {
    if (!out.empty() && v.size() != out[0].size())
      throw UserError(
          fmt::format("collective '{}': hierarchical needs the same number of members on every node "
                      "(node {} has {}, another {})",
                      c.name, node, v.size(), out[0].size()));
    out.push_back(std::move(v));
  }
  return out;
}

[[noreturn]] void unsupported(const Collective& c, const std::string& algo) {
  throw UserError(fmt::format("collective '{}': algorithm '{}' does not implement {}", c.name, algo, to_string(c.op)));
}

// Members by node, nodes in order of their index, members in group order.
std::vector<std::vector<int>> members_by_node(const Collective& c, const Topology& topo) {
  std::map<int, std::vector<int>> m;
  for (std::size_t i = 0; i < c.group.size(); ++i) m[topo.node_of(c.group[i])].push_back(static_cast<int>(i));
  std::vector<std::vector<int>> out;
  for (auto& [n, v] : m) out.push_back(std::move(v));
  return out;
}

Time us_time(double us) {
  return Time::ps(std::llround(us * 1e6));
}

double proto_efficiency(NcclProto p) {
  // NCCL's model factors (tuning.cc): LL carries 8 data bytes per 16-byte
  // line (0.5), LL128 120 of 128 (modelled as 0.92), Simple all.
  return p == NcclProto::ll ? 0.5 : p == NcclProto::ll128 ? 0.92 : 1.0;
}

std::uint64_t wire(double payload, double eff) {
  return static_cast<std::uint64_t>(std::ceil(payload / eff));
}

// The member of a node (of m) that carries rail r of k: evenly spaced, so
// that with fewer NICs than GPUs each rail leaves through the NIC next to its
// member (NIC r sits by GPUs r m / k .. (r + 1) m / k - 1 on the bundled and
// generated servers, e.g. AWS p4de: GPUs 2r and 2r + 1 by EFA device r), as
// NCCL's search gives channel r the NIC closest to its GPU.
int rail_member(int r, int k, int m) {
  return static_cast<int>(static_cast<long long>(r) * m / k);
}

// The inter-node flows of NCCL's double binary tree over `nodes`: tree 0 is a
// binary tree in heap order rooted at node 0, tree 1 its mirror (node i plays
// node N-1-i), so a node interior in one tree is mostly a leaf in the other
// (src/graph/trees.cc builds the same property with a bit-reversal order).
// Each tree carries half the data up (reduce) and down (broadcast), spread
// over the first `rails` members of each node (one channel per NIC).
void tree_flows(const std::vector<std::vector<int>>& nodes, int rails, double bytes, double eff,
                const std::vector<int>& step, CollPlan& plan) {
  const int N = static_cast<int>(nodes.size());
  if (N < 2) return;
  for (int t = 0; t < 2; ++t)
    for (int i = 1; i < N; ++i) {
      int child = i, parent = (i - 1) / 2;
      if (t == 1) child = N - 1 - i, parent = N - 1 - parent;
      const auto& cv = nodes[child];
      const auto& pv = nodes[parent];
      const int m = static_cast<int>(std::min(cv.size(), pv.size()));
      const int k = std::max(1, std::min(rails, m));
      const std::uint64_t b = wire(bytes / 2 / k, eff);
      for (int r = 0; r < k; ++r) {
        const int j = rail_member(r, k, m);
        plan.xfers.push_back({cv[j], pv[j], b, step[cv[j]], step[pv[j]]});
        plan.xfers.push_back({pv[j], cv[j], b, step[pv[j]], step[cv[j]]});
      }
    }
}

// NVLS inside one node: every member sends `up` bytes to the switch and
// receives `down` bytes from it (one-link routes).
void nvls_flows(const std::vector<int>& v, const Collective& c, const Topology& topo, double up, double down,
                double eff, const std::vector<int>& step, CollPlan& plan, Workspace& ws) {
  const int m = static_cast<int>(v.size());
  if (m < 2) return;
  for (int j = 0; j < m; ++j) {
    const int a = c.group[v[j]], b = c.group[v[(j + 1) % m]];
    const int up_link = topo.route(a, b, ws).links.front();  // copied: above 256 GPUs route() reuses one buffer
    const int down_link = topo.route(b, a, ws).links.back();
    plan.routes.push_back({up_link});
    plan.xfers.push_back({v[j], v[j], wire(up, eff), step[v[j]], step[v[j]], static_cast<int>(plan.routes.size()) - 1});
    plan.routes.push_back({down_link});
    plan.xfers.push_back(
        {v[j], v[j], wire(down, eff), step[v[j]], step[v[j]], static_cast<int>(plan.routes.size()) - 1});
  }
}

CollPlan nccl_plan(const Collective& c, const Topology& topo, const NcclSystem& sys, const NcclEstimate& e,
                   Workspace& ws) {
  CollPlan plan;
  const int p = static_cast<int>(c.group.size());
  std::vector<int> step(p);
  for (int m = 0; m < p; ++m) {
    CollStep st;
    st.member = m;
    plan.steps.push_back(st);
    step[m] = m;
  }
  plan.barrier = true;
  plan.latencies.push_back(us_time(e.run_lat_us()));
  const double S = static_cast<double>(c.bytes);
  plan.min_duration = duration_for_rate(S, e.run_bw() * 1e9);
  plan.choice = e.label();
  const double eff = proto_efficiency(e.proto);
  const auto nodes = members_by_node(c, topo);
  const int N = static_cast<int>(nodes.size());
  const int rails = std::max(1, std::min(std::max(1, sys.nics), e.channels));
  const bool ar = c.op == CollOp::allreduce;
  switch (e.algo) {
    case NcclAlgo::ring: {
      const int nsteps = ar ? 2 * (p - 1) : p - 1;
      const double B = nsteps * S / p;  // payload each member sends over the whole collective
      // Without peer-to-peer the ring's edges inside a node are NCCL's SHM
      // transport: the sender's kernel writes into host memory, the
      // receiver's kernel reads it back over PCIe (shm.cc, buffers on the
      // receiver's side, no copy engine by default). One loop of the ring
      // kernel runs its steps in program order in the same threads (NVIDIA/nccl
      // v2.21.5 src/device/all_reduce.h runRing: send, 2p-3 receive-and-send
      // steps, receive; all_gather.h: send, p-2, receive), so each chunk takes
      // nsteps + 1 step times where a full-duplex path takes nsteps: the first
      // send only writes (the PCIe path's read direction idle) and the last
      // receive only reads (its write direction idle). The intra-node flows
      // hold their links for (nsteps + 1) / nsteps of their bytes (`moved` keeps
      // what they send; docs/collectives.md, section 5, "The SHM transport's
      // program order").
      const double shm = topo.hints().p2p ? 1.0 : static_cast<double>(nsteps + 1) / nsteps;
      for (int i = 0; i < N; ++i) {
        const auto& v = nodes[i];
        const auto& next = nodes[(i + 1) % N];
        const int mv = static_cast<int>(v.size());
        const int k = N > 1 ? std::min(rails, mv) : 0;
        std::vector<char> owns(mv, 0);
        for (int r = 0; r < k; ++r) owns[rail_member(r, k, mv)] = 1;
        for (int j = 0; j < mv; ++j) {
          const double inter = owns[j] ? B / k : 0.0;
          const double intra = B - inter;
          if (mv > 1 && intra > 0) {
            plan.xfers.push_back({v[j], v[(j + 1) % mv], wire(intra * shm, eff), step[v[j]], step[v[(j + 1) % mv]]});
            if (shm != 1.0) plan.xfers.back().moved = wire(intra, eff);
          }
          if (inter > 0) {
            const int to = next[j % next.size()];
            plan.xfers.push_back({v[j], to, wire(inter, eff), step[v[j]], step[to]});
          }
        }
      }
      break;
    }
    case NcclAlgo::tree:
      for (const auto& v : nodes)
        for (std::size_t j = 0; j + 1 < v.size(); ++j) {
          plan.xfers.push_back({v[j], v[j + 1], wire(S, eff), step[v[j]], step[v[j + 1]]});
          plan.xfers.push_back({v[j + 1], v[j], wire(S, eff), step[v[j + 1]], step[v[j]]});
        }
      tree_flows(nodes, rails, S, eff, step, plan);
      break;
    case NcclAlgo::nvls:
    case NcclAlgo::nvls_tree:
      for (const auto& v : nodes) {
        const double n = static_cast<double>(v.size());
        double up = S * (n + 1) / n, down = up;  // AllReduce: ld_reduce reads S, st multicasts S/n
        if (c.op == CollOp::allgather) up = S / n, down = S * (n - 1) / n;
        if (c.op == CollOp::reducescatter) up = S * (n - 1) / n, down = S / n;
        nvls_flows(v, c, topo, up, down, eff, step, plan, ws);
      }
      if (e.algo == NcclAlgo::nvls_tree) tree_flows(nodes, rails, S, eff, step, plan);
      break;
  }
  for (CollXfer& x : plan.xfers) x.lat = 0;
  return plan;
}

// The GPU through which `src` reaches `dst` on another node with PXN: the GPU
// of src's node with dst's local index (on dst's rail), if there is one. NCCL
// relays through a GPU only where that GPU has GPUDirect RDMA to the NIC and
// reaches the sender over NVLink (src/graph/paths.cc@5067397c lines 817-840:
// "(1) ... GDR is enabled", "(2) is connected to us through NVLink"): never on
// PCIe-only servers, nor without GPUDirect RDMA.
int pxn_via(int src, int dst, const Topology& topo) {
  if (topo.same_node(src, dst) || !topo.hints().gdr) return -1;
  const int g = topo.gpus_per_node();
  const int via = topo.node_of(src) * g + dst % g;
  return via == src || !topo.nvlinked(src, via) ? -1 : via;
}

// Marks every transfer of `plan` as NCCL send/recv: p2p latency by path, PXN
// routes, and the proxy's launch of each network peer. The transfers whose
// send steps have the same depth in the step DAG are one grouped batch (one
// ncclGroupStart/End: all of direct/p2p's transfers, one window, one SAA
// round). In a batch every network transfer is one proxy send, on the GPU it
// leaves from (the PXN GPU, else the sender), and one proxy receive, on the
// receiver; each proxy launches its operations one after another, a send and
// a receive together taking one nccl_p2p_net_overhead_us. The busiest proxy
// of the batch, with k places (max of its sends and its receives), launches
// its last 1 + (k - 1) overheads after its first: every network transfer of
// the batch gets the network p2p latency plus (k - 1) overheads, so the
// batch's last peer is costed exactly and the others wait with it (their
// head start is not modelled: distinct start times would cost the flow
// network one max-min re-solve each, thousands in a 1024-GPU AlltoAll).
// Intra-node transfers need no proxy (the P2P and SHM transports' kernels
// move the data themselves) and keep the single latency.
//
// With R > 0, `plan` is the representatives' part of a plan (make_rep_plan)
// that the server shift of R GPUs maps onto itself, each batch one round of
// the step DAG, listed before the next: every GPU's sends and receives in a
// batch equal its orbit's representative's (GPU g mod R), which are counted
// from the representatives' transfers: a proxy sits on its sender's server,
// so a representative GPU's sends are representatives' transfers, and the
// transfers g receives are, one to one, the images of the representatives'
// transfers to a GPU of g's orbit (shifted back until their sender is a
// representative). So each batch's busiest proxy, and every latency, is the
// full plan's.
void as_p2p(CollPlan& plan, const Collective& c, const Topology& topo, Workspace& ws, int R = 0) {
  const NcclSystem sys = *shared_nccl_system(c.group, topo, ws);
  const double inter_us = nccl_p2p_latency_us(sys, true), overhead_us = nccl_p2p_net_overhead_us(sys);
  plan.latencies = {us_time(nccl_p2p_latency_us(sys, false))};
  // Depth of every step (dependencies precede their steps in every plan).
  std::vector<int> depth(plan.steps.size(), 0);
  int depths = 1;
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    for (int d : plan.steps[s].deps)
      if (d >= 0) depth[s] = std::max(depth[s], depth[d] + 1);
    depths = std::max(depths, depth[s] + 1);
  }
  // Per GPU: sends and receives launched so far in batch `batch[g]` (every
  // plan lists a batch's transfers before the next batch's); per batch: the
  // most places any proxy holds.
  const int G = R > 0 ? R : topo.num_gpus();  // GPUs counted (with R: orbits, by their representative)
  std::vector<int> batch(G, -1), sends(G, 0), recvs(G, 0), places(depths, 0);
  auto at = [&](int g, int d) {
    if (batch[g] != d) batch[g] = d, sends[g] = 0, recvs[g] = 0;
  };
  for (CollXfer& x : plan.xfers) {
    const int a = c.group[x.src], b = c.group[x.dst];
    if (topo.same_node(a, b)) {
      x.lat = 0;
      continue;
    }
    x.via = pxn_via(a, b, topo);
    const int d = depth[x.send_step], proxy = x.via >= 0 ? x.via : a;
    at(proxy, d);
    at(b % G, d);
    places[d] = std::max({places[d], ++sends[proxy], ++recvs[b % G]});
  }
  // One latency per distinct place count (index 1 + k - 1 for k places).
  for (CollXfer& x : plan.xfers) {
    if (x.lat == 0) continue;
    const int k = places[depth[x.send_step]];
    while (static_cast<int>(plan.latencies.size()) <= k)
      plan.latencies.push_back(
          us_time(inter_us + static_cast<double>(plan.latencies.size() - 1) * overhead_us));
    x.lat = k;
  }
}

}  // namespace

// The textbook algorithms and SAA, step by step.
CollPlan step_plan(const Collective& c, const Topology& topo, const std::string& algo) {
  const int p = static_cast<int>(c.group.size());
  Builder b(p);
  std::vector<int> all(p);
  for (int i = 0; i < p; ++i) all[i] = i;
  const std::uint64_t S = c.bytes;
  const std::uint64_t per = ceil_div(S, static_cast<std::uint64_t>(p));
  auto uniform = [per](int, int) { return per; };

  if (c.op == CollOp::sendrecv) {
    if (algo != "direct" && algo != "p2p") unsupported(c, algo);
    const int s0 = b.step(0), s1 = b.step(1);
    b.xfer(0, 1, S, s0, s1);
    return b.take();
  }
  if (c.op == CollOp::saa) {
    if (c.inner <= 0 || p % c.inner != 0)
      throw UserError(fmt::format("collective '{}': saa needs an inner group size dividing the group size {} (inner {})",
                                  c.name, p, c.inner));
    if (algo != "released" && algo != "pipelined") unsupported(c, algo);
    const int G = c.inner;
    // released: W = p rounds over all members (chunk S/p); pipelined: W = p/G
    // rounds along the rails (chunk S/W).
    const bool released = algo == "released";
    const int W = released ? p : p / G;
    const std::uint64_t chunk = ceil_div(S, static_cast<std::uint64_t>(W));
    // W x p steps on each chain; at most W x p AlltoAll and W x p x (G-1) gather transfers.
    b.reserve(2 * static_cast<std::size_t>(W) * p, static_cast<std::size_t>(W) * p * G);
    // AlltoAll chain (stream 0): x[i][m], chained on b.last; round 0 is the
    // member's own chunk (no transfer).
    std::vector<std::vector<int>> x(W, std::vector<int>(p)), g(W, std::vector<int>(p));
    for (int i = 0; i < W; ++i) {
      for (int m = 0; m < p; ++m) x[i][m] = b.step(m);
      for (int m = 0; m < p; ++m) {
        int to;
        if (released) {
          to = (m + i) % p;
        } else {
          const int blk = m / G, l = m % G;
          to = ((blk + i) % W) * G + l;
        }
        b.xfer(m, to, i == 0 ? 0 : chunk, x[i][m], x[i][to]);
      }
    }
    CollPlan plan = b.take();
    auto add_step = [&plan](int m, int d0, int d1) {
      CollStep s;
      s.member = m;
      s.add_dep(d0);
      if (d1 >= 0) s.add_dep(d1);
      plan.steps.push_back(std::move(s));
      return static_cast<int>(plan.steps.size()) - 1;
    };
    for (int i = 0; i < W; ++i)
      for (int m = 0; m < p; ++m) {
        if (!released) {
          // The gather chain is separate from the AlltoAll chain: g[i] waits
          // for x[i] (its chunk has arrived) and g[i-1] (its stream is in order).
          g[i][m] = add_step(m, x[i][m], i > 0 ? g[i - 1][m] : -1);
        } else if (i < W - 1) {
          // The kernel's loop iteration i+1: stream 1 waits on an event after
          // AlltoAll round i on stream 0, then gathers chunk i (stream 1 order).
          g[i][m] = add_step(m, x[i][m], i > 0 ? g[i - 1][m] : -1);
        } else {
          // The last gather is issued on stream 0 after the last AlltoAll round.
          g[i][m] = add_step(m, x[i][m], -1);
        }
      }
    for (int i = 0; i < W; ++i)
      for (int m = 0; m < p; ++m) {
        const int blk = m / G;
        for (int l2 = 0; l2 < G; ++l2) {
          const int peer = blk * G + l2;
          if (peer != m && chunk > 0) plan.xfers.push_back({m, peer, chunk, g[i][m], g[i][peer]});
        }
      }
    return plan;
  }

  if (algo == "flat_ring") {
    switch (c.op) {
      case CollOp::allreduce:
        b.ring(all, 2 * (p - 1), per);
        break;
      case CollOp::allgather:
      case CollOp::reducescatter:
        b.ring(all, p - 1, per);
        break;
      default:
        unsupported(c, algo);
    }
  } else if (algo == "direct" || algo == "pairwise" || algo == "p2p") {
    const int window = algo == "pairwise" ? 1 : c.window;
    switch (c.op) {
      case CollOp::allgather:
      case CollOp::reducescatter:
        if (algo == "p2p") unsupported(c, algo);
        b.rounds(all, window, uniform);
        break;
      case CollOp::alltoall:
        b.rounds(all, window, uniform);
        break;
      case CollOp::alltoallv:
        b.rounds(all, window, [&c](int i, int j) { return c.matrix[i][j]; });
        break;
      case CollOp::allreduce:
        if (algo != "direct") unsupported(c, algo);
        b.rounds(all, window, uniform);  // reduce-scatter
        b.rounds(all, window, uniform);  // all-gather
        break;
      default:
        unsupported(c, algo);
    }
  } else if (algo == "hierarchical") {
    const auto nodes = by_node(c, topo);
    const int N = static_cast<int>(nodes.size()), G = static_cast<int>(nodes[0].size());
    auto rail = [&](int l) {
      std::vector<int> v;
      for (const auto& n : nodes) v.push_back(n[l]);
      return v;
    };
    switch (c.op) {
      case CollOp::allreduce: {
        const std::uint64_t intra = ceil_div(S, G), inter = ceil_div(S, static_cast<std::uint64_t>(G) * N);
        for (const auto& n : nodes) b.ring(n, G - 1, intra);
        for (int l = 0; l < G; ++l) b.ring(rail(l), 2 * (N - 1), inter);
        for (const auto& n : nodes) b.ring(n, G - 1, intra);
        break;
      }
      case CollOp::allgather: {
        for (const auto& n : nodes) b.ring(n, G - 1, per);
        for (int l = 0; l < G; ++l) b.ring(rail(l), N - 1, ceil_div(S, N));
        break;
      }
      case CollOp::reducescatter: {
        for (int l = 0; l < G; ++l) b.ring(rail(l), N - 1, ceil_div(S, N));
        for (const auto& n : nodes) b.ring(n, G - 1, per);
        break;
      }
      case CollOp::alltoall: {
        // Intra: to local peer j, everything bound for members with local index j (N chunks);
        // inter: to the same-local-index member of each other node, G chunks.
        const std::uint64_t intra = per * N, inter = per * G;
        for (const auto& n : nodes) b.rounds(n, c.window, [intra](int, int) { return intra; });
        for (int l = 0; l < G; ++l) b.rounds(rail(l), c.window, [inter](int, int) { return inter; });
        break;
      }
      default:
        unsupported(c, algo);
    }
  } else {
    std::string names;
    for (const auto& n : algorithm_names()) names += (names.empty() ? "" : ", ") + n;
    throw UserError(fmt::format("collective '{}': unknown algorithm '{}'; known: {}", c.name, algo, names));
  }
  return b.take();
}

namespace {

std::optional<NcclProto> forced_proto(const Collective& c) {
  if (c.proto.empty()) return std::nullopt;
  NcclProto p;
  if (!parse_nccl_proto(c.proto, &p))
    throw UserError(fmt::format("collective '{}': unknown protocol '{}'; known: ll, ll128, simple", c.name, c.proto));
  return p;
}

// NCCL's algorithm for c, or nullopt for the step-by-step algorithms.
std::optional<NcclEstimate> nccl_pick(const Collective& c, const Topology& topo, const std::string& algo, Workspace& ws,
                                      NcclSystem* sys_out = nullptr) {
  NcclAlgo forced{};
  const bool named = parse_nccl_algo(algo, &forced);
  if (algo != "auto" && !named) return std::nullopt;
  if (!nccl_tuned(c.op)) {
    if (named) unsupported(c, algo);
    return std::nullopt;
  }
  if (c.channels < 0 || c.channels > 64)
    throw UserError(fmt::format("collective '{}': channels must be 1..64, got {}", c.name, c.channels));
  const NcclSystem sys = *shared_nccl_system(c.group, topo, ws);
  if (sys_out) *sys_out = sys;
  const std::optional<NcclProto> proto = forced_proto(c);
  try {
    return nccl_choose(c.op, sys, static_cast<double>(c.bytes), named ? std::optional(forced) : std::nullopt, proto,
                       c.channels);
  } catch (const UserError& e) {
    rethrow_with(e, fmt::format("collective '{}': {}", c.name, e.what()));
  }
}

std::string resolve(const Collective& c) {
  std::string algo = c.algo.empty() ? default_algorithm(c.op) : c.algo;
  if (algo == "auto" && !nccl_tuned(c.op)) algo = c.op == CollOp::saa ? "released" : "p2p";
  return algo;
}

}  // namespace

std::string resolved_choice(const Collective& c, const Topology& topo, Workspace& ws) {
  const std::string algo = resolve(c);
  if (auto e = nccl_pick(c, topo, algo, ws)) return e->label();
  return algo;
}

std::string resolved_choice(const Collective& c, const Topology& topo) {
  Workspace ws;
  return resolved_choice(c, topo, ws);
}

CollPlan make_plan(const Collective& c, const Topology& topo) {
  Workspace ws;
  return make_plan(c, topo, ws);
}

CollPlan make_plan(const Collective& c, const Topology& topo, Workspace& ws) {
  for (int r : c.group)
    if (r < 0 || r >= topo.num_gpus())
      throw UserError(fmt::format("collective '{}' names rank {}, but topology '{}' has {} GPUs", c.name, r,
                                  topo.name(), topo.num_gpus()));
  const std::string algo = resolve(c);
  NcclSystem sys;
  if (auto e = nccl_pick(c, topo, algo, ws, &sys)) {
    if (c.group.size() < 2) return {};
    return nccl_plan(c, topo, sys, *e, ws);
  }
  if (!c.proto.empty() || c.channels != 0)
    throw UserError(fmt::format("collective '{}': proto and channels apply to NCCL's algorithms (auto, ring, tree, "
                                "nvls, nvls_tree on allreduce, allgather, reducescatter), not to {} {}",
                                c.name, algo, to_string(c.op)));
  CollPlan plan = step_plan(c, topo, algo);
  plan.choice = algo;
  if (algo == "p2p" || c.op == CollOp::saa) as_p2p(plan, c, topo, ws);
  return plan;
}

// (the header says what it builds and when). Each builder below is
// step_plan's, restricted to the representatives: the steps and transfers it
// would create in the same order, skipping every step of another member and
// every transfer another member sends, each transfer received by the step
// its receiver's representative creates in the same round (the same place
// among its member's steps: every member creates one step per round).
std::optional<CollPlan> make_rep_plan(const Collective& c, const Topology& topo, const NodeShift& sh, Workspace& ws) {
  const int P = topo.num_gpus(), R = sh.gpus, p = static_cast<int>(c.group.size());
  if (R <= 0 || R >= P || P % R != 0 || R % topo.gpus_per_node() != 0 || p < 2) return std::nullopt;
  if (!c.proto.empty() || c.channels != 0) return std::nullopt;
  const std::string algo = resolve(c);
  const bool rounds_algo = algo == "direct" || algo == "pairwise" || algo == "p2p";
  const bool saa = c.op == CollOp::saa && (algo == "released" || algo == "pipelined") && c.inner > 0 && p % c.inner == 0;
  const bool rounds = rounds_algo && (c.op == CollOp::alltoall || c.op == CollOp::alltoallv ||
                                      ((c.op == CollOp::allgather || c.op == CollOp::reducescatter) && algo != "p2p") ||
                                      (c.op == CollOp::allreduce && algo == "direct"));
  if (!saa && !rounds) return std::nullopt;
  // The shift on the group: member m's rank r goes to (r + R) mod P, which
  // must be member (m + t) mod p for one t (a rotation: then every power of
  // the shift rotates too, and the builders' member arithmetic commutes with it).
  std::vector<int> member_of(P, -1);
  for (int m = 0; m < p; ++m) {
    const int r = c.group[m];
    if (r < 0 || r >= P || member_of[r] >= 0) return std::nullopt;
    member_of[r] = m;
  }
  const int t = member_of[(c.group[0] + R) % P];
  if (t < 0) return std::nullopt;
  for (int m = 0; m < p; ++m)
    if (member_of[(c.group[m] + R) % P] != (m + t) % p) return std::nullopt;
  if (saa && t % c.inner != 0) return std::nullopt;  // blocks onto blocks, in order
  if (c.op == CollOp::alltoallv) {
    if (static_cast<int>(c.matrix.size()) != p) return std::nullopt;
    for (const auto& row : c.matrix)
      if (static_cast<int>(row.size()) != p) return std::nullopt;
    for (int i = 0; i < p; ++i)
      for (int j = 0; j < p; ++j)
        if (c.matrix[(i + t) % p][(j + t) % p] != c.matrix[i][j]) return std::nullopt;
  }
  // Representatives (members on ranks [0, R)), ascending, and each member's.
  std::vector<int> reps, rep(p);
  for (int m = 0; m < p; ++m) {
    if (c.group[m] < R) reps.push_back(m);
    rep[m] = member_of[c.group[m] % R];
  }
  CollPlan plan;
  std::vector<int> last(p, -1);
  auto step = [&plan, &last](int m) {
    CollStep s;
    s.member = m;
    if (last[m] >= 0) s.add_dep(last[m]);
    plan.steps.push_back(s);
    return last[m] = static_cast<int>(plan.steps.size()) - 1;
  };
  auto xfer = [&plan](int src, int dst, std::uint64_t bytes, int ss, int rs) {
    if (bytes == 0 || src == dst) return;
    plan.xfers.push_back({src, dst, bytes, ss, rs});
  };
  const std::uint64_t S = c.bytes;
  std::vector<int> s(p, -1);  // this round's step of each representative
  if (rounds) {
    const std::uint64_t per = ceil_div(S, static_cast<std::uint64_t>(p));
    auto run = [&](int window, auto&& bytes) {  // Builder::rounds over every member
      const int w = window <= 0 ? p - 1 : std::min(window, p - 1);
      for (int lo = 1; lo <= p - 1; lo += w) {
        const int hi = std::min(p - 1, lo + w - 1);
        for (int i : reps) s[i] = step(i);
        for (int i : reps)
          for (int off = lo; off <= hi; ++off) {
            const int j = (i + off) % p;
            xfer(i, j, bytes(i, j), s[i], s[rep[j]]);
          }
      }
    };
    auto uniform = [per](int, int) { return per; };
    const int window = algo == "pairwise" ? 1 : c.window;
    if (c.op == CollOp::alltoallv)
      run(window, [&c](int i, int j) { return c.matrix[i][j]; });
    else
      run(window, uniform);
    if (c.op == CollOp::allreduce) run(window, uniform);  // reduce-scatter, then all-gather
  } else {
    const int G = c.inner;
    const bool released = algo == "released";
    const int W = released ? p : p / G;
    const std::uint64_t chunk = ceil_div(S, static_cast<std::uint64_t>(W));
    const std::size_t nr = reps.size();
    plan.steps.reserve(2 * static_cast<std::size_t>(W) * nr);
    plan.xfers.reserve(static_cast<std::size_t>(W) * nr * G);
    std::vector<std::vector<int>> x(W, std::vector<int>(nr)), g(W, std::vector<int>(nr));
    std::vector<int> at(p, -1);  // a representative's index in reps
    for (std::size_t k = 0; k < nr; ++k) at[reps[k]] = static_cast<int>(k);
    for (int i = 0; i < W; ++i) {
      for (std::size_t k = 0; k < nr; ++k) x[i][k] = step(reps[k]);
      for (std::size_t k = 0; k < nr; ++k) {
        const int m = reps[k];
        const int to = released ? (m + i) % p : ((m / G + i) % W) * G + m % G;
        xfer(m, to, i == 0 ? 0 : chunk, x[i][k], x[i][at[rep[to]]]);
      }
    }
    auto add_step = [&plan](int m, int d0, int d1) {
      CollStep st;
      st.member = m;
      st.add_dep(d0);
      if (d1 >= 0) st.add_dep(d1);
      plan.steps.push_back(st);
      return static_cast<int>(plan.steps.size()) - 1;
    };
    for (int i = 0; i < W; ++i)
      for (std::size_t k = 0; k < nr; ++k) {
        const int prev = (!released || i < W - 1) && i > 0 ? g[i - 1][k] : -1;
        g[i][k] = add_step(reps[k], x[i][k], prev);
      }
    for (int i = 0; i < W; ++i)
      for (std::size_t k = 0; k < nr; ++k) {
        const int m = reps[k], blk = m / G;
        for (int l2 = 0; l2 < G; ++l2) {
          const int peer = blk * G + l2;
          if (peer == m || chunk == 0) continue;
          // Batches of p2p latencies are rounds only while the gathers stay in a server.
          if (!topo.same_node(c.group[m], c.group[peer])) return std::nullopt;
          plan.xfers.push_back({m, peer, chunk, g[i][k], g[i][at[rep[peer]]]});
        }
      }
  }
  plan.choice = algo;
  if (algo == "p2p" || c.op == CollOp::saa) as_p2p(plan, c, topo, ws, R);
  return plan;
}

}  // namespace parmsim
