// Task graphs of a layer's op lists, with the data bindings executors use.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <span>

#include "sim/core/error.hpp"
#include "sim/core/format_into.hpp"
#include "sim/moe/layer.hpp"
#include "sim/moe/layer_kernels.hpp"

namespace parmsim::moe {

// ---------------------------------------------------------------- task graph

namespace {

// The builder also gives every task its data: buffers (the same names on
// every rank), the kernel to run and its arguments (sim/graph/kernel_args.hpp),
// so that executors can run the graph with real tensors. The simulator
// ignores the data. Tracked state: the buffer the next op reads, the current
// expert capacity C, and the layout of combine-side buffers (SlotLayout).
class GraphBuilder {
 public:
  GraphBuilder(const LayerSpec& s, const Dims& d, const ScheduleOptions& o, GraphData data = GraphData::bound)
      : s_(s), d_(d), o_(o), data_(data == GraphData::bound), g_(make_groups(d.P, d.G, d.n_ep)), b_(d.P), prev_(d.P, -1) {
    // About 20 tasks per rank for a layer's forward or backward pass and 3 per
    // local expert run one after another (1056 for the backward pass of the
    // default layer on 32 GPUs, 4 experts each): reserved, so the task array
    // (a Task is a few hundred bytes) is not moved as it grows.
    b_.reserve_tasks(static_cast<std::size_t>(d.P) * static_cast<std::size_t>(24 + 4 * expert_repeats(s, d)));
    b_.add_stream_all("compute");
    b_.add_stream_all("comm");
    b_.add_stream_all("rs");
    if (host_on()) {
      b_.add_stream_all("host");
      sync_.assign(static_cast<std::size_t>(d.P), -1);
    }
    if (allgather() && data_)
      throw UserError("key 'token_dispatcher': allgather is simulated only; verify and execute run the AlltoAll "
                      "dispatcher (token_dispatcher=alltoall)");
    if (s.load) {
      // Dropless routing is timed, not executed: the executors' kernels work on capacity buffers.
      if (data_)
        throw UserError("key 'load': dropless routing is simulated only; verify and execute run the capacity-factor "
                        "layer (load=capacity)");
      load_ = draw_layer_load(s, d);
    }
    const std::int64_t M = s.M, h = s.H / d.G;
    buf("x", d.S * M);
    buf("Wg", M * s.E);
    buf("W1", d.E_local * M * h);
    buf("W2", d.E_local * h * M);
  }

  void add(const MoeOp& op) {
    if (op.backward && !in_backward_) start_backward();
    // fp8_wire: rows sent before a layer's experts (its gate starts a layer, forward and backward).
    if (op.kind == MoeStep::gate) wire_seen_ = false;
    if (op.kind == MoeStep::experts) wire_seen_ = true;
    if (allgather()) return add_timed(op);
    switch (op.kind) {
      case MoeStep::gate:
        return op.backward ? gate_bwd(op) : gate(op);
      case MoeStep::order:
        return op.backward ? order_bwd(op) : order(op);
      case MoeStep::slot_slice:
        return slot_slice(op);
      case MoeStep::experts:
        return op.backward ? experts_bwd(op) : experts(op);
      case MoeStep::iorder:
        return op.backward ? iorder_bwd(op) : iorder(op);
      case MoeStep::kernel:
        return kernel_task(op);
      case MoeStep::shared:  // timing only: the executors refuse shared_H (backend/verify.cpp)
        return timing_only(kernels(op, s_, d_), op.backward);
      case MoeStep::split:
      case MoeStep::mp_gather_free:
        return;  // views: no work, no task
      case MoeStep::rs_then:
        return rs_then(op);
      case MoeStep::a2a:
        return coll_step(CollOp::alltoall, GroupKind::ep, op, 1);
      case MoeStep::saa:
        return coll_step(CollOp::saa, GroupKind::world, op, d_.G);
      case MoeStep::rs:
        return coll_step(CollOp::reducescatter, op.group, op, 0);
      case MoeStep::ag:
        if (op.data == CollData::route) {
          collective(CollOp::allgather, GroupKind::mp, op.elems, "comm", op.label, "route", "route_all", 0, 1);
          buf("route_all", op.elems);
          route_ = "route_all";
          return;
        }
        if (op.data == CollData::token_rows && op.backward && dx_started_) {
          // MP-Split's adjoint after the gate: gather every member's dx rows.
          buf("dx", d_.S * s_.M);
          collective(CollOp::allgather, GroupKind::mp, op.elems, "comm", op.label, "dxl", "dx", 0, s_.M);
          return;
        }
        if (op.data == CollData::token_rows && !op.backward && cur_ == "outl") {
          buf("out", d_.S * s_.M);
          collective(CollOp::allgather, GroupKind::mp, op.elems, "comm", op.label, "outl", "out", 0, s_.M);
          cur_ = "out";
          return;
        }
        return coll_step(CollOp::allgather, op.group, op, -1);
      case MoeStep::ar: {
        // In place: the ESP AllReduce on the current buffer, or the gate gradient's over MP.
        const bool gate_grad = op.data == CollData::gate_grad;
        const std::string target = gate_grad ? "dWg" : cur_;
        collective(CollOp::allreduce, op.group, op.elems, "comm", op.label, target, target, 0, gate_grad ? s_.E : s_.M);
        return;
      }
    }
  }

  // The baseline under Megatron-Core's AllGather token dispatcher
  // (schedule_ops.cpp): simulated only (the constructor refuses data), so its
  // ops are timed without buffers: kernels in order on the compute stream,
  // collectives over their groups, each expert's kernels per local expert
  // (the drawn rows under a load model).
  bool allgather() const { return !o_.parm && s_.token_dispatcher == TokenDispatcher::allgather; }
  void add_timed(const MoeOp& op) {
    switch (op.kind) {
      case MoeStep::split:
      case MoeStep::mp_gather_free:
        return;
      case MoeStep::experts: {
        const std::int64_t n = expert_repeats(s_, d_);
        if (load_) return dropless_experts(op, n);
        const auto ks = kernels(op, s_, d_);
        for (std::int64_t e = 0; e < n; ++e) timing_only(ks, op.backward);
        return;
      }
      case MoeStep::ag:
      case MoeStep::rs:
      case MoeStep::ar:
        // fp8 layers: the token AllGather before the experts (and its backward counterpart,
        // the ReduceScatter's adjoint) moves fp8 rows, as fp8_wire says of every dispatch.
        wire_fp8_ = fp8_wire(d_, op.kind, op.data, wire_seen_);
        collective(op.kind == MoeStep::ag   ? CollOp::allgather
                   : op.kind == MoeStep::rs ? CollOp::reducescatter
                                            : CollOp::allreduce,
                   op.group, op.elems, "comm", op.label, "", "", 0, s_.M);
        wire_fp8_ = false;
        return;
      case MoeStep::a2a:
      case MoeStep::saa:
      case MoeStep::rs_then:
        throw InternalError(fmt::format("the AllGather dispatcher has no op '{}'", op.label));
      default:
        return timing_only(kernels(op, s_, d_), op.backward);
    }
  }

  TaskGraph build() && { return std::move(b_).build(); }
  // Dry: ops set up buffers and state but emit no tasks (a backward-only
  // graph replays its forward pass this way).
  void set_dry(bool dry) { dry_ = dry; }

 private:
  static std::int64_t cdiv(std::int64_t n, std::int64_t c) { return (n + c - 1) / c; }
  int mp_index(int r) const { return r % d_.G; }

  void buf(const std::string& name, std::int64_t elems) {
    auto it = size_.find(name);
    if (it != size_.end()) {
      if (it->second != elems)
        throw InternalError(fmt::format("buffer '{}' declared with {} and {} elements", name, it->second, elems));
      return;
    }
    size_[name] = elems;
    if (!data_) return;
    // Routing metadata (expert, slot, weight triples; gate probabilities and
    // their gradients) stays fp32; activations and weights are of the layer's dtype.
    const bool meta = name == "route" || name == "route_all" || name == "probs" || name == "dw";
    const DType dt = meta ? DType::fp32 : s_.dtype;
    for (int r = 0; r < d_.P; ++r) b_.add_buffer({r, name, static_cast<std::uint64_t>(elems), dt});
  }

  void start_backward() {
    in_backward_ = true;
    buf("dout", d_.S * s_.M);
    buf("dWg", s_.M * s_.E);
    buf("dW1", size_["W1"]);
    buf("dW2", size_["W2"]);
    cur_ = "dout";
    offset_next_ = false;
    experts_seen_ = false;
    wire_seen_ = false;  // the backward pass's rows before its experts (the combine's adjoint) are fp8
  }

  void chain(int rank, int task) {
    if (prev_[rank] >= 0) b_.add_dep(task, prev_[rank]);
    prev_[rank] = task;
  }

  bool host_on() const { return s_.host_op > Time::zero(); }

  // The host's task on rank r issuing `launches` kernel launches or collective
  // calls (stream host, which runs them in issue order); after a sync it first
  // waits for the GPU to reach the sync.
  int host_task(int r, int launches) {
    if (host_kernel_ == kNoKernel) host_kernel_ = b_.kernel_id("host");
    Task& t = b_.new_task();
    format_into(t.name, FMT_COMPILE("host#{}@{}"), host_n_++, r);
    t.rank = r;
    t.stream = kHostStream;
    ComputeTask& c = t.compute();
    c.op = OpKind::host;
    c.kernel = host_kernel_;
    c.dtype = s_.dtype;
    c.host_wait = s_.host_op * launches;
    const int id = t.id;
    if (sync_[r] >= 0) b_.add_dep(id, sync_[r]);
    sync_[r] = -1;
    return id;
  }

  // Rank r's task of kernel k on the compute stream, after the rank's last
  // task and, when the host is modelled, after the host task `issued`.
  int gpu_task(int r, const Kernel& k, bool bwd, int issued, KernelId kernel) {
    Task& t = b_.new_task();
    format_into(t.name, FMT_COMPILE("{}{}#{}@{}"), bwd ? "bwd_" : "", k.name, n_++, r);
    t.rank = r;
    t.stream = 0;
    ComputeTask& c = t.compute();
    c.op = k.op;
    c.kernel = kernel;
    c.flops = k.flops;
    c.bytes = k.bytes;
    c.dtype = k.dtype.value_or(s_.dtype);
    if (!k.dims().empty()) c.shape.assign(k.shape.begin(), k.shape.end());
    c.launches = k.launches;
    c.host_wait = k.host_wait;
    const int id = t.id;
    if (issued >= 0) b_.add_dep(id, issued);
    chain(r, id);
    return id;
  }

  // One compute task per rank from a Kernel, with data bindings. With the
  // host modelled (layer_kernels.hpp: host_split) the host issues the first
  // launch, the GPU runs the kernel's first L - 1 launches, and its last
  // (a task of its own) once the host has issued the rest.
  // `args` (none: timing only) gives rank r's kernel arguments.
  using ArgsOf = std::function<KernelArgs(int)>;
  using KernelOf = std::function<const Kernel&(int)>;
  void compute(const Kernel& k, bool bwd, const std::vector<std::string>& in, const std::vector<std::string>& out,
               const ArgsOf& args, const KernelOf& of_rank = {}) {
    if (dry_) return;
    const KernelId kernel = kernel_id(k, bwd);
    const bool host = host_on();
    HostSplit hs;
    auto split = [&](const Kernel& kk) {
      if (host) {
        hs = host_split(kk);
      } else {
        hs.main = kk;
        hs.last = Kernel{};
        hs.last.launches = 0;
      }
    };
    split(k);
    for (int r = 0; r < d_.P; ++r) {
      if (of_rank) split(of_rank(r));  // rank r's own sizes (dropless experts), the same kernel
      const int main = gpu_task(r, hs.main, bwd, host ? host_task(r, 1) : -1, kernel);
      if (data_ && args) {
        Task& t = b_.task(main);
        t.inputs = in;
        t.outputs = out;
        t.compute().args = args(r);
      }
      int last = main;
      if (hs.last.launches > 0) last = gpu_task(r, hs.last, bwd, host_task(r, k.launches - 1), kernel);
      if (hs.sync) sync_[r] = last;
    }
  }
  // The id of kernel k's name in the graph ("bwd_" + its name in the backward
  // pass). Kernel names are literals: found by address among those seen.
  KernelId kernel_id(const Kernel& k, bool bwd) {
    for (const SeenKernel& e : kernels_)
      if (e.name == k.name && e.bwd == bwd) return e.id;
    const KernelId id = b_.kernel_id(bwd ? std::string("bwd_") + k.name : std::string(k.name));
    kernels_.push_back({k.name, bwd, id});
    return id;
  }
  // Timing-only kernels of an op (the extra kernels of a fused op).
  void timing_only(const std::vector<Kernel>& ks, bool bwd) {
    for (const Kernel& k : ks) compute(k, bwd, {}, {}, {});
  }
  // An op's kernels: the first carries the data binding (the executors' kernel
  // does the op's whole work), the others are timing only.
  void emit(const std::vector<Kernel>& ks, bool bwd, const std::vector<std::string>& in,
            const std::vector<std::string>& out, const ArgsOf& args) {
    compute(ks[0], bwd, in, out, args);
    timing_only({ks.begin() + 1, ks.end()}, bwd);
  }

  std::int64_t tok_begin(int r, std::int64_t count) const { return count == d_.S ? 0 : mp_index(r) * count; }

  void gate(const MoeOp& op) {
    const auto ks = kernels(op, s_, d_);
    count_ = op.tokens;
    C_ = o_.parm && o_.split == Split::before_gate ? d_.T_parm : d_.T_base;
    buf("probs", count_ * s_.E);
    buf("route", count_ * s_.k * 3);
    route_ = "route";
    emit(ks, false, {"x", "Wg"}, {"probs", "route"},
         [&](int r) { return MoeGateArgs{tok_begin(r, count_), count_, s_.M, s_.E, s_.k, C_}; });
  }

  void order(const MoeOp& op) {
    buf("disp", s_.E * C_ * s_.M);
    emit(kernels(op, s_, d_), false, {"x", "route"}, {"disp"},
         [&](int r) { return MoeOrderArgs{tok_begin(r, count_), count_, s_.M, s_.E, s_.k, C_}; });
    cur_ = "disp";
  }

  void slot_slice(const MoeOp& op) {
    const std::int64_t Tl = cdiv(C_, d_.G);
    buf("displ", s_.E * Tl * s_.M);
    const std::int64_t C = C_;
    emit(kernels(op, s_, d_), false, {"disp"}, {"displ"}, [&, C, Tl](int r) {
      return MoeSlotSliceArgs{s_.E, C, Tl, s_.M, mp_index(r)};
    });
    full_C_ = C_;
    C_ = Tl;
    slot_split_ = true;
    cur_ = "displ";
  }

  void experts(const MoeOp& op) {
    const std::int64_t h = s_.H / d_.G, n = size_[cur_];
    const std::int64_t X = n / (d_.E_local * C_ * s_.M);
    buf("eout", n);
    buf("h1", X * d_.E_local * C_ * h);
    const std::int64_t C = C_;
    expert_loop(
        op,
        [&] {
          emit(kernels(op, s_, d_), false, {cur_, "W1", "W2"}, {"eout", "h1"}, [&, X, C, h](int) {
            return MoeExpertsArgs{X, d_.E_local, C, s_.M, h};
          });
        },
        "eout");
    ein_ = cur_;
    cur_ = "eout";
  }

  void experts_bwd(const MoeOp& op) {
    const std::int64_t h = s_.H / d_.G, n = size_[ein_];
    const std::int64_t X = n / (d_.E_local * C_ * s_.M);
    buf("dein", n);
    const std::int64_t C = C_;
    expert_loop(
        op,
        [&] {
          emit(kernels(op, s_, d_), true, {cur_, ein_, "h1", "W1", "W2"}, {"dein", "dW1", "dW2"}, [&, X, C, h](int) {
            return MoeExpertsBwdArgs{X, d_.E_local, C, s_.M, h};
          });
        },
        "dein");
    cur_ = "dein";
  }

  // The experts op: its local experts one after another (expert_repeats), each
  // followed, with `allreduce_each`, by the ESP AllReduce of its rows. The
  // first expert's first kernel runs every expert's data (`data`), the last
  // AllReduce sums the whole buffer `target`; the rest are timing only, so
  // executors compute the same values while the simulator times the sequence.
  void expert_loop(const MoeOp& op, const std::function<void()>& data, const std::string& target) {
    const std::int64_t n = expert_repeats(s_, d_);
    if (load_) {
      dropless_experts(op, n);
      experts_seen_ = true;
      return;
    }
    experts_seen_ = true;
    const auto ks = kernels(op, s_, d_);
    for (std::int64_t e = 0; e < n; ++e) {
      if (e == 0)
        data();
      else
        timing_only(ks, op.backward);
      if (!op.allreduce_each) continue;
      const std::string label = op.backward ? "bwd_esp_allreduce" : "esp_allreduce";
      const std::int64_t elems = expert_elems(op, s_, d_);
      if (e + 1 < n)
        collective(CollOp::allreduce, GroupKind::esp, elems, "comm", label, "", "", 0, s_.M);
      else
        collective(CollOp::allreduce, GroupKind::esp, elems, "comm", label, target, target, 0, s_.M);
    }
  }

  // The drawn rows of local expert j (0 <= j < E_local) on rank r: every
  // token of the rank's block routed to it (all MP shares: the expert's G
  // shards all take them, as the capacity buffers do).
  std::uint64_t expert_rows(int r, std::int64_t j) const {
    const int b = r / (d_.G * d_.n_ep), e = (r / d_.G) % d_.n_ep;
    return load_->expert_rows[static_cast<std::size_t>(b) * s_.E + static_cast<std::size_t>(e * d_.E_local + j)];
  }
  // Dropless experts: each local expert's kernels on its drawn rows, per rank
  // (`lean`, one batched GEMM of all local experts: padded to the largest);
  // with `allreduce_each`, each expert's ESP AllReduce of its rows.
  void dropless_experts(const MoeOp& op, std::int64_t n) {
    const bool lean = n == 1 && d_.E_local > 1;
    const std::int64_t batch = lean ? d_.E_local : 1;
    std::vector<std::vector<Kernel>> per_rank(static_cast<std::size_t>(d_.P));
    for (std::int64_t e = 0; e < n; ++e) {
      for (int r = 0; r < d_.P; ++r) {
        std::uint64_t rows = 0;
        if (lean)
          for (std::int64_t j = 0; j < d_.E_local; ++j) rows = std::max(rows, expert_rows(r, j));
        else
          rows = expert_rows(r, e);
        MoeOp o = op;
        // kernels() takes rows = elems / M / repeats / batch; an expert with no
        // token still launches its kernels (one row: the GEMM model's floor).
        o.elems = static_cast<std::int64_t>(std::max<std::uint64_t>(rows, 1)) * s_.M * n * batch;
        per_rank[static_cast<std::size_t>(r)] = kernels(o, s_, d_);
      }
      const std::size_t nk = per_rank[0].size();
      for (std::size_t q = 0; q < nk; ++q)
        compute(per_rank[0][q], op.backward, {}, {}, {},
                [&](int r) -> const Kernel& { return per_rank[static_cast<std::size_t>(r)][q]; });
      if (!op.allreduce_each) continue;
      const std::string label = op.backward ? "bwd_esp_allreduce" : "esp_allreduce";
      // One ESP group per MP group: its G ranks hold shards of the same experts.
      collective(CollOp::allreduce, GroupKind::esp, expert_elems(op, s_, d_), "comm", label, "", "", 0, s_.M, 0, 0, {},
                 [&](std::size_t gi, Collective& c) {
                   const int r0 = static_cast<int>(gi) * d_.G;
                   c.bytes = expert_rows(r0, e) * static_cast<std::uint64_t>(s_.M) *
                             static_cast<std::uint64_t>(d_.dtype_bytes);
                 });
    }
  }

  // Under a load model, an EP AlltoAll of the capacity buffers becomes an
  // AlltoAllv of the drawn rows: before the experts (dispatch; in backward,
  // the combine's adjoint) member m sends member m' the rows of its tokens
  // routed to m''s experts; after them, the transpose. A baseline member
  // sends its MP group's S tokens, a Parm member its S/G share; the capacity
  // buffer's size per peer over the token set's capacity scales the rows (1,
  // or 1/G for 0.14.5's deduplicated sends), rounded up.
  void dropless_a2a(std::size_t gi, Collective& c, std::int64_t elems, std::int64_t width) const {
    const int G = d_.G, n = d_.n_ep, b = static_cast<int>(gi) / G, t = static_cast<int>(gi) % G;
    const bool part = o_.parm;
    const std::int64_t cap = part ? d_.T_parm : d_.T_base;
    const __int128 den = static_cast<__int128>(width) * n * d_.E_local * cap;
    c.op = CollOp::alltoallv;
    c.matrix.assign(static_cast<std::size_t>(n), std::vector<std::uint64_t>(static_cast<std::size_t>(n), 0));
    for (int m = 0; m < n; ++m) {
      const int i = b * n + m;  // the member's MP group
      for (int q = 0; q < n; ++q) {
        std::uint64_t sel = 0;
        for (std::int64_t j = q * d_.E_local; j < (q + 1) * d_.E_local; ++j) {
          if (part) {
            sel += load_->count(i, t, j);
          } else {
            for (int p = 0; p < G; ++p) sel += load_->count(i, p, j);
          }
        }
        const std::uint64_t rows = static_cast<std::uint64_t>((static_cast<__int128>(sel) * elems + den - 1) / den);
        const std::uint64_t bytes = wire_bytes(d_, rows * static_cast<std::uint64_t>(width), wire_fp8_);
        if (experts_seen_)
          c.matrix[static_cast<std::size_t>(q)][static_cast<std::size_t>(m)] = bytes;
        else
          c.matrix[static_cast<std::size_t>(m)][static_cast<std::size_t>(q)] = bytes;
      }
    }
  }

  // Layout of a buffer of combine-side slots of this size.
  SlotLayout layout_of(std::int64_t n) const {
    if (n == s_.E * C_ * s_.M) return SlotLayout::local;
    return slot_split_ ? SlotLayout::sliced : SlotLayout::gathered;
  }

  void iorder(const MoeOp& op) {
    icount_ = op.tokens;
    layout_ = layout_of(size_[cur_]);
    const std::string out = icount_ == d_.S ? "out" : "outl";
    buf(out, icount_ * s_.M);
    comb_ = cur_;
    emit(kernels(op, s_, d_), false, {cur_, route_}, {out},
         [&](int) { return MoeIOrderArgs{icount_, s_.M, s_.E, s_.k, C_, icount_ / d_.G, layout_}; });
    cur_ = out;
  }

  void iorder_bwd(const MoeOp& op) {
    icount_ = op.tokens;
    layout_ = layout_of(size_[comb_]);
    buf("dcomb", size_[comb_]);
    buf("dw", icount_ * s_.k);
    emit(kernels(op, s_, d_), true, {"dout", comb_, route_}, {"dcomb", "dw"}, [&](int r) {
      return MoeIOrderBwdArgs{tok_begin(r, icount_), icount_, s_.M, s_.E, s_.k, C_, icount_ / d_.G, layout_};
    });
    cur_ = "dcomb";
    // A gathered layout: the next collective sends this member's part only.
    offset_next_ = layout_ != SlotLayout::local;
  }

  void order_bwd(const MoeOp& op) {
    dx_started_ = true;
    // Parm with the split before the gate gathers every member's dx rows
    // afterwards (bwd_mp_split_allgather), so it writes its own rows apart,
    // even when the MP group has one member.
    const bool gathered = o_.parm && o_.split == Split::before_gate;
    const std::string out = count_ == d_.S && !gathered ? "dx" : "dxl";
    buf(out, count_ * s_.M);
    const SlotLayout layout = size_[cur_] == s_.E * C_ * s_.M ? SlotLayout::local : SlotLayout::sliced;
    emit(kernels(op, s_, d_), true, {cur_, route_ == "route_all" ? "route" : route_}, {out}, [&, layout](int) {
      return MoeOrderBwdArgs{count_, s_.M, s_.E, s_.k, slot_split_ ? full_C_ : C_, C_, layout};
    });
    dx_ = out;
  }

  void gate_bwd(const MoeOp& op) {
    const auto ks = kernels(op, s_, d_);
    // dw covers icount_ tokens; the gate saw count_ of them, starting at this member's offset.
    emit(ks, true, {"dw", "probs", "route", "x", "Wg"}, {"dWg", dx_}, [&](int r) {
      const std::int64_t dw_off = icount_ == count_ ? 0 : mp_index(r) * count_;
      return MoeGateBwdArgs{tok_begin(r, count_), count_, s_.M, s_.E, s_.k, dw_off};
    });
  }

  void kernel_task(const MoeOp& op) { compute(kernels(op, s_, d_)[0], op.backward, {}, {}, {}); }

  // A collective that maps the current buffer to `label`.out. grow: output =
  // input x grow; 0 = ReduceScatter (input / G); -1 = AllGather (x group size).
  void coll_step(CollOp cop, GroupKind kind, const MoeOp& op, int grow) {
    std::int64_t in = size_[cur_];
    std::uint64_t off = 0;
    if (offset_next_) {
      in /= d_.G;
      off = 1;  // per rank: mp_index * in, set in collective()
      offset_next_ = false;
    }
    const std::int64_t gsize = kind == GroupKind::ep ? d_.n_ep : d_.G;
    const std::int64_t out = grow > 0 ? in * grow : grow == 0 ? in / gsize : in * gsize;
    const std::string name = std::string(op.backward ? "g." : "") + op.label + ".out";
    buf(name, out);
    wire_fp8_ = fp8_wire(d_, op.kind, op.data, wire_seen_);
    collective(cop, kind, op.elems, "comm", op.label, cur_, name, off ? static_cast<std::uint64_t>(in) : 0, s_.M);
    wire_fp8_ = false;
    if (cop == CollOp::allgather && op.group == GroupKind::mp && !op.backward)
      layout_ = slot_split_ ? SlotLayout::sliced : SlotLayout::gathered;
    cur_ = name;
  }

  void rs_then(const MoeOp& op) {
    const std::int64_t c = op.chunks;
    const std::int64_t in = size_[cur_];
    const std::string rs_out = std::string(op.backward ? "g." : "") + op.label + ".rs",
                      out_name = std::string(op.backward ? "g." : "") + op.label + ".out";
    const std::int64_t mid = in / d_.G;
    const std::int64_t out = op.then == MoeStep::saa ? mid * d_.G : mid;
    buf(rs_out, mid);
    buf(out_name, out);
    const std::int64_t cw = cdiv(s_.M, c);
    std::vector<int> start = prev_;
    std::vector<int> last(d_.P, -1);
    for (std::int64_t j = 0; j < c; ++j) {
      const std::int64_t c0 = j * cw, cn = std::min(s_.M, c0 + cw) - c0;
      if (cn <= 0) break;
      const std::string tag = c > 1 ? fmt::format("{}[{}]", op.label, j) : std::string(op.label);
      prev_ = start;
      collective(CollOp::reducescatter, op.group, cdiv(op.elems, c), "rs", tag + ".rs", cur_, rs_out, 0, s_.M, c0,
                 c > 1 ? cn : 0);
      if (j == 0)
        for (int r = 0; r < d_.P; ++r) start[r] = -1;  // later chunks follow on the rs stream
      const std::vector<int> after_rs = prev_;
      if (op.then == MoeStep::saa)
        collective(CollOp::saa, GroupKind::world, cdiv(op.elems, c) / d_.G, "comm", tag + ".saa", rs_out, out_name, 0,
                   s_.M, c0, c > 1 ? cn : 0, last);
      else
        collective(CollOp::alltoall, GroupKind::ep, cdiv(op.elems, c) / d_.G, "comm", tag + ".a2a", rs_out, out_name, 0,
                   s_.M, c0, c > 1 ? cn : 0, last);
      last = prev_;
      prev_ = after_rs;
    }
    prev_ = last;
    cur_ = out_name;
  }

  // One collective per group of `kind`; each rank's part depends on prev_ and
  // on `extra` (when given), and becomes the new prev_. `offset_per_mp`: the
  // send buffer starts at mp_index * offset_per_mp on each rank.
  void collective(CollOp op, GroupKind kind, std::int64_t elems, const std::string& stream, const std::string& label,
                  const std::string& send, const std::string& recv, std::uint64_t offset_per_mp, std::int64_t row,
                  std::int64_t c0 = 0, std::int64_t cn = 0, const std::vector<int>& extra = {},
                  const std::function<void(std::size_t, Collective&)>& adjust = {}) {
    if (dry_) return;
    const std::vector<std::vector<int>>& groups = kind == GroupKind::ep          ? g_.ep
                                                  : kind == GroupKind::world     ? g_.block
                                                  : kind == GroupKind::dense_dp  ? g_.dense_dp
                                                  : kind == GroupKind::expert_dp ? g_.expert_dp
                                                                                 : g_.mp;
    const std::uint64_t bytes = wire_bytes(d_, static_cast<std::uint64_t>(elems), wire_fp8_);
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const bool solo = groups[gi].size() < 2 && op != CollOp::saa;
      Collective c;
      format_into(c.name, FMT_COMPILE("{}#{}.{}"), label, n_, gi);
      c.op = op;
      c.group = groups[gi];
      c.bytes = bytes;
      c.inner = op == CollOp::saa ? d_.G : 0;
      if (op == CollOp::alltoall) c.algo = o_.a2a_algo;
      if (op == CollOp::saa) c.algo = s_.saa_algo;
      if (data_) {
        c.send_buf = send;
        c.recv_buf = recv;
      }
      if (data_ && offset_per_mp) {
        for (int r : c.group) c.member_send_offset.push_back(offset_per_mp * static_cast<std::uint64_t>(mp_index(r)));
        c.send_count = offset_per_mp;
      }
      c.row = static_cast<std::uint64_t>(row);
      c.col_begin = static_cast<std::uint64_t>(c0);
      c.col_count = static_cast<std::uint64_t>(cn);
      if (adjust) adjust(gi, c);
      if (load_ && op == CollOp::alltoall && kind == GroupKind::ep && !solo) dropless_a2a(gi, c, elems, cn > 0 ? cn : row);
      if (solo) {
        // A group of one moves no bytes; it still has to put its data in place.
        c.bytes = 0;
      }
      const std::string prefix = c.name;
      // With the host modelled, each member's host issues its call first.
      std::vector<int> issued;
      if (host_on())
        for (int r : groups[gi]) issued.push_back(host_task(r, 1));
      const auto ids = b_.add_collective_tasks(std::move(c), stream, prefix);
      for (std::size_t m = 0; m < ids.size(); ++m) {
        const int r = groups[gi][m];
        if (!extra.empty() && extra[r] >= 0) b_.add_dep(ids[m], extra[r]);
        if (!issued.empty()) b_.add_dep(ids[m], issued[m]);
        chain(r, ids[m]);
      }
    }
    ++n_;
  }

  const LayerSpec& s_;
  const Dims& d_;
  const ScheduleOptions& o_;
  bool data_;  // with data bindings (GraphData::bound)
  Groups g_;
  TaskGraphBuilder b_;
  std::vector<int> prev_;
  int n_ = 0;
  std::map<std::string, std::int64_t> size_;
  std::string cur_ = "x", route_ = "route", ein_, comb_, dx_ = "dx";
  std::int64_t C_ = 0, full_C_ = 0, count_ = 0, icount_ = 0;
  SlotLayout layout_ = SlotLayout::local;
  static constexpr int kHostStream = 3;  // after compute, comm and rs
  std::vector<int> sync_;                // per rank: the sync the next host task waits for, or -1
  int host_n_ = 0;
  KernelId host_kernel_ = kNoKernel;
  struct SeenKernel {
    const char* name;
    bool bwd;
    KernelId id;
  };
  std::vector<SeenKernel> kernels_;  // kernel_id's cache
  std::shared_ptr<const LayerLoad> load_;  // the drawn routing under a load model, or null
  bool experts_seen_ = false;               // this pass's experts op is behind us (AlltoAllv direction)
  bool wire_fp8_ = false;                   // the collective being added moves fp8 rows (fp8_wire)
  bool wire_seen_ = false;                  // fp8_wire's experts_seen: set by experts, cleared by a gate
  bool slot_split_ = false, in_backward_ = false, offset_next_ = false, dx_started_ = false, dry_ = false;
};

}  // namespace

TaskGraph build_graph(const std::vector<MoeOp>& ops, const LayerSpec& s, const Dims& d, const ScheduleOptions& o,
                      GraphData data) {
  GraphBuilder gb(s, d, o, data);
  for (const MoeOp& op : ops) gb.add(op);
  return std::move(gb).build();
}

TaskGraph build_backward_graph(const std::vector<MoeOp>& fwd, const std::vector<MoeOp>& bwd, const LayerSpec& s,
                               const Dims& d, const ScheduleOptions& o, GraphData data) {
  GraphBuilder gb(s, d, o, data);
  gb.set_dry(true);
  for (const MoeOp& op : fwd) gb.add(op);
  gb.set_dry(false);
  for (const MoeOp& op : bwd) gb.add(op);
  return std::move(gb).build();
}

TaskGraph build_training_graph(const std::vector<MoeOp>& fwd, const std::vector<MoeOp>& bwd, const LayerSpec& s,
                               const Dims& d, const ScheduleOptions& o) {
  GraphBuilder gb(s, d, o);
  for (const MoeOp& op : fwd) gb.add(op);
  for (const MoeOp& op : bwd) gb.add(op);
  return std::move(gb).build();
}


}  // namespace parmsim::moe
