#pragma once
// Small graphs the executor and device tests share.
#include "sim/graph/task_graph.hpp"

namespace parmsim::test {

// One collective `c` over ranks 0..p-1 (named "c", on stream "comm"), with
// buffers "s" (send, send_elems) and "r" (receive, recv_elems) on every rank.
inline TaskGraph one_collective(Collective c, int p, std::uint64_t send_elems, std::uint64_t recv_elems) {
  TaskGraphBuilder b(p);
  b.add_stream_all("comm");
  for (int r = 0; r < p; ++r) {
    b.add_buffer({r, "s", send_elems, DType::fp32});
    b.add_buffer({r, "r", recv_elems, DType::fp32});
  }
  c.name = "c";
  c.send_buf = "s";
  c.recv_buf = "r";
  c.group.clear();
  for (int r = 0; r < p; ++r) c.group.push_back(r);
  b.add_collective_tasks(c, "comm", "c");
  return std::move(b).build();
}

}  // namespace parmsim::test
