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

}  // namespace

void CudaOps::launch(exec::dev::Body b, I n, const exec::dev::LaunchArgs& a) {
  if (n <= 0) return;
  const unsigned blocks = blocks_for(n);
  cudaStream_t s = stream_;
  auto go = [&](auto body) { each<<<blocks, kThreads, 0, s>>>(n, body); };
  switch (act_) {
    case Elem::f32:
      exec::dev::with_body<float>(b, a, go);
      break;
    case Elem::f16:
      exec::dev::with_body<__half>(b, a, go);
      break;
    case Elem::bf16:
      exec::dev::with_body<__nv_bfloat16>(b, a, go);
      break;
  }
  detail_check_cuda(cudaGetLastError(), "kernel launch");
}

void acc_add(float* acc, const void* src, Elem e, std::uint64_t n, cudaStream_t s) {
  const I m = static_cast<I>(n);
  if (m <= 0) return;
  switch (e) {
    case Elem::f32:
      acc_add_kernel<<<blocks_for(m), kThreads, 0, s>>>(acc, static_cast<const float*>(src), m);
      break;
    case Elem::f16:
      acc_add_kernel<<<blocks_for(m), kThreads, 0, s>>>(acc, static_cast<const __half*>(src), m);
      break;
    case Elem::bf16:
      acc_add_kernel<<<blocks_for(m), kThreads, 0, s>>>(acc, static_cast<const __nv_bfloat16*>(src), m);
      break;
  }
  detail_check_cuda(cudaGetLastError(), "acc_add kernel launch");
}

void acc_store(void* dst, const float* acc, Elem e, std::uint64_t n, cudaStream_t s) {
  const I m = static_cast<I>(n);
  if (m <= 0) return;
  switch (e) {
    case Elem::f32:
      acc_store_kernel<<<blocks_for(m), kThreads, 0, s>>>(static_cast<float*>(dst), acc, m);
      break;
    case Elem::f16:
      acc_store_kernel<<<blocks_for(m), kThreads, 0, s>>>(static_cast<__half*>(dst), acc, m);
      break;
    case Elem::bf16:
      acc_store_kernel<<<blocks_for(m), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(dst), acc, m);
      break;
  }
  detail_check_cuda(cudaGetLastError(), "acc_store kernel launch");
}

}  // namespace parmsim::cuda
