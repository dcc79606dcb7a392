// Heap guard kernels: fill and check the guard regions of one rank's heap (runtime/heap_guard.hpp).
#include <algorithm>

#include "core/kernel_modules.hpp"
#include "iris/core/cuda_check.hpp"
#include "runtime/heap_guard.hpp"

namespace iris::detail {
namespace {

constexpr int kThreads = 256;

// One block per region (grid-stride over regions), threads over its bytes.
__global__ void fill_guards(char* heap, const uint64_t* spans, int regions) {
  for (int r = blockIdx.x; r < regions; r += gridDim.x) {
    const uint64_t begin = spans[2 * r], end = spans[2 * r + 1];
    for (uint64_t o = begin + threadIdx.x; o < end; o += blockDim.x) heap[o] = static_cast<char>(heap_guard_byte(o));
  }
}

// result[0]: the lowest damaged offset (atomicMin); result[1]: regions with any damaged byte.
__global__ void check_guards(const char* heap, const uint64_t* spans, int regions, unsigned long long* result) {
  __shared__ int damaged;
  for (int r = blockIdx.x; r < regions; r += gridDim.x) {
    if (threadIdx.x == 0) damaged = 0;
    __syncthreads();
    const uint64_t begin = spans[2 * r], end = spans[2 * r + 1];
    for (uint64_t o = begin + threadIdx.x; o < end; o += blockDim.x) {
      if (static_cast<uint8_t>(heap[o]) != heap_guard_byte(o)) {
        atomicMin(&result[0], static_cast<unsigned long long>(o));
        damaged = 1;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0 && damaged) atomicAdd(&result[1], 1ull);
    __syncthreads();
  }
}

unsigned grid_for(size_t regions) { return static_cast<unsigned>(std::clamp<size_t>(regions, 1, 1024)); }

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(fill_guards)

HeapGuards::~HeapGuards() {
  if (spans_ != nullptr) cudaFree(spans_);
  if (result_ != nullptr) cudaFree(result_);
}

void HeapGuards::upload(const std::vector<HeapAllocator::GuardRegion>& regions, cudaStream_t stream) {
  if (regions.size() > span_capacity_) {
    if (spans_ != nullptr) IRIS_CUDA_CHECK(cudaFree(spans_));
    spans_ = nullptr;
    const size_t capacity = std::max<size_t>(regions.size(), 2 * span_capacity_);
    span_capacity_ = 0;  // until the allocation succeeds: a failed one leaves no capacity behind a null buffer
    IRIS_CUDA_CHECK(cudaMalloc(&spans_, capacity * 2 * sizeof(uint64_t)));
    span_capacity_ = capacity;
  }
  std::vector<uint64_t> host;
  host.reserve(regions.size() * 2);
  for (const auto& r : regions) {
    host.push_back(r.begin);
    host.push_back(r.end);
  }
  IRIS_CUDA_CHECK(cudaMemcpyAsync(spans_, host.data(), host.size() * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` goes out of scope
}

void HeapGuards::fill(char* heap, const std::vector<HeapAllocator::GuardRegion>& regions, cudaStream_t stream) {
  if (regions.empty()) return;
  upload(regions, stream);
  fill_guards<<<grid_for(regions.size()), kThreads, 0, stream>>>(heap, spans_, static_cast<int>(regions.size()));
  IRIS_CUDA_CHECK(cudaGetLastError());
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

GuardCheck HeapGuards::check(const char* heap, const std::vector<HeapAllocator::GuardRegion>& regions,
                             cudaStream_t stream) {
  GuardCheck out;
  if (regions.empty()) return out;
  if (result_ == nullptr) IRIS_CUDA_CHECK(cudaMalloc(&result_, 2 * sizeof(unsigned long long)));
  upload(regions, stream);
  const unsigned long long init[2] = {~0ull, 0ull};
  IRIS_CUDA_CHECK(cudaMemcpyAsync(result_, init, sizeof(init), cudaMemcpyHostToDevice, stream));
  check_guards<<<grid_for(regions.size()), kThreads, 0, stream>>>(heap, spans_, static_cast<int>(regions.size()),
                                                                  result_);
  IRIS_CUDA_CHECK(cudaGetLastError());
  unsigned long long got[2] = {0, 0};
  IRIS_CUDA_CHECK(cudaMemcpyAsync(got, result_, sizeof(got), cudaMemcpyDeviceToHost, stream));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.first = got[0] == ~0ull ? SIZE_MAX : static_cast<size_t>(got[0]);
  out.damaged_regions = got[1];
  return out;
}

GuardDamage HeapGuards::inspect(const char* heap, const HeapAllocator::GuardRegion& region, cudaStream_t stream) {
  GuardDamage d;
  const size_t n = region.end - region.begin;
  std::vector<unsigned char> bytes(n);
  if (n > 0) {
    IRIS_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), heap + region.begin, n, cudaMemcpyDeviceToHost, stream));
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = heap_guard_byte(region.begin + i);
    if (bytes[i] == want) continue;
    if (d.changed++ == 0) {
      d.first = region.begin + i;
      d.found = bytes[i];
      d.want = want;
    }
  }
  return d;
}

}  // namespace iris::detail
