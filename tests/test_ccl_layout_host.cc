// Host tests (CI, no GPU) of the exchange staging layout: the LL line arithmetic, the LL / chunked
// choice, and the claim the kernels' reuse arguments rest on: parity 1 starts at half of each array's
// capacity, so for every shape a workspace can serve, the bytes of one parity never reach the other's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/workspace.hpp"
#include "support/error_text.hpp"
#include "support/fake_workspace_host.hpp"

namespace iris::ccl {
namespace {

using detail::ExchangePlan;
using detail::plan_exchange_layout;

struct Block {
  int64_t rows, cols;
};

// From 1 element to 2 MiB of fp32 per block: LL blocks, chunked blocks, blocks that are not a
// multiple of a line, a chunk or 256 bytes.
const Block kBlocks[] = {{1, 1},     {1, 7},     {1, 777},    {3, 1000},  {16, 1024},
                         {17, 1000}, {64, 1000}, {300, 1000}, {512, 1024}};
const OpKind kExchanges[] = {OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllToAll};

OpSignature signature(OpKind op, const Block& b, DType dt, int world) {
  return detail::collective_signature(op, Tensor{nullptr, dt, b.rows, b.cols, b.cols}, world, Config{});
}

TEST(CclLayout, LLLinesCarryEightDataBytesInSixteen) {
  // A line is two 8-byte words, each {4 data bytes, 4 tag bytes}: words = 2 * ceil(bytes / 8).
  EXPECT_EQ(detail::ll_words(1, DType::kFloat32), 2);
  EXPECT_EQ(detail::ll_words(2, DType::kFloat32), 2);
  EXPECT_EQ(detail::ll_words(3, DType::kFloat32), 4);
  EXPECT_EQ(detail::ll_words(4, DType::kBFloat16), 2);
  EXPECT_EQ(detail::ll_words(5, DType::kBFloat16), 4);
  EXPECT_EQ(detail::ll_words(1000, DType::kFloat32), 1000);
  // 2 parities x W slots x (a header line and the words) x 8 bytes, rounded up to 256.
  EXPECT_EQ(detail::ll_staging_bytes(1000, DType::kFloat32, 2), 32256u) << "2 x 2 x 1002 x 8 = 32064";
  EXPECT_EQ(detail::ll_staging_bytes(1, DType::kInt32, 8), 512u) << "2 x 8 x 4 x 8";
}

// The call key an LL slot's header line carries (ll_exchange.cu): every field of the call that changes
// what the lines mean gives another key, the copying exchanges ignore the reduction they are not doing,
// and the hex digits read as the error message says (exchange, dtype, reduction, 0, 12 of elements; broadcast's
// root, mod 256, in the two digits after the dtype).
TEST(CclLayout, LLCallKeysTellEveryDifferenceOfTheCallAndReadAsTheMessageSays) {
  using detail::ll_call_key;
  using detail::LLMode;
  EXPECT_EQ(ll_call_key(LLMode::kAllGather, DType::kBFloat16, ReduceOp::kSum, 1000), 0x32000000000003e8ull);
  EXPECT_EQ(ll_call_key(LLMode::kReduceScatter, DType::kFloat32, ReduceOp::kAvg, 4096), 0x2030000000001000ull);
  EXPECT_EQ(ll_call_key(LLMode::kAllReduce, DType::kFloat8E5M2, ReduceOp::kProd, (int64_t{1} << 48) - 1),
            0x1940ffffffffffffull);
  EXPECT_EQ(ll_call_key(LLMode::kAllToAll, DType::kInt8, ReduceOp::kMax, 1),
            ll_call_key(LLMode::kAllToAll, DType::kInt8, ReduceOp::kSum, 1))
      << "a copy has no reduction";
  EXPECT_EQ(ll_call_key(LLMode::kBroadcast, DType::kBFloat16, ReduceOp::kSum, 1000, 3), 0x52030000000003e8ull);
  EXPECT_EQ(ll_call_key(LLMode::kBroadcast, DType::kBFloat16, ReduceOp::kMax, 1000, 259),
            ll_call_key(LLMode::kBroadcast, DType::kBFloat16, ReduceOp::kSum, 1000, 3))
      << "no reduction; the root mod 256";
  EXPECT_EQ(ll_call_key(LLMode::kAllGather, DType::kBFloat16, ReduceOp::kSum, 1000, 3),
            ll_call_key(LLMode::kAllGather, DType::kBFloat16, ReduceOp::kSum, 1000))
      << "only broadcast has a root";
  std::vector<uint64_t> keys;
  for (LLMode mode : {LLMode::kAllReduce, LLMode::kReduceScatter, LLMode::kAllGather, LLMode::kAllToAll})
    for (DType dt : kAllDTypes)
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd}) {
        const bool copies = mode == LLMode::kAllGather || mode == LLMode::kAllToAll;
        if (copies && op != ReduceOp::kSum) continue;
        for (int64_t numel : {int64_t{1}, int64_t{2}, int64_t{1000}, int64_t{1} << 20, (int64_t{1} << 48) - 1})
          keys.push_back(ll_call_key(mode, dt, op, numel));
      }
  for (DType dt : kAllDTypes)
    for (int root : {0, 1, 7})
      for (int64_t numel : {int64_t{1}, int64_t{2}, int64_t{1000}, int64_t{1} << 20, (int64_t{1} << 48) - 1})
        keys.push_back(ll_call_key(LLMode::kBroadcast, dt, ReduceOp::kSum, numel, root));
  EXPECT_EQ(std::count(keys.begin(), keys.end(), 0u), 0);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "two calls share a key";
  EXPECT_EQ(keys.size(), size_t{(2 * 5 + 2) * 10 * 5 + 10 * 3 * 5});
}

// An LL word's tag is a bijection of the epoch's low 31 bits under the top bit, which leaves no epoch as it
// is, so a stale element equal to the epoch (an int32 3 in call 3) is not taken for a line of that call, and
// no zero (nor positive int32 or fp32) ever is: tag 0 was epoch 2^32's before 2026-12-06, when the tag mixed
// all 32 bits, so the zeros another protocol left in the staging passed as that call's lines. ll_epoch_of
// inverts it for the timeout message.
TEST(CclLayout, LLTagsAreAMixedBijectionOfTheEpochThatNoZeroCarries) {
  std::vector<uint32_t> tags;
  auto add = [&](uint64_t e) {
    const uint32_t t = detail::ll_tag(e);
    ASSERT_EQ(detail::ll_epoch_of(t), static_cast<uint32_t>(e) & detail::kLLEpochMask) << e;
    ASSERT_NE(t, static_cast<uint32_t>(e)) << "epoch " << e << " tags as itself";
    ASSERT_NE(t & detail::kLLTagBit, 0u) << "epoch " << e << "'s tag lacks the top bit";
    tags.push_back(t);
  };
  for (uint64_t e = 0; e <= (1u << 16); ++e) add(e);
  for (uint64_t e = (uint64_t{1} << 31) - (1u << 12); e < (uint64_t{1} << 31); ++e) add(e);  // up to the period
  std::sort(tags.begin(), tags.end());
  EXPECT_EQ(std::adjacent_find(tags.begin(), tags.end()), tags.end()) << "two epochs of one period share a tag";
  EXPECT_EQ(detail::ll_tag(uint64_t{1} << 31 | 7), detail::ll_tag(7)) << "the low 31 bits: the period";
  EXPECT_NE(detail::ll_tag(uint64_t{1} << 32), 0u);
  EXPECT_NE(detail::ll_tag(8), detail::ll_tag(9)) << "neighbours";
  for (uint32_t t : {0x80000000u, 0x80000001u, 0xdeadbeefu, 0xffffffffu})
    EXPECT_EQ(detail::ll_tag(detail::ll_epoch_of(t)), t);
}

// The LL grid (ll_launch, ll_exchange.cu): each block pushes about block_bytes of 16-byte lines summed over
// its W - 1 peers, one line per thread, in whole warps; past the block limit, blocks of 512 threads loop.
TEST(CclLayout, LLGridSpreadsLinesOverBlocksOfAboutBlockBytes) {
  auto grid = [](int64_t lines, int world, int limit, size_t bytes = 2048) {
    const detail::LLLaunch g = detail::ll_launch(2 * lines, world, limit, bytes);
    return std::pair{g.blocks, g.threads};
  };
  using P = std::pair<int, int>;
  // 2 ranks, 2 KiB: 128 lines (1 KiB of bf16) per block.
  EXPECT_EQ(grid(1, 2, 132), P(1, 32));
  EXPECT_EQ(grid(128, 2, 132), P(1, 128));
  EXPECT_EQ(grid(129, 2, 132), P(2, 96));       // 65 lines per block, in whole warps
  EXPECT_EQ(grid(1024, 2, 132), P(8, 128));     // all_reduce of 8 KiB: 8 blocks, not one of 512 threads
  EXPECT_EQ(grid(8192, 2, 132), P(64, 128));    // 64 KiB
  EXPECT_EQ(grid(16896, 2, 132), P(132, 128));  // the last size that fits the limit at 128 lines a block
  EXPECT_EQ(grid(65536, 2, 132), P(132, 512));  // 512 KiB: the limit; threads loop over their lines
  EXPECT_EQ(grid(int64_t{1} << 29, 2, 132), P(132, 512));
  // More peers, fewer lines per block: 4 ranks 64 (2048 / 48 = 43, a warp up), 8 ranks 32.
  EXPECT_EQ(grid(1024, 4, 132), P(16, 64));
  EXPECT_EQ(grid(1024, 8, 132), P(32, 32));
  // comm_sms caps the blocks; their threads grow to take the lines.
  EXPECT_EQ(grid(1024, 2, 4), P(4, 256));
  EXPECT_EQ(grid(1024, 2, 1), P(1, 512));
  // The grid of 512-thread blocks holding 1024 lines each, as before 2026-12-03: block_bytes 16 KiB at 2 ranks.
  EXPECT_EQ(grid(1024, 2, 132, 16384), P(1, 512));
  EXPECT_EQ(grid(1025, 2, 132, 16384), P(2, 512));
  // Every grid: whole warps, within the limits; below the limit one line per thread, no idle warp.
  for (int world : {2, 3, 4, 8})
    for (int limit : {1, 7, 132})
      for (int64_t lines = 1; lines < 40000; lines = lines * 3 / 2 + 1) {
        const auto [blocks, threads] = grid(lines, world, limit);
        ASSERT_GE(blocks, 1);
        ASSERT_LE(blocks, limit);
        ASSERT_EQ(threads % 32, 0);
        ASSERT_GE(threads, 32);
        ASSERT_LE(threads, 512);
        if (threads < 512) {
          ASSERT_GE(int64_t{blocks} * threads, lines) << lines << " lines, " << world << " ranks";
          ASSERT_LT(int64_t{blocks} * (threads - 32), lines) << lines << " lines, " << world << " ranks";
        }
        if (blocks < limit) ASSERT_LE((lines + blocks - 1) / blocks * (world - 1) * 16, 2048 + 32 * 16 * (world - 1));
      }
}

// comm_sms caps every communication launch (comm_block_limit), and may not pass the device's SMs: blocks
// of a launch wait for peers' blocks, and only one block per SM is sure to be resident. Before
// 2026-12-03 up to 65535 was accepted and a launch past what the GPU keeps resident could end in a
// TimeoutError. Sizing ahead knows no device and checks nothing.
TEST(CclLayout, CommSmsMayNotExceedTheDeviceSms) {
  const detail::PlanScope h200{0, 2, 132, false};
  Config c;
  EXPECT_EQ(detail::comm_block_limit("all_reduce", h200, c), 132) << "0: every SM";
  c.comm_sms = 7;
  EXPECT_EQ(detail::comm_block_limit("all_reduce", h200, c), 7);
  c.comm_sms = 132;
  EXPECT_EQ(detail::comm_block_limit("all_reduce", h200, c), 132);
  c.comm_sms = 133;
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { detail::comm_block_limit("all_gather", h200, c); }),
            "all_gather: comm_sms (133) must be at most the device's 132 SMs: the communication kernel's blocks wait "
            "for its peers' blocks, so all of them must be resident at once.");
  EXPECT_EQ(detail::comm_block_limit("all_reduce_needs", detail::PlanScope::sizing("all_reduce_needs", 2), c), 133);
  // Every plan asks it: the exchanges (all_gather, reduce_scatter, all_to_all) and broadcast's chunk launch.
  const Tensor t{nullptr, DType::kBFloat16, 4, 8, 8};
  EXPECT_NE(test::error_text<std::invalid_argument>([&] {
              detail::plan_exchange(h200, detail::collective_signature(OpKind::kReduceScatter, t, 2, c), 2, 8,
                                    DType::kBFloat16, c);
            }).find("reduce_scatter: comm_sms (133) must be at most the device's 132 SMs"),
            std::string::npos);
  EXPECT_NE(test::error_text<std::invalid_argument>([&] {
              detail::launch_blocks("broadcast", h200, c, 1000);
            }).find("broadcast: comm_sms (133)"),
            std::string::npos);
  c.comm_sms = 3;
  EXPECT_EQ(detail::launch_blocks("broadcast", h200, c, 1000), 3);
  EXPECT_EQ(detail::launch_blocks("broadcast", h200, c, 2), 2);
}

// The LL bound of an exchange is part of the signature every rank compares in the preamble: ranks with
// different IRIS_LL_MAX_BYTES would take different protocols over one staging.
TEST(CclLayout, ExchangeSignaturesCarryTheirLLBound) {
  if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES overrides the rule";
  const Config config;
  auto plan = [&](OpKind op, int world) {
    const Tensor t{nullptr, DType::kBFloat16, 4, 8, 8};
    return detail::plan_exchange(detail::PlanScope::sizing("test", world),
                                 detail::collective_signature(op, t, world, config), 4 / world, 8, DType::kBFloat16,
                                 config);
  };
  EXPECT_EQ(plan(OpKind::kAllGather, 2).sig.ll_max_bytes, 4096);
  EXPECT_EQ(plan(OpKind::kAllToAll, 2).sig.ll_max_bytes, 4096);
  EXPECT_EQ(plan(OpKind::kReduceScatter, 2).sig.ll_max_bytes, 65536);
  EXPECT_EQ(plan(OpKind::kAllGather, 2).sig.describe(),
            "all_gather 4x8 bfloat16 world 2 blocks 32x64 LL up to 4096 bytes per block (IRIS_LL_MAX_BYTES)");
  // One rank exchanges nothing: no bound, nothing in the description.
  EXPECT_EQ(plan(OpKind::kAllGather, 1).sig.ll_max_bytes, -1);
  EXPECT_EQ(plan(OpKind::kAllGather, 1).sig.describe(), "all_gather 4x8 bfloat16 world 1 blocks 32x64");
}

// all_reduce's signature carries the config's choices that the ranks' kernels share beyond the shape, each
// only where the variant depends on it, so that ranks passing other ones raise from the preamble: the tile
// variants' swizzle (which rectangle tile t is), two_shot's distribution (who owns a chunk), the ring's
// rings, slice columns and grid. one_shot depends on none (its LL lines and segments are the same for any
// grid), so those may differ there.
TEST(CclLayout, AllReduceSignaturesCarryTheConfigChoicesThePeersShare) {
  const detail::PlanScope h200{0, 2, 132, true};
  const Tensor t{nullptr, DType::kFloat32, 64, 1000, 1000};
  auto sig = [&](AllReduceVariant v, auto&& edit) {
    Config c;
    c.all_reduce_variant = v;
    edit(c);
    return detail::all_reduce_signature(h200, t, t, c);
  };
  const auto same = [](Config&) {};
  EXPECT_EQ(sig(AllReduceVariant::kSpinlock, same).describe(),
            "all_reduce 64x1000 float32 world 2 variant spinlock blocks 32x64 op sum swizzle_size 4");
  EXPECT_EQ(sig(AllReduceVariant::kTwoShot, same).describe(),
            "all_reduce 64x1000 float32 world 2 variant two_shot blocks 32x64 op sum all_reduce_distribution 0");
  // 2 x 16 tiles of 32 x 64: the ring launches one block per tile.
  EXPECT_EQ(sig(AllReduceVariant::kRing, same).describe(),
            "all_reduce 64x1000 float32 world 2 variant ring blocks 32x64 op sum swizzle_size 4 all_reduce_num_rings 1 "
            "ring slices of 64 columns grid 32 blocks (comm_sms, or the device's SMs)");
  for (AllReduceVariant v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kRing})
    EXPECT_NE(sig(v, same), sig(v, [](Config& c) { c.swizzle_size = 8; })) << variant_name(v);
  EXPECT_NE(sig(AllReduceVariant::kTwoShot, same),
            sig(AllReduceVariant::kTwoShot, [](Config& c) { c.all_reduce_distribution = 1; }));
  EXPECT_NE(sig(AllReduceVariant::kRing, same),
            sig(AllReduceVariant::kRing, [](Config& c) { c.all_reduce_num_rings = 2; }));
  EXPECT_NE(sig(AllReduceVariant::kRing, same),
            sig(AllReduceVariant::kRing, [](Config& c) { c.all_reduce_ring_slice_n = 32; }));
  EXPECT_NE(sig(AllReduceVariant::kRing, same), sig(AllReduceVariant::kRing, [](Config& c) { c.comm_sms = 2; }));
  // Where the layout does not depend on a field, ranks may differ in it.
  const auto launch_only = [](Config& c) {
    c.comm_sms = 7;
    c.swizzle_size = 8;
    c.all_reduce_distribution = 1;
    c.all_reduce_num_rings = 2;
  };
  EXPECT_EQ(sig(AllReduceVariant::kOneShot, same), sig(AllReduceVariant::kOneShot, launch_only));
  EXPECT_EQ(sig(AllReduceVariant::kSpinlock, same), sig(AllReduceVariant::kSpinlock, [](Config& c) {
              c.comm_sms = 7;  // atomic and spinlock: arrivals by tile and source, whatever the grid
            }));
  EXPECT_EQ(sig(AllReduceVariant::kTwoShot, same), sig(AllReduceVariant::kTwoShot, [](Config& c) {
              c.comm_sms = 7;  // chunks are planned for a fixed block count, whatever the grid
              c.swizzle_size = 8;
            }));
}

TEST(CclLayout, LLVec8NeedsContiguousEightByteAlignedBlocks) {
  alignas(16) static float buf[4096];
  EXPECT_TRUE(detail::ll_vec8(Tensor{buf, DType::kFloat32, 4, 100, 100}, 2));
  EXPECT_FALSE(detail::ll_vec8(Tensor{buf + 1, DType::kFloat32, 4, 100, 100}, 2));  // 4-byte aligned
  EXPECT_FALSE(detail::ll_vec8(Tensor{buf, DType::kFloat32, 4, 100, 101}, 2));      // row gaps
  EXPECT_FALSE(detail::ll_vec8(Tensor{buf, DType::kFloat32, 4, 101, 101}, 1));      // block 1 at 404 bytes
  EXPECT_FALSE(detail::ll_vec8(Tensor{buf, DType::kFloat32, 1, 101, 101}, 1));      // (conservative: one block)
  EXPECT_FALSE(detail::ll_vec8(Tensor{buf, DType::kBFloat16, 6, 3, 3}, 1));         // block 1 at 6 bytes
  EXPECT_TRUE(detail::ll_vec8(Tensor{buf, DType::kBFloat16, 8, 4, 4}, 1));
}

TEST(CclLayout, SmallBlocksTakeLLAndLargeOnesChunkedByTheMeasuredRule) {
  if (std::getenv("IRIS_LL_MAX_BYTES") != nullptr) GTEST_SKIP() << "IRIS_LL_MAX_BYTES overrides the rule";
  // all_gather and all_to_all: blocks up to 4 KiB; reduce_scatter: up to 64 KiB. One rank: neither.
  EXPECT_TRUE(plan_exchange_layout(OpKind::kAllGather, 2, 1, 1024, DType::kFloat32).ll);
  EXPECT_FALSE(plan_exchange_layout(OpKind::kAllGather, 2, 1, 1025, DType::kFloat32).ll);
  EXPECT_TRUE(plan_exchange_layout(OpKind::kAllToAll, 4, 2, 1024, DType::kBFloat16).ll);
  EXPECT_FALSE(plan_exchange_layout(OpKind::kAllToAll, 4, 2, 1025, DType::kBFloat16).ll);
  EXPECT_TRUE(plan_exchange_layout(OpKind::kReduceScatter, 2, 16, 1024, DType::kFloat32).ll);
  EXPECT_FALSE(plan_exchange_layout(OpKind::kReduceScatter, 2, 16, 1025, DType::kFloat32).ll);
  EXPECT_FALSE(plan_exchange_layout(OpKind::kAllGather, 1, 1, 1, DType::kFloat32).ll);
  // LL needs no flags; chunked needs one per chunk, source and parity.
  const ExchangePlan ll = plan_exchange_layout(OpKind::kAllGather, 4, 1, 1000, DType::kFloat32);
  EXPECT_EQ(ll.needs.flags, 0u);
  EXPECT_EQ(ll.needs.staging_bytes, detail::ll_staging_bytes(1000, DType::kFloat32, 4));
  const ExchangePlan chunked = plan_exchange_layout(OpKind::kAllGather, 4, 64, 1000, DType::kFloat32);
  EXPECT_EQ(chunked.needs.flags, 2u * 3 * static_cast<size_t>(chunked.chunks.nchunks));
}

// The two LL variables, parsed as the first plan reads them (once per process, so the parse is tested
// here and not through the environment): sizes with suffixes, 0 meaning "never" for the bound only,
// anything else refused naming the variable.
TEST(CclLayout, LLVariablesParseSizesAndNameThemselvesWhenRefused) {
  EXPECT_EQ(detail::ll_max_bytes_from(nullptr), std::nullopt);
  EXPECT_EQ(detail::ll_max_bytes_from(""), std::nullopt);
  EXPECT_EQ(detail::ll_max_bytes_from("0"), size_t{0});
  EXPECT_EQ(detail::ll_max_bytes_from("4096"), size_t{4096});
  EXPECT_EQ(detail::ll_max_bytes_from("64K"), size_t{64} << 10);
  EXPECT_EQ(detail::ll_block_bytes_from(nullptr), size_t{2} << 10);
  EXPECT_EQ(detail::ll_block_bytes_from(""), size_t{2} << 10);
  EXPECT_EQ(detail::ll_block_bytes_from("16K"), size_t{16} << 10);
  EXPECT_EQ(detail::ll_block_bytes_from("512"), size_t{512});
  const std::string rule =
      "': expected a positive integer with an optional K, M, G or T suffix (powers of 1024), e.g. 1073741824, "
      "512M or 2G.";
  for (const char* bad : {"-1", "4KB", "1.5K", "big"}) {
    EXPECT_EQ(test::error_text<InvalidArgument>([&] { detail::ll_max_bytes_from(bad); }),
              std::string("IRIS_LL_MAX_BYTES: Invalid byte size '") + bad + rule + " (or 0: never use LL)");
    EXPECT_EQ(test::error_text<InvalidArgument>([&] { detail::ll_block_bytes_from(bad); }),
              std::string("IRIS_LL_BLOCK_BYTES: Invalid byte size '") + bad + rule +
                  " (bytes of LL lines per block, e.g. 2K)");
  }
  EXPECT_EQ(test::error_text<InvalidArgument>([] { detail::ll_block_bytes_from("0"); }),
            "IRIS_LL_BLOCK_BYTES: Invalid byte size '0" + rule + " (bytes of LL lines per block, e.g. 2K)");
}

// How the collectives tell in-place calls from overlapping buffers: spans that share a byte overlap (rows of
// strided views that interleave too), one-row views are the same view whatever their strides, and the
// refusal says what to pass.
TEST(CclLayout, OverlappingBuffersAreRefusedUnlessTheSameView) {
  alignas(16) static float buf[64];
  const auto view = [](int64_t first, int64_t rows, int64_t cols, int64_t stride) {
    return Tensor::matrix(buf + first, DType::kFloat32, rows, cols, stride);
  };
  const Tensor a = view(0, 4, 8, 8);  // elements 0..31
  EXPECT_TRUE(a.overlaps(view(31, 1, 1, 1)));
  EXPECT_FALSE(a.overlaps(view(32, 4, 8, 8)));                 // back to back
  EXPECT_FALSE(a.overlaps(view(8, 0, 8, 8)));                  // empty: no bytes
  EXPECT_TRUE(view(0, 2, 4, 16).overlaps(view(8, 2, 4, 16)));  // interleaved rows: the spans meet
  EXPECT_TRUE(a.same_view(view(0, 4, 8, 8)));
  EXPECT_FALSE(a.same_view(view(0, 4, 8, 16)));
  EXPECT_FALSE(a.same_view(Tensor::matrix(buf, DType::kInt32, 4, 8)));
  EXPECT_TRUE(view(0, 1, 8, 8).same_view(view(0, 1, 8, 40)));  // one row: the stride is never used

  EXPECT_NO_THROW(detail::check_no_partial_overlap("all_reduce", a, view(32, 4, 8, 8), true));
  EXPECT_NO_THROW(detail::check_no_partial_overlap("all_reduce", a, a, true));
  EXPECT_NO_THROW(detail::check_no_partial_overlap("broadcast", view(0, 1, 8, 8), view(0, 1, 8, 40), true));
  EXPECT_EQ(test::error_text<InvalidArgument>(
                [&] { detail::check_no_partial_overlap("all_reduce", a, view(8, 4, 8, 8), true); }),
            "all_reduce: output and input overlap without being the same view; pass separate buffers or the same "
            "view for in-place.");
  EXPECT_EQ(test::error_text<InvalidArgument>([&] { detail::check_no_partial_overlap("op", a, a, false); }),
            "op: output and input overlap; pass separate buffers.");
}

// all_gather's input and reduce_scatter's output may be exactly this rank's rows of the other buffer (in place);
// any other overlap is refused with the rows to pass, and sizing ahead, which has no buffers, checks none.
TEST(CclLayout, RankRowsAreInPlaceAndOtherOverlapsAreRefused) {
  alignas(16) static float buf[96];
  const Tensor whole = Tensor::matrix(buf, DType::kFloat32, 6, 8);  // 3 ranks' 2 rows
  const auto rows = [](int64_t first, int64_t count) { return Tensor::matrix(buf + first * 8, DType::kFloat32, count, 8); };
  detail::PlanScope s;
  s.rank = 1;
  s.world = 3;
  EXPECT_TRUE(detail::rank_rows_in_place("all_gather", s, whole, "output", rows(2, 2), "input"));
  EXPECT_FALSE(detail::rank_rows_in_place("all_gather", s, whole, "output", rows(6, 2), "input"));  // apart
  EXPECT_FALSE(detail::rank_rows_in_place("all_gather", s, whole, "output", rows(2, 0), "input"));  // empty
  EXPECT_EQ(test::error_text<InvalidArgument>(
                [&] { detail::rank_rows_in_place("all_gather", s, whole, "output", rows(0, 2), "input"); }),
            "all_gather: input overlaps the output without being the output's rows of this rank (2 to 4); pass "
            "separate buffers, or exactly those rows for in-place.");
  EXPECT_EQ(test::error_text<InvalidArgument>(
                [&] { detail::rank_rows_in_place("reduce_scatter", s, whole, "input", rows(3, 2), "output"); }),
            "reduce_scatter: output overlaps the input without being the input's rows of this rank (2 to 4); pass "
            "separate buffers, or exactly those rows for in-place.");
  s.shapes_only = true;
  EXPECT_FALSE(detail::rank_rows_in_place("reduce_scatter", s, whole, "input", rows(3, 2), "output"));
}

// For every pair (shape the workspace was prepared for, shape it then serves) with every world size
// and dtype: both parities of the served call fit in the arrays, and parity 0's bytes end before
// parity 1's begin, whether the call is LL or chunked and whatever the call before it was.
TEST(CclLayout, ParityHalvesNeverOverlapForAnyShapeAWorkspaceServes) {
  int pairs = 0;
  for (OpKind op : kExchanges)
    for (int world : {2, 3, 4, 8})
      for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kUInt8, DType::kInt64})
        for (const Block& first : kBlocks) {
          test::FakeWorkspaceHost host;
          Workspace ws;
          const ExchangePlan big = plan_exchange_layout(op, world, first.rows, first.cols, dt);
          ws.prepare(host, signature(op, first, dt, world), big.needs);
          for (const Block& b : kBlocks) {
            const ExchangePlan p = plan_exchange_layout(op, world, b.rows, b.cols, dt);
            try {
              ws.check_capacity(p.needs);
            } catch (const std::invalid_argument&) {
              continue;  // this workspace cannot serve b: the call raises (tested elsewhere)
            }
            SCOPED_TRACE(std::string(op_name(op)) + " W=" + std::to_string(world) + " " + dtype_name(dt) + " " +
                         std::to_string(first.rows) + "x" + std::to_string(first.cols) + " then " +
                         std::to_string(b.rows) + "x" + std::to_string(b.cols));
            ++pairs;
            const size_t esz = dtype_size(dt);
            if (p.ll) {
              const size_t parity_bytes = static_cast<size_t>(detail::ll_parity_words(ws)) * 8;
              // Slots sit at a stride of the workspace's, not the call's: each holds the header and the lines.
              const int64_t slot = detail::ll_slot_words(detail::ll_parity_words(ws), world);
              const size_t used = static_cast<size_t>(world) * static_cast<size_t>(slot) * 8;
              EXPECT_EQ(parity_bytes % 16, 0u);
              EXPECT_EQ(slot % 2, 0) << "a slot starts on a 16-byte line";
              EXPECT_GE(slot, detail::kLLHeaderWords + p.ll_words);
              EXPECT_LE(used, parity_bytes);
              EXPECT_LE(parity_bytes + used, ws.staging_capacity());
            } else {
              const size_t parity_bytes = static_cast<size_t>(detail::exchange_parity_elems(ws, dt)) * esz;
              const size_t used = static_cast<size_t>(world - 1) * static_cast<size_t>(p.slot) * esz;
              EXPECT_EQ(parity_bytes % 16, 0u);
              EXPECT_LE(used, parity_bytes);
              EXPECT_LE(parity_bytes + used, ws.staging_capacity());
              const size_t parity_flags = static_cast<size_t>(detail::exchange_parity_flags(ws));
              const size_t flags = static_cast<size_t>(world - 1) * static_cast<size_t>(p.chunks.nchunks);
              EXPECT_LE(flags, parity_flags);
              EXPECT_LE(parity_flags + flags, ws.flag_capacity());
            }
          }
          ws.release(host);
        }
  EXPECT_GT(pairs, 300);  // the loop above really checked something
}

// The call-tagged flags of the chunked exchanges (collective_kernels.hpp, tagged_epoch): the tag's marker bits,
// the wrap-safe epoch comparison over 48 bits, and the claim that a tagged word is never taken for a reached
// epoch by a plain wait (Cmp::kReached over 64 bits) nor a plain epoch by a tagged wait.
TEST(ExchangeFlags, TaggedEpochsCompareTheirEpochBitsAndKeepTheCallsTag) {
  using detail::call_tag;
  using detail::kTaggedEpochMask;
  using detail::tagged_epoch;
  using detail::tagged_epoch_reached;
  using detail::tagged_word_looks_reached;
  const uint64_t keys[] = {0, ~uint64_t{0}, 0x0123456789abcdefull, 0x3fffull, 0xc000ull, uint64_t{1} << 63};
  const uint64_t epochs[] = {1,
                             2,
                             3,
                             1000,
                             kTaggedEpochMask - 1,
                             kTaggedEpochMask,
                             kTaggedEpochMask + 1,
                             kTaggedEpochMask + 2,
                             (uint64_t{1} << 62) - 1};
  for (const uint64_t key : keys) {
    const uint64_t tag = call_tag(key);
    EXPECT_EQ(tag >> 14, 3u) << std::hex << key;  // the two marker bits, 16 bits in all
    for (const uint64_t e : epochs) {
      const uint64_t word = tagged_epoch(key, e);
      EXPECT_EQ(word >> detail::kTaggedEpochBits, tag);
      EXPECT_EQ(word & kTaggedEpochMask, e & kTaggedEpochMask);
      // The wait for e takes this call's word, and a later call's; not the word of call e - 2 (the same
      // parity's previous call), nor one left long ago, across the 48-bit wrap too.
      EXPECT_TRUE(tagged_epoch_reached(word, tagged_epoch(key, e)));
      EXPECT_TRUE(tagged_epoch_reached(tagged_epoch(key ^ 1, e + 2), word));
      EXPECT_FALSE(tagged_epoch_reached(tagged_epoch(key, e - 2), word)) << e;
      EXPECT_FALSE(tagged_epoch_reached(tagged_epoch(key, e - 1), word)) << e;
      EXPECT_FALSE(tagged_epoch_reached(tagged_epoch(key, e - (uint64_t{1} << 46)), word)) << e;
      // A plain epoch (all_reduce's flags) left in the word: below this call's, so not taken. A zeroed word
      // neither, for 2^47 calls after the zeroing: past that, as with any word left more than 2^47 calls
      // behind, the 48-bit comparison takes it for one ahead, and at a multiple of 2^48 for this call's
      // (decades of calls; checked here, not hidden).
      EXPECT_FALSE(tagged_epoch_reached(e - 1, word)) << e;
      const uint64_t behind = e & kTaggedEpochMask;
      EXPECT_EQ(tagged_epoch_reached(0, word), behind == 0 || behind > (uint64_t{1} << 47)) << e;
    }
    // A tagged word left by any call is never reached for a plain wait of any epoch below 2^62.
    for (const uint64_t left : {uint64_t{0}, uint64_t{1}, uint64_t{5}, kTaggedEpochMask})
      for (const uint64_t e : epochs)
        EXPECT_FALSE(tagged_word_looks_reached(tagged_epoch(key, left), e)) << left << " " << e;
  }
  // The extremes of the tag range against the extremes of the epochs.
  for (const uint64_t word : {uint64_t{0xc000} << 48, ~uint64_t{0}})
    for (const uint64_t e : {uint64_t{1}, (uint64_t{1} << 62) - 1}) EXPECT_FALSE(tagged_word_looks_reached(word, e));
  // Keys that differ in one bit of any of their 16-bit parts' low 14 bits have different tags.
  for (int bit = 0; bit < 64; ++bit)
    if (bit % 16 < 14) EXPECT_NE(call_tag(keys[2]), call_tag(keys[2] ^ (uint64_t{1} << bit))) << bit;
}

}  // namespace
}  // namespace iris::ccl
