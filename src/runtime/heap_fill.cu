// Fill kernels behind Context::zeros/full/random.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>

#include "core/kernel_modules.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris {
namespace {

// Repeats a pattern of `pattern_size` bytes (1, 2, 4, 8 or 16) `count` times.
template <typename Word>
__global__ void fill_pattern_kernel(Word* dst, Word value, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = value;
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__device__ __forceinline__ T from_unit(double u, double lo, double hi) {
  double v = lo + (hi - lo) * u;
  if constexpr (std::is_same_v<T, __half>) {
    return __double2half(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __double2bfloat16(v);
  } else if constexpr (std::is_integral_v<T>) {
    double f = floor(v);
    if (f >= hi) f = hi - 1;  // integer range [lo, hi)
    return static_cast<T>(f);
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
__global__ void random_kernel(T* dst, size_t count, uint64_t seed, double lo, double hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    double u = static_cast<double>(mix64(seed * 0x100000001b3ull ^ mix64(i)) >> 11) * 0x1.0p-53;  // [0, 1)
    dst[i] = from_unit<T>(u, lo, hi);
  }
}

int grid_for(size_t count) {
  size_t blocks = (count + 255) / 256;
  return static_cast<int>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(fill_pattern_kernel<uint32_t>)

void Context::fill_bytes(void* dst, int value, size_t bytes) {
  const detail::DeviceGuard device(device_);
  IRIS_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Context::fill_pattern(void* dst, const void* pattern, size_t pattern_size, size_t count) {
  if (count == 0) return;
  const detail::DeviceGuard device(device_);
  auto launch = [&](auto word) {
    using Word = decltype(word);
    std::memcpy(&word, pattern, sizeof(Word));
    fill_pattern_kernel<Word><<<grid_for(count), 256, 0, stream_>>>(static_cast<Word*>(dst), word, count);
  };
  switch (pattern_size) {
    case 1: launch(uint8_t{}); break;
    case 2: launch(uint16_t{}); break;
    case 4: launch(uint32_t{}); break;
    case 8: launch(uint64_t{}); break;
    case 16: launch(uint4{}); break;
    default:
      IRIS_CHECK_ARG(false, "Context::full supports element sizes 1, 2, 4, 8 and 16 bytes, got ", pattern_size, ".");
  }
  IRIS_CUDA_CHECK_LAUNCH();
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

template <typename T>
T* Context::random(size_t count, uint64_t seed, double lo, double hi) {
  IRIS_CHECK_ARG(hi > lo, "Context::random needs lo < hi, got [", lo, ", ", hi, ").");
  T* p = empty<T>(count);
  if (count > 0) {
    const detail::DeviceGuard device(device_);

    random_kernel<T><<<grid_for(count), 256, 0, stream_>>>(p, count, seed, lo, hi);
    IRIS_CUDA_CHECK_LAUNCH();
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return p;
}

template float* Context::random<float>(size_t, uint64_t, double, double);
template double* Context::random<double>(size_t, uint64_t, double, double);
template int32_t* Context::random<int32_t>(size_t, uint64_t, double, double);
template uint32_t* Context::random<uint32_t>(size_t, uint64_t, double, double);
template int64_t* Context::random<int64_t>(size_t, uint64_t, double, double);
template uint64_t* Context::random<uint64_t>(size_t, uint64_t, double, double);
template __half* Context::random<__half>(size_t, uint64_t, double, double);
template __nv_bfloat16* Context::random<__nv_bfloat16>(size_t, uint64_t, double, double);

}  // namespace iris
