// The bounds of IRIS_DEVICE_CHECKS (iris/device/common.cuh, translation_in_bounds), the test a checked
// translation makes before it stops a kernel, at every edge, without a GPU. test_device_checks.cu shows on the GPU
// that kernels make it and stop as they should.
#include <gtest/gtest.h>

#include <cstdint>

#include "iris/device/common.cuh"

namespace iris::device {
namespace {

// Rank 1 of 3, heaps of 4 KiB from 0x100000: rank 1's heap is [0x101000, 0x102000).
DeviceContext context() {
  DeviceContext ctx{};
  ctx.heap_base = reinterpret_cast<char*>(uintptr_t{0x100000});
  ctx.heap_size = 0x1000;
  ctx.rank = 1;
  ctx.world_size = 3;
  return ctx;
}

constexpr uintptr_t kMine = 0x101000, kEnd = 0x102000;

TEST(DeviceChecksHost, EveryRankOfTheWorldAndNoOther) {
  const DeviceContext ctx = context();
  for (int to : {0, 1, 2}) EXPECT_TRUE(translation_in_bounds(ctx, kMine, 1, 4, to)) << to;
  for (int to : {-1, 3, 4, -2147483647 - 1, 2147483647})
    EXPECT_FALSE(translation_in_bounds(ctx, kMine, 1, 4, to)) << to;
}

TEST(DeviceChecksHost, AnObjectOrRangeMustLieInThisRanksHeap) {
  const DeviceContext ctx = context();
  EXPECT_TRUE(translation_in_bounds(ctx, kMine, 1, 4, 0));
  EXPECT_TRUE(translation_in_bounds(ctx, kEnd - 4, 1, 4, 0));        // ends at the heap's last byte
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd - 3, 1, 4, 0));       // one byte past it
  EXPECT_TRUE(translation_in_bounds(ctx, kMine, 0x1000 / 4, 4, 0));  // the whole heap
  EXPECT_FALSE(translation_in_bounds(ctx, kMine, 0x1000 / 4 + 1, 4, 0));
  EXPECT_TRUE(translation_in_bounds(ctx, kMine + 8, (0x1000 - 8) / 16, 16, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, kMine + 8, (0x1000 - 8) / 16 + 1, 16, 0));
  // No bytes: anywhere in the heap up to its end, not past it.
  EXPECT_TRUE(translation_in_bounds(ctx, kEnd, 0, 4, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd, 1, 4, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd + 4, 0, 4, 0));
  // Below this rank's heap: the rank before's (a pointer translated already), below the window, address 0.
  EXPECT_FALSE(translation_in_bounds(ctx, kMine - 4, 1, 4, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, kMine - 1, 0, 4, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, 0x100000 - 0x10, 1, 4, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, 0, 1, 4, 0));
  // The next rank's heap (a pointer translated already).
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd + 0x10, 1, 4, 0));
  // A count whose bytes overflow 64 bits is refused, not wrapped into a small range.
  EXPECT_FALSE(translation_in_bounds(ctx, kMine, (uint64_t{1} << 62) + 1, 4, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, kMine, ~uint64_t{0}, 1, 0));
}

TEST(DeviceChecksHost, AnAddressIsCheckedAsNoBytes) {
  const DeviceContext ctx = context();
  // object_bytes 0 (translate of a void pointer): the count does not matter, the address does.
  EXPECT_TRUE(translation_in_bounds(ctx, kMine, 1, 0, 2));
  EXPECT_TRUE(translation_in_bounds(ctx, kEnd, 5, 0, 2));
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd + 1, 1, 0, 2));
  EXPECT_FALSE(translation_in_bounds(ctx, kMine - 1, 1, 0, 2));
}

TEST(DeviceChecksHost, RankZeroAndTheLastRankHaveTheirOwnHeaps) {
  DeviceContext ctx = context();
  ctx.rank = 0;
  EXPECT_TRUE(translation_in_bounds(ctx, 0x100000, 0x1000, 1, 2));
  EXPECT_FALSE(translation_in_bounds(ctx, kMine, 1, 1, 2));
  ctx.rank = 2;
  EXPECT_TRUE(translation_in_bounds(ctx, kEnd + 0xfff, 1, 1, 0));
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd + 0x1000, 1, 1, 0));  // one past the window
  EXPECT_FALSE(translation_in_bounds(ctx, kEnd - 1, 1, 1, 0));
}

}  // namespace
}  // namespace iris::device
