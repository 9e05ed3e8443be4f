#include "backend/cpu/cpu_executor.hpp"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include "backend/cpu/communicator.hpp"
#include "sim/core/error.hpp"

namespace parmsim::exec {

Memory::Memory(const TaskGraph& g) : buf_(g.num_ranks()) {
  for (const Buffer& b : g.buffers()) buf_[b.rank][b.name].assign(b.elems, 0.0f);
}

std::vector<float>& Memory::at(int rank, const std::string& name) {
  if (rank < 0 || rank >= ranks()) throw UserError(fmt::format("no rank {} (memory has {} ranks)", rank, ranks()));
  auto it = buf_[rank].find(name);
  if (it == buf_[rank].end()) throw UserError(fmt::format("rank {} has no buffer '{}'", rank, name));
  return it->second;
}

bool Memory::has(int rank, const std::string& name) const {
  return rank >= 0 && rank < ranks() && buf_[rank].count(name) > 0;
}

namespace {

class Run {
 public:
  Run(const TaskGraph& g, Memory& mem, const KernelTable& k) : g_(g), mem_(mem), kernels_(k) {
    const int N = static_cast<int>(g.tasks().size());
    done_.assign(N, 0);
    started_.assign(N, 0);
    arrived_.assign(g.collectives().size(), 0);
    coll_done_.assign(g.collectives().size(), 0);
    res_.trace.resize(N);
    for (int t = 0; t < N; ++t) res_.trace[t].task = t;
    for (const Task& t : g.tasks())
      if (t.is_compute() && t.compute().role() != KernelRole::none && !kernels_.count(t.compute().role()))
        throw UserError(fmt::format("task '{}': no CPU kernel for {}", t.name, to_string(t.compute().role())));
  }

  SimResult go() {
    start_ = std::chrono::steady_clock::now();
    std::vector<std::vector<int>> lanes;
    for (int r = 0; r < g_.num_ranks(); ++r)
      for (int s = 0; s < static_cast<int>(g_.streams(r).size()); ++s) {
        std::vector<int> mine;
        for (const Task& t : g_.tasks())
          if (t.rank == r && t.stream == s) mine.push_back(t.id);
        if (!mine.empty()) lanes.push_back(std::move(mine));
      }
    live_ = static_cast<int>(lanes.size());  // all counted before any thread can wait
    std::vector<std::thread> threads;
    threads.reserve(lanes.size());
    try {
      for (const auto& lane : lanes) threads.emplace_back([this, &lane] { stream_loop(lane); });
    } catch (const std::system_error& e) {
      // The system refused a thread (a limit on threads or memory). The ones
      // started stop at their next task; the run fails in one line.
      {
        std::lock_guard<std::mutex> lk(mu_);
        failure_ = std::make_exception_ptr(UserError(fmt::format(
            "the CPU executor runs one thread per (rank, stream): {} were needed and thread {} could not start ({}); "
            "use fewer ranks (a smaller `mp`/`E`/GPU count) or raise the process's thread and memory limits",
            lanes.size(), threads.size() + 1, e.what())));
      }
      cv_.notify_all();
    }
    for (auto& t : threads) t.join();
    if (failure_) std::rethrow_exception(failure_);
    Time end;
    for (const auto& row : res_.trace) end = std::max(end, row.end);
    res_.makespan = end;
    return std::move(res_);
  }

 private:
  Time now() const {
    return Time::ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }

  // Waits until pred() holds; detects that every live thread waits.
  // Stuck means: every live thread waits and no waiter's condition holds (a
  // waiter that was notified but has not woken yet still counts as waiting).
  void wait(std::unique_lock<std::mutex>& lk, int task, const std::function<bool()>& pred) {
    if (pred()) return;
    ++waiting_;
    waiting_on_[std::this_thread::get_id()] = {task, &pred};
    while (!pred() && !failure_) {
      if (waiting_ == live_) {
        bool runnable = false;
        for (const auto& [tid, w] : waiting_on_) runnable = runnable || (*w.second)();
        if (!runnable) {
          fail_stuck();
          break;
        }
        cv_.notify_all();
      }
      cv_.wait(lk);
    }
    waiting_on_.erase(std::this_thread::get_id());
    --waiting_;
  }

  void fail_stuck() {
    std::string msg = "execution stuck: every stream waits; blocked:";
    int shown = 0;
    for (const auto& [tid, w] : waiting_on_) {
      const int task = w.first;
      if (++shown > 10) break;
      const Task& t = g_.task(task);
      msg += fmt::format("\n  '{}' (rank {}, stream {})", t.name, t.rank, g_.streams(t.rank)[t.stream]);
      if (!t.is_compute() && started_[task])
        msg += fmt::format(" waits in collective '{}' for its other members", g_.collective(t.collective()).name);
      else
        msg += " waits for its dependencies";
    }
    failure_ = std::make_exception_ptr(UserError(msg));
    cv_.notify_all();
  }

  void stream_loop(const std::vector<int>& tasks) {
    std::unique_lock<std::mutex> lk(mu_);
    for (int id : tasks) {
      if (failure_) break;
      const Task& t = g_.task(id);
      wait(lk, id, [&] {
        for (int d : t.deps)
          if (!done_[d]) return false;
        return true;
      });
      if (failure_) break;
      started_[id] = 1;
      res_.trace[id].start = now();
      try {
        if (t.is_compute()) {
          const ComputeTask& ct = t.compute();
          res_.trace[id].flops = ct.flops;
          res_.trace[id].bytes = ct.bytes;
          if (ct.role() != KernelRole::none) {
            lk.unlock();
            kernels_.at(ct.role())(t, mem_);
            lk.lock();
          }
        } else {
          const int c = t.collective();
          if (++arrived_[c] == static_cast<int>(g_.collective(c).group.size())) {
            if (!g_.collective(c).send_buf.empty()) run_collective(g_.collective(c), mem_);
            coll_done_[c] = 1;
            cv_.notify_all();
          }
          wait(lk, id, [&] { return coll_done_[c] != 0; });
          if (failure_) break;
        }
      } catch (...) {
        if (!lk.owns_lock()) lk.lock();
        if (!failure_) failure_ = std::current_exception();
        cv_.notify_all();
        break;
      }
      res_.trace[id].end = now();
      done_[id] = 1;
      cv_.notify_all();
    }
    --live_;
    cv_.notify_all();
  }

  const TaskGraph& g_;
  Memory& mem_;
  const KernelTable& kernels_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> done_, started_, coll_done_;
  std::vector<int> arrived_;
  int live_ = 0, waiting_ = 0;
  std::map<std::thread::id, std::pair<int, const std::function<bool()>*>> waiting_on_;
  std::exception_ptr failure_;
  std::chrono::steady_clock::time_point start_;
  SimResult res_;
};

}  // namespace

SimResult CpuExecutor::run(const TaskGraph& g, Memory& mem) {
  return Run(g, mem, kernels_).go();
}

}  // namespace parmsim::exec
