#include "sim/graph/task_graph.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "sim/core/error.hpp"
#include "sim/core/format_into.hpp"

namespace parmsim {

int dtype_bytes(DType d) {
  return d == DType::fp32 ? 4 : d == DType::fp8 ? 1 : 2;
}
const char* to_string(DType d) {
  switch (d) {
    case DType::fp32:
      return "fp32";
    case DType::fp16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::fp8:
      return "fp8";
  }
  return "?";
}
DType parse_dtype(const std::string& s) {
  if (s == "fp32") return DType::fp32;
  if (s == "fp16") return DType::fp16;
  if (s == "bf16") return DType::bf16;
  if (s == "fp8") return DType::fp8;
  throw UserError(fmt::format("unknown dtype '{}': expected fp32, fp16, bf16 or fp8", s));
}

const char* to_string(CollOp op) {
  switch (op) {
    case CollOp::alltoall:
      return "alltoall";
    case CollOp::alltoallv:
      return "alltoallv";
    case CollOp::allgather:
      return "allgather";
    case CollOp::reducescatter:
      return "reducescatter";
    case CollOp::allreduce:
      return "allreduce";
    case CollOp::sendrecv:
      return "sendrecv";
    case CollOp::saa:
      return "saa";
  }
  return "?";
}
bool parse_coll_op(const std::string& s, CollOp* out) {
  for (CollOp op : {CollOp::alltoall, CollOp::alltoallv, CollOp::allgather, CollOp::reducescatter, CollOp::allreduce,
                    CollOp::sendrecv, CollOp::saa})
    if (s == to_string(op)) return *out = op, true;
  return false;
}

std::string window_unused(CollOp op, const std::string& algo) {
  const bool a2a = op == CollOp::alltoall || op == CollOp::alltoallv;
  // auto on an AlltoAll is p2p; on the other ops NCCL's algorithms (rings, trees) or SAA's, which have no rounds.
  const bool paced = algo == "direct" || (algo == "p2p" && op != CollOp::sendrecv && op != CollOp::saa) ||
                     (algo == "hierarchical" && op == CollOp::alltoall) || ((algo.empty() || algo == "auto") && a2a);
  if (paced) return "";
  return fmt::format("a window paces the direct, p2p and hierarchical AlltoAll rounds, not {} {}",
                     algo.empty() ? "auto" : algo, to_string(op));
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::gemm:
      return "gemm";
    case OpKind::softmax:
      return "softmax";
    case OpKind::topk:
      return "topk";
    case OpKind::order:
      return "order";
    case OpKind::iorder:
      return "iorder";
    case OpKind::activation:
      return "activation";
    case OpKind::elementwise:
      return "elementwise";
    case OpKind::copy:
      return "copy";
    case OpKind::slice:
      return "slice";
    case OpKind::host:
      return "host";
  }
  return "?";
}
bool parse_op_kind(const std::string& s, OpKind* out) {
  for (OpKind k : {OpKind::gemm, OpKind::softmax, OpKind::topk, OpKind::order, OpKind::iorder, OpKind::activation,
                   OpKind::elementwise, OpKind::copy, OpKind::slice})
    if (s == to_string(k)) return *out = k, true;
  return false;
}

TaskGraphBuilder::TaskGraphBuilder(int num_ranks) {
  if (num_ranks <= 0) throw UserError(fmt::format("task graph: ranks must be positive, got {}", num_ranks));
  g_.num_ranks_ = num_ranks;
  g_.streams_.resize(num_ranks);
}

int TaskGraphBuilder::add_stream(int rank, const std::string& name) {
  auto& s = g_.streams_.at(rank);
  if (std::find(s.begin(), s.end(), name) != s.end())
    throw UserError(fmt::format("task graph: stream '{}' declared twice on rank {}", name, rank));
  if (s.empty()) s.reserve(4);  // a few per rank: one allocation, not one per growth
  s.push_back(name);
  return static_cast<int>(s.size()) - 1;
}

int TaskGraphBuilder::add_stream_all(const std::string& name) {
  int id = -1;
  for (int r = 0; r < g_.num_ranks_; ++r) id = add_stream(r, name);
  return id;
}

int TaskGraphBuilder::stream(int rank, const std::string& name) const {
  const auto& s = g_.streams_.at(rank);
  auto it = std::find(s.begin(), s.end(), name);
  return it == s.end() ? -1 : static_cast<int>(it - s.begin());
}

void TaskGraphBuilder::add_buffer(Buffer b) {
  g_.buffers_.push_back(std::move(b));
}

int TaskGraphBuilder::add_collective(Collective c) {
  c.id = static_cast<int>(g_.collectives_.size());
  g_.collectives_.push_back(std::move(c));
  return g_.collectives_.back().id;
}

int TaskGraphBuilder::add_task(Task t) {
  t.id = static_cast<int>(g_.tasks_.size());
  g_.tasks_.push_back(std::move(t));
  return g_.tasks_.back().id;
}

Task& TaskGraphBuilder::new_task() {
  Task& t = g_.tasks_.emplace_back();
  t.id = static_cast<int>(g_.tasks_.size()) - 1;
  return t;
}

void TaskGraphBuilder::add_dep(int task, int on) {
  g_.tasks_.at(task).deps.push_back(on);
}

KernelId TaskGraphBuilder::kernel_id(std::string_view name) {
  auto it = kernel_ids_.find(std::string(name));
  if (it != kernel_ids_.end()) return it->second;
  const auto id = static_cast<KernelId>(g_.kernel_names_.size());
  if (id == kNoKernel) throw UserError(fmt::format("task graph: more than {} kernel names", id));
  g_.kernel_names_.emplace_back(name);
  kernel_ids_.emplace(name, id);
  return id;
}

std::vector<int> TaskGraphBuilder::add_collective_tasks(Collective c, const std::string& stream_name,
                                                        const std::string& task_prefix) {
  const std::vector<int> group = c.group;
  const int cid = add_collective(std::move(c));
  std::vector<int> ids;
  ids.reserve(group.size());
  for (int r : group) {
    const int st = stream(r, stream_name);
    if (st < 0) throw UserError(fmt::format("task graph: no stream '{}' on rank {}", stream_name, r));
    Task& t = new_task();
    format_into(t.name, FMT_COMPILE("{}@{}"), task_prefix, r);
    t.rank = r;
    t.stream = st;
    t.set_collective(cid);
    ids.push_back(t.id);
  }
  return ids;
}

TaskGraph TaskGraphBuilder::build() && {
  TaskGraph& g = g_;
  const int R = g.num_ranks_;
  const int N = static_cast<int>(g.tasks_.size());
  // Buffers: (rank, name) pairs sorted once, looked up by binary search (no string copies).
  std::vector<std::pair<int, std::string_view>> bufs;
  bufs.reserve(g.buffers_.size());
  for (const Buffer& b : g.buffers_) {
    if (b.rank < 0 || b.rank >= R)
      throw UserError(fmt::format("task graph: buffer '{}' is on rank {}, which does not exist (ranks 0..{})", b.name,
                                  b.rank, R - 1));
    bufs.emplace_back(b.rank, b.name);
  }
  std::sort(bufs.begin(), bufs.end());
  for (std::size_t i = 1; i < bufs.size(); ++i)
    if (bufs[i] == bufs[i - 1])
      throw UserError(fmt::format("task graph: buffer '{}' declared twice on rank {}", bufs[i].second, bufs[i].first));
  auto has_buf = [&bufs](int rank, const std::string& name) {
    return std::binary_search(bufs.begin(), bufs.end(), std::pair<int, std::string_view>(rank, name));
  };
  // Collectives. seen[r] holds 1 + the index of the last collective naming rank r.
  std::vector<int> seen(R, 0);
  for (const Collective& c : g.collectives_) {
    if (c.group.empty()) throw UserError(fmt::format("task graph: collective '{}' has an empty group", c.name));
    for (int r : c.group) {
      if (r < 0 || r >= R)
        throw UserError(fmt::format("task graph: collective '{}' names rank {}, which does not exist (ranks 0..{})",
                                    c.name, r, R - 1));
      if (seen[r] == c.id + 1) throw UserError(fmt::format("task graph: collective '{}' names rank {} twice", c.name, r));
      seen[r] = c.id + 1;
    }
    const std::size_t p = c.group.size();
    if (c.op == CollOp::alltoallv) {
      if (c.matrix.size() != p)
        throw UserError(fmt::format("task graph: alltoallv '{}' needs a {}x{} byte matrix, got {} rows", c.name, p, p,
                                    c.matrix.size()));
      for (const auto& row : c.matrix)
        if (row.size() != p)
          throw UserError(fmt::format("task graph: alltoallv '{}' needs {} entries per matrix row", c.name, p));
    }
    if (c.op == CollOp::sendrecv && p != 2)
      throw UserError(fmt::format("task graph: sendrecv '{}' needs a group of 2 ranks (sender, receiver)", c.name));
    if (c.op == CollOp::saa && (c.inner <= 0 || p % static_cast<std::size_t>(c.inner) != 0))
      throw UserError(
          fmt::format("task graph: saa '{}' needs an inner group size dividing the group size {}", c.name, p));
  }
  g.parts_.assign(g.collectives_.size(), {});
  // Each collective's members as (rank, member index) sorted by rank, and
  // the task of each member (-1 until seen).
  std::vector<std::vector<std::pair<int, int>>> members(g.collectives_.size());
  std::vector<std::vector<int>> part_of(g.collectives_.size());
  for (const Collective& c : g.collectives_) {
    auto& m = members[c.id];
    m.reserve(c.group.size());
    for (std::size_t i = 0; i < c.group.size(); ++i) m.emplace_back(c.group[i], static_cast<int>(i));
    std::sort(m.begin(), m.end());
    part_of[c.id].assign(c.group.size(), -1);
  }
  // The member index of `rank` in collective c, or -1.
  auto member_of = [&members](int c, int rank) {
    const auto& m = members[c];
    auto it = std::lower_bound(m.begin(), m.end(), std::pair<int, int>(rank, -1));
    return it != m.end() && it->first == rank ? it->second : -1;
  };
  // Task names are unique: an open-addressing set of (hash, id), names
  // compared only for equal hashes (the names themselves are long and alike).
  // Of several repeated names, the smallest is reported.
  {
    std::size_t cap = 16;
    while (cap < 2 * g.tasks_.size()) cap *= 2;
    std::vector<std::pair<std::size_t, int>> set(cap, {0, -1});
    const std::string* dup = nullptr;
    for (const Task& t : g.tasks_) {
      const std::size_t h = std::hash<std::string_view>{}(t.name);
      std::size_t i = h & (cap - 1);
      for (; set[i].second >= 0; i = (i + 1) & (cap - 1))
        if (set[i].first == h && g.tasks_[set[i].second].name == t.name) break;
      if (set[i].second < 0)
        set[i] = {h, t.id};
      else if (!dup || t.name < *dup)
        dup = &t.name;
    }
    if (dup) throw UserError(fmt::format("task graph: task name '{}' used twice", *dup));
  }
  for (const Task& t : g.tasks_) {
    if (t.rank < 0 || t.rank >= R)
      throw UserError(fmt::format("task graph: task '{}' is on rank {}, which does not exist (ranks 0..{})", t.name,
                                  t.rank, R - 1));
    if (t.stream < 0 || t.stream >= static_cast<int>(g.streams_[t.rank].size()))
      throw UserError(fmt::format("task graph: task '{}' names stream {} on rank {}, which has {} streams", t.name,
                                  t.stream, t.rank, g.streams_[t.rank].size()));
    for (int d : t.deps) {
      if (d == t.id) throw UserError(fmt::format("task graph: task '{}' depends on itself", t.name));
      if (d < 0 || d >= N)
        throw UserError(fmt::format("task graph: task '{}' depends on task id {}, which does not exist", t.name, d));
    }
    for (const auto* list : {&t.inputs, &t.outputs})
      for (const std::string& b : *list)
        if (!has_buf(t.rank, b))
          throw UserError(fmt::format("task graph: task '{}' uses buffer '{}', which is not declared on rank {}",
                                      t.name, b, t.rank));
    if (t.is_compute()) {
      const ComputeTask& ct = t.compute();
      if (ct.kernel != kNoKernel && ct.kernel >= g.kernel_names_.size())
        throw UserError(
            fmt::format("task graph: task '{}' names kernel id {}, which does not exist", t.name, ct.kernel));
      const KernelRoleInfo& role = role_info(ct.role());
      if (ct.role() != KernelRole::none && (t.inputs.size() != static_cast<std::size_t>(role.inputs) ||
                                            t.outputs.size() != static_cast<std::size_t>(role.outputs)))
        throw UserError(
            fmt::format("task graph: task '{}' runs kernel {}, which takes {} input and {} output buffers; "
                        "it names {} and {}",
                        t.name, role.name, role.inputs, role.outputs, t.inputs.size(), t.outputs.size()));
    } else {
      const int tc = t.collective();
      if (tc < 0 || tc >= static_cast<int>(g.collectives_.size()))
        throw UserError(fmt::format("task graph: task '{}' names collective id {}, which does not exist", t.name, tc));
      const Collective& c = g.collectives_[tc];
      const int mi = member_of(tc, t.rank);
      if (mi < 0)
        throw UserError(
            fmt::format("task graph: task '{}' on rank {} is part of collective '{}', whose group does "
                        "not include rank {}",
                        t.name, t.rank, c.name, t.rank));
      int& part = part_of[tc][mi];
      if (part >= 0)
        throw UserError(fmt::format("task graph: rank {} has two parts of collective '{}' ('{}' and '{}')", t.rank,
                                    c.name, g.tasks_[part].name, t.name));
      part = t.id;
    }
  }
  for (const Collective& c : g.collectives_) {
    for (std::size_t i = 0; i < c.group.size(); ++i) {
      if (part_of[c.id][i] < 0)
        throw UserError(fmt::format("task graph: collective '{}' has no task on rank {}, a member of its group", c.name,
                                    c.group[i]));
    }
    g.parts_[c.id] = std::move(part_of[c.id]);
  }
  // Successors: explicit deps plus stream order, as (predecessor, task)
  // pairs in task order, then grouped by predecessor (a stable counting
  // sort, so each task's successors stay in task order).
  g.npred_.assign(N, 0);
  std::vector<std::vector<int>> last(R);
  for (int r = 0; r < R; ++r) last[r].assign(g.streams_[r].size(), -1);
  std::vector<std::pair<int, int>> edges;
  edges.reserve(2 * static_cast<std::size_t>(N));
  boost::container::small_vector<int, 8> preds;  // a task has a few: inline
  for (const Task& t : g.tasks_) {
    preds.assign(t.deps.begin(), t.deps.end());
    int& prev = last[t.rank][t.stream];
    if (prev >= 0) preds.push_back(prev);
    prev = t.id;
    if (preds.size() > 1) {
      std::sort(preds.begin(), preds.end());
      preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    }
    for (int p : preds) edges.emplace_back(p, t.id);
    g.npred_[t.id] = static_cast<int>(preds.size());
  }
  g.succ_start_.assign(static_cast<std::size_t>(N) + 1, 0);
  for (const auto& e : edges) ++g.succ_start_[e.first + 1];
  for (int i = 0; i < N; ++i) g.succ_start_[i + 1] += g.succ_start_[i];
  g.succ_.resize(edges.size());
  {
    std::vector<int> fill(g.succ_start_.begin(), g.succ_start_.end() - 1);
    for (const auto& e : edges) g.succ_[fill[e.first]++] = e.second;
  }
  // Kahn's algorithm; leftovers are on or behind a cycle.
  std::vector<int> indeg = g.npred_;
  std::vector<int> ready;
  for (int i = N - 1; i >= 0; --i)
    if (indeg[i] == 0) ready.push_back(i);
  g.topo_order_.clear();
  while (!ready.empty()) {
    const int t = ready.back();
    ready.pop_back();
    g.topo_order_.push_back(t);
    for (int s : g.successors(t))
      if (--indeg[s] == 0) ready.push_back(s);
  }
  if (static_cast<int>(g.topo_order_.size()) != N) {
    // Walk predecessors among the leftovers until a task repeats: that is a cycle.
    std::vector<std::vector<int>> pred(N);
    for (int i = 0; i < N; ++i)
      for (int s : g.successors(i)) pred[s].push_back(i);
    int start = -1;
    for (int i = 0; i < N && start < 0; ++i)
      if (indeg[i] > 0) start = i;
    std::vector<int> pos(N, -1), path;
    int v = start;
    while (pos[v] < 0) {
      pos[v] = static_cast<int>(path.size());
      path.push_back(v);
      for (int p : pred[v])
        if (indeg[p] > 0) {
          v = p;
          break;
        }
    }
    // path[i+1] precedes path[i], and v precedes path.back(): in execution
    // order the cycle is v -> path.back() -> ... -> path[pos[v] + 1] -> v.
    std::string cyc = fmt::format("'{}'", g.tasks_[v].name);
    for (std::size_t i = path.size(); i-- > static_cast<std::size_t>(pos[v]) + 1;)
      cyc += fmt::format(" -> '{}'", g.tasks_[path[i]].name);
    cyc += fmt::format(" -> '{}'", g.tasks_[v].name);
    throw UserError(fmt::format("task graph: dependency cycle (stream order included): {}", cyc));
  }
  return std::move(g_);
}

}  // namespace parmsim
