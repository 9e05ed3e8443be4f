#include "backend/cuda/cuda_executor.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "backend/cuda/cuda_ops.hpp"
#include "backend/device/coll_plan.hpp"
#include "backend/device/enqueue_order.hpp"
#include "backend/device/moe_tasks.hpp"
#include "backend/device/timing.hpp"
#include "sim/core/error.hpp"
#include "sim/mpi/mpi_shim.hpp"

namespace parmsim::cuda {

void detail_check_nccl(ncclResult_t e, const char* call) {
  if (e != ncclSuccess) fail_call(call, fmt::format("{} ({})", ncclGetErrorString(e), ncclGetLastError(nullptr)));
}

}  // namespace parmsim::cuda

namespace parmsim::exec {

using cuda::call_context;
using cuda::CudaOps;
using dev::Elem;

std::string cuda_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return fmt::format("no usable GPU: cudaGetDeviceCount: {}", cudaGetErrorString(e));
  if (n == 0) return "no usable GPU: the CUDA driver sees no device";
  return "";
}

namespace {

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

ncclDataType_t nccl_type(Elem e) {
  switch (e) {
    case Elem::f16:
      return ncclFloat16;
    case Elem::bf16:
      return ncclBfloat16;
    case Elem::f32:
      break;
  }
  return ncclFloat32;
}

struct DevBuf {
  void* p = nullptr;
  Elem elem = Elem::f32;
  std::uint64_t elems = 0;
};

// Device address of n elements at a Ref of a member (rank) of the collective
// being run; throws UserError when they do not fit.
using Resolve = std::function<char*(int rank, const dev::Ref& r, std::uint64_t n)>;

// run_phases on device memory of one process (loopback), on one stream.
class DeviceMover final : public dev::Mover {
 public:
  DeviceMover(Resolve at, cudaStream_t s, float* acc, Elem elem) : at_(std::move(at)), s_(s), acc_(acc), elem_(elem) {}
  void copy(int dr, const dev::Ref& d, int sr, const dev::Ref& s, std::uint64_t n) override {
    PARMSIM_CUDA(cudaMemcpyAsync(at_(dr, d, n), at_(sr, s, n), n * eb(), cudaMemcpyDeviceToDevice, s_));
  }
  void copy2d(int dr, const dev::Ref& d, std::uint64_t dp, int sr, const dev::Ref& s, std::uint64_t sp, std::uint64_t w,
              std::uint64_t rows) override {
    if (!rows) return;
    PARMSIM_CUDA(cudaMemcpy2DAsync(at_(dr, d, (rows - 1) * dp + w), dp * eb(), at_(sr, s, (rows - 1) * sp + w),
                                   sp * eb(), w * eb(), rows, cudaMemcpyDeviceToDevice, s_));
  }
  void acc_zero(std::uint64_t n) override { PARMSIM_CUDA(cudaMemsetAsync(acc_, 0, n * 4, s_)); }
  void acc_add(int r, const dev::Ref& s, std::uint64_t n) override { cuda::acc_add(acc_, at_(r, s, n), elem_, n, s_); }
  void acc_store(int r, const dev::Ref& d, std::uint64_t n) override {
    cuda::acc_store(at_(r, d, n), acc_, elem_, n, s_);
  }

 private:
  std::uint64_t eb() const { return static_cast<std::uint64_t>(dev::elem_bytes(elem_)); }
  Resolve at_;
  cudaStream_t s_;
  float* acc_;
  Elem elem_;
};

}  // namespace

struct CudaExecutor::Impl {
  CudaOptions o;
  int rank = 0, size = 1, device = 0;
  std::string device_name;
  ncclComm_t world = nullptr;
  std::map<std::vector<int>, ncclComm_t> comms;  // the communicators this process is in
  std::set<std::vector<int>> split;              // every group split so far (the same on every process)

  // Per run.
  const TaskGraph* g = nullptr;
  Elem act = Elem::f32;
  std::vector<std::map<std::string, DevBuf>> bufs;         // per graph rank (empty when not owned)
  std::vector<std::vector<cudaStream_t>> streams, lane1;   // per rank, per graph stream
  std::vector<std::vector<cublasHandle_t>> blas;           // per rank, per graph stream
  std::vector<std::vector<std::array<void*, 2>>> scratch;  // per rank, per graph stream
  std::vector<cudaEvent_t> start, end;                     // per task
  std::vector<std::vector<cudaEvent_t>> phase_ev;          // per collective, per phase
  std::vector<std::vector<dev::MemberPlan>> plans;         // per collective
  std::vector<Elem> coll_elem;                             // per collective
  std::vector<std::vector<int>> members;                   // per collective: its member tasks
  std::vector<dev::Unit> order;
  // Per rank and graph stream, so that collectives on two streams of a rank
  // never share them: stage buffers (send, receive; bytes) and, in loopback,
  // the fp32 accumulator of reductions.
  std::vector<std::vector<std::array<DevBuf, 2>>> stage;
  std::vector<std::vector<float*>> acc;
  cudaStream_t ref_stream = nullptr;
  cudaEvent_t ref = nullptr;
  std::vector<void*> allocations;

  bool owns(int r) const { return o.loopback || r == rank; }

  void* alloc(std::uint64_t bytes) {
    void* p = nullptr;
    PARMSIM_CUDA(cudaMalloc(&p, std::max<std::uint64_t>(bytes, 16)));
    allocations.push_back(p);
    return p;
  }

  void release() {
    for (auto& v : blas)
      for (auto h : v) cublasDestroy(h);
    for (auto* v : {&streams, &lane1})
      for (auto& w : *v)
        for (auto s : w) cudaStreamDestroy(s);
    for (auto* v : {&start, &end})
      for (auto e : *v) cudaEventDestroy(e);
    for (auto& v : phase_ev)
      for (auto e : v) cudaEventDestroy(e);
    for (void* p : allocations) cudaFree(p);
    if (ref) cudaEventDestroy(ref);
    if (ref_stream) cudaStreamDestroy(ref_stream);
    blas.clear(), streams.clear(), lane1.clear(), start.clear(), end.clear(), phase_ev.clear(), allocations.clear();
    bufs.clear(), scratch.clear(), plans.clear(), coll_elem.clear(), members.clear(), order.clear();
    stage.clear(), acc.clear();
    ref = nullptr, ref_stream = nullptr;
  }

  void init() {
    if (!o.loopback) {
      if (!mpi::active()) {
        int r = 0, s = 1;
        mpi::init(&r, &s);
      }
      if (!mpi::active())
        throw UserError("cuda executor: NCCL mode needs mpirun (or use the loopback mode on one GPU)");
      mpi::world(&rank, &size);
    }
    if (const std::string why = cuda_unavailable(); !why.empty()) throw UserError(why);
    int n = 0;
    PARMSIM_CUDA(cudaGetDeviceCount(&n));
    device = o.device >= 0 ? o.device : (o.loopback ? 0 : local_rank() % n);
    if (device >= n) throw UserError(fmt::format("cuda executor: no GPU {} (this process sees {})", device, n));
    PARMSIM_CUDA(cudaSetDevice(device));
    cudaDeviceProp p{};
    PARMSIM_CUDA(cudaGetDeviceProperties(&p, device));
    device_name = p.name;
    if (!o.loopback) {
      ncclUniqueId id{};
      if (rank == 0) PARMSIM_NCCL(ncclGetUniqueId(&id));
      mpi::broadcast_bytes(&id, sizeof id);
      call_context() = fmt::format("rank {}", rank);
      PARMSIM_NCCL(ncclCommInitRank(&world, size, id, rank));
    }
  }

  // Every process splits the same communicators in the same order: the
  // groups of all collectives (and SAA's inner and outer groups), packed
  // greedily into families of disjoint groups, one ncclCommSplit per family.
  void make_comms(const TaskGraph& graph) {
    std::set<std::vector<int>> lists;
    for (const Collective& c : graph.collectives()) {
      if (c.send_buf.empty()) continue;
      for (int m = 0; m < static_cast<int>(c.group.size()); ++m) {
        lists.insert(dev::comm_ranks(c, dev::CommKind::group, m));
        if (c.op == CollOp::saa) {
          lists.insert(dev::comm_ranks(c, dev::CommKind::inner, m));
          lists.insert(dev::comm_ranks(c, dev::CommKind::outer, m));
        }
      }
    }
    std::vector<std::vector<std::vector<int>>> families;
    for (const auto& l : lists) {
      if (!split.insert(l).second) continue;
      bool placed = false;
      for (auto& f : families) {
        bool disjoint = true;
        for (const auto& other : f)
          for (int r : l) disjoint = disjoint && std::find(other.begin(), other.end(), r) == other.end();
        if (disjoint) {
          f.push_back(l);
          placed = true;
          break;
        }
      }
      if (!placed) families.push_back({l});
    }
    for (const auto& f : families) {
      int color = NCCL_SPLIT_NOCOLOR, key = 0;
      for (std::size_t i = 0; i < f.size(); ++i) {
        const auto it = std::find(f[i].begin(), f[i].end(), rank);
        if (it != f[i].end()) color = static_cast<int>(i), key = static_cast<int>(it - f[i].begin());
      }
      ncclComm_t c = nullptr;
      PARMSIM_NCCL(ncclCommSplit(world, color, key, &c, nullptr));
      if (color != NCCL_SPLIT_NOCOLOR) comms[f[color]] = c;
    }
  }

  void setup(const TaskGraph& graph) {
    release();
    g = &graph;
    const int R = graph.num_ranks();
    if (!o.loopback && R != size)
      throw UserError(fmt::format("cuda executor: the graph has {} ranks but mpirun started {} processes", R, size));
    // The activation type: the one non-fp32 type among the buffers, else fp32.
    std::set<Elem> types;
    for (const Buffer& b : graph.buffers())
      if (b.dtype != DType::fp32) types.insert(dev::elem_of(b.dtype));
    if (types.size() > 1) throw UserError("cuda executor: buffers of both fp16 and bf16 in one graph");
    act = types.empty() ? Elem::f32 : *types.begin();
    for (const Task& t : graph.tasks()) {
      if (!o.loopback)
        for (int d : t.deps)
          if (graph.task(d).rank != t.rank)
            throw UserError(
                fmt::format("task '{}' depends on '{}' of another rank: NCCL mode orders ranks only "
                            "through collectives",
                            t.name, graph.task(d).name));
    }
    order = dev::enqueue_order(graph);
    members.assign(graph.collectives().size(), {});
    for (const Collective& c : graph.collectives()) members[c.id].assign(c.group.size(), -1);
    for (const Task& t : graph.tasks())
      if (!t.is_compute())
        for (std::size_t m = 0; m < graph.collective(t.collective()).group.size(); ++m)
          if (graph.collective(t.collective()).group[m] == t.rank && members[t.collective()][m] < 0) {
            members[t.collective()][m] = t.id;
            break;
          }
    plans.assign(graph.collectives().size(), {});
    coll_elem.assign(graph.collectives().size(), Elem::f32);
    bufs.assign(R, {});
    std::map<std::pair<int, std::string>, Elem> elem_of_buf;
    for (const Buffer& b : graph.buffers()) elem_of_buf[{b.rank, b.name}] = dev::elem_of(b.dtype);
    std::vector<std::uint64_t> stage_s(R, 0), stage_r(R, 0);
    std::uint64_t acc_elems = 0;
    for (const Collective& c : graph.collectives()) {
      if (c.send_buf.empty()) continue;
      plans[c.id] = dev::plan_collective(graph, c);
      const Elem e = elem_of_buf.at({c.group[0], c.send_buf});
      if (elem_of_buf.at({c.group[0], c.recv_buf}) != e)
        throw UserError(
            fmt::format("collective '{}': '{}' and '{}' have different element types", c.name, c.send_buf, c.recv_buf));
      coll_elem[c.id] = e;
      for (const auto& mp : plans[c.id]) {
        stage_s[mp.rank] = std::max(stage_s[mp.rank], mp.stage_send * dev::elem_bytes(e));
        stage_r[mp.rank] = std::max(stage_r[mp.rank], mp.stage_recv * dev::elem_bytes(e));
        for (const auto& ph : mp.phases) acc_elems = std::max(acc_elems, ph.count);
      }
    }
    for (const Buffer& b : graph.buffers())
      if (owns(b.rank))
        bufs[b.rank][b.name] = {alloc(b.elems * dev::elem_bytes(dev::elem_of(b.dtype))), dev::elem_of(b.dtype),
                                b.elems};
    streams.assign(R, {}), lane1.assign(R, {}), blas.assign(R, {}), scratch.assign(R, {});
    std::vector<std::array<std::uint64_t, 2>> need(R, {0, 0});
    for (const Task& t : graph.tasks())
      if (t.is_compute() && t.compute().role() != KernelRole::none) {
        const auto s = dev::scratch_bytes(t, act);
        need[t.rank][0] = std::max(need[t.rank][0], s[0]);
        need[t.rank][1] = std::max(need[t.rank][1], s[1]);
      }
    for (int r = 0; r < R; ++r) {
      if (!owns(r)) continue;
      // Stage buffers hold any element type: sized in bytes, declared as whole floats.
      stage.resize(R), acc.resize(R);
      for (std::size_t s = 0; s < graph.streams(r).size(); ++s) {
        stage[r].push_back({DevBuf{alloc(stage_s[r] + 4), Elem::f32, (stage_s[r] + 3) / 4},
                            DevBuf{alloc(stage_r[r] + 4), Elem::f32, (stage_r[r] + 3) / 4}});
        acc[r].push_back(o.loopback ? static_cast<float*>(alloc(acc_elems * 4)) : nullptr);
        // Scratch per stream: tasks of one rank on two streams may run at once.
        scratch[r].push_back({alloc(need[r][0]), alloc(need[r][1])});
        cudaStream_t a = nullptr, b = nullptr;
        PARMSIM_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        PARMSIM_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        streams[r].push_back(a), lane1[r].push_back(b);
        cublasHandle_t h = nullptr;
        PARMSIM_CUBLAS(cublasCreate(&h));
        PARMSIM_CUBLAS(cublasSetStream(h, a));
        blas[r].push_back(h);
      }
    }
    start.assign(graph.tasks().size(), nullptr), end.assign(graph.tasks().size(), nullptr);
    for (const Task& t : graph.tasks())
      if (owns(t.rank)) {
        PARMSIM_CUDA(cudaEventCreate(&start[t.id]));
        PARMSIM_CUDA(cudaEventCreate(&end[t.id]));
      }
    phase_ev.assign(graph.collectives().size(), {});
    if (!o.loopback) {
      for (const Collective& c : graph.collectives()) {
        if (c.send_buf.empty()) continue;
        for (const auto& mp : plans[c.id])
          if (mp.rank == rank)
            for (std::size_t j = 0; j < mp.phases.size(); ++j) {
              cudaEvent_t e = nullptr;
              PARMSIM_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
              phase_ev[c.id].push_back(e);
            }
      }
      make_comms(graph);
    }
    PARMSIM_CUDA(cudaStreamCreateWithFlags(&ref_stream, cudaStreamNonBlocking));
    PARMSIM_CUDA(cudaEventCreate(&ref));
  }

  cudaStream_t stream_of(const Task& t) const { return streams[t.rank][t.stream]; }

  void wait_deps(const Task& t) {
    for (int d : t.deps) {
      const Task& dt = g->task(d);
      if (dt.rank != t.rank || dt.stream != t.stream) PARMSIM_CUDA(cudaStreamWaitEvent(stream_of(t), end[d], 0));
    }
  }

  dev::BufferLookup lookup(int r) {
    return [this, r](const std::string& name) {
      auto it = bufs[r].find(name);
      if (it == bufs[r].end()) throw UserError(fmt::format("rank {} has no buffer '{}'", r, name));
      return dev::BufRef{it->second.p, it->second.elem, it->second.elems};
    };
  }

  void compute(const Task& t) {
    call_context() = fmt::format("rank {}, task '{}'", t.rank, t.name);
    cudaStream_t s = stream_of(t);
    wait_deps(t);
    PARMSIM_CUDA(cudaEventRecord(start[t.id], s));
    if (t.compute().role() != KernelRole::none) {
      CudaOps ops(act, s, blas[t.rank][t.stream]);
      const auto& sc = scratch[t.rank][t.stream];
      dev::run_task(t, ops, lookup(t.rank), sc[0], sc[1]);
    }
    PARMSIM_CUDA(cudaEventRecord(end[t.id], s));
  }

  // Device address of a Ref on `rank`, whose collective task runs on graph stream `stream`.
  char* resolve(int rank, int stream, const dev::Ref& r, std::uint64_t n, Elem e) {
    const DevBuf* b = nullptr;
    if (r.buf == dev::kStageSend || r.buf == dev::kStageRecv) {
      b = &stage.at(rank).at(stream)[r.buf == dev::kStageSend ? 0 : 1];
    } else {
      auto it = bufs.at(rank).find(r.buf);
      if (it == bufs[rank].end()) throw UserError(fmt::format("rank {} has no device buffer '{}'", rank, r.buf));
      b = &it->second;
    }
    const std::uint64_t eb = dev::elem_bytes(e), cap = b->elems * dev::elem_bytes(b->elem) / eb;
    if (r.off + n > cap)
      throw UserError(fmt::format("rank {}: {} elements at {} of '{}' ({}) out of bounds", rank, n, r.off, r.buf, cap));
    return static_cast<char*>(b->p) + r.off * eb;
  }

  void collective_loopback(const Collective& c, const std::vector<int>& tasks) {
    for (int id : tasks) {
      const Task& t = g->task(id);
      call_context() = fmt::format("rank {}, task '{}'", t.rank, t.name);
      wait_deps(t);
      PARMSIM_CUDA(cudaEventRecord(start[id], stream_of(t)));
    }
    const Task& t0 = g->task(tasks[0]);
    cudaStream_t s = stream_of(t0);
    call_context() = fmt::format("collective '{}' (loopback on rank {}'s stream)", c.name, t0.rank);
    for (int id : tasks) PARMSIM_CUDA(cudaStreamWaitEvent(s, start[id], 0));
    if (!c.send_buf.empty()) {
      std::map<int, int> stream_of_rank;
      for (int id : tasks) stream_of_rank[g->task(id).rank] = g->task(id).stream;
      const Elem e = coll_elem[c.id];
      DeviceMover mv(
          [&](int r, const dev::Ref& ref, std::uint64_t n) { return resolve(r, stream_of_rank.at(r), ref, n, e); }, s,
          acc[t0.rank][t0.stream], e);
      dev::run_phases(c, plans[c.id], mv);
    }
    PARMSIM_CUDA(cudaEventRecord(end[tasks[0]], s));
    for (std::size_t m = 1; m < tasks.size(); ++m) {
      cudaStream_t sm = stream_of(g->task(tasks[m]));
      PARMSIM_CUDA(cudaStreamWaitEvent(sm, end[tasks[0]], 0));
      PARMSIM_CUDA(cudaEventRecord(end[tasks[m]], sm));
    }
  }

  void collective_nccl(const Collective& c, const std::vector<int>& tasks) {
    int mi = -1;
    for (std::size_t m = 0; m < c.group.size(); ++m)
      if (c.group[m] == rank) mi = static_cast<int>(m);
    if (mi < 0) return;
    const Task& t = g->task(tasks[mi]);
    call_context() = fmt::format("rank {}, task '{}'", t.rank, t.name);
    cudaStream_t l0 = stream_of(t), l1 = lane1[t.rank][t.stream];
    wait_deps(t);
    PARMSIM_CUDA(cudaEventRecord(start[t.id], l0));
    if (!c.send_buf.empty()) {
      const dev::MemberPlan& mp = plans[c.id][mi];
      const Elem e = coll_elem[c.id];
      const std::uint64_t eb = dev::elem_bytes(e);
      const std::uint64_t p = c.group.size();
      const auto ptr = [&](const dev::Ref& r, std::uint64_t n) { return resolve(rank, t.stream, r, n, e); };
      int last1 = -1;
      for (std::size_t j = 0; j < mp.phases.size(); ++j) {
        const dev::Phase& ph = mp.phases[j];
        cudaStream_t s = ph.lane == 0 ? l0 : l1;
        if (ph.after >= 0) PARMSIM_CUDA(cudaStreamWaitEvent(s, phase_ev[c.id][ph.after], 0));
        ncclComm_t comm = nullptr;
        if (ph.kind != dev::PhaseKind::local) comm = comms.at(dev::comm_ranks(c, ph.comm, mi));
        switch (ph.kind) {
          case dev::PhaseKind::local:
            for (const dev::Step& st : ph.steps) {
              if (st.kind == dev::StepKind::copy)
                PARMSIM_CUDA(cudaMemcpyAsync(ptr(st.dst, st.count), ptr(st.src, st.count), st.count * eb,
                                             cudaMemcpyDeviceToDevice, s));
              else if (st.rows)
                PARMSIM_CUDA(cudaMemcpy2DAsync(ptr(st.dst, (st.rows - 1) * st.dpitch + st.count), st.dpitch * eb,
                                               ptr(st.src, (st.rows - 1) * st.spitch + st.count), st.spitch * eb,
                                               st.count * eb, st.rows, cudaMemcpyDeviceToDevice, s));
            }
            break;
          case dev::PhaseKind::allreduce:
            PARMSIM_NCCL(
                ncclAllReduce(ptr(ph.src, ph.count), ptr(ph.dst, ph.count), ph.count, nccl_type(e), ncclSum, comm, s));
            break;
          case dev::PhaseKind::allgather:
            PARMSIM_NCCL(
                ncclAllGather(ptr(ph.src, ph.count), ptr(ph.dst, ph.count * p), ph.count, nccl_type(e), comm, s));
            break;
          case dev::PhaseKind::reducescatter:
            PARMSIM_NCCL(ncclReduceScatter(ptr(ph.src, ph.count * p), ptr(ph.dst, ph.count), ph.count, nccl_type(e),
                                           ncclSum, comm, s));
            break;
          case dev::PhaseKind::p2p:
            PARMSIM_NCCL(ncclGroupStart());
            for (const dev::Step& st : ph.steps) {
              if (st.kind == dev::StepKind::send)
                PARMSIM_NCCL(ncclSend(ptr(st.src, st.count), st.count, nccl_type(e), st.peer, comm, s));
              if (st.kind == dev::StepKind::recv)
                PARMSIM_NCCL(ncclRecv(ptr(st.dst, st.count), st.count, nccl_type(e), st.peer, comm, s));
            }
            PARMSIM_NCCL(ncclGroupEnd());
            break;
        }
        PARMSIM_CUDA(cudaEventRecord(phase_ev[c.id][j], s));
        if (ph.lane == 1) last1 = static_cast<int>(j);
      }
      if (last1 >= 0) PARMSIM_CUDA(cudaStreamWaitEvent(l0, phase_ev[c.id][last1], 0));
    }
    PARMSIM_CUDA(cudaEventRecord(end[t.id], l0));
  }

  void enqueue_all() {
    PARMSIM_CUDA(cudaEventRecord(ref, ref_stream));
    for (std::size_t r = 0; r < streams.size(); ++r)
      for (auto s : streams[r]) PARMSIM_CUDA(cudaStreamWaitEvent(s, ref, 0));
    for (std::size_t r = 0; r < lane1.size(); ++r)
      for (auto s : lane1[r]) PARMSIM_CUDA(cudaStreamWaitEvent(s, ref, 0));
    for (const dev::Unit& u : order) {
      if (u.task >= 0) {
        if (owns(g->task(u.task).rank)) compute(g->task(u.task));
        continue;
      }
      const Collective& c = g->collective(u.collective);
      const auto& tasks = members[c.id];
      if (o.loopback)
        collective_loopback(c, tasks);
      else
        collective_nccl(c, tasks);
    }
    call_context().clear();
  }

  void convert(void* dst, const void* src, std::uint64_t n, bool to_act) {
    CudaOps ops(act, ref_stream, nullptr);
    ops.launch(to_act ? dev::Body::to_act : dev::Body::from_act, static_cast<dev::I>(n), dev::CastArgs{src, dst});
  }

  void upload(Memory& mem) {
    for (std::size_t r = 0; r < bufs.size(); ++r)
      for (auto& [name, b] : bufs[r]) {
        call_context() = fmt::format("rank {}, loading buffer '{}'", r, name);
        const auto& host = mem.at(static_cast<int>(r), name);
        if (b.elem == Elem::f32) {
          PARMSIM_CUDA(cudaMemcpy(b.p, host.data(), b.elems * 4, cudaMemcpyHostToDevice));
        } else {
          void* tmp = nullptr;
          PARMSIM_CUDA(cudaMalloc(&tmp, std::max<std::uint64_t>(b.elems * 4, 16)));
          PARMSIM_CUDA(cudaMemcpy(tmp, host.data(), b.elems * 4, cudaMemcpyHostToDevice));
          convert(b.p, tmp, b.elems, true);
          PARMSIM_CUDA(cudaStreamSynchronize(ref_stream));
          PARMSIM_CUDA(cudaFree(tmp));
        }
      }
    call_context().clear();
  }

  void download(Memory& mem) {
    for (std::size_t r = 0; r < bufs.size(); ++r)
      for (auto& [name, b] : bufs[r]) {
        call_context() = fmt::format("rank {}, reading buffer '{}'", r, name);
        auto& host = mem.at(static_cast<int>(r), name);
        if (b.elem == Elem::f32) {
          PARMSIM_CUDA(cudaMemcpy(host.data(), b.p, b.elems * 4, cudaMemcpyDeviceToHost));
        } else {
          void* tmp = nullptr;
          PARMSIM_CUDA(cudaMalloc(&tmp, std::max<std::uint64_t>(b.elems * 4, 16)));
          convert(tmp, b.p, b.elems, false);
          PARMSIM_CUDA(cudaStreamSynchronize(ref_stream));
          PARMSIM_CUDA(cudaMemcpy(host.data(), tmp, b.elems * 4, cudaMemcpyDeviceToHost));
          PARMSIM_CUDA(cudaFree(tmp));
        }
      }
    call_context().clear();
  }

  SimResult run(const TaskGraph& graph, Memory& mem) {
    setup(graph);
    upload(mem);
    const int N = static_cast<int>(graph.tasks().size());
    std::vector<std::vector<std::pair<Time, Time>>> reps;
    for (int i = 0; i < o.warmup + std::max(1, o.reps); ++i) {
      mpi::barrier();
      enqueue_all();
      call_context() = "waiting for the run to finish";
      PARMSIM_CUDA(cudaDeviceSynchronize());
      if (i < o.warmup) continue;
      std::vector<std::pair<Time, Time>> row(N);
      for (const Task& t : graph.tasks()) {
        if (!owns(t.rank)) continue;
        float a = 0, b = 0;
        PARMSIM_CUDA(cudaEventElapsedTime(&a, ref, start[t.id]));
        PARMSIM_CUDA(cudaEventElapsedTime(&b, ref, end[t.id]));
        row[t.id] = {Time::ps(std::llround(static_cast<double>(a) * 1e9)),
                     Time::ps(std::llround(static_cast<double>(b) * 1e9))};
      }
      reps.push_back(std::move(row));
    }
    call_context().clear();
    download(mem);
    SimResult res;
    dev::summarize(reps, &res);
    for (const Task& t : graph.tasks()) {
      res.trace[t.id].flops = t.is_compute() ? t.compute().flops : 0;
      res.trace[t.id].bytes = t.is_compute() ? t.compute().bytes : 0;
    }
    return res;
  }

  ~Impl() {
    release();
    for (auto& [l, c] : comms) ncclCommDestroy(c);
    if (world) ncclCommDestroy(world);
  }
};

CudaExecutor::CudaExecutor(CudaOptions o) : impl_(std::make_unique<Impl>()) {
  impl_->o = o;
  impl_->init();
}
CudaExecutor::~CudaExecutor() = default;
SimResult CudaExecutor::run(const TaskGraph& g, Memory& mem) {
  return impl_->run(g, mem);
}
bool CudaExecutor::owns(int rank) const {
  return impl_->owns(rank);
}
int CudaExecutor::world_rank() const {
  return impl_->rank;
}
int CudaExecutor::world_size() const {
  return impl_->size;
}
std::string CudaExecutor::device_name() const {
  return impl_->device_name;
}

}  // namespace parmsim::exec
