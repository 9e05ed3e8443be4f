// Host side of CudaOps: status checks, cuBLAS GEMMs, fills.
#include "backend/cuda/cuda_ops.hpp"

#include <fmt/format.h>

#include <limits>

namespace parmsim::cuda {

using exec::dev::Elem;

std::string& call_context() {
  thread_local std::string where;
  return where;
}

void fail_call(const char* call, const std::string& error) {
  const std::string& where = call_context();
  throw UserError(fmt::format("{} failed{}{}: {}", call, where.empty() ? "" : " on ", where, error));
}

void detail_check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail_call(call, fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e)));
}

void detail_check_cublas(cublasStatus_t e, const char* call) {
  if (e != CUBLAS_STATUS_SUCCESS) fail_call(call, cublasGetStatusString(e));
}

namespace {

cudaDataType_t data_type(Elem e) {
  switch (e) {
    case Elem::f16:
      return CUDA_R_16F;
    case Elem::bf16:
      return CUDA_R_16BF;
    case Elem::f32:
      break;
  }
  return CUDA_R_32F;
}

int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    fail_call("cublasGemmStridedBatchedEx", fmt::format("{} = {} does not fit cuBLAS' int", what, v));
  return static_cast<int>(v);
}

}  // namespace

void CudaOps::gemm(const exec::dev::Gemm& g) {
  if (g.r == 0 || g.c == 0 || g.batch == 0) return;
  const exec::dev::ColMajorGemm c = exec::dev::to_col_major(g);
  const float alpha = g.alpha, beta = g.beta;
  // fp32 accumulation for every type; fp32 operands use no TF32 shortcut.
  PARMSIM_CUBLAS(cublasGemmStridedBatchedEx(
      blas_, c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.tb ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(c.m, "m"), as_int(c.n, "n"),
      as_int(c.k, "k"), &alpha, c.A, data_type(g.ab), as_int(c.lda, "lda"), c.sa, c.B, data_type(g.ab),
      as_int(c.ldb, "ldb"), c.sb, &beta, c.C, data_type(g.d), as_int(c.ldc, "ldc"), c.sc, as_int(g.batch, "batch"),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaOps::zero(void* p, std::uint64_t bytes) {
  if (bytes) PARMSIM_CUDA(cudaMemsetAsync(p, 0, bytes, stream_));
}

}  // namespace parmsim::cuda
