#include "sim/validation/measured_csv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "sim/calib/fit.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/io/csv.hpp"
#include "sim/io/output.hpp"

namespace parmsim {

namespace {

const Section kMeasured{
    "measured",
    "A CSV of measured times for `parmsim compare --measured FILE.csv` (docs/measured.md): a header line, then one "
    "row per measured layer or collective; '#' lines are comments. Columns in any order; a column a row's kind "
    "does not read must be empty there.",
    {{"kind", "string", "required", "layer (a whole MoE layer) | collective (one collective alone)"},
     {"measured_us", "number", "required", "the measured time in microseconds (finite, above 0, at most an hour)"},
     {"name", "string", "FILE:LINE", "the row's label in the output"},
     {"topology", "string", "-t FILE",
      "topology file; a relative path starts at the CSV's folder; empty: the one compare -t gives"},
     {"topo_set", "string", "\"\"", "topology overrides, as --topo-set: \"nodes=2,link_efficiency.network=0.9\""},
     {"system", "string", "\"\"", "what ran it (a label: DeepSpeed-MoE 0.14.4, Megatron-Core 0.16, ...)"},
     {"source", "string", "\"\"", "where the measurement comes from"},
     {"layer", "string", "defaults", "layer rows: layer keys and schedule options, as layer --set: \"B=4,E=32,mp=4\""},
     {"schedule", "string", "required*", "layer rows: baseline | s1 | s2 (how parmsim runs the measured layer)"},
     {"what", "string", "total", "layer rows: forward | backward | total (forward + backward) of the layer"},
     {"op", "string", "required*", "collective rows: allreduce | allgather | reducescatter | alltoall | sendrecv"},
     {"ranks", "int", "required*", "collective rows: the group size"},
     {"nodes", "int", "1",
      "collective rows: the servers the group spans, ranks / nodes GPUs on each (the first ones of each of the "
      "first servers, as calibrate --fit-machine places a table)"},
     {"bytes", "size", "required*",
      "collective rows: the size in nccl-tests' convention, in bytes (1048576) or with a unit (1MiB)"}}};
const SectionRegistrar reg(kMeasured);

const std::vector<std::string>& layer_only() {
  static const std::vector<std::string> v = {"layer", "schedule", "what"};
  return v;
}
const std::vector<std::string>& collective_only() {
  static const std::vector<std::string> v = {"op", "ranks", "nodes", "bytes"};
  return v;
}

}  // namespace

const Section& measured_csv_section() {
  return kMeasured;
}

std::vector<MeasuredRow> parse_measured_csv(const std::string& text, const std::string& name, const std::string& dir,
                                            const std::string& default_topology) {
  std::istringstream in(text);
  std::map<std::string, std::size_t> col;
  std::size_t columns = 0;
  std::string line;
  int lineno = 0;
  std::vector<MeasuredRow> rows;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = fmt::format("{}:{}", name, lineno);
    if (trim(line).empty() || trim(line)[0] == '#') continue;
    std::vector<std::string> f = split_csv(line, where);
    for (auto& s : f) s = trim(s);
    if (col.empty()) {
      for (std::size_t i = 0; i < f.size(); ++i) {
        bool known = false;
        for (const KeyDoc& k : kMeasured.keys) known = known || k.key == f[i];
        if (!known) {
          std::string names;
          for (const KeyDoc& k : kMeasured.keys) names += (names.empty() ? "" : ", ") + k.key;
          throw UserError(fmt::format("{}: column '{}': unknown column (the header's field {}); columns: {}", where,
                                      excerpt(f[i]), i + 1, names));
        }
        if (!col.emplace(f[i], i).second)
          throw UserError(fmt::format("{}: column '{}' appears twice in the header", where, f[i]));
      }
      for (const char* need : {"kind", "measured_us"})
        if (!col.count(need)) throw UserError(fmt::format("{}: missing column '{}'", where, need));
      columns = f.size();
      continue;
    }
    if (f.size() != columns)
      throw UserError(fmt::format("{}: {} fields, the header has {} (quote a field that holds a comma: \"B=4,E=32\")",
                                  where, f.size(), columns));
    auto get = [&](const std::string& c) {
      const auto it = col.find(c);
      return it == col.end() ? std::string() : f[it->second];
    };
    MeasuredRow r;
    r.line = lineno;
    r.where = where;
    r.name = get("name").empty() ? where : get("name");
    r.kind = get("kind");
    if (r.kind != "layer" && r.kind != "collective")
      throw UserError(fmt::format("{}: column 'kind': expected layer or collective, got '{}'", where, excerpt(r.kind)));
    {
      const std::string v = get("measured_us");
      double us = 0;
      std::size_t used = 0;
      try {
        us = std::stod(v, &used);
      } catch (const std::logic_error&) {
        used = 0;
      }
      if (v.empty() || used != v.size())
        throw UserError(
            fmt::format("{}: column 'measured_us': expected a time in microseconds, got '{}'", where, excerpt(v)));
      if (const std::string why = calib::measured_time_error(us); !why.empty())
        throw UserError(fmt::format("{}: column 'measured_us': expected a measured time in microseconds, got {}: {}",
                                    where, excerpt(v), why));
      r.measured_us = us;
    }
    // A column the row's kind does not read would be ignored: refused.
    for (const std::string& c : r.kind == "layer" ? collective_only() : layer_only())
      if (!get(c).empty())
        throw UserError(fmt::format("{}: column '{}': a {} row does not read it (it is for {} rows); leave it empty",
                                    where, c, r.kind, r.kind == "layer" ? "collective" : "layer"));
    r.topology = get("topology");
    if (r.topology.empty()) {
      if (default_topology.empty())
        throw UserError(
            fmt::format("{}: column 'topology' is empty and compare has no -t TOPOLOGY to use instead", where));
      r.topology = default_topology;
    } else if (std::filesystem::path(r.topology).is_relative() && !dir.empty()) {
      r.topology = (std::filesystem::path(dir) / r.topology).lexically_normal().string();
    }
    r.topo_set = get("topo_set");
    r.system = get("system");
    r.source = get("source");
    if (r.kind == "layer") {
      r.layer = get("layer");
      r.schedule = get("schedule");
      if (r.schedule.empty())
        throw UserError(
            fmt::format("{}: column 'schedule' is empty: a layer row says how parmsim runs it "
                        "(baseline, s1 or s2)",
                        where));
      r.what = get("what").empty() ? "total" : get("what");
      if (r.what != "forward" && r.what != "backward" && r.what != "total")
        throw UserError(
            fmt::format("{}: column 'what': expected forward, backward or total, got '{}'", where, excerpt(r.what)));
    } else {
      r.op = get("op");
      if (r.op.empty()) throw UserError(fmt::format("{}: column 'op' is empty: a collective row names its op", where));
      for (const char* c : {"ranks", "bytes"})
        if (get(c).empty())
          throw UserError(fmt::format("{}: column '{}' is empty: a collective row gives it", where, c));
      const std::int64_t ranks = positive_int(get("ranks"), "ranks", where);
      const std::int64_t nodes = get("nodes").empty() ? 1 : positive_int(get("nodes"), "nodes", where);
      if (ranks < 2 || ranks > (1 << 20))
        throw UserError(
            fmt::format("{}: column 'ranks': expected a group of 2 to {} ranks, got {}", where, 1 << 20, ranks));
      if (nodes > ranks || ranks % nodes != 0)
        throw UserError(
            fmt::format("{}: column 'nodes': {} ranks do not spread evenly over {} nodes", where, ranks, nodes));
      r.ranks = static_cast<int>(ranks);
      r.nodes = static_cast<int>(nodes);
      const std::string b = get("bytes");
      if (std::all_of(b.begin(), b.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        r.bytes = static_cast<std::uint64_t>(positive_int(b, "bytes", where));
      } else {
        std::string why;
        const auto v = units::parse_size(b, &why);
        if (!v || *v == 0)
          throw UserError(
              fmt::format("{}: column 'bytes': expected a size above 0 in bytes (1048576) or with a unit "
                          "(1MiB), got '{}'",
                          where, excerpt(b)));
        r.bytes = *v;
      }
    }
    rows.push_back(std::move(r));
  }
  if (col.empty()) throw UserError(fmt::format("{}: no header line", name));
  if (rows.empty()) throw UserError(fmt::format("{}: no data rows after the header", name));
  return rows;
}

std::vector<MeasuredRow> read_measured_csv(const std::string& path, const std::string& default_topology) {
  return parse_measured_csv(read_file(path), path, std::filesystem::path(path).parent_path().string(),
                            default_topology);
}

}  // namespace parmsim
