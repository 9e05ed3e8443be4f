#pragma once
// Helpers the NCCL-model tests share: a bundled topology by name, a collective
// over ranks 0..p-1, and the simulated time of one collective alone.
#include <string>
#include <utility>
#include <vector>

#include "sim/engine/simulator.hpp"
#include "sim/graph/task_graph.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::test {

inline Topology topo(const std::string& name, const std::vector<std::string>& set = {}) {
  return load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/" + name + ".yaml", set);
}

inline Collective all(CollOp op, int p, std::uint64_t bytes, std::string algo = "", std::string proto = "") {
  Collective c;
  c.name = "c";
  c.op = op;
  c.bytes = bytes;
  c.algo = std::move(algo);
  c.proto = std::move(proto);
  for (int r = 0; r < p; ++r) c.group.push_back(r);
  return c;
}

// The collective alone on `t` (the flow network), in microseconds.
inline double sim_us(const Topology& t, const Collective& c) {
  TaskGraphBuilder b(static_cast<int>(c.group.size()));
  b.add_stream_all("comm");
  b.add_collective_tasks(c, "comm", "c");
  const TaskGraph g = std::move(b).build();
  return simulate(g, t, {}).makespan.to_us();
}

}  // namespace parmsim::test
