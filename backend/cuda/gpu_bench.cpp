// parmsim-gpu-bench: the speed of the CUDA executor's kernels on this GPU.
//   - Order and I-Order on 64 MiB token buffers: bandwidth against a plain
//     device-to-device copy of the same bytes (the GPU's achievable bandwidth);
//   - the expert task (two GEMMs per source block + ReLU) against the same
//     GEMMs called on cuBLAS directly, in TFLOP/s.
// Prints one table; exits 2 without a usable GPU.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <map>
#include <vector>

#include "backend/cuda/cuda_executor.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/device/moe_tasks.hpp"

using namespace parmsim;
using namespace parmsim::exec;
using cuda::CudaOps;
using dev::Elem;
using dev::I;

namespace {

struct Bench {
  cudaStream_t s = nullptr;
  cublasHandle_t h = nullptr;
  std::map<std::string, dev::BufRef> bufs;
  std::vector<void*> mem;

  Bench() {
    PARMSIM_CUDA(cudaStreamCreate(&s));
    PARMSIM_CUBLAS(cublasCreate(&h));
    PARMSIM_CUBLAS(cublasSetStream(h, s));
  }
  ~Bench() {
    for (void* p : mem) cudaFree(p);
    cublasDestroy(h);
    cudaStreamDestroy(s);
  }
  void* buf(const std::string& name, std::uint64_t elems, Elem e) {
    void* p = nullptr;
    PARMSIM_CUDA(cudaMalloc(&p, elems * dev::elem_bytes(e)));
    PARMSIM_CUDA(cudaMemset(p, 0, elems * dev::elem_bytes(e)));
    mem.push_back(p);
    bufs[name] = {p, e, elems};
    return p;
  }
  // Median-free: the mean over `iters` back-to-back runs after 3 warm-up runs, in seconds.
  double time(const std::function<void()>& fn, int iters = 20) {
    for (int i = 0; i < 3; ++i) fn();
    cudaEvent_t a, b;
    PARMSIM_CUDA(cudaEventCreate(&a));
    PARMSIM_CUDA(cudaEventCreate(&b));
    PARMSIM_CUDA(cudaEventRecord(a, s));
    for (int i = 0; i < iters; ++i) fn();
    PARMSIM_CUDA(cudaEventRecord(b, s));
    PARMSIM_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    PARMSIM_CUDA(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / 1e3 / iters;
  }
  dev::BufferLookup lookup() {
    return [this](const std::string& n) { return bufs.at(n); };
  }
};

const char* name_of(Elem e) {
  return e == Elem::f32 ? "fp32" : e == Elem::f16 ? "fp16" : "bf16";
}

void order_bench(Elem e) {
  Bench b;
  const I M = 1024, k = 2, E = 32;
  const I count = (I{64} << 20) / (M * dev::elem_bytes(e));  // x is 64 MiB
  const I C = (count * k * 12 / 10 + E - 1) / E;
  b.buf("x", count * M, e);
  b.buf("disp", E * C * M, e);
  b.buf("out", count * M, e);
  float* route = static_cast<float*>(b.buf("route", count * k * 3, Elem::f32));
  std::vector<float> r(count * k * 3);
  std::vector<I> fill(E, 0);
  for (I i = 0; i < count; ++i)
    for (I j = 0; j < k; ++j) {
      const I ex = (i * k + j) % E;
      r[(i * k + j) * 3] = static_cast<float>(ex);
      r[(i * k + j) * 3 + 1] = static_cast<float>(fill[ex]++);
      r[(i * k + j) * 3 + 2] = 0.5f;
    }
  PARMSIM_CUDA(cudaMemcpy(route, r.data(), r.size() * 4, cudaMemcpyHostToDevice));
  CudaOps ops(e, b.s, b.h);
  Task order;
  order.name = "order", order.inputs = {"x", "route"}, order.outputs = {"disp"};
  order.compute().args = MoeOrderArgs{0, count, M, E, k, C};
  Task iorder;
  iorder.name = "iorder", iorder.inputs = {"disp", "route"}, iorder.outputs = {"out"};
  iorder.compute().args = MoeIOrderArgs{count, M, E, k, C, count, SlotLayout::local};
  const double eb = dev::elem_bytes(e);
  const double x_bytes = static_cast<double>(count * M) * eb, disp_bytes = static_cast<double>(E * C * M) * eb;
  const double t_copy = b.time([&] {
    PARMSIM_CUDA(cudaMemcpyAsync(b.bufs["out"].p, b.bufs["x"].p, count * M * eb, cudaMemcpyDeviceToDevice, b.s));
  });
  const double copy_bw = 2 * x_bytes / t_copy;
  const double t_order = b.time([&] { dev::run_task(order, ops, b.lookup(), nullptr, nullptr); });
  const double t_iorder = b.time([&] { dev::run_task(iorder, ops, b.lookup(), nullptr, nullptr); });
  // Bytes each must move: Order reads k rows per token and writes the whole
  // dispatch buffer (its zero fill included); I-Order reads k rows and writes one per token.
  const double order_bytes = k * x_bytes + 2 * disp_bytes, iorder_bytes = (k + 1) * x_bytes;
  std::printf("%-8s %-6s %10.1f %12.1f %12.1f %8.2f\n", "order", name_of(e), x_bytes / (1 << 20), t_order * 1e6,
              order_bytes / t_order / 1e9, order_bytes / t_order / copy_bw);
  std::printf("%-8s %-6s %10.1f %12.1f %12.1f %8.2f\n", "iorder", name_of(e), x_bytes / (1 << 20), t_iorder * 1e6,
              iorder_bytes / t_iorder / 1e9, iorder_bytes / t_iorder / copy_bw);
  std::printf("%-8s %-6s %10.1f %12.1f %12.1f %8.2f\n", "d2d-copy", name_of(e), x_bytes / (1 << 20), t_copy * 1e6,
              copy_bw / 1e9, 1.0);
}

void expert_bench(Elem e) {
  // The paper-like layer on 8 GPUs, mp = 4: 2 source blocks, 16 local experts,
  // capacity 154, M = 1024, h = H / mp = 1024.
  Bench b;
  const I X = 2, El = 16, C = 154, M = 1024, h = 1024;
  b.buf("in", X * El * C * M, e);
  b.buf("W1", El * M * h, e);
  b.buf("W2", El * h * M, e);
  b.buf("eout", X * El * C * M, e);
  b.buf("h1", X * El * C * h, e);
  void* act = b.buf("act", X * El * C * h, e);
  Task t;
  t.name = "experts", t.inputs = {"in", "W1", "W2"}, t.outputs = {"eout", "h1"};
  t.compute().args = MoeExpertsArgs{X, El, C, M, h};
  CudaOps ops(e, b.s, b.h);
  const double flops = 2.0 * 2 * X * El * C * M * h;
  const double t_task = b.time([&] { dev::run_task(t, ops, b.lookup(), act, nullptr); });
  // The same two GEMMs per block straight on cuBLAS, without the ReLU.
  const double t_blas = b.time([&] {
    for (I x = 0; x < X; ++x)
      for (int which = 0; which < 2; ++which) {
        dev::Gemm g;
        const bool first = which == 0;
        g.r = C, g.c = first ? h : M, g.k = first ? M : h, g.batch = El, g.ab = e, g.d = e;
        const char* in = static_cast<const char*>(first ? b.bufs["in"].p : act);
        g.A = in + x * El * C * (first ? M : h) * dev::elem_bytes(e), g.lda = g.k, g.sa = C * g.k;
        g.B = first ? b.bufs["W1"].p : b.bufs["W2"].p, g.ldb = g.c, g.sb = g.k * g.c;
        g.D = static_cast<char*>(first ? b.bufs["h1"].p : b.bufs["eout"].p) + x * El * C * g.c * dev::elem_bytes(e);
        g.ldd = g.c, g.sd = C * g.c;
        ops.gemm(g);
      }
  });
  std::printf("%-8s %-6s %10s %12.1f %12.1f %8.2f   (cuBLAS alone: %.1f TFLOP/s)\n", "experts", name_of(e), "-",
              t_task * 1e6, flops / t_task / 1e12, t_blas / t_task, flops / t_blas / 1e12);
}

}  // namespace

int main() {
  if (const std::string why = cuda_unavailable(); !why.empty()) {
    std::fprintf(stderr, "parmsim-gpu-bench: %s\n", why.c_str());
    return 2;
  }
  try {
    cudaDeviceProp p{};
    PARMSIM_CUDA(cudaGetDeviceProperties(&p, 0));
    std::printf("parmsim-gpu-bench on %s\n", p.name);
    std::printf("%-8s %-6s %10s %12s %12s %8s\n", "kernel", "dtype", "MiB", "time_us", "GB/s|TF/s", "ratio");
    for (Elem e : {Elem::f32, Elem::bf16}) order_bench(e);
    for (Elem e : {Elem::f32, Elem::bf16, Elem::f16}) expert_bench(e);
    std::printf("ratio: bandwidth over the device-to-device copy's; for experts, cuBLAS-alone time over the task's\n");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "parmsim-gpu-bench: %s\n", ex.what());
    return 1;
  }
  return 0;
}
