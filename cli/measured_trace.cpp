#include "cli/measured_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.hpp"
#include "sim/core/error.hpp"
#include "sim/io/csv.hpp"
#include "sim/moe/resources.hpp"
#include "sim/io/yaml_reader.hpp"

namespace parmsim::cli {

namespace {

// The executors' bound on ranks (cmd_exec.cpp's --gpus).
constexpr int kMaxRanks = 1024;

}  // namespace

TaskGraph graph_from_sidecar(const std::string& json_text, const std::string& name, const moe::LayerSpec& base,
                             std::uint64_t max_bytes, const std::string& max_why) {
  nlohmann::json side;
  try {
    YamlReader::load_string(json_text, name);  // strict JSON, no repeated key
    side = nlohmann::json::parse(json_text);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError(fmt::format("{}: {}", name, e.what()));
  }
  if (!side.is_object()) throw UserError(fmt::format("{}: expected a JSON object (parmsim execute's sidecar)", name));
  auto str = [&](const char* key, const std::string& def) {
    if (!side.contains(key)) return def;
    if (!side[key].is_string()) throw UserError(fmt::format("{}: key '{}': expected a string", name, key));
    return side[key].get<std::string>();
  };
  auto ranks = [&](const char* key, int def) {
    if (!side.contains(key)) return def;
    const auto& v = side[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > kMaxRanks)
      throw UserError(fmt::format("{}: key '{}': expected an integer in [1, {}], got {}", name, key, kMaxRanks,
                                  v.dump()));
    return static_cast<int>(v.get<std::int64_t>());
  };
  moe::LayerSpec s = base;
  moe::ScheduleOptions custom = moe::preset("s1");
  moe::apply_assignments(&s, &custom, split_assignments(str("layer", ""), name + ": key 'layer'"), name);
  const moe::ScheduleOptions o = moe::preset(str("schedule", "s2"));
  const int gpus = ranks("gpus", 8), node_gpus = ranks("node_gpus", 8);
  const moe::Dims d = moe::make_dims(s, gpus, node_gpus);
  // The executed graph (forward and backward in one) holds what the simulator's would.
  const moe::SimCost e = moe::estimate_schedule(s, d, o);
  if (side.contains("tasks")) {
    // The trace's own task count: layer keys describing a far larger graph are refused before it is
    // built (the estimate is within 25% of the built graph's tasks, tests/test_resources.cpp).
    const auto& t = side["tasks"];
    if (!t.is_number_integer() || t.get<std::int64_t>() < 1)
      throw UserError(fmt::format("{}: key 'tasks': expected a positive integer, got {}", name, excerpt(t.dump())));
    const double n = static_cast<double>(t.get<std::int64_t>());
    if (e.tasks > 2 * n + 64)
      throw UserError(fmt::format("{}: key 'layer' ({}) describes a graph of about {:.3g} tasks, but key 'tasks' says "
                                  "the trace has {}: the sidecar is not the one `parmsim execute` wrote with it",
                                  name, moe::spec_string(s), e.tasks, t.get<std::int64_t>()));
  }
  if (max_bytes > 0) {
    if (e.bytes > static_cast<double>(max_bytes))
      throw UserError(fmt::format("{}: the graph of this layer ({}) needs an estimated {}, above the {:.2f} GiB a run "
                                  "may use ({})",
                                  name, moe::spec_string(s), moe::describe(e),
                                  static_cast<double>(max_bytes) / (1u << 30), max_why));
  }
  const auto f = moe::forward_ops(s, d, o);
  return moe::build_training_graph(f, moe::backward_ops(f, s, d, o), s, d, o);
}

MeasuredRows read_trace_rows(const std::string& csv_text, const std::string& name, const TaskGraph& g) {
  std::istringstream in(csv_text);
  std::string line;
  std::getline(in, line);
  // Repeated GPU runs add the duration percentiles as two more columns.
  const std::string head = "task,name,rank,stream,kind,op,start_us,end_us,duration_us,bytes,flops";
  const std::size_t columns = line == head ? 11 : line == head + ",duration_p10_us,duration_p90_us" ? 13 : 0;
  if (columns == 0) throw UserError(fmt::format("{}:1: not a parmsim trace CSV header", name));
  const std::size_t n = g.tasks().size();
  MeasuredRows m{std::vector<double>(n, -1), std::vector<double>(n, 0), std::vector<double>(n, 0), 0};
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    const auto fl = split_csv(line, fmt::format("{}:{}", name, lineno));
    std::size_t id = 0;
    try {
      if (fl.size() != columns) throw std::invalid_argument("x");
      id = std::stoul(fl[0]);
      if (id >= n || fl[1] != g.task(static_cast<int>(id)).name) throw std::invalid_argument("x");
      if (m.duration[id] >= 0) throw UserError(fmt::format("{}:{}: a second row for task {}", name, lineno, id));
      m.duration[id] = std::stod(fl[8]);
      m.start[id] = std::stod(fl[6]);
      m.end[id] = std::stod(fl[7]);
      m.end_time = std::max(m.end_time, m.end[id]);
    } catch (const std::logic_error&) {
      throw UserError(fmt::format("{}:{}: row does not match task {} of the graph in {}.json", name, lineno, id, name));
    }
    if (!(std::isfinite(m.start[id]) && std::isfinite(m.end[id]) && std::isfinite(m.duration[id]) &&
          m.start[id] >= 0 && m.end[id] >= m.start[id] && m.duration[id] >= 0))
      throw UserError(fmt::format("{}:{}: start_us, end_us, duration_us: expected finite times with 0 <= start_us <= "
                                  "end_us and duration_us >= 0, got {}, {}, {}",
                                  name, lineno, fl[6], fl[7], fl[8]));
  }
  for (std::size_t i = 0; i < n; ++i)
    if (m.duration[i] < 0) throw UserError(fmt::format("{}: task '{}' has no row", name, g.task(i).name));
  return m;
}

}  // namespace parmsim::cli
