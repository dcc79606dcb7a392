// Checks for CUDA runtime and driver calls: a failure throws iris::CudaError / iris::CuError whose
// what() carries the call text, file:line, the error name and the error string.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "iris/core/error.hpp"

#define IRIS_CUDA_CHECK(expr)                                                                       \
  do {                                                                                              \
    cudaError_t iris_err_ = (expr);                                                                 \
    if (iris_err_ != cudaSuccess) ::iris::detail::throw_cuda_error(iris_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define IRIS_CU_CHECK(expr)                                                                         \
  do {                                                                                              \
    CUresult iris_res_ = (expr);                                                                    \
    if (iris_res_ != CUDA_SUCCESS) ::iris::detail::throw_cu_error(iris_res_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: surfaces launch-configuration errors at the launch site.
#define IRIS_CUDA_CHECK_LAUNCH() IRIS_CUDA_CHECK(cudaGetLastError())
