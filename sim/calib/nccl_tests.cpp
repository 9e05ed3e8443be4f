#include "sim/calib/nccl_tests.hpp"

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>

#include "sim/core/error.hpp"

namespace parmsim::calib {
namespace {

std::string op_from(const std::string& s) {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"all_reduce", "allreduce"}, {"all_gather", "allgather"}, {"reduce_scatter", "reducescatter"},
      {"alltoall", "alltoall"},    {"sendrecv", "sendrecv"}};
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

}  // namespace

NcclTable read_nccl_tests_text(const std::string& file, const std::string& op) {
  std::ifstream in(file);
  if (!in) throw ParmError(fmt::format("{}: cannot open file", file));
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
    // size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong
    double size = 0, time_us = 0;
    if (tok.size() < 11 || !number(tok[0], &size) || !number(tok[tok.size() - 8], &time_us) || size < 0 ||
        time_us <= 0)
      throw ParmError(fmt::format("{}:{}: expected an nccl-tests data line (size count type redop root time algbw "
                                  "busbw #wrong time algbw busbw #wrong), got '{}'",
                                  file, lineno, line));
    t.points.push_back({size, time_us * 1e-6});
  }
  if (t.op.empty()) t.op = op_from(file);
  if (t.op.empty())
    throw ParmError(fmt::format("{}: cannot tell which collective this is (no 'Collective test starting' line and "
                                "no all_reduce/all_gather/reduce_scatter/alltoall/sendrecv in the file name); give "
                                "--op",
                                file));
  if (t.points.empty()) throw ParmError(fmt::format("{}: no data lines", file));
  t.hosts = static_cast<int>(hosts.size());
  return t;
}

}  // namespace parmsim::calib
