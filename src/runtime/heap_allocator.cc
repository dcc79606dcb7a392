#include "runtime/heap_allocator.hpp"

#include <iterator>
#include <string>

#include "iris/core/error.hpp"

namespace iris {
namespace {

constexpr uint64_t kOpAlloc = 1, kOpFree = 2, kOpFailed = 3;

// splitmix64 finalizer: a cheap, well-mixed 64-bit hash step.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace

HeapAllocator::HeapAllocator(size_t capacity, size_t guard_bytes, size_t max_alignment)
    : capacity_(capacity), guard_bytes_(guard_bytes), max_alignment_(max_alignment), hash_(mix(capacity)) {
  IRIS_CHECK_ARG(guard_bytes % kMinAlignment == 0, "Heap guard bytes must be a multiple of ", kMinAlignment, ", got ",
                 guard_bytes, ".");
  IRIS_CHECK_ARG((max_alignment & (max_alignment - 1)) == 0, "Heap alignment limit must be a power of two, got ",
                 max_alignment, ".");
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

void HeapAllocator::record(uint64_t op, uint64_t a, uint64_t b, uint64_t c) {
  hash_ = mix(hash_ ^ mix(op ^ mix(a ^ mix(b ^ mix(c)))));
  ++length_;
}

size_t HeapAllocator::allocate(size_t bytes, size_t alignment) {
  IRIS_CHECK_ARG(alignment != 0 && (alignment & (alignment - 1)) == 0,
                 "Heap alignment must be a power of two, got ", alignment, ".");
  // Before 2026-12-07 any power of two was taken: the offset was aligned, the address (heap slot + offset)
  // only to the slot's alignment, the heap's allocation granularity.
  IRIS_CHECK_ARG(max_alignment_ == 0 || alignment <= max_alignment_, "Heap alignment of ", alignment,
                 " bytes is above the heap's allocation granularity (", max_alignment_,
                 " bytes), the most its addresses are aligned to: ask for at most that.");
  if (alignment < kMinAlignment) alignment = kMinAlignment;
  // Blocks are whole multiples of the minimum alignment so every free block starts aligned.
  size_t size = align_up(bytes == 0 ? 1 : bytes, kMinAlignment);
  if (size < bytes || size > SIZE_MAX - guard_bytes_)
    size = SIZE_MAX;  // overflow: cannot fit
  else
    size += guard_bytes_;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    size_t start = align_up(it->first, alignment);
    size_t pad = start - it->first;
    if (pad > it->second || it->second - pad < size) continue;
    size_t block_off = it->first, block_size = it->second;
    free_.erase(it);
    if (pad > 0) free_.emplace(block_off, pad);
    size_t tail = block_size - pad - size;
    if (tail > 0) free_.emplace(start + size, tail);
    live_.emplace(start, Live{size, bytes, ++serial_});
    in_use_ += size;
    record(kOpAlloc, bytes, alignment, start);
    return start;
  }
  record(kOpFailed, bytes, alignment, 0);
  throw InvalidArgument(
      detail::str_cat("Symmetric heap exhausted: requested ", bytes, " bytes (alignment ", alignment,
                      guard_bytes_ > 0 ? detail::str_cat(", plus ", guard_bytes_, " guard bytes") : std::string(),
                      ") but the largest free block is ", largest_free_block(), " bytes (", bytes_free(), " of ",
                      capacity_, " bytes free). Free buffers or raise IRIS_HEAP_SIZE."));
}

void HeapAllocator::release(size_t offset) {
  auto it = live_.find(offset);
  IRIS_CHECK_ARG(it != live_.end(), "Heap free of offset ", offset,
                 " which does not start a live allocation (double free, or a pointer into the middle of one).");
  size_t start = it->first, size = it->second.size;
  live_.erase(it);
  in_use_ -= size;
  record(kOpFree, start, size, 0);
  // Coalesce with the free neighbours on both sides.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += size;
      return;
    }
  }
  free_.emplace(start, size);
}

bool HeapAllocator::contains(size_t offset) const { return live_span(offset).has_value(); }

std::optional<HeapAllocator::LiveSpan> HeapAllocator::live_span(size_t offset) const {
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (offset >= it->first + it->second.size) return std::nullopt;
  return LiveSpan{it->first, it->second.requested};
}

size_t HeapAllocator::block_size(size_t offset) const {
  auto it = live_.find(offset);
  return it == live_.end() ? 0 : it->second.size;
}

std::vector<HeapAllocator::GuardRegion> HeapAllocator::guard_regions() const {
  std::vector<GuardRegion> regions;
  if (guard_bytes_ == 0) return regions;
  regions.reserve(live_.size());
  for (const auto& [offset, live] : live_)
    regions.push_back(GuardRegion{offset, live.requested, offset + live.requested, offset + live.size, live.serial});
  return regions;
}

HeapAllocator::GuardRegion HeapAllocator::guard_region(size_t offset) const {
  auto it = live_.find(offset);
  IRIS_CHECK_ARG(it != live_.end(), "No live heap allocation starts at offset ", offset, ".");
  const size_t begin = guard_bytes_ == 0 ? offset + it->second.size : offset + it->second.requested;
  return GuardRegion{offset, it->second.requested, begin, offset + it->second.size, it->second.serial};
}

size_t HeapAllocator::largest_free_block() const {
  size_t best = 0;
  for (const auto& [off, size] : free_) best = size > best ? size : best;
  return best;
}

}  // namespace iris
