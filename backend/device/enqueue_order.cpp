#include "backend/device/enqueue_order.hpp"

#include <map>
#include <queue>
#include <set>

#include "sim/core/error.hpp"

namespace parmsim::exec::dev {

// Compute tasks and collectives in an order every process computes alike:
// Kahn's algorithm over units, the lowest first task id first, honouring
// dependencies and each stream's task order.
std::vector<Unit> enqueue_order(const TaskGraph& g) {
  const int N = static_cast<int>(g.tasks().size());
  std::vector<int> unit_of(N), prev_on_stream(N, -1);
  std::vector<Unit> units;
  std::map<int, int> coll_unit;
  std::map<std::pair<int, int>, int> last;
  for (const Task& t : g.tasks()) {
    if (t.is_compute()) {
      unit_of[t.id] = static_cast<int>(units.size());
      units.push_back({t.id, -1});
    } else {
      auto [it, fresh] = coll_unit.try_emplace(t.collective(), static_cast<int>(units.size()));
      if (fresh) units.push_back({-1, t.collective()});
      unit_of[t.id] = it->second;
    }
    auto key = std::make_pair(t.rank, t.stream);
    if (last.count(key)) prev_on_stream[t.id] = last[key];
    last[key] = t.id;
  }
  const int U = static_cast<int>(units.size());
  std::vector<std::set<int>> succ(U);
  std::vector<int> indeg(U, 0), first(U, N);
  for (const Task& t : g.tasks()) {
    const int u = unit_of[t.id];
    first[u] = std::min(first[u], t.id);
    std::vector<int> preds(t.deps.begin(), t.deps.end());
    if (prev_on_stream[t.id] >= 0) preds.push_back(prev_on_stream[t.id]);
    for (int d : preds) {
      const int v = unit_of[d];
      if (v != u && succ[v].insert(u).second) ++indeg[u];
    }
  }
  std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> ready;
  for (int u = 0; u < U; ++u)
    if (!indeg[u]) ready.push({first[u], u});
  std::vector<Unit> order;
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    order.push_back(units[u]);
    for (int v : succ[u])
      if (--indeg[v] == 0) ready.push({first[v], v});
  }
  if (static_cast<int>(order.size()) != U)
    throw UserError("the graph's collectives and streams order each other in a cycle");
  return order;
}

}  // namespace parmsim::exec::dev
