// Small helpers shared by the device-API GPU tests (tests/test_device_*.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/kernel_modules.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"

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

// %globaltimer, in nanoseconds (shared by every SM; __nanosleep alone may sleep far less than asked).
__device__ inline uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Holds the stream for `us` microseconds of the GPU's clock (one thread: launch <<<1, 1>>>).
__global__ inline void hold_stream_us(int us) {
  const uint64_t end = global_timer_ns() + static_cast<uint64_t>(us) * 1000u;
  while (global_timer_ns() < end) __nanosleep(1000);
}

// Holds the stream until *flag is nonzero or `max_us` microseconds have passed (one thread: <<<1, 1>>>);
// raise_flag, on another stream, ends it. Atomics, so the kernels see each other while both run.
__global__ inline void hold_stream_until(uint32_t* flag, int max_us) {
  const uint64_t end = global_timer_ns() + static_cast<uint64_t>(max_us) * 1000u;
  while (atomicAdd(flag, 0u) == 0u && global_timer_ns() < end) __nanosleep(1000);
}

__global__ inline void raise_flag(uint32_t* flag) { atomicExch(flag, 1u); }

// Loads kernels now, with every kernel of their libraries (the driver's library API, as a Context loads
// iris's: core/kernel_modules.hpp). CUDA loads a kernel at its first launch by default
// (CUDA_MODULE_LOADING=LAZY), and that launch waits until the kernels already running on the device have
// ended: a test that needs two of its kernels to run at the same time loads them first, or its first
// launches run one after the other.
template <typename... Kernels>
void load_kernels(Kernels... kernels) {
  auto load = [](auto kernel) {
    const detail::KernelLoadReport loaded = detail::load_kernel_library(reinterpret_cast<const void*>(kernel));
    if (!loaded.failure.empty()) throw Error("test::load_kernels: " + loaded.failure);
  };
  (load(kernels), ...);
}

// How long `launch` took to return, and until what it enqueued had run (run_beside_a_spinning_kernel).
struct BesideASpinningKernel {
  std::chrono::steady_clock::duration launch, ran;
};

// Calls launch(ctx.stream()) while a kernel on another stream of the process spins until a flag that
// ctx.stream() raises after what `launch` enqueued (at most 3 s): a first launch that waits for the device
// to idle shows as `launch` (the host blocked) or as `ran` (the GPU ran it after the spin gave up).
// Complete on return (ctx.synchronize()).
inline BesideASpinningKernel run_beside_a_spinning_kernel(Context& ctx,
                                                          const std::function<void(cudaStream_t)>& launch) {
  cudaStream_t other = nullptr;
  IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  DeviceBuffer<uint32_t> done(1);
  IRIS_CUDA_CHECK(cudaMemsetAsync(done.get(), 0, sizeof(uint32_t), ctx.stream()));
  ctx.synchronize();
  load_kernels(hold_stream_until, raise_flag);
  hold_stream_until<<<1, 1, 0, other>>>(done.get(), 3'000'000);
  const auto start = std::chrono::steady_clock::now();
  launch(ctx.stream());
  BesideASpinningKernel t;
  t.launch = std::chrono::steady_clock::now() - start;
  raise_flag<<<1, 1, 0, ctx.stream()>>>(done.get());
  ctx.synchronize();
  t.ran = std::chrono::steady_clock::now() - start;
  IRIS_CUDA_CHECK(cudaStreamSynchronize(other));
  IRIS_CUDA_CHECK(cudaStreamDestroy(other));
  return t;
}

// Two calls that share state, for the call-order tests: first(ctx.stream()), then then(second) on
// `second`, forked off ctx.stream() before and joined back after. Rank 0's ctx.stream() is held before the
// first call until the second stream's calls are done, or `max_hold_us` have passed: the calls run in the
// order made only if `then` waited for `first`, in which case the hold lasts max_hold_us; otherwise rank
// 0's second call runs, and meets its peers' calls, while its first one has not started, however late
// its peers come (within max_hold_us). Eagerly, or captured into one graph (thread-local mode) launched
// once. Complete on return (ctx.synchronize(): a device timeout raises). The kernels of `first` and `then`
// must have run before (load_kernels): a first launch would wait for the hold to end.
inline void calls_on_two_streams(Context& ctx, cudaStream_t second, bool graph, int max_hold_us,
                                 const std::function<void(cudaStream_t)>& first,
                                 const std::function<void(cudaStream_t)>& then) {
  load_kernels(hold_stream_until, raise_flag);
  DeviceBuffer<uint32_t> done(1);
  cudaEvent_t fork = nullptr, join = nullptr;
  IRIS_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  IRIS_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const cudaStream_t s = ctx.stream();
  auto both = [&] {
    IRIS_CUDA_CHECK(cudaMemsetAsync(done.get(), 0, sizeof(uint32_t), s));
    IRIS_CUDA_CHECK(cudaEventRecord(fork, s));
    IRIS_CUDA_CHECK(cudaStreamWaitEvent(second, fork, 0));
    if (ctx.rank() == 0) hold_stream_until<<<1, 1, 0, s>>>(done.get(), max_hold_us);
    first(s);
    then(second);
    raise_flag<<<1, 1, 0, second>>>(done.get());
    IRIS_CUDA_CHECK(cudaEventRecord(join, second));
    IRIS_CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
  };
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    IRIS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    both();
    IRIS_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    IRIS_CUDA_CHECK(cudaGraphLaunch(exec, s));
    ctx.synchronize();
    IRIS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    IRIS_CUDA_CHECK(cudaGraphDestroy(g));
  } else {
    both();
    ctx.synchronize();
  }
  IRIS_CUDA_CHECK(cudaEventDestroy(join));
  IRIS_CUDA_CHECK(cudaEventDestroy(fork));
}

}  // namespace iris::test
