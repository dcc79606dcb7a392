// Small helpers shared by the device-API GPU tests (tests/test_device_*.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::test {

// Heap per rank for device-API tests (creation is faster than the 1 GiB default).
inline ContextOptions device_test_options(std::chrono::milliseconds device_timeout = std::chrono::milliseconds(0)) {
  ContextOptions o;
  o.heap_size = size_t{256} << 20;
  o.device_timeout = device_timeout;
  return o;
}

// Plain cudaMalloc'd memory outside the symmetric heap.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    IRIS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), (count == 0 ? 1 : count) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Copies and fills run on `stream` and are complete when these return (the plain cudaMemcpy and
// cudaMemset are not ordered with the contexts' non-blocking streams).
template <typename T>
std::vector<T> copy_to_host(cudaStream_t stream, const T* device, size_t count) {
  std::vector<T> host(count);
  if (count > 0) {
    IRIS_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return host;
}

template <typename T>
void copy_to_device(cudaStream_t stream, T* device, const std::vector<T>& host) {
  if (host.empty()) return;
  IRIS_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template <typename T>
void fill_bytes(cudaStream_t stream, T* device, int byte, size_t count) {
  IRIS_CUDA_CHECK(cudaMemsetAsync(device, byte, count * sizeof(T), stream));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Every rank's vector, indexed by rank (through the bootstrap: works for threads and processes).
template <typename T>
std::vector<std::vector<T>> allgather_vector(Context& ctx, const std::vector<T>& mine) {
  std::string_view bytes(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T));
  auto all = ctx.bootstrap().allgather(bytes);
  std::vector<std::vector<T>> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    out[r].resize(all[r].size() / sizeof(T));
    if (!out[r].empty()) std::memcpy(out[r].data(), all[r].data(), out[r].size() * sizeof(T));
  }
  return out;
}

// SplitMix64 finalizer: deterministic test data on host and device.
__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__host__ __device__ inline uint64_t mix64(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

// Holds the stream for about `us` microseconds (one thread: launch <<<1, 1>>>).
__global__ inline void hold_stream_us(int us) {
  for (int t = 0; t < us; ++t) __nanosleep(1000);
}

}  // namespace iris::test
