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
  // 0 when the output lists no ranks (no "#  Rank" lines, no config.devices).
  // The text lists every rank (a process's list may be cut at about 22 lines:
  // nccl-tests' 2048-character buffer), the JSON one device per process: the
  // ranks are the processes times the header's nThread x nGpus.
  int ranks = 0, hosts = 0;
  int per_process = 0;        // nThread x nGpus from the header (0: no header)
  std::vector<Point> points;  // bytes (nccl-tests' size), seconds
};

// The collective parmsim calls `name`: its own names (allreduce, allgather,
// reducescatter, alltoall, sendrecv) or nccl-tests' (all_reduce,
// all_reduce_perf, ./build/all_gather_perf, ...); "" for anything else
// (broadcast, reduce, gather, scatter, hypercube).
std::string nccl_op(const std::string& name);

// `op` (--op, either spelling) names the collective when the output does not;
// when its "Collective test starting" line (JSON: args[0]) names another, or
// names a program parmsim cannot calibrate (broadcast_perf, ...), that is an
// error naming file:line. Otherwise the op comes from the file name. Throws
// UserError naming file:line for a malformed data line and for a row whose
// #wrong column (JSON: nwrong) is not 0 or N/A, and when no data line or no op
// is found.
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
