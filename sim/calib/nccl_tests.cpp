#include "sim/calib/nccl_tests.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/io/output.hpp"

namespace parmsim::calib {
namespace {

const std::vector<std::pair<std::string, std::string>>& op_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {{"all_reduce", "allreduce"},
                                                                         {"all_gather", "allgather"},
                                                                         {"reduce_scatter", "reducescatter"},
                                                                         {"alltoall", "alltoall"},
                                                                         {"sendrecv", "sendrecv"}};
  return names;
}

std::string op_from(const std::string& s) {
  for (const auto& [k, v] : op_names())
    if (s.find(k) != std::string::npos) return v;
  return "";
}

// The program a "Collective test starting: ./build/all_reduce_perf" line or args[0] names, without its folder.
std::string program_of(const std::string& s) {
  std::string p = s;
  while (!p.empty() && std::isspace(static_cast<unsigned char>(p.back()))) p.pop_back();
  while (!p.empty() && std::isspace(static_cast<unsigned char>(p.front()))) p.erase(p.begin());
  if (const auto slash = p.find_last_of('/'); slash != std::string::npos) p = p.substr(slash + 1);
  return p;
}

// The op a table says it holds (`program`, at `where`) against --op: the table wins, a mismatch is an error.
std::string resolve_op(const std::string& file, const std::string& where, const std::string& program,
                       const std::string& given) {
  const std::string want = given.empty() ? "" : nccl_op(given);
  if (!given.empty() && want.empty())
    throw UserError(fmt::format("--op '{}': calibrate imports allreduce, allgather, reducescatter, alltoall or "
                                "sendrecv (nccl-tests' all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                                "alltoall_perf, sendrecv_perf)",
                                given));
  if (!program.empty()) {
    const std::string has = nccl_op(program);
    if (has.empty())
      throw UserError(fmt::format("{}: the table is {}'s: calibrate imports all_reduce_perf, all_gather_perf, "
                                  "reduce_scatter_perf, alltoall_perf and sendrecv_perf tables",
                                  where, program));
    if (!want.empty() && want != has)
      throw UserError(fmt::format("{}: the table is {}'s ({}), not --op {}'s; leave --op out, or import the {} table",
                                  where, program, has, given, want));
    return has;
  }
  if (!want.empty()) return want;
  return op_from(std::filesystem::path(file).filename().string());
}

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream is(line);
  std::vector<std::string> t;
  for (std::string w; is >> w;) t.push_back(w);
  return t;
}

bool number(const std::string& s, double* v) {
  try {
    std::size_t used = 0;
    *v = std::stod(s, &used);
    return used == s.size();
  } catch (const std::logic_error&) {
    return false;
  }
}

// "0" or "N/A" (validation off: -c 0) is fine; a positive count is refused.
void check_wrong(const std::string& cell, const std::string& where, const char* which, double size,
                 const std::string& line) {
  if (cell == "N/A") return;
  double n = 0;
  if (!number(cell, &n) || !(n >= 0))
    throw UserError(fmt::format("{}: expected a count or N/A in the {} #wrong column, got '{}' in '{}'", where, which,
                                cell, line));
  if (n > 0)
    throw UserError(fmt::format("{}: #wrong is {} ({}) at size {:.0f}: nccl-tests found wrong results in this run; "
                                "its times are not a measurement to calibrate from",
                                where, cell, which, size));
}

}  // namespace

std::string nccl_op(const std::string& name) {
  for (const auto& [k, v] : op_names())
    if (name == v) return v;
  const std::string p = program_of(name);
  for (const auto& [k, v] : op_names())
    if (p == k || p == k + "_perf" || p == k + "_perf_mpi") return v;
  return "";
}

std::string NcclTable::name() const { return tables > 1 ? fmt::format("{}:{}", file, line) : file; }

std::string NcclTable::row(std::size_t i) const {
  if (i >= rows.size()) return name();
  return json ? fmt::format("{}: results[{}]", file, rows[i]) : fmt::format("{}:{}", file, rows[i]);
}

namespace {

// A repeated size in one table is refused, not averaged: `where` names the second row in full, `label` it
// briefly ("line 17", "results[2]") for a later repeat's message.
void check_new_size(std::map<double, std::string>& sizes, double size, const std::string& where,
                    const std::string& label) {
  // 0-byte rows (nccl-tests prints one for each size too small to split among the ranks, e.g. all_gather_perf
  // -b 8 on 4 ranks) measure no size and every consumer drops them: they may repeat.
  if (size == 0) return;
  if (const auto [it, fresh] = sizes.emplace(size, label); !fresh)
    throw UserError(fmt::format("{}: size {:.0f} appears twice in one table (first at {}); repeated sizes are not "
                                "averaged: a table holds one run (one -N cycle), one row per size",
                                where, size, it->second));
}

// The table `t` read from text: its op, ranks and hosts from what its header said.
void finish_text_table(NcclTable& t, const std::string& program, const std::string& program_at,
                       const std::string& op, int seen, std::size_t hosts) {
  t.op = resolve_op(t.file, program_at, program, op);
  if (t.op.empty())
    throw UserError(
        fmt::format("{}: cannot tell which collective this is (no 'Collective test starting' line and "
                    "no all_reduce/all_gather/reduce_scatter/alltoall/sendrecv in the file name); give "
                    "--op",
                    t.name()));
  if (t.points.empty())
    throw UserError(t.tables > 1
                        ? fmt::format("{}:{}: the table starting here has no data lines", t.file, t.line)
                        : fmt::format("{}: no data lines", t.file));
  t.hosts = static_cast<int>(hosts);
  // Whole processes: a process's rank lines may be cut short (nccl-tests prints them into 2048 characters).
  t.ranks = t.per_process > 0 ? (seen + t.per_process - 1) / t.per_process * t.per_process : seen;
}

}  // namespace

std::vector<NcclTable> read_nccl_tests_text_all(const std::string& file, const std::string& op) {
  return parse_nccl_tests_text_all(read_file(file), file, op);
}

NcclTable read_nccl_tests_text(const std::string& file, const std::string& op) {
  return parse_nccl_tests_text(read_file(file), file, op);
}

namespace {
NcclTable only_table(std::vector<NcclTable> ts) {
  if (ts.size() > 1)
    throw UserError(fmt::format("{}:{}: a second table starts here ({} tables in one file); import the file with "
                                "calibrate --import-nccl-tests, which reads each table",
                                ts[1].file, ts[1].line, ts.size()));
  return std::move(ts.at(0));
}
}  // namespace

NcclTable parse_nccl_tests_text(const std::string& text, const std::string& file, const std::string& op) {
  return only_table(parse_nccl_tests_text_all(text, file, op));
}

std::vector<NcclTable> parse_nccl_tests_text_all(const std::string& text, const std::string& file,
                                                 const std::string& op) {
  std::istringstream in(text);
  std::vector<NcclTable> out;
  // The table being read and what its header said.
  NcclTable t;
  std::set<std::string> hosts;
  std::map<double, std::string> sizes;  // size -> the row that measured it
  std::string line, program, program_at;
  int lineno = 0, seen = 0, time_col = -1;
  bool has_nthread = false;
  std::vector<int> wrong_cols;  // data columns holding #wrong (from the column header)
  auto start_table = [&](int at) {
    t = NcclTable{};
    t.file = file;
    t.line = at;
    t.index = static_cast<int>(out.size());
    hosts.clear();
    sizes.clear();
    program.clear();
    program_at.clear();
    seen = 0, time_col = -1, has_nthread = false;
    wrong_cols.clear();
  };
  auto end_table = [&](bool more) {
    t.tables = more || t.index > 0 ? 2 : 1;  // several or not, for messages; the count is set at the end
    finish_text_table(t, program, program_at, op, seen, hosts.size());
    out.push_back(std::move(t));
  };
  start_table(1);
  while (std::getline(in, line)) {
    ++lineno;
    auto tok = tokens(line);
    if (tok.empty()) continue;
    // srun --label's "N: " before every line (a table copied from a Slurm job's output).
    if (tok.size() > 1 && tok[0].size() > 1 && tok[0].back() == ':' &&
        std::all_of(tok[0].begin(), tok[0].end() - 1, [](char ch) { return ch >= '0' && ch <= '9'; })) {
      line = line.substr(line.find(':') + 1);
      tok.erase(tok.begin());
    }
    if (tok[0] == "#" || tok[0][0] == '#') {
      const auto starting = line.find("Collective test starting:");
      const bool nthread = tok.size() > 4 && tok[1] == "nThread" && tok[3] == "nGpus";
      const bool header = starting != std::string::npos || nthread ||
                          (tok.size() > 1 && (tok[1] == "Rank" || (tok[1] == "Using" && tok.size() > 2 &&
                                                                   tok[2] == "devices"))) ||
                          (tok.size() > 6 && tok[0] == "#" && tok[1] == "size");
      // A header line after this table's data, or a second start or nThread line: the next run's table.
      if (header && (!t.points.empty() || (starting != std::string::npos && !program.empty()) ||
                     (nthread && has_nthread))) {
        end_table(true);
        start_table(lineno);
      }
      // "#  Rank  0 Group  0 Pid 123 on host device  0 [0x07] NVIDIA H100"
      if (tok.size() > 8 && tok[1] == "Rank") {
        double r = 0;
        for (std::size_t i = 2; i + 1 < tok.size(); ++i)
          if (tok[i] == "on") {
            hosts.insert(tok[i + 1]);
            seen = number(tok[2], &r) && r >= 0 && r < (1 << 20) ? std::max(seen, static_cast<int>(r) + 1) : seen + 1;
            break;
          }
      }
      // "# nThread 1 nGpus 4 minBytes ...": ranks per process.
      if (nthread) {
        has_nthread = true;
        double th = 0, g = 0;
        if (number(tok[2], &th) && number(tok[4], &g) && th >= 1 && g >= 1 && th * g < (1 << 20))
          t.per_process = static_cast<int>(th * g);
      }
      // The column header "#  size count type redop root time algbw busbw #wrong time ... #wrong": where the
      // out-of-place time and the #wrong counts are (older versions have no root column and an "error" column,
      // a largest deviation, not a count; -B and per-iteration runs add columns).
      if (tok.size() > 6 && tok[0] == "#" && tok[1] == "size" && time_col < 0) {
        for (std::size_t i = 1; i < tok.size(); ++i) {
          if (time_col < 0 && (tok[i] == "time" || tok[i] == "cputime")) time_col = static_cast<int>(i) - 1;
          if (tok[i] == "#wrong") wrong_cols.push_back(static_cast<int>(i) - 1);
        }
      }
      if (starting != std::string::npos && program.empty()) {
        program = program_of(line.substr(starting + 25));
        program_at = fmt::format("{}:{}", file, lineno);
      }
      continue;
    }
    // size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong [date time]
    auto tk = tok;
    if (tk.size() >= 13 && tk[tk.size() - 2].find('-') != std::string::npos && tk.back().find(':') != std::string::npos)
      tk.resize(tk.size() - 2);  // the -T timestamp column
    // Without a column header: the time 8 columns from the end, and #wrong where nccl-tests' 13 columns have it.
    const int tc = time_col >= 0 ? time_col : static_cast<int>(tk.size()) - 8;
    std::vector<int> wc = wrong_cols;
    if (time_col < 0 && tk.size() == 13) wc = {8, 12};
    int need = std::max(11, tc + 1);
    for (const int c : wc) need = std::max(need, c + 1);
    double size = 0, time_us = 0;
    if (static_cast<int>(tk.size()) < need || tc < 0 || !number(tk[0], &size) ||
        !number(tk[static_cast<std::size_t>(tc)], &time_us) || !(size >= 0) || !std::isfinite(size) ||
        size != std::floor(size))
      throw UserError(
          fmt::format("{}:{}: expected an nccl-tests data line (size count type redop root time algbw "
                      "busbw #wrong time algbw busbw #wrong), got '{}'",
                      file, lineno, excerpt(line)));
    if (const std::string why = measured_time_error(time_us); !why.empty())
      throw UserError(fmt::format("{}:{}: expected an nccl-tests data line with a measured out-of-place time, got "
                                  "{} us at size {:.0f}: {}",
                                  file, lineno, tk[static_cast<std::size_t>(tc)], size, why));
    const std::string where = fmt::format("{}:{}", file, lineno);
    for (std::size_t i = 0; i < wc.size(); ++i)
      check_wrong(tk[static_cast<std::size_t>(wc[i])], where, i == 0 ? "out-of-place" : "in-place", size, line);
    check_new_size(sizes, size, where, fmt::format("line {}", lineno));
    t.points.push_back({size, time_us * 1e-6});
    t.rows.push_back(lineno);
  }
  end_table(false);
  for (NcclTable& x : out) x.tables = static_cast<int>(out.size());
  return out;
}

NcclTable read_nccl_tests_json(const std::string& file, const std::string& op) {
  return parse_nccl_tests_json(read_file(file), file, op);
}

NcclTable parse_nccl_tests_json(const std::string& text, const std::string& file, const std::string& op) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::size_t at = std::min<std::size_t>(e.byte, text.size());
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    throw UserError(fmt::format("{}:{}: malformed JSON: {}", file, line, e.what()));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double (1e999): out_of_range.406 names the number ("... parsing '1e999'"),
    // not its place: the first occurrence of that text is where it is.
    const std::string msg = e.what();
    const auto q = msg.find('\'');
    const std::size_t at = q == std::string::npos ? 0 : text.find(msg.substr(q + 1, msg.rfind('\'') - q - 1));
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(at, text.size())), '\n');
    throw UserError(fmt::format("{}:{}: malformed JSON: {}", file, line, msg));
  }
  NcclTable t;
  t.file = file;
  t.json = true;
  std::string program;
  if (j.contains("args") && j["args"].is_array() && !j["args"].empty() && j["args"][0].is_string())
    program = program_of(j["args"][0].get<std::string>());
  t.op = resolve_op(file, file + ": args[0]", program, op);
  if (t.op.empty())
    throw UserError(
        fmt::format("{}: cannot tell which collective this is (args[0] names no nccl-tests program); "
                    "give --op",
                    file));
  std::set<std::string> hosts;
  if (j.contains("config") && j["config"].is_object()) {
    const auto& cfg = j["config"];
    // config.devices: one entry per process (its first rank); each process runs nthreads x ngpus ranks.
    auto count = [&](const char* k) {
      if (!cfg.contains(k)) return 1;
      if (!cfg[k].is_number_integer() || cfg[k].get<long long>() < 1 || cfg[k].get<long long>() > 1024)
        throw UserError(fmt::format("{}: config.{}: expected an integer in [1, 1024]", file, k));
      return static_cast<int>(cfg[k].get<long long>());
    };
    t.per_process = count("nthreads") * count("ngpus");
    if (cfg.contains("devices") && cfg["devices"].is_array()) {
      for (const auto& d : cfg["devices"]) {
        t.ranks += t.per_process;
        if (d.is_object() && d.contains("hostname") && d["hostname"].is_string())
          hosts.insert(d["hostname"].get<std::string>());
      }
    }
  }
  t.hosts = static_cast<int>(hosts.size());
  if (!j.contains("results") || !j["results"].is_array())
    throw UserError(fmt::format("{}: no \"results\" list (is this nccl-tests -J output?)", file));
  std::size_t i = 0;
  std::map<double, std::string> sizes;  // size -> the result that measured it
  for (const auto& r : j["results"]) {
    const auto where = fmt::format("{}: results[{}]", file, i++);
    if (!r.is_object() || !r.contains("size") || !r["size"].is_number())
      throw UserError(fmt::format("{}: expected an object with a numeric \"size\"", where));
    const nlohmann::json* body = nullptr;
    for (const char* k : {"out_of_place", "in_place"})
      if (r.contains(k) && r[k].is_object()) {
        body = &r[k];
        break;
      }
    if (!body) throw UserError(fmt::format("{}: neither out_of_place nor in_place holds a result", where));
    const char* key = body->contains("time") ? "time" : "cpu_time";
    if (!body->contains(key) || !(*body)[key].is_number() || !((*body)[key].get<double>() > 0) ||
        !std::isfinite((*body)[key].get<double>()))
      throw UserError(fmt::format("{}: expected a positive \"time\" in microseconds", where));
    const double size = r["size"].get<double>();
    if (!(size >= 0) || !std::isfinite(size) || size != std::floor(size))
      throw UserError(fmt::format("{}: expected a whole, non-negative \"size\" in bytes", where));
    if (const std::string why = measured_time_error((*body)[key].get<double>()); !why.empty())
      throw UserError(fmt::format("{}: expected a positive \"{}\" in microseconds, got {} at size {:.0f}: {}", where,
                                  key, (*body)[key].dump(), size, why));
    check_new_size(sizes, size, where, fmt::format("results[{}]", i - 1));
    // nwrong: a count, or null when validation was off (-c 0).
    for (const char* k : {"out_of_place", "in_place"}) {
      if (!r.contains(k) || !r[k].is_object() || !r[k].contains("nwrong") || r[k]["nwrong"].is_null()) continue;
      const auto& w = r[k]["nwrong"];
      if (!w.is_number() || !(w.get<double>() >= 0))
        throw UserError(fmt::format("{}.{}.nwrong: expected a count or null", where, k));
      if (w.get<double>() > 0)
        throw UserError(fmt::format("{}.{}.nwrong is {} at size {:.0f}: nccl-tests found wrong results in this run; "
                                    "its times are not a measurement to calibrate from",
                                    where, k, w.dump(), size));
    }
    t.points.push_back({size, (*body)[key].get<double>() * 1e-6});
    t.rows.push_back(static_cast<int>(i - 1));
  }
  if (t.points.empty()) throw UserError(fmt::format("{}: no results", file));
  return t;
}

std::string apply_given_group(NcclTable& t, int ranks, int nodes) {
  if (ranks <= 0) return "";
  const int hosts = nodes > 0 ? nodes : 1;
  if (t.ranks > 0) {
    if (t.ranks != ranks)
      throw UserError(fmt::format("{}: --ranks {}: the table lists {} ranks ({}); leave --ranks out for it, or import "
                                  "it apart",
                                  t.name(), ranks, t.ranks, t.json ? "config.devices" : "its '#  Rank' lines"));
    if (nodes > 0 && t.hosts > 0 && t.hosts != nodes)
      throw UserError(fmt::format("{}: --nodes {}: the table's ranks run on {} host(s)", t.name(), nodes, t.hosts));
    if (nodes > 0 && t.hosts == 0) {
      t.hosts = nodes;
      return fmt::format("{}: its {} ranks name no hosts; assumed {} node(s) (--nodes {})", t.name(), ranks, nodes,
                         nodes);
    }
    return "";
  }
  if (t.per_process > 0 && ranks % t.per_process != 0)
    throw UserError(fmt::format("{}: --ranks {}: the header runs {} rank(s) per process (nThread x nGpus), so the "
                                "group is a multiple of {}",
                                t.name(), ranks, t.per_process, t.per_process));
  if (ranks % hosts != 0)
    throw UserError(fmt::format("{}: --ranks {} --nodes {}: the ranks do not spread evenly over the nodes", t.name(),
                                ranks, hosts));
  t.ranks = ranks;
  t.hosts = hosts;
  return fmt::format("{}: no rank lines; assumed {} ranks on {} node(s), {} per node (--ranks {}{})", t.name(), ranks,
                     hosts, ranks / hosts, ranks, nodes > 0 ? fmt::format(" --nodes {}", nodes) : "; no --nodes: one");
}

std::vector<NcclTable> read_nccl_tests_all(const std::string& file, const std::string& op) {
  const std::string text = read_file(file);
  const std::size_t first = text.find_first_not_of(" \t\r\n\f\v");
  if (first != std::string::npos && text[first] == '{') return {parse_nccl_tests_json(text, file, op)};
  return parse_nccl_tests_text_all(text, file, op);
}

NcclTable read_nccl_tests(const std::string& file, const std::string& op) {
  return only_table(read_nccl_tests_all(file, op));
}

}  // namespace parmsim::calib
