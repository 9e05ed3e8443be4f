#include "sim/coll/collective_plan.hpp"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "sim/core/error.hpp"

namespace parmsim {

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> n = {"ring", "direct", "pairwise", "hierarchical", "released", "pipelined"};
  return n;
}

std::string default_algorithm(CollOp op) {
  switch (op) {
    case CollOp::allreduce:
    case CollOp::allgather:
    case CollOp::reducescatter:
      return "ring";
    case CollOp::saa:
      return "released";
    default:
      return "direct";
  }
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
      throw ParmError(
          fmt::format("collective '{}': hierarchical needs the same number of members on every node "
                      "(node {} has {}, another {})",
                      c.name, node, v.size(), out[0].size()));
    out.push_back(std::move(v));
  }
  return out;
}

[[noreturn]] void unsupported(const Collective& c, const std::string& algo) {
  throw ParmError(fmt::format("collective '{}': algorithm '{}' does not implement {}", c.name, algo, to_string(c.op)));
}

}  // namespace

CollPlan make_plan(const Collective& c, const Topology& topo) {
  const int p = static_cast<int>(c.group.size());
  for (int r : c.group)
    if (r >= topo.num_gpus())
      throw ParmError(fmt::format("collective '{}' names rank {}, but topology '{}' has {} GPUs", c.name, r,
                                  topo.name(), topo.num_gpus()));
  const std::string algo = c.algo.empty() ? default_algorithm(c.op) : c.algo;
  Builder b(p);
  std::vector<int> all(p);
  for (int i = 0; i < p; ++i) all[i] = i;
  const std::uint64_t S = c.bytes;
  const std::uint64_t per = ceil_div(S, static_cast<std::uint64_t>(p));
  auto uniform = [per](int, int) { return per; };

  if (c.op == CollOp::sendrecv) {
    if (algo != "direct") unsupported(c, algo);
    const int s0 = b.step(0), s1 = b.step(1);
    b.xfer(0, 1, S, s0, s1);
    return b.take();
  }
  if (c.op == CollOp::saa) {
    if (c.inner <= 0 || p % c.inner != 0)
      throw ParmError(fmt::format("collective '{}': saa needs an inner group size dividing the group size {} (inner {})",
                                  c.name, p, c.inner));
    if (algo != "released" && algo != "pipelined") unsupported(c, algo);
    const int G = c.inner;
    // released: W = p rounds over all members (chunk S/p); pipelined: W = p/G
    // rounds along the rails (chunk S/W).
    const bool released = algo == "released";
    const int W = released ? p : p / G;
    const std::uint64_t chunk = ceil_div(S, static_cast<std::uint64_t>(W));
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

  if (algo == "ring") {
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
  } else if (algo == "direct" || algo == "pairwise") {
    const int window = algo == "pairwise" ? 1 : c.window;
    switch (c.op) {
      case CollOp::alltoall:
      case CollOp::allgather:
      case CollOp::reducescatter:
        b.rounds(all, window, uniform);
        break;
      case CollOp::alltoallv:
        b.rounds(all, window, [&c](int i, int j) { return c.matrix[i][j]; });
        break;
      case CollOp::allreduce:
        if (algo == "pairwise") unsupported(c, algo);
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
    throw ParmError(fmt::format("collective '{}': unknown algorithm '{}'; known: {}", c.name, algo, names));
  }
  return b.take();
}

}  // namespace parmsim
