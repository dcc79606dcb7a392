// The split-K sum (gemm_split_k.hpp): one thread per four consecutive outputs of a row, float4 loads of
// each slice's partial, the slices added in order 0, 1, ..., S - 1 whatever the launch, so every run (and
// every rank running the same GEMM) gets the same bits. Launched with programmatic dependent launch (the
// collectives' mechanism, ccl/ccl_common.cuh): it may be scheduled while the GEMM's last CTAs finish, and
// waits for the GEMM's partials before it reads them.
#include "ops/gemm_split_k.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "ccl/ccl_common.cuh"
#include "core/kernel_modules.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"

namespace iris::ops::detail {
namespace {

// Four outputs of C's type T: float4, or two pairs of a 16-bit type (T2: its pair type).
__device__ inline __nv_bfloat162 pair_of(float2 v, __nv_bfloat16) { return __float22bfloat162_rn(v); }
__device__ inline __half2 pair_of(float2 v, __half) { return __float22half2_rn(v); }
__device__ inline float2 floats_of(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ inline float2 floats_of(__half2 v) { return __half22float2(v); }

template <typename T>
struct Out4 {
  using T2 = decltype(pair_of(float2{}, T{}));
  struct alignas(8) Vec {
    T2 lo, hi;
  };
  __device__ static Vec pack(float4 v) {
    return {pair_of(make_float2(v.x, v.y), T{}), pair_of(make_float2(v.z, v.w), T{})};
  }
  __device__ static float4 unpack(const T* p) {
    const Vec v = *reinterpret_cast<const Vec*>(p);
    const float2 lo = floats_of(v.lo), hi = floats_of(v.hi);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
};
template <>
struct Out4<float> {
  using Vec = float4;
  __device__ static Vec pack(float4 v) { return v; }
  __device__ static float4 unpack(const float* p) { return *reinterpret_cast<const float4*>(p); }
};

template <typename T>
__global__ void split_k_reduce_kernel(SplitKReduce r) {
  ccl::detail::pdl_wait();  // the GEMM's partials are complete and visible
  ccl::detail::pdl_launch_dependents();
  const float* __restrict__ partials = r.partials;
  T* __restrict__ c = static_cast<T*>(r.c);
  const T* __restrict__ bias = static_cast<const T*>(r.bias);
  const int64_t quads_per_row = r.n / 4;
  const int64_t quads = r.m * quads_per_row;
  const int64_t slice = r.m * r.n;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < quads; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = q / quads_per_row;
    const int64_t col = (q - row * quads_per_row) * 4;
    const float* p = partials + row * r.n + col;
    float4 acc = *reinterpret_cast<const float4*>(p);
    for (int s = 1; s < r.splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(p + s * slice);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    if (bias != nullptr) {
      const float4 b = Out4<T>::unpack(bias + col);
      acc.x += b.x;
      acc.y += b.y;
      acc.z += b.z;
      acc.w += b.w;
    }
    *reinterpret_cast<typename Out4<T>::Vec*>(c + row * r.ldc + col) = Out4<T>::pack(acc);
  }
}

template <typename T>
void launch(const SplitKReduce& r, int sm_count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t quads = r.m * (r.n / 4);
  const int64_t blocks = std::min<int64_t>((quads + kThreads - 1) / kThreads, int64_t{sm_count} * 8);
  if (blocks == 0) return;
  ccl::detail::launch_collective(split_k_reduce_kernel<T>, static_cast<int>(blocks), kThreads, stream, r);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(split_k_reduce_kernel<float>)

void launch_split_k_reduce(const SplitKReduce& r, int sm_count, cudaStream_t stream) {
  switch (r.c_type) {
    case DType::kFloat32:
      return launch<float>(r, sm_count, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(r, sm_count, stream);
    case DType::kFloat16:
      return launch<__half>(r, sm_count, stream);
    default:
      throw Error(iris::detail::str_cat("iris internal error: split-K sum into ", dtype_name(r.c_type), "."));
  }
}

}  // namespace iris::ops::detail
