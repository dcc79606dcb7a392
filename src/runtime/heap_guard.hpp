// Heap guards (ContextOptions::heap_guards, IRIS_HEAP_GUARDS=1): a debug mode in which every heap
// block ends in a guard region (HeapAllocator::GuardRegion: from the end of the request to the end of
// the block, at least HeapAllocator's guard bytes) holding a pattern that is a function of the heap
// offset. A kernel that writes past the end of a heap object (the founding bug: lock entries written
// past their array into the next object) changes the pattern; Context checks every live guard at each
// barrier() and each freed object's guard at free(), and raises HeapCorruption on every rank. The heap
// is one device allocation, so compute-sanitizer cannot see such a write (DESIGN.md, the heap).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/heap_allocator.hpp"

namespace iris::detail {

// Guard bytes after every request when heap guards are on.
inline constexpr size_t kHeapGuardBytes = 256;

// The guard byte at heap offset `offset`: odd (never 0x00, never a zeroed or even-valued write), and
// different for neighbouring offsets, so that neither a cleared, a poisoned nor a shifted guard passes.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline constexpr uint8_t
    heap_guard_byte(uint64_t offset) {
  uint64_t x = (offset + 0x6972697347554152ull) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  return static_cast<uint8_t>((x >> 24) | 1u);
}

// What a check found in the guards it was given.
struct GuardCheck {
  size_t first = SIZE_MAX;  // lowest heap offset whose byte differs from the pattern (SIZE_MAX: none)
  uint64_t damaged_regions = 0;
};

// One region's damage, read back to the host.
struct GuardDamage {
  size_t changed = 0;  // bytes that differ from the pattern
  size_t first = 0;    // heap offset of the first of them
  uint8_t found = 0, want = 0;
};

// Device side of the guards of one rank's heap (`heap`: this rank's slot). Every call is complete on
// return (debug mode: simplicity over overlap).
class HeapGuards {
 public:
  HeapGuards() = default;
  ~HeapGuards();
  HeapGuards(const HeapGuards&) = delete;
  HeapGuards& operator=(const HeapGuards&) = delete;

  // Writes the pattern into every region.
  void fill(char* heap, const std::vector<HeapAllocator::GuardRegion>& regions, cudaStream_t stream);
  // Checks every region against the pattern.
  GuardCheck check(const char* heap, const std::vector<HeapAllocator::GuardRegion>& regions, cudaStream_t stream);
  // Reads one region back and compares it on the host.
  GuardDamage inspect(const char* heap, const HeapAllocator::GuardRegion& region, cudaStream_t stream);

 private:
  void upload(const std::vector<HeapAllocator::GuardRegion>& regions, cudaStream_t stream);

  uint64_t* spans_ = nullptr;             // [begin, end) heap offsets of each region
  size_t span_capacity_ = 0;              // regions
  unsigned long long* result_ = nullptr;  // lowest damaged offset, damaged regions
};

}  // namespace iris::detail
