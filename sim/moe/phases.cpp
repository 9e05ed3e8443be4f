#include "sim/moe/phases.hpp"

#include <fmt/format.h>

#include <string>
#include <unordered_map>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/moe/layer_kernels.hpp"

namespace parmsim::moe {

namespace {

constexpr std::array<std::string_view, kPhases> kNames = {"gate",      "order",     "experts",       "iorder",
                                                          "other",     "host",      "alltoall",      "alltoallv",
                                                          "allgather", "reducescatter", "allreduce", "sendrecv",
                                                          "saa"};

Phase phase_of(CollOp op) {
  switch (op) {
    case CollOp::alltoall:
      return Phase::alltoall;
    case CollOp::alltoallv:
      return Phase::alltoallv;
    case CollOp::allgather:
      return Phase::allgather;
    case CollOp::reducescatter:
      return Phase::reducescatter;
    case CollOp::allreduce:
      return Phase::allreduce;
    case CollOp::sendrecv:
      return Phase::sendrecv;
    case CollOp::saa:
      return Phase::saa;
  }
  throw InternalError("phase_of: unknown collective op");
}

// The phase of the compute ops' kernels, by task kind (the task name before '#').
std::unordered_map<std::string, Phase> kernel_phases(std::span<const MoeOp> ops, const LayerSpec& s, const Dims& d) {
  std::unordered_map<std::string, Phase> m;
  for (const MoeOp& op : ops) {
    Phase p;
    switch (op.kind) {
      case MoeStep::gate:
        p = Phase::gate;
        break;
      case MoeStep::order:
      case MoeStep::slot_slice:
        p = Phase::order;
        break;
      case MoeStep::experts:
      case MoeStep::shared:
        p = Phase::experts;
        break;
      case MoeStep::iorder:
        p = Phase::iorder;
        break;
      case MoeStep::kernel:
        p = Phase::other;
        break;
      default:
        continue;  // collectives and views: their tasks are collectives, or none
    }
    for (const Kernel& k : kernel_list(op, s, d)) {
      const std::string name = (op.backward ? "bwd_" : "") + std::string(k.name);
      const auto [it, fresh] = m.emplace(name, p);
      if (!fresh && it->second != p)
        throw InternalError(fmt::format("layer phases: kernel '{}' belongs to both {} and {}", name,
                                        to_string(it->second), to_string(p)));
    }
  }
  return m;
}

}  // namespace

std::string_view to_string(Phase p) { return kNames.at(static_cast<std::size_t>(p)); }

bool is_communication(Phase p) { return p >= Phase::alltoall && p < Phase::count; }

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  for (std::size_t i = 0; i < kPhases; ++i) t[i] += o.t[i];
  return *this;
}

Time PhaseTimes::total() const {
  Time sum;
  for (const Time& x : t) sum += x;
  return sum;
}

Time PhaseTimes::communication() const {
  Time sum;
  for (std::size_t i = 0; i < kPhases; ++i)
    if (is_communication(static_cast<Phase>(i))) sum += t[i];
  return sum;
}

std::vector<PathStep> critical_path(const TaskGraph& g, const SimResult& r) {
  const int n = static_cast<int>(g.tasks().size());
  std::vector<PathStep> path;
  if (n == 0) return path;
  if (static_cast<int>(r.trace.size()) != n)
    throw InternalError(fmt::format("critical path: {} trace rows for {} tasks", r.trace.size(), n));
  // Predecessors: the inverse of successors (dependencies and the stream predecessor).
  std::vector<int> start(n + 1, 0), preds;
  for (int t = 0; t < n; ++t)
    for (int s : g.successors(t)) ++start[s + 1];
  for (int t = 0; t < n; ++t) start[t + 1] += start[t];
  preds.resize(start[n]);
  {
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (int t = 0; t < n; ++t)
      for (int s : g.successors(t)) preds[fill[s]++] = t;
  }
  auto row = [&](int t) -> const TraceRow& { return r.trace[t]; };
  int cur = 0;
  for (int t = 1; t < n; ++t)
    if (row(t).end > row(cur).end) cur = t;
  if (row(cur).end != r.makespan)
    throw InternalError(fmt::format("critical path: the last task ends at {} ps, the makespan is {} ps",
                                    row(cur).end.count_ps(), r.makespan.count_ps()));
  Time to = row(cur).end;
  while (true) {
    const Task& task = g.task(cur);
    int from_task = cur;
    if (task.kind() == TaskKind::collective) {
      // The member that entered last before `to`: until then the collective waited for it.
      for (int p : g.parts(task.collective()))
        if (row(p).start <= to && (row(p).start > row(from_task).start ||
                                   (row(p).start == row(from_task).start && p < from_task)))
          from_task = p;
    }
    const Time from = row(from_task).start;
    if (from > to) throw InternalError(fmt::format("critical path: task {} starts after it ends", cur));
    path.push_back({cur, from, to});
    if (from == Time::zero()) break;
    // The predecessor that finished last; the engine started the task at that instant.
    int next = -1;
    for (int i = start[from_task]; i < start[from_task + 1]; ++i) {
      const int p = preds[i];
      if (next < 0 || row(p).end > row(next).end || (row(p).end == row(next).end && p < next)) next = p;
    }
    if (next < 0 || row(next).end != from)
      throw InternalError(fmt::format("critical path: task '{}' starts at {} ps, but no predecessor ends then",
                                      g.task(from_task).name, from.count_ps()));
    cur = next;
    to = from;
  }
  return path;
}

PhaseTimes layer_phases(const TaskGraph& g, const SimResult& r, std::span<const MoeOp> ops, const LayerSpec& s,
                        const Dims& d) {
  const auto kinds = kernel_phases(ops, s, d);
  PhaseTimes out;
  for (const PathStep& step : critical_path(g, r)) {
    const Task& t = g.task(step.task);
    Phase p = Phase::other;
    if (t.kind() == TaskKind::collective) {
      p = phase_of(g.collective(t.collective()).op);
    } else if (t.compute().op == OpKind::host) {
      p = Phase::host;
    } else if (auto it = kinds.find(std::string(g.kernel_name(t.compute().kernel))); it != kinds.end()) {
      p = it->second;
    }
    out[p] += step.to - step.from;
  }
  if (out.total() != r.makespan)
    throw InternalError(fmt::format("layer phases add up to {} ps, the makespan is {} ps", out.total().count_ps(),
                                    r.makespan.count_ps()));
  return out;
}

}  // namespace parmsim::moe
