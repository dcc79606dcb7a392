// Host tests (CI, no GPU) of the ring all_reduce's grid (ring_blocks, all_reduce_tiles.cu). A block
// walks tiles t = b, b + G, ...; tile t's reduce-scatter chain starts next to its owner t % W and runs
// in direction t % rings. The tests model the ring kernel's waits on that walk and count the flag hops
// on the longest chain of waits: with the grid ring_blocks gives it stays below a few W however many
// tiles a block walks (a pipeline), while a grid with G % W != 0 adds hops with every tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ccl/all_reduce_kernels.hpp"

namespace iris::ccl {
namespace {

using detail::kMaxRingBatch;
using detail::ring_batch;
using detail::ring_blocks;
using detail::ring_period;

using Place = detail::RingPlace;
Place place(int64_t t, int me, int world, int rings) { return detail::ring_place(t, me, world, rings); }

// The rank at step i of tile t's reduce-scatter chain (&Place::pos) or all-gather chain (&Place::apos).
int rank_at(int64_t t, int Place::*step, int i, int world, int rings) {
  int me = 0;
  while (place(t, me, world, rings).*step != i) ++me;
  return me;
}

// The most flag waits on one chain of waits, over the blocks of a ring all_reduce of `tiles` tiles on
// `blocks` blocks: a step waits for the block's previous step on its rank and, unless it starts its
// chain, for the same tile's step on its upstream rank (one hop). Pass 1 is every tile's reduce-scatter
// step, pass 2 every tile's all-gather step but the owner's (whose all-gather starts in pass 1).
int64_t longest_wait_chain(int64_t tiles, int world, int rings, int blocks) {
  int64_t longest = 0;
  for (int b = 0; b < blocks; ++b) {
    std::vector<int64_t> walk;
    for (int64_t t = b; t < tiles; t += blocks) walk.push_back(t);
    const size_t k_max = walk.size();
    // hops[pass][rank][k]: the most waits behind rank's step on the block's k-th tile.
    std::vector<std::vector<int64_t>> rs(world, std::vector<int64_t>(k_max, 0)), ag = rs;
    std::vector<int64_t> last(world, 0);  // the rank's previous step in its walk
    for (size_t k = 0; k < k_max; ++k) {
      const int64_t t = walk[k];
      // Ranks in chain order: the start first, then each one's downstream.
      for (int i = 0; i < world; ++i) {
        const int me = rank_at(t, &Place::pos, i, world, rings);
        const Place p = place(t, me, world, rings);
        rs[me][k] = std::max(last[me], p.pos > 0 ? rs[p.upstream][k] + 1 : 0);
        last[me] = rs[me][k];
      }
    }
    for (size_t k = 0; k < k_max; ++k) {
      const int64_t t = walk[k];
      for (int i = 1; i < world; ++i) {
        const int me = rank_at(t, &Place::apos, i, world, rings);
        const Place p = place(t, me, world, rings);
        const int64_t up = i == 1 ? rs[p.upstream][k] : ag[p.upstream][k];
        ag[me][k] = std::max(last[me], up + 1);
        last[me] = ag[me][k];
      }
    }
    for (int r = 0; r < world; ++r) longest = std::max(longest, last[r]);
  }
  return longest;
}

TEST(CclRing, BlocksAreAMultipleOfWorldAndRingsWhenBlocksWalkSeveralTiles) {
  EXPECT_EQ(ring_blocks(16384, 8, 1, 132), 128);  // 8 H200s
  EXPECT_EQ(ring_blocks(16384, 8, 1, 14), 8);     // 8 ranks sharing one H200 under MPS (12% each)
  EXPECT_EQ(ring_blocks(16384, 2, 1, 132), 132);
  EXPECT_EQ(ring_blocks(16384, 4, 1, 132), 132);
  EXPECT_EQ(ring_blocks(16384, 5, 1, 132), 130);
  EXPECT_EQ(ring_blocks(16384, 8, 3, 132), 120);  // lcm(8, 3) = 24
  EXPECT_EQ(ring_blocks(16384, 4, 2, 66), 64);    // lcm(4, 2) = 4
  EXPECT_EQ(ring_blocks(16384, 3, 2, 66), 66);    // lcm(3, 2) = 6
  EXPECT_EQ(ring_blocks(16384, 2, 3, 131), 130);  // two ranks: both directions are one ring
}

TEST(CclRing, PeriodIsTheWorldAndTheDirectionsTurn) {
  EXPECT_EQ(ring_period(1, 5), 1);
  EXPECT_EQ(ring_period(2, 3), 2);  // (t % 3) % 2 turns, but at two ranks both ways are the same ring
  EXPECT_EQ(ring_period(8, 1), 8);
  EXPECT_EQ(ring_period(8, 2), 8);
  EXPECT_EQ(ring_period(8, 3), 24);  // (t % 3) % 2: 0 1 0 0 1 0 ...
  EXPECT_EQ(ring_period(3, 4), 6);   // (t % 4) % 2 = t % 2
  EXPECT_EQ(ring_period(5, 4), 10);
  // Odd ring counts near 2^31 (validate bounds them only below): the period exceeds an int. Before 2026-12-05
  // it wrapped, to a negative period (a grid of 0 blocks at 132 SMs) or to 11, whose grid of 121 blocks then
  // batched tiles of other owners and directions behind one wait.
  EXPECT_EQ(ring_period(3, 1000000001), 3000000003);
  EXPECT_EQ(ring_period(3, 1431655769), 4294967307);
  EXPECT_EQ(ring_blocks(8192, 3, 1000000001, 132), 132);  // fewer blocks than a period: every one runs
  EXPECT_EQ(ring_blocks(8192, 3, 1431655769, 121), 121);
  EXPECT_EQ(ring_batch(8192, 121, 3, 1431655769), 1);  // not whole periods: one tile per wait
}

TEST(CclRing, EveryBlockRunsWhenEachHasOneTileOrTooFewBlocksForAPeriod) {
  EXPECT_EQ(ring_blocks(100, 8, 1, 132), 100);  // one tile each: no walk to chain
  EXPECT_EQ(ring_blocks(132, 8, 1, 132), 132);
  EXPECT_EQ(ring_blocks(133, 8, 1, 132), 128);
  EXPECT_EQ(ring_blocks(1, 8, 1, 132), 1);
  EXPECT_EQ(ring_blocks(0, 8, 1, 132), 1);
  EXPECT_EQ(ring_blocks(16384, 8, 1, 4), 4);  // comm_sms = 4 at 8 ranks: fewer blocks than a period
  EXPECT_EQ(ring_blocks(16384, 1, 1, 132), 132);
}

TEST(CclRing, WaitChainsStayAPipelineOnTheGridRingBlocksGives) {
  for (int world : {2, 3, 4, 5, 8}) {
    for (int rings : {1, 2}) {
      for (int limit : {14, 33, 66, 132}) {
        for (int64_t tiles :
             {int64_t{1}, int64_t{7}, int64_t{limit}, int64_t{limit} + 1, int64_t{limit} * 9 + 5, int64_t{2048}}) {
          const int blocks = ring_blocks(tiles, world, rings, limit);
          ASSERT_GE(blocks, 1);
          ASSERT_LE(blocks, limit);
          if (blocks < ring_period(world, rings) && tiles > blocks) continue;  // no period fits: any grid chains
          // At most W - 1 hops for each pass's fill, plus the all-gather's wait on the reduce-scatter.
          EXPECT_LE(longest_wait_chain(tiles, world, rings, blocks), 2 * world)
              << "world " << world << " rings " << rings << " limit " << limit << " tiles " << tiles << " blocks "
              << blocks;
        }
      }
    }
  }
}

TEST(CclRing, AGridThatIsNotAMultipleOfTheWorldChainsHopsWithEveryTile) {
  // What ring_blocks avoids: 14 blocks at 8 ranks (d = 6) walking 2048 tiles (about 146 each). The
  // model must see it, or the test above could not fail.
  EXPECT_GT(longest_wait_chain(2048, 8, 1, 14), 146 * 4);
  EXPECT_LE(longest_wait_chain(2048, 8, 1, 8), 2 * 8);
  // Three rings at 4 ranks on 8 blocks: the owners repeat along each walk but the direction, by
  // (t % 3) % 2, turns from tile to tile.
  EXPECT_GT(longest_wait_chain(2048, 4, 3, 8), 2048 / 8);
  EXPECT_LE(longest_wait_chain(2048, 4, 3, 12), 2 * 4);
}

TEST(CclRing, BatchesGrowWithTheWalkOnlyOnGridsOfWholePeriods) {
  EXPECT_EQ(ring_batch(16384, 128, 8, 1), 6);  // 64 MiB bfloat16 on 8 H200s: 128 tiles a walk
  EXPECT_EQ(ring_batch(16384, 132, 2, 1), kMaxRingBatch);
  EXPECT_EQ(ring_batch(32 * 66, 66, 2, 1), 8);
  EXPECT_EQ(ring_batch(31 * 66, 66, 2, 1), 7);
  EXPECT_EQ(ring_batch(13 * 8, 8, 8, 1), 1);
  EXPECT_EQ(ring_batch(14 * 8, 8, 8, 1), 2);
  EXPECT_EQ(ring_batch(100, 100, 8, 1), 1);   // one tile a walk
  EXPECT_EQ(ring_batch(16384, 14, 8, 1), 1);  // 14 % 8 != 0: tiles of a walk on different chains
  EXPECT_EQ(ring_batch(16384, 8, 4, 3), 1);   // 8 % lcm(4, 3) != 0: directions turn along a walk
  EXPECT_EQ(ring_batch(16384, 12, 4, 3), kMaxRingBatch);
  EXPECT_EQ(ring_batch(16384, 132, 1, 1), 1);  // one rank: a copy
}

// A batch waits for all its tiles' flags before it moves any of them, and signals none before it moved
// them all. Two tiles of one batch on chains that pass between two ranks in opposite directions would
// have each rank wait for the other: every batch of every walk must hold tiles of one chain (the same
// places on it for every rank).
TEST(CclRing, EveryBatchHoldsTilesOfOneChain) {
  for (int world : {2, 3, 4, 5, 6, 8}) {
    for (int rings : {1, 2, 3}) {
      for (int limit : {4, 14, 33, 66, 132}) {
        for (int64_t tiles : {int64_t{1}, int64_t{limit} + 1, int64_t{limit} * 9 + 5, int64_t{5000}}) {
          const int blocks = ring_blocks(tiles, world, rings, limit);
          const int batch = ring_batch(tiles, blocks, world, rings);
          ASSERT_GE(batch, 1);
          ASSERT_LE(batch, kMaxRingBatch);
          for (int b = 0; b < blocks; ++b) {
            int64_t k = 0;
            for (int64_t t = b; t < tiles; t += blocks, ++k) {
              const int64_t first = b + (k - k % batch) * blocks;  // the batch's first tile
              for (int me = 0; me < world; ++me) {
                const Place p = place(t, me, world, rings), q = place(first, me, world, rings);
                ASSERT_TRUE(p.pos == q.pos && p.apos == q.apos && p.upstream == q.upstream)
                    << world << " ranks, " << rings << " rings, " << blocks << " blocks, batch " << batch << ": tile "
                    << t << " and " << first << " on rank " << me;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace iris::ccl
