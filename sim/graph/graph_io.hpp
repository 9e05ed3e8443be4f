#pragma once
// Loads a task graph from YAML or JSON (the format is documented in
// docs/task-graph.md and by `parmsim --help-config`).
#include <string>

#include "sim/graph/task_graph.hpp"

namespace parmsim {

TaskGraph load_task_graph(const std::string& file);
TaskGraph parse_task_graph_text(const std::string& text, const std::string& name);

}  // namespace parmsim
