#pragma once
// DeviceOps on a GPU: cuBLAS GEMMs (fp32 accumulation) and the kernel bodies
// as CUDA kernels, all on one stream; plus the few extra kernels the loopback
// collectives need. Only CUDA runtime/cuBLAS types here, so host C++ can use it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/check.hpp"
#include "backend/device/device_ops.hpp"

namespace parmsim::cuda {

void detail_check_cuda(cudaError_t e, const char* call);
void detail_check_cublas(cublasStatus_t e, const char* call);

class CudaOps final : public exec::dev::DeviceOps {
 public:
  CudaOps(exec::dev::Elem act, cudaStream_t stream, cublasHandle_t blas) : act_(act), stream_(stream), blas_(blas) {}
  exec::dev::Elem act() const override { return act_; }
  void gemm(const exec::dev::Gemm& g) override;
  void zero(void* p, std::uint64_t bytes) override;
  void launch(exec::dev::Body b, exec::dev::I n, const exec::dev::LaunchArgs& a) override;
  cudaStream_t stream() const { return stream_; }

 private:
  exec::dev::Elem act_;
  cudaStream_t stream_;
  cublasHandle_t blas_;
};

// acc[i] += src[i] and dst[i] = acc[i] for n elements of type e (acc is fp32).
void acc_add(float* acc, const void* src, exec::dev::Elem e, std::uint64_t n, cudaStream_t s);
void acc_store(void* dst, const float* acc, exec::dev::Elem e, std::uint64_t n, cudaStream_t s);

}  // namespace parmsim::cuda
