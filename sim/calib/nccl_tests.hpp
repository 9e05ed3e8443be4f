#pragma once
// Reads the text output of nccl-tests (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, alltoall_perf, sendrecv_perf): the "#  Rank ..." lines
// give the ranks and hosts, each data line a size and its out-of-place time.
#include <string>
#include <vector>

#include "sim/calib/fit.hpp"

namespace parmsim::calib {

struct NcclTable {
  std::string file;
  std::string op;  // parmsim's name: allreduce, allgather, reducescatter, alltoall, sendrecv
  int ranks = 0, hosts = 0;
  std::vector<Point> points;  // bytes (nccl-tests' size), seconds
};

// `op` overrides the collective (otherwise taken from the "Collective test
// starting" line or the file name). Throws ParmError naming file:line for a
// malformed data line, and when no data line or no op is found.
NcclTable read_nccl_tests_text(const std::string& file, const std::string& op = "");

// The JSON that nccl-tests writes with -J: "args" (the program first),
// "config" with "devices" (rank, hostname, ...), and "results" entries with
// "size" and "out_of_place" {"time" (us)} ("in_place" when out-of-place is null).
NcclTable read_nccl_tests_json(const std::string& file, const std::string& op = "");

// The same from text; `name` stands for the file (messages, the op from its name).
NcclTable parse_nccl_tests_text(const std::string& text, const std::string& name, const std::string& op = "");
NcclTable parse_nccl_tests_json(const std::string& text, const std::string& name, const std::string& op = "");

// Either format, by content: JSON when the file starts with '{'.
NcclTable read_nccl_tests(const std::string& file, const std::string& op = "");

}  // namespace parmsim::calib
