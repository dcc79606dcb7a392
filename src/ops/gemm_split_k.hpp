// The second kernel of the GEMM core's split-K (GemmArguments::split_k): C = sum of the float32 partials of
// the K slices, in slice order, plus the bias, converted to C's type. No CUTLASS here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "iris/core/tensor.hpp"

namespace iris::ops::detail {

struct SplitKReduce {
  const float* partials = nullptr;  // `splits` packed M x N float32 matrices, 16-byte aligned
  int splits = 0;
  int64_t m = 0, n = 0;  // n a multiple of 8
  void* c = nullptr;     // M x N of c_type, row stride ldc (elements); 16-byte aligned rows
  int64_t ldc = 0;
  DType c_type = DType::kBFloat16;  // bfloat16, float16 or float32
  const void* bias = nullptr;       // N elements of c_type, 16-byte aligned, or null
};

// Enqueues the sum on `stream` (asynchronous; capturable).
void launch_split_k_reduce(const SplitKReduce& r, int sm_count, cudaStream_t stream);

}  // namespace iris::ops::detail
