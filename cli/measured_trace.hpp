#pragma once
// Reading what `parmsim execute --trace FILE` wrote, for `parmsim compare`: the
// JSON sidecar FILE.json (layer keys, schedule, ranks), from which the executed
// task graph is rebuilt, and the trace CSV, one row per task of that graph.
// Both take the text and a name for messages (fuzz/ feeds them bytes).
#include <cstdint>
#include <string>
#include <vector>

#include "sim/graph/task_graph.hpp"
#include "sim/moe/layer.hpp"

namespace parmsim::cli {

// The graph `parmsim execute` ran: `base` is the executors' default layer
// (exec::small_layer), overridden by the sidecar's "layer" keys. Throws
// UserError naming the file and the key for anything malformed, and one
// whose graph is estimated above `max_bytes` (0: no limit; sim/moe/resources.hpp)
// before it is built, naming `max_why`.
TaskGraph graph_from_sidecar(const std::string& json_text, const std::string& name, const moe::LayerSpec& base,
                             std::uint64_t max_bytes = 0, const std::string& max_why = "");

struct MeasuredRows {
  std::vector<double> duration, start, end;  // per task id, microseconds
  double end_time = 0;                       // the latest end
};
// Every task of `g` must have exactly one row; throws UserError naming file:line.
MeasuredRows read_trace_rows(const std::string& csv_text, const std::string& name, const TaskGraph& g);

}  // namespace parmsim::cli
