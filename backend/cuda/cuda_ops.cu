// CUDA side of CudaOps: a grid-stride kernel per kernel body and element type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_ops.hpp"

namespace parmsim::cuda {

using exec::dev::Elem;
using exec::dev::I;

namespace {

template <class Body>
__global__ void each(I n, Body body) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x)
    body(i);
}

template <class T>
__global__ void acc_add_kernel(float* acc, const T* src, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x)
    acc[i] += static_cast<float>(src[i]);
}
template <class T>
__global__ void acc_store_kernel(T* dst, const float* acc, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x)
    dst[i] = T(acc[i]);
}

constexpr int kThreads = 256;
unsigned blocks_for(I n) {
  return static_cast<unsigned>(std::min<I>((n + kThreads - 1) / kThreads, I{1} << 16));
}

// Calls fn(T{}) with the element type of `e`: the one switch over types.
template <class Fn>
void by_elem(Elem e, Fn&& fn) {
  switch (e) {
    case Elem::f32:
      return fn(float{});
    case Elem::f16:
      return fn(__half{});
    case Elem::bf16:
      return fn(__nv_bfloat16{});
  }
}

}  // namespace

void CudaOps::launch(exec::dev::Body b, I n, const exec::dev::LaunchArgs& a) {
  if (n <= 0) return;
  const unsigned blocks = blocks_for(n);
  cudaStream_t s = stream_;
  by_elem(act_, [&](auto tag) {
    exec::dev::with_body<decltype(tag)>(b, a, [&](auto body) { each<<<blocks, kThreads, 0, s>>>(n, body); });
  });
  detail_check_cuda(cudaGetLastError(), "kernel launch");
}

void acc_add(float* acc, const void* src, Elem e, std::uint64_t n, cudaStream_t s) {
  const I m = static_cast<I>(n);
  if (m <= 0) return;
  by_elem(e, [&](auto tag) {
    using T = decltype(tag);
    acc_add_kernel<<<blocks_for(m), kThreads, 0, s>>>(acc, static_cast<const T*>(src), m);
  });
  detail_check_cuda(cudaGetLastError(), "acc_add kernel launch");
}

void acc_store(void* dst, const float* acc, Elem e, std::uint64_t n, cudaStream_t s) {
  const I m = static_cast<I>(n);
  if (m <= 0) return;
  by_elem(e, [&](auto tag) {
    using T = decltype(tag);
    acc_store_kernel<<<blocks_for(m), kThreads, 0, s>>>(static_cast<T*>(dst), acc, m);
  });
  detail_check_cuda(cudaGetLastError(), "acc_store kernel launch");
}

}  // namespace parmsim::cuda
