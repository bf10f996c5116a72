#pragma once
// One check macro per library: a failing CUDA runtime or cuBLAS call throws scalelab::Error with
// the call's text, file:line, the library's own error name and string, and what to try next.
//   SCALELAB_CUDA_CHECK(cudaMalloc(&p, bytes));
//   SCALELAB_CUBLAS_CHECK(cublasSgemm(handle, ...));
// Usable from .cpp and .cu files alike (host code only), so it keeps to C++17.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace scalelab::detail {

inline const char* cuda_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory — reduce the batch size or the model, or shard it over more devices";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return "no usable GPU — check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu or --device sim";
    default:
      return "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel, and check nvidia-smi for GPU errors";
  }
}

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw Error("cuda", std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                          cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") — " + cuda_hint(e));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  const char* hint = s == CUBLAS_STATUS_ALLOC_FAILED
                         ? "the GPU is out of memory — reduce the batch size or the model"
                         : "check the matrix sizes and leading dimensions, and rerun with CUDA_LAUNCH_BLOCKING=1";
  throw Error("cuda", std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                          cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ") — " + hint);
}

}  // namespace scalelab::detail

#define SCALELAB_CUDA_CHECK(call)                                                              \
  do {                                                                                         \
    const cudaError_t scalelab_cuda_err_ = (call);                                             \
    if (scalelab_cuda_err_ != cudaSuccess)                                                     \
      ::scalelab::detail::throw_cuda_error(scalelab_cuda_err_, #call, __FILE__, __LINE__);     \
  } while (0)

#define SCALELAB_CUBLAS_CHECK(call)                                                            \
  do {                                                                                         \
    const cublasStatus_t scalelab_cublas_st_ = (call);                                         \
    if (scalelab_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::scalelab::detail::throw_cublas_error(scalelab_cublas_st_, #call, __FILE__, __LINE__);  \
  } while (0)
