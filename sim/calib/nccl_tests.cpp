#include "sim/calib/nccl_tests.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
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

NcclTable read_nccl_tests_text(const std::string& file, const std::string& op) {
  return parse_nccl_tests_text(read_file(file), file, op);
}

NcclTable parse_nccl_tests_text(const std::string& text, const std::string& file, const std::string& op) {
  std::istringstream in(text);
  NcclTable t;
  t.file = file;
  std::set<std::string> hosts;
  std::string line, program, program_at;
  int lineno = 0, seen = 0, time_col = -1;
  std::vector<int> wrong_cols;  // data columns holding #wrong (from the column header)
  while (std::getline(in, line)) {
    ++lineno;
    const auto tok = tokens(line);
    if (tok.empty()) continue;
    if (tok[0] == "#" || tok[0][0] == '#') {
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
      if (tok.size() > 4 && tok[1] == "nThread" && tok[3] == "nGpus") {
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
      if (const auto at = line.find("Collective test starting:"); at != std::string::npos && program.empty()) {
        program = program_of(line.substr(at + 25));
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
        size != std::floor(size) || !(time_us > 0) || !std::isfinite(time_us))
      throw UserError(
          fmt::format("{}:{}: expected an nccl-tests data line (size count type redop root time algbw "
                      "busbw #wrong time algbw busbw #wrong), got '{}'",
                      file, lineno, line));
    const std::string where = fmt::format("{}:{}", file, lineno);
    for (std::size_t i = 0; i < wc.size(); ++i)
      check_wrong(tk[static_cast<std::size_t>(wc[i])], where, i == 0 ? "out-of-place" : "in-place", size, line);
    t.points.push_back({size, time_us * 1e-6});
  }
  t.op = resolve_op(file, program_at, program, op);
  if (t.op.empty())
    throw UserError(
        fmt::format("{}: cannot tell which collective this is (no 'Collective test starting' line and "
                    "no all_reduce/all_gather/reduce_scatter/alltoall/sendrecv in the file name); give "
                    "--op",
                    file));
  if (t.points.empty()) throw UserError(fmt::format("{}: no data lines", file));
  t.hosts = static_cast<int>(hosts.size());
  // Whole processes: a process's rank lines may be cut short (nccl-tests prints them into 2048 characters).
  t.ranks = t.per_process > 0 ? (seen + t.per_process - 1) / t.per_process * t.per_process : seen;
  return t;
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
  }
  if (t.points.empty()) throw UserError(fmt::format("{}: no results", file));
  return t;
}

NcclTable read_nccl_tests(const std::string& file, const std::string& op) {
  const std::string text = read_file(file);
  const std::size_t first = text.find_first_not_of(" \t\r\n\f\v");
  return first != std::string::npos && text[first] == '{' ? parse_nccl_tests_json(text, file, op)
                                                           : parse_nccl_tests_text(text, file, op);
}

}  // namespace parmsim::calib
