#include "sim/engine/trace_writer.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "sim/io/csv.hpp"
#include "sim/io/output.hpp"

namespace parmsim {

namespace {
std::string kind_of(const TaskGraph& g, const Task& t) {
  return t.is_compute() ? "compute" : to_string(g.collective(t.collective()).op);
}
// The ranks a part writes: ranks 0 .. n-1.
int written_ranks(const TracePart& p) {
  return p.ranks > 0 && p.ranks < p.graph->num_ranks() ? p.ranks : p.graph->num_ranks();
}
}  // namespace

void write_trace_csv(std::ostream& os, const TaskGraph& g, const SimResult& r) {
  const bool spread = !r.spread.empty();
  os << "task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops"
     << (spread ? ",duration_p10_us,duration_p90_us\n" : "\n");
  for (const TraceRow& row : r.trace) {
    const Task& t = g.task(row.task);
    const std::string op = t.is_compute() ? to_string(t.compute().op) : g.collective(t.collective()).name;
    os << fmt::format("{},{},{},{},{},{},{},{},{},{},{}", t.id, csv_field(t.name), t.rank,
                      csv_field(g.streams(t.rank)[t.stream]), kind_of(g, t), csv_field(op), us_exact(row.start), us_exact(row.end), us_exact(row.end - row.start),
                      row.bytes, row.flops);
    if (spread)
      os << fmt::format(",{},{}", us_exact(r.spread.at(row.task).first), us_exact(r.spread.at(row.task).second));
    os << "\n";
  }
}

void write_chrome_trace(std::ostream& os, const TaskGraph& g, const SimResult& r) {
  nlohmann::json ev = nlohmann::json::array();
  for (int rank = 0; rank < g.num_ranks(); ++rank) {
    ev.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
    for (std::size_t s = 0; s < g.streams(rank).size(); ++s)
      ev.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", s}, {"args", {{"name", g.streams(rank)[s]}}}});
  }
  for (const TraceRow& row : r.trace) {
    const Task& t = g.task(row.task);
    ev.push_back({{"ph", "X"},
                  {"name", t.name},
                  {"cat", kind_of(g, t)},
                  {"pid", t.rank},
                  {"tid", t.stream},
                  {"ts", row.start.to_us()},
                  {"dur", (row.end - row.start).to_us()},
                  {"args", {{"bytes", row.bytes}, {"flops", row.flops}}}});
  }
  nlohmann::json doc = {{"traceEvents", ev}, {"displayTimeUnit", "ns"}};
  os << doc.dump(1) << "\n";
}

void write_trace_csv(std::ostream& os, std::span<const TracePart> parts) {
  bool classes = false;
  for (const TracePart& p : parts) classes = classes || written_ranks(p) < p.graph->num_ranks();
  os << "run,pass,task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops"
     << (classes ? ",stands_for\n" : "\n");
  for (const TracePart& p : parts) {
    const TaskGraph& g = *p.graph;
    const int ranks = written_ranks(p);
    const int stands_for = ranks < g.num_ranks() ? p.result->symmetry : 1;
    for (const TraceRow& row : p.result->trace) {
      const Task& t = g.task(row.task);
      if (t.rank >= ranks) continue;
      const std::string op = t.is_compute() ? to_string(t.compute().op) : g.collective(t.collective()).name;
      os << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{}", csv_field(p.run), csv_field(p.pass), t.id,
                        csv_field(t.name), t.rank, csv_field(g.streams(t.rank)[t.stream]), kind_of(g, t),
                        csv_field(op), us_exact(p.offset + row.start), us_exact(p.offset + row.end),
                        us_exact(row.end - row.start), row.bytes, row.flops);
      if (classes) os << "," << stands_for;
      os << "\n";
    }
  }
}

void write_chrome_trace(std::ostream& os, std::span<const TracePart> parts) {
  nlohmann::json ev = nlohmann::json::array();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const TracePart& p = parts[i];
    const TaskGraph& g = *p.graph;
    const int pid = static_cast<int>(i);
    // Thread ids: every rank's streams in turn.
    std::vector<std::size_t> first(static_cast<std::size_t>(g.num_ranks()) + 1, 0);
    for (int rank = 0; rank < g.num_ranks(); ++rank) first[rank + 1] = first[rank] + g.streams(rank).size();
    const int ranks = written_ranks(p);
    const std::string label =
        ranks < g.num_ranks()
            ? fmt::format("{} {} (ranks 0-{} of {}, one per class of symmetric ranks: each stands for {})", p.run,
                          p.pass, ranks - 1, g.num_ranks(), p.result->symmetry)
            : p.run + " " + p.pass;
    ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", label}}}});
    ev.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (int rank = 0; rank < ranks; ++rank)
      for (std::size_t s = 0; s < g.streams(rank).size(); ++s) {
        const std::size_t tid = first[rank] + s;
        ev.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"name", fmt::format("rank {} {}", rank, g.streams(rank)[s])}}}});
        ev.push_back(
            {{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
      }
    for (const TraceRow& row : p.result->trace) {
      const Task& t = g.task(row.task);
      if (t.rank >= ranks) continue;
      ev.push_back({{"ph", "X"},
                    {"name", t.name},
                    {"cat", kind_of(g, t)},
                    {"pid", pid},
                    {"tid", first[t.rank] + static_cast<std::size_t>(t.stream)},
                    {"ts", (p.offset + row.start).to_us()},
                    {"dur", (row.end - row.start).to_us()},
                    {"args", {{"bytes", row.bytes}, {"flops", row.flops}}}});
    }
  }
  nlohmann::json doc = {{"traceEvents", ev}, {"displayTimeUnit", "ns"}};
  os << doc.dump(1) << "\n";
}

}  // namespace parmsim
