// Host tests of the symmetric-heap offset allocator: no GPU needed.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "iris/core/error.hpp"
#include "runtime/heap_allocator.hpp"
#include "support/error_text.hpp"

namespace iris {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HeapAllocator, AlignmentIsAtLeast256AndHonoursLargerRequests) {
  HeapAllocator a(64 * kMiB);
  for (size_t align : {1, 8, 64, 256, 512, 4096, 65536, 2 * 1024 * 1024}) {
    size_t off = a.allocate(100, align);
    EXPECT_EQ(off % std::max<size_t>(align, 256), 0u) << "alignment " << align;
  }
  EXPECT_THROW(a.allocate(16, 3), InvalidArgument);
  EXPECT_THROW(a.allocate(16, 0), InvalidArgument);
}

// An offset aligned past what the addresses it is added to are aligned to is no aligned address: an alignment
// above the limit (Context's: the heap's allocation granularity) is refused, naming it, before the sequence
// hash records anything (the limit is the same on every rank); up to the limit it is honoured.
TEST(HeapAllocator, AlignmentAboveTheLimitIsRefusedWithoutARecord) {
  HeapAllocator a(64 * kMiB, 0, 2 * kMiB);
  const uint64_t hash = a.sequence_hash();
  EXPECT_EQ(test::error_text<InvalidArgument>([&] { a.allocate(100, 4 * kMiB); }),
            "Heap alignment of 4194304 bytes is above the heap's allocation granularity (2097152 bytes), the most "
            "its addresses are aligned to: ask for at most that.");
  EXPECT_EQ(a.sequence_hash(), hash);
  EXPECT_EQ(a.allocate(100, 256), 0u);
  EXPECT_EQ(a.allocate(100, 2 * kMiB), 2 * kMiB);
  EXPECT_THROW(HeapAllocator(kMiB, 0, 3 * kMiB), InvalidArgument);
}

TEST(HeapAllocator, BlocksDoNotOverlapAndZeroBytesGetsADistinctBlock) {
  HeapAllocator a(kMiB);
  size_t x = a.allocate(0), y = a.allocate(0), z = a.allocate(1000);
  EXPECT_NE(x, y);
  EXPECT_GE(y, x + 256);
  EXPECT_GE(z, y + 256);
  EXPECT_TRUE(a.contains(z + 999));
  EXPECT_EQ(a.block_size(z), 1024u);
}

// live_span names the live block holding an offset and the bytes its caller asked for (the ops refuse a
// view in the heap that runs past them: Context::heap_span_problem); padding, freed blocks and free space
// hold no live span.
TEST(HeapAllocator, LiveSpanIsTheBlockHoldingAnOffsetAndItsRequestedBytes) {
  HeapAllocator h(1 << 20, /*guard_bytes=*/256);
  const size_t a = h.allocate(1000);
  const size_t b = h.allocate(300);
  for (size_t off : {a, a + 999, a + 1000, a + 1023}) {
    const auto s = h.live_span(off);
    ASSERT_TRUE(s.has_value()) << off;
    EXPECT_EQ(s->offset, a);
    EXPECT_EQ(s->requested, 1000u) << "the request, not the padded and guarded block";
  }
  ASSERT_TRUE(h.live_span(b + 299).has_value());
  EXPECT_EQ(h.live_span(b + 299)->offset, b);
  EXPECT_FALSE(h.live_span(b + h.block_size(b)).has_value()) << "free space after the last block";
  h.release(a);
  EXPECT_FALSE(h.live_span(a).has_value()) << "a freed block";
  EXPECT_FALSE(h.live_span(a + 500).has_value());
  EXPECT_EQ(h.live_span(b)->requested, 300u);
}

TEST(HeapAllocator, ReuseAfterFree) {
  HeapAllocator a(kMiB);
  size_t x = a.allocate(4096);
  size_t y = a.allocate(4096);
  a.release(x);
  EXPECT_EQ(a.allocate(4096), x) << "first fit must reuse the freed hole";
  a.release(y);
  EXPECT_FALSE(a.contains(y));
}

TEST(HeapAllocator, FreeCoalescesSoFragmentationHeals) {
  HeapAllocator a(kMiB);
  std::vector<size_t> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(a.allocate(kMiB / 16));
  EXPECT_EQ(a.bytes_free(), 0u);
  EXPECT_THROW(a.allocate(1), InvalidArgument);
  // Free every other block: half the heap free but no hole larger than one block.
  for (int i = 0; i < 16; i += 2) a.release(blocks[i]);
  EXPECT_EQ(a.bytes_free(), kMiB / 2);
  EXPECT_EQ(a.largest_free_block(), kMiB / 16);
  EXPECT_THROW(a.allocate(kMiB / 8), InvalidArgument);
  // Free the rest in a scrambled order: everything coalesces back into one block.
  for (int i : {7, 1, 15, 3, 11, 5, 13, 9}) a.release(blocks[i]);
  EXPECT_EQ(a.largest_free_block(), kMiB);
  EXPECT_EQ(a.allocate(kMiB), 0u);
}

TEST(HeapAllocator, ExhaustionMessageNamesRequestAndFreeSpace) {
  HeapAllocator a(kMiB);
  a.allocate(kMiB / 2);
  try {
    a.allocate(kMiB);
    FAIL() << "expected InvalidArgument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Symmetric heap exhausted: requested 1048576 bytes (alignment 256) but the largest free block is "
                 "524288 bytes (524288 of 1048576 bytes free). Free buffers or raise IRIS_HEAP_SIZE.");
  }
}

// Heap guards (Context's debug mode): every block holds guard_bytes more than the request's whole
// 256-byte units, and its guard region runs from the end of the request to the end of the block.
TEST(HeapAllocator, GuardBytesFollowEveryRequestAndRegionsRunToTheBlockEnd) {
  HeapAllocator a(kMiB, 256);
  EXPECT_EQ(a.guard_bytes(), 256u);
  const size_t x = a.allocate(1000), y = a.allocate(4096), z = a.allocate(0);
  EXPECT_EQ(a.block_size(x), 1024u + 256);
  EXPECT_EQ(a.block_size(y), 4096u + 256) << "a request of whole units still gets its guard bytes";
  EXPECT_EQ(a.block_size(z), 256u + 256);
  EXPECT_EQ(y, x + 1280);
  EXPECT_EQ(a.bytes_in_use(), 1280u + 4352 + 512);
  const auto regions = a.guard_regions();
  ASSERT_EQ(regions.size(), 3u);
  auto expect_region = [](const HeapAllocator::GuardRegion& r, size_t object, size_t requested, size_t end,
                          uint64_t serial) {
    EXPECT_EQ(r.object, object);
    EXPECT_EQ(r.requested, requested);
    EXPECT_EQ(r.begin, object + requested);
    EXPECT_EQ(r.end, end);
    EXPECT_EQ(r.serial, serial);
  };
  expect_region(regions[0], x, 1000, x + 1280, 1);
  expect_region(regions[1], y, 4096, y + 4352, 2);
  expect_region(regions[2], z, 0, z + 512, 3);
  a.release(y);
  EXPECT_EQ(a.guard_regions().size(), 2u);
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { a.guard_region(y); }),
            "No live heap allocation starts at offset " + std::to_string(y) + ".");
  const size_t w = a.allocate(4000);  // reuses y's block: a new serial
  EXPECT_EQ(w, y);
  expect_region(a.guard_region(w), w, 4000, w + 4352, 4);
  // Without guard bytes: blocks as before, no regions.
  HeapAllocator plain(kMiB);
  EXPECT_EQ(plain.block_size(plain.allocate(1000)), 1024u);
  EXPECT_TRUE(plain.guard_regions().empty());
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { HeapAllocator bad(kMiB, 100); }),
            "Heap guard bytes must be a multiple of 256, got 100.");
}

TEST(HeapAllocator, ExhaustionMessageCountsTheGuardBytes) {
  HeapAllocator a(2048, 256);
  a.allocate(1024);  // 1280 bytes with its guard
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { a.allocate(768); }),
            "Symmetric heap exhausted: requested 768 bytes (alignment 256, plus 256 guard bytes) but the largest free "
            "block is 768 bytes (768 of 2048 bytes free). Free buffers or raise IRIS_HEAP_SIZE.");
  EXPECT_NO_THROW(a.allocate(512));
}

TEST(HeapAllocator, DoubleFreeAndInteriorPointerAreRejected) {
  HeapAllocator a(kMiB);
  size_t x = a.allocate(4096);
  EXPECT_THROW(a.release(x + 256), InvalidArgument);
  a.release(x);
  try {
    a.release(x);
    FAIL() << "expected InvalidArgument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Heap free of offset 0 which does not start a live allocation (double free, or a pointer into the "
                 "middle of one).");
  }
}

// Two allocators fed the same random sequence of allocs and frees hand out identical offsets and
// end with identical hashes: this is what makes the heap symmetric across ranks.
TEST(HeapAllocator, IdenticalSequencesGiveIdenticalOffsetsAndHashes) {
  HeapAllocator a(256 * kMiB), b(256 * kMiB);
  std::mt19937_64 rng(7);
  std::vector<size_t> live;
  for (int step = 0; step < 5000; ++step) {
    if (!live.empty() && rng() % 2 == 0) {
      size_t i = rng() % live.size();
      a.release(live[i]);
      b.release(live[i]);
      live.erase(live.begin() + static_cast<long>(i));
    } else {
      size_t bytes = rng() % (1 << 16);
      size_t align = size_t{1} << (rng() % 14);
      size_t x = a.allocate(bytes, align);
      ASSERT_EQ(b.allocate(bytes, align), x) << "step " << step;
      live.push_back(x);
    }
  }
  EXPECT_EQ(a.sequence_hash(), b.sequence_hash());
  EXPECT_EQ(a.sequence_length(), b.sequence_length());
  // Live blocks never overlap.
  std::set<size_t> sorted(live.begin(), live.end());
  size_t end = 0;
  for (size_t off : sorted) {
    EXPECT_GE(off, end);
    end = off + a.block_size(off);
  }
}

TEST(HeapAllocator, HashDetectsADifferentSizeOrderOrMissingFree) {
  auto run = [](std::vector<std::pair<char, size_t>> ops) {
    HeapAllocator a(kMiB);
    std::vector<size_t> offs;
    for (auto [op, v] : ops) {
      if (op == 'a') offs.push_back(a.allocate(v));
      else a.release(offs[v]);
    }
    return a.sequence_hash();
  };
  uint64_t base = run({{'a', 100}, {'a', 300}, {'f', 0}});
  EXPECT_EQ(base, run({{'a', 100}, {'a', 300}, {'f', 0}}));
  EXPECT_NE(base, run({{'a', 101}, {'a', 300}, {'f', 0}})) << "same block size, different request";
  EXPECT_NE(base, run({{'a', 300}, {'a', 100}, {'f', 0}})) << "different order";
  EXPECT_NE(base, run({{'a', 100}, {'a', 300}})) << "missing free";
  EXPECT_NE(base, run({{'a', 100}, {'a', 300}, {'f', 1}})) << "freed a different block";
}

}  // namespace
}  // namespace iris
