#pragma once
// Status checks for every CUDA, cuBLAS and NCCL call: a failure throws a
// UserError naming the call, and the rank and task being enqueued (set by the
// executor through CallContext).
#include <string>

#include "sim/core/error.hpp"

namespace parmsim::cuda {

// What the executor is doing on this thread ("rank 3, task 'a2a#1'"), for messages.
std::string& call_context();

[[noreturn]] void fail_call(const char* call, const std::string& error);

}  // namespace parmsim::cuda

// Checks a call that returns cudaError_t / cublasStatus_t / ncclResult_t.
#define PARMSIM_CUDA(call) ::parmsim::cuda::detail_check_cuda((call), #call)
#define PARMSIM_CUBLAS(call) ::parmsim::cuda::detail_check_cublas((call), #call)
#define PARMSIM_NCCL(call) ::parmsim::cuda::detail_check_nccl((call), #call)
