#include "sim/calib/nccl_tests.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "sim/core/error.hpp"

namespace parmsim::calib {
namespace {

std::string op_from(const std::string& s) {
  static const std::vector<std::pair<std::string, std::string>> names = {{"all_reduce", "allreduce"},
                                                                         {"all_gather", "allgather"},
                                                                         {"reduce_scatter", "reducescatter"},
                                                                         {"alltoall", "alltoall"},
                                                                         {"sendrecv", "sendrecv"}};
  for (const auto& [k, v] : names)
    if (s.find(k) != std::string::npos) return v;
  return "";
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

std::string slurp(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ParmError(fmt::format("{}: cannot open file", file));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

NcclTable read_nccl_tests_text(const std::string& file, const std::string& op) {
  return parse_nccl_tests_text(slurp(file), file, op);
}

NcclTable parse_nccl_tests_text(const std::string& text, const std::string& file, const std::string& op) {
  std::istringstream in(text);
  NcclTable t;
  t.file = file;
  t.op = op;
  std::set<std::string> hosts;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const auto tok = tokens(line);
    if (tok.empty()) continue;
    if (tok[0] == "#" || tok[0][0] == '#') {
      // "#  Rank  0 Group  0 Pid 123 on host device  0 [0x07] NVIDIA H100"
      if (tok.size() > 8 && tok[1] == "Rank") {
        for (std::size_t i = 2; i + 1 < tok.size(); ++i)
          if (tok[i] == "on") {
            ++t.ranks;
            hosts.insert(tok[i + 1]);
            break;
          }
      }
      if (t.op.empty() && line.find("Collective test starting") != std::string::npos) t.op = op_from(line);
      continue;
    }
    // size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong [date time]
    auto tk = tok;
    if (tk.size() >= 13 && tk[tk.size() - 2].find('-') != std::string::npos && tk.back().find(':') != std::string::npos)
      tk.resize(tk.size() - 2);  // the -T timestamp column
    double size = 0, time_us = 0;
    if (tk.size() < 11 || !number(tk[0], &size) || !number(tk[tk.size() - 8], &time_us) || size < 0 || time_us <= 0)
      throw ParmError(
          fmt::format("{}:{}: expected an nccl-tests data line (size count type redop root time algbw "
                      "busbw #wrong time algbw busbw #wrong), got '{}'",
                      file, lineno, line));
    t.points.push_back({size, time_us * 1e-6});
  }
  if (t.op.empty()) t.op = op_from(file);
  if (t.op.empty())
    throw ParmError(
        fmt::format("{}: cannot tell which collective this is (no 'Collective test starting' line and "
                    "no all_reduce/all_gather/reduce_scatter/alltoall/sendrecv in the file name); give "
                    "--op",
                    file));
  if (t.points.empty()) throw ParmError(fmt::format("{}: no data lines", file));
  t.hosts = static_cast<int>(hosts.size());
  return t;
}

NcclTable read_nccl_tests_json(const std::string& file, const std::string& op) {
  return parse_nccl_tests_json(slurp(file), file, op);
}

NcclTable parse_nccl_tests_json(const std::string& text, const std::string& file, const std::string& op) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::size_t at = std::min<std::size_t>(e.byte, text.size());
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    throw ParmError(fmt::format("{}:{}: malformed JSON: {}", file, line, e.what()));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double (1e999): out_of_range.406 names the number ("... parsing '1e999'"),
    // not its place: the first occurrence of that text is where it is.
    const std::string msg = e.what();
    const auto q = msg.find('\'');
    const std::size_t at = q == std::string::npos ? 0 : text.find(msg.substr(q + 1, msg.rfind('\'') - q - 1));
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(at, text.size())), '\n');
    throw ParmError(fmt::format("{}:{}: malformed JSON: {}", file, line, msg));
  }
  NcclTable t;
  t.file = file;
  t.op = op;
  if (t.op.empty() && j.contains("args") && j["args"].is_array() && !j["args"].empty() && j["args"][0].is_string())
    t.op = op_from(j["args"][0].get<std::string>());
  if (t.op.empty()) t.op = op_from(file);
  if (t.op.empty())
    throw ParmError(
        fmt::format("{}: cannot tell which collective this is (args[0] names no nccl-tests program); "
                    "give --op",
                    file));
  std::set<std::string> hosts;
  if (j.contains("config") && j["config"].is_object() && j["config"].contains("devices"))
    for (const auto& d : j["config"]["devices"]) {
      ++t.ranks;
      if (d.contains("hostname") && d["hostname"].is_string()) hosts.insert(d["hostname"].get<std::string>());
    }
  t.hosts = static_cast<int>(hosts.size());
  if (!j.contains("results") || !j["results"].is_array())
    throw ParmError(fmt::format("{}: no \"results\" list (is this nccl-tests -J output?)", file));
  std::size_t i = 0;
  for (const auto& r : j["results"]) {
    const auto where = fmt::format("{}: results[{}]", file, i++);
    if (!r.is_object() || !r.contains("size") || !r["size"].is_number())
      throw ParmError(fmt::format("{}: expected an object with a numeric \"size\"", where));
    const nlohmann::json* body = nullptr;
    for (const char* k : {"out_of_place", "in_place"})
      if (r.contains(k) && r[k].is_object()) {
        body = &r[k];
        break;
      }
    if (!body) throw ParmError(fmt::format("{}: neither out_of_place nor in_place holds a result", where));
    const char* key = body->contains("time") ? "time" : "cpu_time";
    if (!body->contains(key) || !(*body)[key].is_number() || (*body)[key].get<double>() <= 0)
      throw ParmError(fmt::format("{}: expected a positive \"time\" in microseconds", where));
    t.points.push_back({r["size"].get<double>(), (*body)[key].get<double>() * 1e-6});
  }
  if (t.points.empty()) throw ParmError(fmt::format("{}: no results", file));
  return t;
}

NcclTable read_nccl_tests(const std::string& file, const std::string& op) {
  std::ifstream in(file);
  if (!in) throw ParmError(fmt::format("{}: cannot open file", file));
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  return c == '{' ? read_nccl_tests_json(file, op) : read_nccl_tests_text(file, op);
}

}  // namespace parmsim::calib
