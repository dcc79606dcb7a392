// Host-side offset allocator for one rank's symmetric heap.
//
// It hands out offsets, never touches device memory, and talks to no other rank: symmetry comes
// from every rank making the same calls in the same order (first fit over a free list ordered by
// offset is deterministic, so equal sequences give equal offsets). Each call extends a running
// hash of (operation, size, alignment, resulting offset), which Context::barrier() compares across
// ranks to catch a rank that allocated out of step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace iris {

class HeapAllocator {
 public:
  static constexpr size_t kMinAlignment = 256;

  explicit HeapAllocator(size_t capacity);

  // Offset of a new block of `bytes` (0 is treated as 1) aligned to `alignment` (a power of two;
  // raised to kMinAlignment). Throws InvalidArgument naming the request, the largest free block and
  // the total free space when nothing fits; the sequence hash records the failed request too.
  size_t allocate(size_t bytes, size_t alignment = kMinAlignment);
  // Releases the block starting at `offset`; neighbouring free blocks coalesce.
  // Throws InvalidArgument when `offset` does not start a live block (double free, interior pointer).
  void release(size_t offset);

  // True when `offset` lies inside a live block.
  bool contains(size_t offset) const;
  // Size of the live block starting at `offset` (0 if none).
  size_t block_size(size_t offset) const;

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use() const { return in_use_; }
  size_t bytes_free() const { return capacity_ - in_use_; }
  size_t largest_free_block() const;
  size_t live_blocks() const { return live_.size(); }

  uint64_t sequence_hash() const { return hash_; }
  uint64_t sequence_length() const { return length_; }

 private:
  void record(uint64_t op, uint64_t a, uint64_t b, uint64_t c);

  size_t capacity_;
  size_t in_use_ = 0;
  std::map<size_t, size_t> free_;  // offset -> size, disjoint, coalesced
  std::map<size_t, size_t> live_;  // offset -> size
  uint64_t hash_;
  uint64_t length_ = 0;
};

}  // namespace iris
