#pragma once
// Reads the text output of nccl-tests (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, alltoall_perf, sendrecv_perf): the "#  Rank ..." lines
// give the ranks and hosts, each data line a size and its out-of-place time.
// Lines may carry srun --label's task prefix ("0: "), as tables copied from
// Slurm jobs do.
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
  std::vector<Point> points;  // bytes (nccl-tests' size), seconds; no size twice
  // Where each point was read: its line (text) or its results index (JSON).
  std::vector<int> rows;
  bool json = false;
  // Text: the line the table starts at; a file may hold several tables (one
  // nccl-tests run after another), `index` of `tables`.
  int line = 1, index = 0, tables = 1;
  // The table in messages: the file, or "file:LINE" when the file holds several.
  std::string name() const;
  // Point i in messages: "file:LINE" (text) or "file: results[i]" (JSON).
  std::string row(std::size_t i) const;
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
// UserError naming file:line for a malformed data line, for a row whose
// #wrong column (JSON: nwrong) is not 0 or N/A, for a time that is not a
// measurement (not finite, not above 0, above calib::kMaxMeasuredUs), for a
// size measured twice in one table, and when no data line or no op is found.
//
// Several tables in one file (outputs of several runs concatenated: a
// "Collective test starting", "# nThread", "# Using devices", "#  Rank" or
// column header line after a table's data lines, or a second "Collective test
// starting" or "# nThread" line in one table's header) are read as several
// tables, each with its own op, ranks and hosts; a table without data lines is
// refused naming its line. The single-table readers refuse a file with
// several, naming the line where the second starts.
std::vector<NcclTable> read_nccl_tests_text_all(const std::string& file, const std::string& op = "");
NcclTable read_nccl_tests_text(const std::string& file, const std::string& op = "");

// The JSON that nccl-tests writes with -J: "args" (the program first),
// "config" with "devices" (rank, hostname, ...), and "results" entries with
// "size" and "out_of_place" {"time" (us)} ("in_place" when out-of-place is null).
NcclTable read_nccl_tests_json(const std::string& file, const std::string& op = "");

// The same from text; `name` stands for the file (messages, the op from its name).
std::vector<NcclTable> parse_nccl_tests_text_all(const std::string& text, const std::string& name,
                                                 const std::string& op = "");
NcclTable parse_nccl_tests_text(const std::string& text, const std::string& name, const std::string& op = "");
NcclTable parse_nccl_tests_json(const std::string& text, const std::string& name, const std::string& op = "");

// `--ranks N [--nodes M]`: the group of a table whose output does not list
// its ranks (published tables are often cut to their data lines). A table
// without rank lines takes N ranks on M hosts (M = 1 when not given; N a
// multiple of the header's ranks per process and of M); one whose rank lines
// or host names say otherwise is refused, naming both. `ranks` 0: nothing
// given. Returns what was assumed, for the import to print ("" when the table
// said it all); throws UserError naming the table and the option.
std::string apply_given_group(NcclTable& t, int ranks, int nodes);

// Either format, by content: JSON when the file starts with '{' (one table:
// nccl-tests -J writes one object per run).
std::vector<NcclTable> read_nccl_tests_all(const std::string& file, const std::string& op = "");
NcclTable read_nccl_tests(const std::string& file, const std::string& op = "");

}  // namespace parmsim::calib
