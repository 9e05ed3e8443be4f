#pragma once
// The task graph: the one intermediate representation that the simulator and
// every executor consume (docs/task-graph.md).
//
// - ranks 0..R-1, one per GPU;
// - buffers per rank (name, element count, dtype);
// - streams per rank: a stream runs its tasks in declaration order;
// - tasks: a compute op on one rank, or one rank's part of a collective;
// - edges: data dependencies, possibly across ranks and streams.
//
// A TaskGraph is immutable. It is made by TaskGraphBuilder::build(), which
// validates it: no dangling ids, no cycles (the message names the tasks on the
// cycle), every group member has exactly one part of each collective, buffers
// named by tasks exist on the task's rank.
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/graph/kernel_args.hpp"

namespace parmsim {

// fp8: e4m3/e5m2 tensor-core GEMMs (Hopper and later); one byte an element.
enum class DType { fp32, fp16, bf16, fp8 };
int dtype_bytes(DType d);
const char* to_string(DType d);
DType parse_dtype(const std::string& s);  // throws UserError

enum class CollOp { alltoall, alltoallv, allgather, reducescatter, allreduce, sendrecv, saa };
const char* to_string(CollOp op);
bool parse_coll_op(const std::string& s, CollOp* out);
// Empty when a `window` (peers in flight at once) paces op under algo ("" or
// "auto": the op's default); else why it would be ignored. Only the round-based
// algorithms take one: direct and p2p, and hierarchical's AlltoAll.
std::string window_unused(CollOp op, const std::string& algo);

// Compute op kinds. gemm is costed as compute-bound, the rest as memory-bound;
// host is time on the host thread that issues the GPU's work (no GPU work:
// its task's host_wait is its duration; made by the MoE layer's builder, not
// read from graph files).
enum class OpKind { gemm, softmax, topk, order, iorder, activation, elementwise, copy, slice, host };
const char* to_string(OpKind k);
bool parse_op_kind(const std::string& s, OpKind* out);

struct Buffer {
  int rank = 0;
  std::string name;
  std::uint64_t elems = 0;
  DType dtype = DType::fp32;
};

// A collective over `group` (ranks, in the collective's member order).
// `bytes` follows nccl-tests' "size": the AllReduce buffer; the AllGather
// output and the ReduceScatter input (whole, not per rank); the AlltoAll send
// buffer of one rank (bytes / p to each member); the message of a SendRecv
// (group[0] sends to group[1]); the AlltoAll input of one rank for SAA.
// AlltoAllv uses `matrix[i][j]` = bytes member i sends to member j.
// SAA (the fused AlltoAll + AllGather of Parm S2): members are in blocks of
// `inner` consecutive entries (the intra-node AllGather groups); the AlltoAll
// runs among members with the same index in their block.
struct Collective {
  int id = 0;
  std::string name;
  CollOp op = CollOp::allreduce;
  std::vector<int> group;
  std::uint64_t bytes = 0;
  std::vector<std::vector<std::uint64_t>> matrix;
  std::string algo;  // "" = the default for the op (auto: NCCL's choice)
  std::string proto;  // NCCL protocol for NCCL algorithms: "" = NCCL's choice, ll, ll128, simple
  int channels = 0;   // NCCL algorithms: the graph's channels (0 = NCCL's count)
  int window = 0;    // direct: peers in flight at once (0 = all)
  int inner = 0;     // saa: inner group size
  // Data, for executors (the simulator ignores these): every member sends
  // from `send_buf` (starting `send_offset` elements in) and receives into
  // `recv_buf`, buffers of the same names on each rank. The buffers are rows
  // of `row` elements of which only columns [col_begin, col_begin + col_count)
  // take part (col_count 0 = whole rows), so a collective can move one column
  // chunk of a pipelined pair. Empty names: no data (timing only).
  std::string send_buf, recv_buf;
  std::uint64_t send_offset = 0, send_count = 0;  // send_count 0 = to the end of send_buf
  std::vector<std::uint64_t> member_send_offset;  // per member; overrides send_offset when given
  std::uint64_t row = 0, col_begin = 0, col_count = 0;
};

enum class TaskKind { compute, collective };

// The kernel a compute task stands for, by name: the key of its calibration
// table (sim/calib: "expert_fc1", "bwd_gate_gemm") and of `compare`'s rows.
// An index into TaskGraph::kernel_names(); kNoKernel: none (no table applies).
using KernelId = std::uint32_t;
inline constexpr KernelId kNoKernel = ~KernelId{0};

// A compute op on the task's rank.
struct ComputeTask {
  OpKind op = OpKind::elementwise;
  DType dtype = DType::fp32;
  // Timing (executors ignore these): the small kernels this task stands for,
  // each paying the GPU's launch floor; and how long the GPU idles for the
  // host before it (a device-to-host sync drains the launch queue).
  int launches = 1;
  KernelId kernel = kNoKernel;
  std::uint64_t flops = 0;
  std::uint64_t bytes = 0;  // bytes read + written in memory
  Time host_wait;
  // gemm: {m, n, k} or {m, n, k, batch}; empty = unknown. Inline (a graph has
  // thousands of tasks: no allocation each).
  boost::container::small_vector<std::int64_t, 4> shape;
  // For executors: the kernel to run and its arguments (sim/graph/kernel_args.hpp);
  // std::monostate: timing only.
  KernelArgs args;
  KernelRole role() const { return role_of(args); }
};

// One rank's part of a collective.
struct CollectiveTask {
  int collective = -1;  // index into TaskGraph::collectives()
};

// A task: a header (identity, placement, buffers, dependencies) and its kind's fields.
struct Task {
  int id = 0;
  int rank = 0;
  int stream = 0;  // index into the rank's streams
  std::string name;
  std::vector<std::string> inputs, outputs;     // buffer names on `rank`
  boost::container::small_vector<int, 2> deps;  // task ids (most tasks have one or two: inline)
  std::variant<ComputeTask, CollectiveTask> body;

  TaskKind kind() const { return body.index() == 0 ? TaskKind::compute : TaskKind::collective; }
  bool is_compute() const { return body.index() == 0; }
  // The kind's fields; asking a task of the other kind throws std::bad_variant_access.
  const ComputeTask& compute() const { return std::get<ComputeTask>(body); }
  ComputeTask& compute() { return std::get<ComputeTask>(body); }
  int collective() const { return std::get<CollectiveTask>(body).collective; }
  // Makes this task the part of collective `c`.
  void set_collective(int c) { body = CollectiveTask{c}; }
};

class TaskGraph {
 public:
  int num_ranks() const { return num_ranks_; }
  const std::vector<std::string>& streams(int rank) const { return streams_[rank]; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<Task>& tasks() const { return tasks_; }
  const Task& task(int id) const { return tasks_[id]; }
  const std::vector<Collective>& collectives() const { return collectives_; }
  const Collective& collective(int id) const { return collectives_[id]; }
  // Task ids of each member's part, in the collective's member order.
  const std::vector<int>& parts(int collective) const { return parts_[collective]; }
  // Task ids in a topological order (stream order and edges respected).
  const std::vector<int>& topo_order() const { return topo_order_; }
  // Task ids that follow `id`: its dependents and its stream successor.
  std::span<const int> successors(int id) const {
    return {succ_.data() + succ_start_[id], succ_.data() + succ_start_[id + 1]};
  }
  // Number of predecessors (deps plus stream predecessor).
  int num_predecessors(int id) const { return npred_[id]; }
  // The name of a compute task's kernel (ComputeTask::kernel); "" for kNoKernel.
  std::string_view kernel_name(KernelId k) const {
    return k == kNoKernel ? std::string_view() : std::string_view(kernel_names_[k]);
  }
  const std::vector<std::string>& kernel_names() const { return kernel_names_; }

 private:
  friend class TaskGraphBuilder;
  int num_ranks_ = 0;
  std::vector<std::vector<std::string>> streams_;
  std::vector<Buffer> buffers_;
  std::vector<Task> tasks_;
  std::vector<Collective> collectives_;
  std::vector<std::vector<int>> parts_;
  std::vector<int> topo_order_;
  std::vector<int> succ_start_, succ_;  // successors of t: succ_[succ_start_[t] .. succ_start_[t + 1])
  std::vector<int> npred_;
  std::vector<std::string> kernel_names_;
};

class TaskGraphBuilder {
 public:
  explicit TaskGraphBuilder(int num_ranks);
  // Streams are per rank; add_stream on every rank gives the same names.
  int add_stream(int rank, const std::string& name);
  int add_stream_all(const std::string& name);          // returns the index (same on all ranks)
  int stream(int rank, const std::string& name) const;  // -1 if none
  void add_buffer(Buffer b);
  int add_collective(Collective c);  // id assigned
  int add_task(Task t);              // id assigned
  // A new default task, its id assigned, to fill in place (a Task is a few
  // hundred bytes: no moves). The reference lasts until the next task is added.
  Task& new_task();
  void add_dep(int task, int on);
  // The id of the kernel named `name` (ComputeTask::kernel), added on first use.
  KernelId kernel_id(std::string_view name);
  int num_tasks() const { return static_cast<int>(g_.tasks_.size()); }
  void reserve_tasks(std::size_t n) { g_.tasks_.reserve(n); }
  Task& task(int id) { return g_.tasks_[id]; }
  // Validates and freezes. Throws UserError with the offending names.
  TaskGraph build() &&;

  // Convenience: one task per member of `c` on stream `stream_name`, each
  // depending on `deps[rank]` when given. Returns the task ids in member order.
  std::vector<int> add_collective_tasks(Collective c, const std::string& stream_name, const std::string& task_prefix);

 private:
  TaskGraph g_;
  std::unordered_map<std::string, KernelId> kernel_ids_;
};

}  // namespace parmsim
