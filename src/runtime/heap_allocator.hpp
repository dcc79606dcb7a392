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
#include <optional>
#include <vector>

namespace iris {

class HeapAllocator {
 public:
  static constexpr size_t kMinAlignment = 256;

  // guard_bytes (a multiple of kMinAlignment, 0 for none): every block also holds this many bytes after
  // the request's whole kMinAlignment units, so that the bytes from the end of the request to the end of
  // its block (the guard region: guard_bytes plus the padding) can hold a pattern a checker verifies
  // (Context's heap guards). max_alignment (a power of two, 0 for no limit): the largest alignment an offset
  // may ask for, that of the addresses the offsets are added to (Context: the heap's allocation granularity;
  // an offset aligned past it is no address aligned past it).
  explicit HeapAllocator(size_t capacity, size_t guard_bytes = 0, size_t max_alignment = 0);

  // Offset of a new block of `bytes` (0 is treated as 1) aligned to `alignment` (a power of two, at most
  // max_alignment; raised to kMinAlignment). Throws InvalidArgument naming the request, the largest free block
  // and the total free space when nothing fits; the sequence hash records the failed request too.
  size_t allocate(size_t bytes, size_t alignment = kMinAlignment);
  // Releases the block starting at `offset`; neighbouring free blocks coalesce.
  // Throws InvalidArgument when `offset` does not start a live block (double free, interior pointer).
  void release(size_t offset);

  // True when `offset` lies inside a live block.
  bool contains(size_t offset) const;
  // The live block that holds `offset`: where it starts and the bytes its caller asked for (what an
  // object may use; the rest of the block is padding and guard). nullopt when no live block holds it.
  struct LiveSpan {
    size_t offset = 0;
    size_t requested = 0;
  };
  std::optional<LiveSpan> live_span(size_t offset) const;
  // Size of the live block starting at `offset` (0 if none).
  size_t block_size(size_t offset) const;

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use() const { return in_use_; }
  size_t bytes_free() const { return capacity_ - in_use_; }
  size_t largest_free_block() const;
  size_t live_blocks() const { return live_.size(); }

  // A live block's guard region: heap offsets [begin, end) from the end of the request to the end of
  // the block (empty without guard bytes).
  struct GuardRegion {
    size_t object = 0;     // offset of the block (what allocate returned)
    size_t requested = 0;  // bytes asked for
    size_t begin = 0, end = 0;
    uint64_t serial = 0;  // 1 for the first allocate that succeeded, 2 for the next, ...
  };
  size_t guard_bytes() const { return guard_bytes_; }
  // Every live block's guard region, by offset (none without guard bytes).
  std::vector<GuardRegion> guard_regions() const;
  // The guard region of the live block starting at `offset` (throws InvalidArgument when none starts there).
  GuardRegion guard_region(size_t offset) const;

  uint64_t sequence_hash() const { return hash_; }
  uint64_t sequence_length() const { return length_; }

 private:
  void record(uint64_t op, uint64_t a, uint64_t b, uint64_t c);

  struct Live {
    size_t size;       // the block
    size_t requested;  // what the caller asked for
    uint64_t serial;
  };

  size_t capacity_;
  size_t guard_bytes_;
  size_t max_alignment_;
  size_t in_use_ = 0;
  uint64_t serial_ = 0;
  std::map<size_t, size_t> free_;  // offset -> size, disjoint, coalesced
  std::map<size_t, Live> live_;    // offset -> block
  uint64_t hash_;
  uint64_t length_ = 0;
};

}  // namespace iris
