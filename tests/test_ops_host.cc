// Host tests of iris::ops: GEMM argument checks and tile choice, FusedConfig validation, the fused ops'
// workspace plans, and the founding regressions (a workspace prepared with large blocks must never
// serve small blocks). No GPU: plans are pure functions, and workspaces are prepared on a fake heap in
// host memory, with a thread bootstrap where ranks must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "iris/ccl/collectives.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/ops/fused.hpp"
#include "iris/ops/gemm.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "ops/gemm_check.hpp"
#include "support/error_text.hpp"
#include "support/fake_workspace_host.hpp"
#include "support/require_gemm_core.hpp"

namespace iris::ops {
namespace {

using ccl::AllReduceVariant;
using ccl::OpKind;
using test::FakeWorkspaceHost;

constexpr int kSms = 132;  // H100/H200 SXM

// Distinct, 256-byte aligned fake device addresses far apart: plans read only the views, never the data.
void* fake_ptr(int slot) { return reinterpret_cast<void*>((static_cast<uintptr_t>(slot) + 1) << 36); }

Tensor mat(int slot, DType dt, int64_t rows, int64_t cols, int64_t stride = -1) {
  return Tensor::matrix(fake_ptr(slot), dt, rows, cols, stride);
}

// One rank's operands: A (a_rows x k), B (b_k x n, or n x b_k; b_k = k unless given), C (c_rows x n).
MatmulOperands operands(int64_t a_rows, int64_t n, int64_t k, int64_t c_rows, DType in = DType::kBFloat16,
                        DType out = DType::kBFloat16, bool b_is_nk = false, int64_t b_k = -1) {
  if (b_k < 0) b_k = k;
  MatmulOperands mm;
  mm.a = mat(0, in, a_rows, k);
  mm.b = b_is_nk ? mat(1, in, n, b_k) : mat(1, in, b_k, n);
  mm.c = mat(2, out, c_rows, n);
  mm.b_is_nk = b_is_nk;
  return mm;
}

FusedConfig blocks(int bm, int bn, AllReduceVariant v = AllReduceVariant::kTwoShot) {
  FusedConfig c;
  c.block_size_m = bm;
  c.block_size_n = bn;
  c.block_size_k = 64;
  c.all_reduce_variant = v;
  return c;
}

// blocks(), with every call of one tile or more through the band pipeline (min_band_tiles 1): its arrays,
// which a call below the default threshold (FusedPlan::unfused) does not all size.
FusedConfig banded(int bm, int bn, AllReduceVariant v = AllReduceVariant::kTwoShot) {
  FusedConfig c = blocks(bm, bn, v);
  c.min_band_tiles = 1;
  return c;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  return test::error_text<std::invalid_argument>(fn);
}

const char* kLock16Need64 =
    "Lock array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes you intend to "
    "use.";

// ---- GEMM core: tiles and argument checks --------------------------------------------------------

GemmArguments gemm_args(int64_t m, int64_t n, int64_t k, DType in = DType::kBFloat16, DType out = DType::kBFloat16,
                        bool b_is_nk = false) {
  GemmArguments g;
  g.a = mat(0, in, m, k);
  g.b = b_is_nk ? mat(1, in, n, k) : mat(1, in, k, n);
  g.c = mat(2, out, m, n);
  g.b_is_nk = b_is_nk;
  return g;
}

TEST(OpsGemmTiles, SupportedSetAndAutomaticChoice) {
  ASSERT_EQ(kGemmTiles.size(), 6u);
  EXPECT_EQ(kGemmTiles[0], (GemmTile{128, 256, 64}));
  EXPECT_EQ(kGemmTiles[1], (GemmTile{128, 128, 64}));
  EXPECT_EQ(kGemmTiles[2], (GemmTile{64, 128, 64}));
  EXPECT_EQ(kGemmTiles[3], (GemmTile{64, 64, 64}));
  EXPECT_EQ(kGemmTiles[4], (GemmTile{16, 64, 128}));
  EXPECT_EQ(kGemmTiles[5], (GemmTile{32, 64, 128}));
  EXPECT_TRUE(GemmTile{}.is_auto());
  // gemm_bench on one H200 (132 SMs, 2026-12-02): above 2^25 output elements, 128x256 only where N and K
  // are both at least 8192, for either layout of B; 128x128 elsewhere.
  EXPECT_EQ(select_gemm_tile(8192, 8192, 8192), kGemmTileLarge);
  EXPECT_EQ(select_gemm_tile(16384, 8192, 8192, /*b_is_nk=*/true), kGemmTileLarge);
  EXPECT_EQ(select_gemm_tile(8192, 8192, 4096), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(8192, 16384, 4096, /*b_is_nk=*/true), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(8192, 8192, 8191), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(16384, 4096, 8192), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(16384, 4096, 4096, /*b_is_nk=*/true), kGemmTileSmall);
  // Up to there, the largest tile whose output still fills 7/8 of the SMs (116 of 132 tiles).
  EXPECT_EQ(select_gemm_tile(4096, 8192, 4096), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(2048, 8192, 4096), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(256, 8192, 8192), kGemmTileSmall);    // 128 tiles
  EXPECT_EQ(select_gemm_tile(128, 8192, 8192), kGemmTileSkinny);   // 64 of 128x128, 128 of 64x128
  EXPECT_EQ(select_gemm_tile(128, 4096, 8192), kGemmTileTiny);     // 64 of 64x128, 128 of 64x64
  EXPECT_EQ(select_gemm_tile(64, 8192, 8192), kGemmTileTiny);      // 64 of 64x128, 128 of 64x64
  EXPECT_EQ(select_gemm_tile(232, 8192, 8192), kGemmTileSmall);    // 2 x 64 partial-row tiles count too
  EXPECT_EQ(select_gemm_tile(128, 7424, 8192), kGemmTileSkinny);   // 116 tiles: exactly 7/8 of 132
  EXPECT_EQ(select_gemm_tile(128, 7296, 8192), kGemmTileTiny);     // 114 tiles: short of it
  // Outputs of at most 16 and 32 rows: the swapped tiles, whatever N, K and the SM count.
  EXPECT_EQ(select_gemm_tile(8, 8, 8), kGemmTileRows16);
  EXPECT_EQ(select_gemm_tile(1, 8192, 8192), kGemmTileRows16);
  EXPECT_EQ(select_gemm_tile(16, 4096, 4096, true), kGemmTileRows16);
  EXPECT_EQ(select_gemm_tile(17, 4096, 4096), kGemmTileRows32);
  EXPECT_EQ(select_gemm_tile(32, 8192, 8192, false, 64), kGemmTileRows32);
  EXPECT_EQ(select_gemm_tile(33, 8192, 8192), kGemmTileTiny);
  EXPECT_EQ(select_gemm_tile(33, 32, 8), kGemmTileTiny);  // one tile: the smallest of 64 rows
  // The wave is the caller's SM count.
  EXPECT_EQ(select_gemm_tile(128, 8192, 8192, false, 64), kGemmTileSmall);
  EXPECT_EQ(select_gemm_tile(128, 4096, 8192, false, 64), kGemmTileSkinny);
  EXPECT_EQ(select_gemm_tile(128, 8192, 8192, false, 256), kGemmTileTiny);
  EXPECT_EQ(error_of([] { (void)select_gemm_tile(128, 8192, 8192, false, 0); }),
            "select_gemm_tile: sm_count must be positive, got 0.");
  EXPECT_EQ(error_of([] { (void)select_gemm_tile(-1, 8192, 8192); }),
            "select_gemm_tile: M x N x K = -1 x 8192 x 8192 has a negative size.");
  // The same choice for every output type.
  EXPECT_EQ(resolved_tile(gemm_args(128, 256, 64)), kGemmTileTiny);
  EXPECT_EQ(resolved_tile(gemm_args(128, 256, 64, DType::kBFloat16, DType::kFloat32)), kGemmTileTiny);
  EXPECT_EQ(resolved_tile(gemm_args(8192, 8192, 8192, DType::kFloat16, DType::kFloat32)), kGemmTileLarge);
  EXPECT_EQ(resolved_tile(gemm_args(8192, 8192, 64, DType::kFloat16, DType::kFloat32)), kGemmTileSmall);
  auto g = gemm_args(128, 256, 64);
  g.tile = kGemmTileLarge;
  EXPECT_EQ(resolved_tile(g), kGemmTileLarge);
  g = gemm_args(128, 8192, 8192);
  g.sm_count = 64;
  EXPECT_EQ(resolved_tile(g), kGemmTileSmall) << "GemmArguments::sm_count sets the wave";
  // sm_count 1 runs on 2 SMs (one 2-CTA cluster), so the choice is 2's, here as on a device.
  g = gemm_args(64, 64, 64);
  g.sm_count = 2;
  const GemmTile two = resolved_tile(g);
  g.sm_count = 1;
  EXPECT_EQ(resolved_tile(g), two);
  // Sizes whose M x N overflows 64 bits take the large-problem branch instead of wrapping.
  EXPECT_EQ(select_gemm_tile(int64_t{1} << 40, int64_t{1} << 40, 64), kGemmTileSmall);
}

// stream_k changes the kernel, never the tile: resolved_tile is the same with it and without it.
TEST(OpsGemmTiles, StreamKKeepsTheTile) {
  for (GemmTile tile : {GemmTile{}, kGemmTileSmall, kGemmTileTiny, kGemmTileLarge})
    for (int64_t n : {1024, 2048, 8192}) {
      GemmArguments g = gemm_args(128, n, 8192);
      g.tile = tile;
      g.sm_count = 132;
      const GemmTile without = resolved_tile(g);
      g.stream_k = true;
      EXPECT_EQ(resolved_tile(g), without) << n;
    }
}

// The automatic split of K: only where the output's tiles leave SMs idle, as many slices as fit one wave,
// each at least kGemmMinSplitKDepth deep and K a multiple of 8 slices.
TEST(OpsGemmSplitK, AutomaticSplitFillsOneWave) {
  EXPECT_EQ(select_split_k(128, 1024, 8192, kGemmTileTiny), 4);  // 32 tiles: 128 of 132 with 4 slices
  EXPECT_EQ(select_split_k(64, 1024, 8192, kGemmTileTiny), 8);   // 16 tiles: 8 slices of 1024
  EXPECT_EQ(select_split_k(128, 2048, 8192, kGemmTileTiny), 2);  // 64 tiles
  EXPECT_EQ(select_split_k(128, 1280, 8192, kGemmTileTiny), 2);  // 40 tiles: 3 slices fit, but 8192 % 24 != 0
  EXPECT_EQ(select_split_k(64, 64, 16384, kGemmTileTiny), 16);   // one tile: kGemmMaxSplitK
  EXPECT_EQ(select_split_k(64, 64, 1 << 20, kGemmTileTiny), kGemmMaxSplitK);
  EXPECT_EQ(select_split_k(128, 1024, 2048, kGemmTileTiny), 2);  // slices of at least 1024
  EXPECT_EQ(select_split_k(128, 1024, 2040, kGemmTileTiny), 1);  // two slices of 1020 are too shallow
  EXPECT_EQ(select_split_k(128, 1024, 1024, kGemmTileTiny), 1);
  EXPECT_EQ(select_split_k(128, 1024, 8200, kGemmTileTiny), 1);  // 8200 is no multiple of 16, 24 or 32
  EXPECT_EQ(select_split_k(128, 1024, 8208, kGemmTileTiny), 3);  // 8208 = 24 x 342 (not 32 x ...)
  EXPECT_EQ(select_split_k(128, 4096, 8192, kGemmTileTiny), 1);  // 128 tiles: a full wave
  EXPECT_EQ(select_split_k(64, 4096, 8192, kGemmTileTiny), 2);   // 64 tiles
  EXPECT_EQ(select_split_k(16, 4096, 4096, kGemmTileTiny), 2);
  EXPECT_EQ(select_split_k(128, 8192, 8192, kGemmTileSkinny), 1);
  EXPECT_EQ(select_split_k(128, 1024, 8192, kGemmTileSmall), 8);  // 8 tiles of 128x128
  // The swapped tiles of decode count their own tiles and split below a third of the SMs (44 of 132).
  EXPECT_EQ(select_split_k(32, 2048, 8192, kGemmTileRows32), 4);  // 32 tiles of 32x64
  EXPECT_EQ(select_split_k(16, 2048, 4096, kGemmTileRows16), 4);  // 32 tiles of 16x64
  EXPECT_EQ(select_split_k(16, 1024, 8192, kGemmTileRows16), 8);  // 16 tiles
  EXPECT_EQ(select_split_k(16, 2752, 8192, kGemmTileRows16), 2);  // 43 tiles: 3 slices fit, 8192 % 24 != 0
  EXPECT_EQ(select_split_k(16, 2816, 8192, kGemmTileRows16), 1);  // 44 tiles: a third of 132
  EXPECT_EQ(select_split_k(16, 4096, 4096, kGemmTileRows16), 1);  // 64 tiles
  EXPECT_EQ(select_split_k(32, 3072, 8192, kGemmTileRows32), 1);  // 48 tiles
  EXPECT_EQ(select_split_k(16, 2048, 4096, kGemmTileRows16, 64), 1) << "a third of the caller's SM count";
  EXPECT_EQ(select_split_k(0, 1024, 8192, kGemmTileTiny), 1) << "no tiles, nothing to split";
  EXPECT_EQ(select_split_k(128, 1024, 8192, kGemmTileTiny, 64), 2) << "the wave is the caller's SM count";
  EXPECT_EQ(error_of([] { (void)select_split_k(128, 1024, 8192, kGemmTileTiny, 0); }),
            "select_split_k: sm_count must be positive, got 0.");
  EXPECT_EQ(error_of([] { (void)select_split_k(128, -1, 8192, kGemmTileTiny); }),
            "select_split_k: M x N x K = 128 x -1 x 8192 has a negative size.");
  EXPECT_EQ(error_of([] {
              (void)select_split_k(128, 1024, 8192, GemmTile{32, 32, 32});
            }),
            "select_split_k: tile 32x32x32 is not supported; the tiles are 128x256x64, 128x128x64, 64x128x64, "
            "64x64x64, 16x64x128, 32x64x128.");
}

TEST(OpsGemmSplitK, ResolvedSplitAndItsArguments) {
  auto g = gemm_args(128, 1024, 8192);
  g.sm_count = 132;
  EXPECT_EQ(resolved_split_k(g), 1) << "split_k defaults to 1: no split";
  g.split_k = 3;
  EXPECT_EQ(can_implement(g),
            "gemm: split_k = 3 needs K to be a multiple of 24 (8 per slice: each slice of A and B "
            "starts 16-byte aligned), but K = 8192.");
  g.split_k = 16;
  EXPECT_EQ(can_implement(g), "");
  EXPECT_EQ(resolved_split_k(g), 16) << "an explicit split is taken as given";
  g.split_k = 17;
  EXPECT_EQ(can_implement(g),
            "gemm: split_k must be 0 (the automatic split), 1 (no split) or up to 16 slices, got 17.");
  g.split_k = -1;
  EXPECT_EQ(can_implement(g),
            "gemm: split_k must be 0 (the automatic split), 1 (no split) or up to 16 slices, got -1.");
  EXPECT_EQ(error_of([&] { (void)workspace_size(g); }), can_implement(g));
  g.split_k = 2;
  g.stream_k = true;
  EXPECT_EQ(can_implement(g), "gemm: stream_k and split_k = 2 both split K; set one of them.");
  // Arguments gemm() refuses get gemm()'s message, not that of a helper the choice calls.
  g.split_k = 0;
  g.c = mat(2, DType::kFloat32, 128, 1024);
  g.tile = GemmTile{32, 32, 32};
  const std::string bad_tile =
      "gemm: tile 32x32x32 is not supported; the tiles are 128x256x64, 128x128x64, 64x128x64, 64x64x64, 16x64x128, "
      "32x64x128 (or 0x0x0 for the automatic choice).";
  EXPECT_EQ(can_implement(g), bad_tile);
  EXPECT_EQ(error_of([&] { (void)resolved_split_k(g); }), bad_tile);
  EXPECT_EQ(error_of([&] { (void)resolved_tile(g); }), bad_tile);
  // The automatic split on 132 SMs (a device with fewer clamps sm_count to its own, and splits otherwise).
  IRIS_TEST_REQUIRE_DEVICE_SMS(132);
  g = gemm_args(128, 1024, 8192);
  g.sm_count = 132;
  g.split_k = 0;
  EXPECT_EQ(resolved_split_k(g), 4);
  EXPECT_EQ(resolved_tile(g), kGemmTileTiny) << "a split never changes the tile";
  // Automatic split with stream_k: where the stream-K kernel runs (an explicit 128x128 tile of 16-bit C,
  // few tiles, K >= 8192) it alone splits K; elsewhere the automatic split applies.
  g.stream_k = true;
  g.tile = kGemmTileSmall;
  EXPECT_EQ(resolved_split_k(g), 1);
  g.c = mat(2, DType::kFloat32, 128, 1024);  // no stream-K kernel for float32 C
  EXPECT_EQ(resolved_split_k(g), 8);
}

TEST(OpsGemmArguments, AcceptsEveryBuiltCombination) {
  for (DType in : {DType::kBFloat16, DType::kFloat16})
    for (DType out : {in, DType::kFloat32})
      for (bool nk : {false, true})
        for (GemmTile tile : {GemmTile{}, kGemmTileLarge, kGemmTileSmall, kGemmTileSkinny, kGemmTileTiny}) {
          auto g = gemm_args(1000, 520, 200, in, out, nk);  // no dimension a multiple of the tile
          g.tile = tile;
          EXPECT_EQ(can_implement(g), "")
              << dtype_name(in) << " -> " << dtype_name(out) << (nk ? " NxK " : " KxN ") << tile.m << "x" << tile.n;
          g.bias = fake_ptr(3);
          EXPECT_EQ(can_implement(g), "");
        }
  EXPECT_EQ(can_implement(gemm_args(1, 8, 8)), "");
  EXPECT_EQ(can_implement(gemm_args(0, 8, 8)), "") << "an empty output is nothing to do";
  // Padded rows: strides that are multiples of 16 bytes.
  auto g = gemm_args(100, 64, 96);
  g.a = mat(0, DType::kBFloat16, 100, 96, 104);
  g.c = mat(2, DType::kBFloat16, 100, 64, 72);
  EXPECT_EQ(can_implement(g), "");
  // A one-row view may carry any stride: it has no second row.
  g = gemm_args(1, 64, 96);
  g.a = Tensor{fake_ptr(0), DType::kBFloat16, 1, 96, 3};
  EXPECT_EQ(can_implement(g), "");
}

TEST(OpsGemmArguments, RejectionsNameTheTensorAndTheRule) {
  auto g = gemm_args(256, 256, 128, DType::kFloat32, DType::kFloat32);
  EXPECT_EQ(can_implement(g), "gemm: A is float32; the GEMM core takes bfloat16 or float16 inputs.");
  g = gemm_args(256, 256, 128);
  g.b.dtype = DType::kFloat16;
  EXPECT_EQ(can_implement(g), "gemm: B is float16 but A is bfloat16; A and B must have the same type.");
  g = gemm_args(256, 256, 128, DType::kBFloat16, DType::kFloat16);
  EXPECT_EQ(can_implement(g), "gemm: C is float16; with bfloat16 inputs C must be bfloat16 or float32.");
  g = gemm_args(256, 256, 128);
  g.b = mat(1, DType::kBFloat16, 64, 256);
  EXPECT_EQ(can_implement(g), "gemm: A is 256x128 but B is 64x256 (stored K x N); B's K must be 128.");
  g = gemm_args(256, 256, 128, DType::kBFloat16, DType::kBFloat16, true);
  g.b = mat(1, DType::kBFloat16, 256, 64);
  EXPECT_EQ(can_implement(g), "gemm: A is 256x128 but B is 256x64 (stored N x K); B's K must be 128.");
  g = gemm_args(256, 256, 128);
  g.c = mat(2, DType::kBFloat16, 128, 256);
  EXPECT_EQ(can_implement(g), "gemm: C is 128x256 but A @ B is 256x256.");
  g.c = mat(2, DType::kBFloat16, 256, 128);
  EXPECT_EQ(can_implement(g), "gemm: C has 128 columns but B has N = 256.");
  EXPECT_EQ(can_implement(gemm_args(256, 256, 100)),
            "gemm: K = 100 is not a multiple of 8: TMA needs 16-byte aligned rows, so K must be a multiple of 8 for "
            "16-bit inputs.");
  EXPECT_EQ(can_implement(gemm_args(256, 250, 128)),
            "gemm: N = 250 is not a multiple of 8: TMA needs 16-byte aligned rows, so N must be a multiple of 8 for "
            "16-bit inputs.");
  EXPECT_EQ(can_implement(gemm_args(256, 256, 0)), "gemm: K is 0 (A is 256x0); the GEMM core needs K >= 1.");
  g = gemm_args(256, 256, 128);
  g.a.data = static_cast<char*>(fake_ptr(0)) + 8;
  EXPECT_EQ(can_implement(g),
            "gemm: A data 0x1000000008 is not 16-byte aligned (TMA reads and writes 16-byte "
            "aligned rows).");
  g = gemm_args(256, 256, 128);
  g.b = mat(1, DType::kBFloat16, 128, 256, 260);
  EXPECT_EQ(can_implement(g),
            "gemm: B row stride 260 elements (520 bytes) is not a multiple of 16 bytes (TMA reads "
            "and writes 16-byte aligned rows).");
  g = gemm_args(256, 256, 128);
  g.c = mat(2, DType::kBFloat16, 256, 256, 200);
  EXPECT_EQ(can_implement(g), "gemm: C row stride 200 is smaller than its 256 columns.");
  g = gemm_args(256, 256, 128);
  g.a.data = nullptr;
  EXPECT_EQ(can_implement(g), "gemm: A is null but has 32768 elements.");
  g = gemm_args(256, 256, 128);
  g.bias = static_cast<char*>(fake_ptr(3)) + 2;
  EXPECT_EQ(can_implement(g), "gemm: bias 0x4000000002 is not 16-byte aligned.");
  g = gemm_args(256, 256, 128);
  g.c.data = g.a.data;
  EXPECT_EQ(can_implement(g), "gemm: C overlaps A or B; pass a separate output buffer.");
  g = gemm_args(256, 256, 128);
  g.sm_count = -1;
  EXPECT_EQ(can_implement(g), "gemm: sm_count must be 0 (every SM) or positive, got -1.");
  g = gemm_args(256, 256, 128);
  g.tile = GemmTile{64, 256, 64};
  EXPECT_EQ(can_implement(g),
            "gemm: tile 64x256x64 is not supported; the tiles are 128x256x64, 128x128x64, 64x128x64, 64x64x64, "
            "16x64x128, 32x64x128 (or 0x0x0 for the automatic choice).");
  // gemm() and workspace_size() refuse what can_implement refuses, with the same text, before any CUDA call.
  g = gemm_args(256, 256, 100);
  EXPECT_EQ(error_of([&] { gemm(g, nullptr, nullptr); }), can_implement(g));
  EXPECT_EQ(error_of([&] { (void)workspace_size(g); }), can_implement(g));
}

TEST(OpsGemmArguments, SourceIsCsShapeAndTypeAndNeverSplit) {
  auto g = gemm_args(1000, 520, 200);
  g.source = mat(4, DType::kBFloat16, 1000, 520);
  EXPECT_EQ(can_implement(g), "");
  g.source = g.c;
  EXPECT_EQ(can_implement(g), "") << "C itself: C += A @ B";
  g.c = mat(2, DType::kBFloat16, 1000, 520, 528);
  g.source = mat(2, DType::kBFloat16, 1000, 520, 528);
  EXPECT_EQ(can_implement(g), "") << "C itself, padded";
  for (GemmTile tile : {kGemmTileLarge, kGemmTileSmall, kGemmTileSkinny, kGemmTileTiny}) {
    g.tile = tile;
    EXPECT_EQ(can_implement(g), "") << tile.m << "x" << tile.n;
  }
  g = gemm_args(256, 256, 128);
  g.source = mat(4, DType::kFloat32, 256, 256);
  EXPECT_EQ(can_implement(g), "gemm: source is float32 but C is bfloat16; the source must have C's type.");
  g.source = mat(4, DType::kBFloat16, 256, 128);
  EXPECT_EQ(can_implement(g), "gemm: source is 256x128 but C is 256x256; the source must have C's shape.");
  g.source = mat(4, DType::kBFloat16, 256, 256, 260);
  EXPECT_EQ(can_implement(g),
            "gemm: source row stride 260 elements (520 bytes) is not a multiple of 16 bytes (TMA reads and writes "
            "16-byte aligned rows).");
  g.source = Tensor::matrix(nullptr, DType::kBFloat16, 256, 256);
  EXPECT_EQ(can_implement(g), "gemm: source is null but has 65536 elements.");
  g.source = Tensor::matrix(static_cast<char*>(g.c.data) + 512, DType::kBFloat16, 256, 256);
  EXPECT_EQ(can_implement(g),
            "gemm: source overlaps C without being C; pass C itself (C += A @ B) or a separate buffer.");
  g.source = mat(4, DType::kBFloat16, 256, 256);
  g.split_k = 2;
  EXPECT_EQ(can_implement(g),
            "gemm: a source is not supported with split_k > 1 (the partial sums of K would each add it); leave K "
            "unsplit.");
  g.split_k = 1;
  g.stream_k = true;
  EXPECT_EQ(can_implement(g),
            "gemm: a source is not supported with stream_k = true (stream-K splits K where it runs, and the partial "
            "sums of K would each add it); set stream_k = false.");
  g.stream_k = false;
  g.tile = kGemmTileRows16;
  EXPECT_EQ(can_implement(g),
            "gemm: tile 16x64x128 takes no source (the swapped decode tiles have no C operand); use a 64- or 128-row "
            "tile or the automatic choice.");
  // The automatic choice with a source: no swapped tile (kGemmTileTiny instead), no split of K; without
  // it, 20 rows take the 32-row tile, split in 8 on 132 SMs (a device with fewer clamps sm_count to its
  // own, and splits otherwise).
  g = gemm_args(20, 1024, 8192);
  g.sm_count = 132;
  g.split_k = 0;
  EXPECT_EQ(resolved_tile(g), kGemmTileRows32);
  g.source = mat(4, DType::kBFloat16, 20, 1024);
  EXPECT_EQ(resolved_tile(g), kGemmTileTiny);
  EXPECT_EQ(resolved_split_k(g), 1);
  IRIS_TEST_REQUIRE_DEVICE_SMS(132);
  g.source = Tensor{};
  EXPECT_EQ(resolved_split_k(g), 8);
}

// gemm()'s refusal of a workspace (iris::WorkspaceTooSmall's text; the fused ops raise it before launch
// too), pinned without a GPU: test_gemm_gpu.cu checks that gemm() throws it and writes nothing.
TEST(OpsGemmWorkspace, RefusalSaysWhatTheArgumentsNeedAndWhatIsHeld) {
  void* ws = fake_ptr(5);
  EXPECT_EQ(detail::check_gemm_workspace(0, nullptr, 0), "");
  EXPECT_EQ(detail::check_gemm_workspace(4096, ws, 4096), "");
  EXPECT_EQ(detail::check_gemm_workspace(4096, ws, size_t{1} << 20), "");
  EXPECT_EQ(detail::check_gemm_workspace(4096, nullptr, size_t{1} << 20),
            "gemm: these arguments need 4096 bytes of device workspace (workspace_size(args)) but workspace is null.");
  EXPECT_EQ(detail::check_gemm_workspace(4096, ws, 4080),
            "gemm: these arguments need 4096 bytes of device workspace (workspace_size(args)) but the workspace "
            "holds 4080.");
}

// The workspace is written while the operands are read: one that shares a byte with any of them is refused
// (gemm() raises InvalidArgument with this text before it launches anything).
TEST(OpsGemmWorkspace, AWorkspaceThatOverlapsAnOperandIsRefusedNamingIt) {
  GemmArguments g = gemm_args(256, 256, 128);  // A at slot 0, B at 1, C at 2 (bf16: 64 KiB, 64 KiB, 128 KiB)
  g.bias = fake_ptr(3);
  g.source = mat(4, DType::kBFloat16, 256, 256);
  auto base = [](int slot) { return static_cast<char*>(fake_ptr(slot)); };
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, fake_ptr(5), 4096), "");
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, nullptr, 4096), "");  // check_gemm_workspace refuses null
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, base(2), 0), "");     // no workspace used
  // Ending right where A starts, and starting one byte past C's end: apart.
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, base(0) - 4096, 4096), "");
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, base(2) + 256 * 256 * 2, 4096), "");
  std::ostringstream at;  // the address as the message prints it (an ostream's void*)
  at << static_cast<const void*>(base(0) - 4096);
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, base(0) - 4096, 4097),
            "gemm: the workspace (4097 bytes at " + at.str() +
                ") overlaps A; the GEMM writes it while it reads its operands. Pass device memory no operand uses.");
  const auto names = [&](int slot, size_t offset) {
    const std::string why = detail::check_gemm_workspace_apart(g, base(slot) + offset, 16);
    return why.substr(why.find(") overlaps ") + 11, why.find(';') - why.find(") overlaps ") - 11);
  };
  EXPECT_EQ(names(1, 64 * 1024 - 16), "B");  // B's last 16 bytes
  EXPECT_EQ(names(2, 1000), "C");
  EXPECT_EQ(names(3, 256 * 2 - 16), "the bias");  // N elements of C's type
  EXPECT_EQ(names(4, 0), "the source");
  // Without them, the same addresses are free.
  g.bias = nullptr;
  g.source = Tensor{};
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, base(3), 16), "");
  EXPECT_EQ(detail::check_gemm_workspace_apart(g, base(4), 16), "");
}

TEST(OpsGemmAvailability, WithoutCutlassGemmSaysHowToGetIt) {
  if (gemm_available()) GTEST_SKIP() << "this build has the GEMM core (CUTLASS headers found)";
  try {
    gemm(gemm_args(256, 256, 128), nullptr, nullptr);
    FAIL() << "gemm ran without a GEMM core";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "gemm: the CUTLASS headers were not found when iris was configured, so this build has no GEMM core. "
                 "Run `bash scripts/setup.sh` (it unpacks them from the nvidia-cutlass==4.2.0.0 PyPI wheel into "
                 ".deps/cutlass/include) or configure with -DIRIS_CUTLASS_INCLUDE_DIR=<path to CUTLASS's include "
                 "folder>, then rebuild.");
  }
}

// ---- FusedConfig -----------------------------------------------------------------------------------

TEST(OpsFusedConfig, DefaultsLeaveTheTileToThePlanAndAreValid) {
  FusedConfig c;
  EXPECT_TRUE(c.auto_tile());
  EXPECT_EQ(c.tile(), (GemmTile{0, 0, 0}));
  EXPECT_FALSE(blocks(128, 256).auto_tile());
  EXPECT_EQ(c.all_reduce_variant, AllReduceVariant::kTwoShot);
  EXPECT_NO_THROW(c.validate(1));
  EXPECT_NO_THROW(c.validate(8));
  EXPECT_NO_THROW(blocks(64, 64).validate(2));
  EXPECT_NO_THROW(blocks(256, 16).validate(2));
  EXPECT_EQ(default_comm_sms(132), 16);
  EXPECT_EQ(default_comm_sms(4), 1);
}

// The GEMM core's advice, kept where the fused kernels run it and otherwise 64x64: following it must
// give a config that validates, also for the per-rank GEMMs of 16 and 32 rows that matmul_all_gather's
// 128-row benchmark shape has on 8 and 4 ranks (iris-bench's fused tables once failed there).
TEST(OpsFusedConfig, SelectFusedTileIsTheGemmChoiceAmongTheFusedTiles) {
  for (int64_t m : {1, 16, 17, 32, 33, 64, 128, 2048, 8192, 16384})
    for (int64_t n : {1024, 4096, 8192})
      for (bool nk : {false, true})
        for (int sms : {4, 132}) {
          const GemmTile t = select_fused_tile(m, n, 8192, nk, sms);
          const GemmTile g = select_gemm_tile(m, n, 8192, nk, sms);
          SCOPED_TRACE(::testing::Message() << m << " x " << n << (nk ? " NK" : " KN") << " on " << sms << " SMs");
          EXPECT_NE(std::find(kFusedTiles.begin(), kFusedTiles.end(), t), kFusedTiles.end());
          EXPECT_EQ(t, m <= 32 ? kGemmTileTiny : g);
          EXPECT_NO_THROW(blocks(t.m, t.n).validate(8));
        }
  EXPECT_EQ(error_of([] { (void)select_fused_tile(-1, 8, 8); }),
            "select_gemm_tile: M x N x K = -1 x 8 x 8 has a negative size.");
}

TEST(OpsFusedConfig, BadFieldsAreNamed) {
  auto expect_msg = [](FusedConfig cfg, int world, const std::string& msg) {
    EXPECT_EQ(error_of([&] { cfg.validate(world); }), msg);
  };
  const std::string all_zero =
      " (or leave block_size_m, block_size_n and block_size_k all 0 for the tile chosen by shape)";
  const FusedConfig c = blocks(128, 256);
  expect_msg(c, 0, "world_size must be at least 1, got 0");
  FusedConfig bad = c;
  bad.block_size_m = 0;
  expect_msg(bad, 2, "block_size_m must be positive, got 0" + all_zero);
  bad = c;
  bad.block_size_n = -4;
  expect_msg(bad, 2, "block_size_n must be positive, got -4" + all_zero);
  bad = c;
  bad.block_size_k = 0;
  expect_msg(bad, 2, "block_size_k must be positive, got 0" + all_zero);
  bad = FusedConfig{};
  bad.block_size_n = 128;  // one block size set, the others left 0
  expect_msg(bad, 2, "block_size_m must be positive, got 0" + all_zero);
  bad = c;
  bad.block_size_m = 96;
  expect_msg(bad, 2, "block_size_m must be 64, 128 or 256 (a Hopper wgmma tile), got 96");
  bad = c;
  bad.block_size_n = 24;
  expect_msg(bad, 2, "block_size_n must be a multiple of 16 up to 256 (a Hopper wgmma tile), got 24");
  bad = c;
  bad.block_size_n = 512;
  expect_msg(bad, 2, "block_size_n must be a multiple of 16 up to 256 (a Hopper wgmma tile), got 512");
  bad = c;
  bad.block_size_k = 40;
  expect_msg(bad, 2, "block_size_k must be a multiple of 16 up to 256 (a Hopper wgmma tile), got 40");
  bad = c;
  bad.gemm_sms = -1;
  expect_msg(bad, 2, "gemm_sms must be 0 (automatic) or positive, got -1");
  bad = c;
  bad.comm_sms = -2;
  expect_msg(bad, 2, "comm_sms must be 0 (automatic) or positive, got -2");
  bad = c;
  bad.all_reduce_variant = AllReduceVariant::kRing;
  expect_msg(bad, 2,
             "all_reduce_variant must be atomic, spinlock, one_shot or two_shot for matmul_all_reduce, got ring");
  bad.all_reduce_variant = AllReduceVariant::kAuto;
  expect_msg(bad, 2,
             "all_reduce_variant must be atomic, spinlock, one_shot or two_shot for matmul_all_reduce, got auto");
  // The other ops ignore the variant: a config shared with them may hold any (before 2026-12-05 every op
  // refused auto and ring, naming a field it does not read).
  for (OpKind op : {OpKind::kMatmulReduceScatter, OpKind::kAllGatherMatmul, OpKind::kMatmulAllGather,
                    OpKind::kAllGatherMatmulKSharded})
    EXPECT_NO_THROW(bad.validate(2, op)) << ccl::op_name(op);
  EXPECT_NO_THROW(plan_matmul_reduce_scatter(operands(512, 512, 256, 256), bad, 2, kSms));
  EXPECT_NO_THROW(plan_all_gather_matmul(operands(256, 512, 256, 512), bad, 2, kSms));
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 512, 256, 512), bad, 2, kSms); }),
            "all_reduce_variant must be atomic, spinlock, one_shot or two_shot for matmul_all_reduce, got auto");
}

// ---- plans: tile math, shapes, needs ---------------------------------------------------------------

TEST(OpsFusedPlan, TileMathCountsEdgeTiles) {
  auto p = plan_matmul_all_reduce(operands(512, 512, 256, 512), blocks(128, 128), 1, kSms);
  EXPECT_EQ(p.tiles, 16);
  EXPECT_EQ(p.needs.locks, 16u);
  EXPECT_EQ(p.tile, (GemmTile{128, 128, 64}));
  p = plan_matmul_all_reduce(operands(512, 512, 256, 512), blocks(64, 64), 1, kSms);
  EXPECT_EQ(p.tiles, 64);
  // 1000 x 520: ceil(1000/128) = 8 by ceil(520/256) = 3.
  p = plan_matmul_all_reduce(operands(1000, 520, 200, 1000), blocks(128, 256), 1, kSms);
  EXPECT_EQ(p.tiles, 24);
  EXPECT_EQ(p.needs.locks, 24u);
  // The default config leaves the tile to the plan: 128x128 would give 40 tiles, short of a wave on
  // 132 SMs, so 64x64: 16 by 9.
  p = plan_matmul_all_reduce(operands(1000, 520, 200, 1000), FusedConfig{}, 1, kSms);
  EXPECT_EQ(p.tile, kGemmTileTiny);
  EXPECT_EQ(p.tiles, 144);
  EXPECT_EQ(p.sig.block_size_m, 64);
  EXPECT_EQ(p.sig.block_size_n, 64);
  p = plan_matmul_all_reduce(operands(1, 8, 8, 1), FusedConfig{}, 1, kSms);
  EXPECT_EQ(p.tiles, 1);
  p = plan_matmul_all_reduce(operands(0, 8, 8, 0), FusedConfig{}, 1, kSms);
  EXPECT_EQ(p.tiles, 0);
  EXPECT_EQ(p.needs.locks, 0u);
}

TEST(OpsFusedPlan, SignatureAndSmSplit) {
  auto p = plan_matmul_all_reduce(operands(512, 256, 128, 512, DType::kBFloat16, DType::kFloat32, true),
                                  blocks(128, 128, AllReduceVariant::kOneShot), 2, kSms);
  EXPECT_EQ(p.sig.op, OpKind::kMatmulAllReduce);
  EXPECT_EQ(p.sig.rows, 512);
  EXPECT_EQ(p.sig.cols, 256);
  EXPECT_EQ(p.sig.depth, 128);
  EXPECT_EQ(p.sig.dtype, DType::kFloat32) << "the partial products cross ranks in C's type";
  EXPECT_EQ(p.sig.world_size, 2);
  EXPECT_EQ(p.sig.variant, AllReduceVariant::kOneShot);
  EXPECT_EQ(p.sig.block_size_m, 128);
  EXPECT_EQ(p.sig.block_size_n, 128);
  EXPECT_EQ(p.sig.min_band_tiles, 66) << "FusedConfig::min_band_tiles 0: half the device's SMs";
  EXPECT_EQ(p.sig.describe(),
            "matmul_all_reduce 512x256 k 128 float32 (A and B bfloat16) world 2 variant one_shot blocks 128x128 "
            "min_band_tiles 66");
  // Copy engines move the data by default: the GEMM keeps every SM.
  EXPECT_EQ(p.comm_sms, 16);
  EXPECT_EQ(p.gemm_sms, 132);
  EXPECT_EQ(p.needs.block_state, 8u + 3 * 2) << "the block state of every iris::ccl op: 8 + 3W words";
  FusedConfig c;
  c.copy_engine = false;  // copy kernels beside the GEMM: the two split the SMs
  p = plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms);
  EXPECT_EQ(p.gemm_sms, 116);
  EXPECT_EQ(p.needs.block_state, 8u + 3 * 2) << "whatever the split";
  c.comm_sms = 20;
  c.gemm_sms = 100;
  p = plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms);
  EXPECT_EQ(p.comm_sms, 20);
  EXPECT_EQ(p.gemm_sms, 100);
  EXPECT_EQ(p.needs.block_state, 8u + 3 * 2);
  c.gemm_sms = 120;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: gemm_sms (120) + comm_sms (20) must leave at least one GEMM SM and fit the device's "
            "132 SMs (copy_engine is false: the communication kernels run beside the GEMM).");
  // atomic and spinlock add on SMs whatever copy_engine says: the same split, and its own reason.
  c.copy_engine = true;
  c.all_reduce_variant = AllReduceVariant::kSpinlock;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: gemm_sms (120) + comm_sms (20) must leave at least one GEMM SM and fit the device's "
            "132 SMs (the atomic and spinlock variants add on SMs: the communication kernels run beside the GEMM).");
  for (auto v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock}) {
    FusedConfig split = blocks(128, 128, v);
    p = plan_matmul_all_reduce(operands(512, 256, 128, 512), split, 2, kSms);
    EXPECT_EQ(p.comm_sms, 32) << "twice the default: their float32 pushes limit the op";
    EXPECT_EQ(p.gemm_sms, 100);
    split.comm_sms = 8;
    p = plan_matmul_all_reduce(operands(512, 256, 128, 512), split, 2, kSms);
    EXPECT_EQ(p.comm_sms, 8);
    EXPECT_EQ(p.gemm_sms, 124);
  }
  c.all_reduce_variant = AllReduceVariant::kTwoShot;
  EXPECT_NO_THROW(plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms));
  c.gemm_sms = 133;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: gemm_sms (133) and comm_sms (20) must each fit the device's 132 SMs.");
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), FusedConfig{}, 2, 0); }),
            "matmul_all_reduce: device_sms must be positive, got 0.");
  // Split sizes whose sum overflows an int are refused, not passed as a negative sum.
  c.copy_engine = false;
  c.gemm_sms = std::numeric_limits<int>::max();
  c.comm_sms = 16;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: gemm_sms (2147483647) + comm_sms (16) must leave at least one GEMM SM and fit the "
            "device's 132 SMs (copy_engine is false: the communication kernels run beside the GEMM).");
  c.gemm_sms = 100;
  c.comm_sms = std::numeric_limits<int>::max();
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: gemm_sms (100) + comm_sms (2147483647) must leave at least one GEMM SM and fit the "
            "device's 132 SMs (copy_engine is false: the communication kernels run beside the GEMM).");
  // gemm_sms left 0 takes what comm_sms leaves: comm_sms alone is named, not a negative split.
  c.gemm_sms = 0;
  c.comm_sms = 200;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: comm_sms (200) must leave at least one of the device's 132 SMs for the GEMM "
            "(copy_engine is false: the communication kernels run beside the GEMM).");
  c.comm_sms = 132;
  c.copy_engine = true;
  c.all_reduce_variant = AllReduceVariant::kAtomic;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 512), c, 2, kSms); }),
            "matmul_all_reduce: comm_sms (132) must leave at least one of the device's 132 SMs for the GEMM (the "
            "atomic and spinlock variants add on SMs: the communication kernels run beside the GEMM).");
}

// validate() admits every Hopper wgmma tile, but the fused kernels run kFusedTiles only: the plan refuses
// the others before it sizes anything (a 64x16 tile would otherwise ask the heap for 8 times the locks and
// flags of 64x128, and fail there or at the call), so the preamble, heap_bytes and the call all say so.
TEST(OpsFusedPlan, TilesTheFusedKernelsDoNotRunAreRefusedByThePlan) {
  const std::string runs =
      " is not a tile of the GEMM core; the fused kernels run 128x256x64, 128x128x64, "
      "64x128x64, 64x64x64.";
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 512, 256, 512), blocks(256, 16), 2, kSms); }),
            "matmul_all_reduce: block_size_m x block_size_n x block_size_k = 256x16x64" + runs);
  EXPECT_EQ(error_of([&] { plan_all_gather_matmul(operands(256, 512, 128, 512), blocks(128, 64), 2, kSms); }),
            "all_gather_matmul: block_size_m x block_size_n x block_size_k = 128x64x64" + runs);
  for (const GemmTile& t : kFusedTiles) {
    FusedConfig c = blocks(t.m, t.n);
    c.block_size_k = t.k;
    EXPECT_NO_THROW(plan_matmul_reduce_scatter(operands(512, 512, 256, 256), c, 2, kSms));
  }
}

// A bias inside C would change under the epilogue's reads as other blocks write C.
TEST(OpsGemmArguments, BiasOverlappingCIsRefused) {
  auto g = gemm_args(256, 256, 128);
  g.bias = static_cast<char*>(g.c.data) + 256 * 2 * 100;  // row 100 of C
  EXPECT_EQ(can_implement(g), "gemm: bias overlaps C; pass a separate bias vector (N elements of C's type).");
  g.bias = static_cast<char*>(g.c.data) - 256 * 2 + 16;  // its last 240 bytes are C's first
  EXPECT_EQ(can_implement(g), "gemm: bias overlaps C; pass a separate bias vector (N elements of C's type).");
  g.bias = static_cast<char*>(g.c.data) - 256 * 2;  // just before C
  EXPECT_EQ(can_implement(g), "");
  MatmulOperands mm = operands(512, 512, 128, 512);
  mm.bias = mm.c.data;
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(mm, blocks(128, 128), 2, kSms); }),
            "matmul_all_reduce: bias overlaps C; pass a separate bias vector (N elements of C's type).");
}

// Views too large for any GPU (a wrong shape or stride) are refused before their sizes overflow the byte
// arithmetic; a negative row stride other than Tensor::matrix's default -1 is kept, and refused.
TEST(OpsGemmArguments, ViewsPastTheAddressSpaceAndNegativeStridesAreRefused) {
  auto g = gemm_args(256, 256, 128);
  g.a = Tensor::matrix(fake_ptr(0), DType::kBFloat16, int64_t{1} << 32, 128, int64_t{1} << 32);
  EXPECT_EQ(can_implement(g),
            "gemm: A 4294967296x128 bfloat16 (row stride 4294967296) spans more than 2^48 bytes, more than a GPU can "
            "address; its shape or row stride is wrong.");
  g = gemm_args(256, 256, 128);
  g.b = Tensor::matrix(fake_ptr(1), DType::kBFloat16, 128, 256, -7);
  EXPECT_EQ(g.b.stride, -7);
  EXPECT_EQ(can_implement(g), "gemm: B row stride -7 is smaller than its 256 columns.");
  EXPECT_EQ(Tensor::matrix(fake_ptr(1), DType::kBFloat16, 128, 256).stride, 256) << "-1: contiguous";
  g = gemm_args(256, 256, 128);
  g.c.rows = -3;
  EXPECT_EQ(can_implement(g), "gemm: C has negative shape -3x256.");
  // TMA's strides must stay below 2^40 bytes: the row pitch, and the whole view (its batch stride).
  g = gemm_args(2, 256, 64);
  g.a = Tensor::matrix(fake_ptr(0), DType::kBFloat16, 2, 64, int64_t{1} << 40);
  EXPECT_EQ(can_implement(g),
            "gemm: A is 2 rows of 2199023255552 bytes: TMA describes a tensor by strides below 2^40 bytes (1 TiB), its "
            "row pitch and its whole extent; split the call into smaller ones.");
  g = gemm_args(int64_t{1} << 21, 256, 64);
  g.a = Tensor::matrix(fake_ptr(0), DType::kBFloat16, int64_t{1} << 21, 64, int64_t{1} << 19);
  EXPECT_EQ(can_implement(g),
            "gemm: A is 2097152 rows of 1048576 bytes: TMA describes a tensor by strides below 2^40 bytes (1 TiB), its "
            "row pitch and its whole extent; split the call into smaller ones.");
  g.a = Tensor::matrix(fake_ptr(0), DType::kBFloat16, int64_t{1} << 21, 64, int64_t{1} << 18);
  EXPECT_EQ(can_implement(g),
            "gemm: A is 2097152 rows of 524288 bytes: TMA describes a tensor by strides below 2^40 bytes (1 TiB), its "
            "row pitch and its whole extent; split the call into smaller ones.")
      << "exactly 2^40 bytes";
  g.a = Tensor::matrix(fake_ptr(64), DType::kBFloat16, int64_t{1} << 21, 64, (int64_t{1} << 18) - 8);  // past B, C
  EXPECT_EQ(can_implement(g), "") << "just under 2^40 bytes";
}

// A preamble that would re-allocate the GEMM's buffer of a workspace whose call a CUDA graph captured
// raises instead of freeing it under the graph's replays (before any CUDA call: no device needed).
TEST(OpsFusedWorkspace, ACapturedWorkspaceIsNotReallocatedUnderItsGraph) {
  FusedWorkspace ws;
  EXPECT_FALSE(ws.captured());
  EXPECT_NO_THROW(ws.reserve_gemm_workspace(0, "matmul_all_reduce_preamble"));
  ws.mark_captured();
  EXPECT_TRUE(ws.captured());
  EXPECT_NO_THROW(ws.reserve_gemm_workspace(0, "matmul_all_reduce_preamble")) << "no growth, nothing freed";
  EXPECT_EQ(error_of([&] { ws.reserve_gemm_workspace(1 << 20, "matmul_all_reduce_preamble"); }),
            "matmul_all_reduce_preamble: these operands need a larger GEMM split-K workspace than this one holds, but "
            "a call with this workspace was captured in a CUDA graph, whose replays would keep using the buffer a "
            "re-allocation frees; give each captured shape a workspace of its own (or release() this one first).");
  EXPECT_EQ(ws.gemm_workspace(), nullptr);
  FusedWorkspace moved(std::move(ws));
  EXPECT_TRUE(moved.captured()) << "moves carry it";
  FakeWorkspaceHost host;
  moved.release(host);
  EXPECT_FALSE(moved.captured()) << "release() frees every buffer: nothing of the graph's is left to protect";
}

// A release() that frees nothing (here: arrays of another heap, as when ranks are out of step) leaves the
// workspace as it was, captured() included: the graph may still run on its buffers, so growing them stays
// refused. Before 2026-12-06 it cleared captured() and freed the split-K buffer anyway.
TEST(OpsFusedWorkspace, AReleaseThatFreesNothingKeepsTheCapturedMark) {
  FakeWorkspaceHost prepared_with;
  FakeWorkspaceHost other;
  FusedWorkspace ws;
  ccl::WorkspaceNeeds needs;
  needs.locks = 64;
  needs.block_state = 14;
  ws.reserve(prepared_with, needs);
  const int live = prepared_with.live;
  ws.mark_captured();
  EXPECT_EQ(
      error_of([&] { ws.release(other); }).rfind("release: the workspace's arrays are not on this context's heap", 0),
      0u);
  EXPECT_TRUE(ws.captured());
  EXPECT_NE(ws.any_array(), nullptr);
  EXPECT_EQ(prepared_with.live, live);
  EXPECT_EQ(error_of([&] {
              ws.reserve_gemm_workspace(1 << 20, "matmul_all_reduce_preamble");
            }).rfind("matmul_all_reduce_preamble: these operands need a larger GEMM split-K workspace", 0),
            0u);
  ws.release(prepared_with);
  EXPECT_FALSE(ws.captured());
  EXPECT_EQ(prepared_with.live, 0);
}

// The fusion threshold: a call whose bands would have fewer than min_band_tiles tiles (default: half
// the SMs, 66 on 132) runs unfused, its GEMM then the iris::ccl collective; never with one rank.
TEST(OpsFusedPlan, UnfusedBelowTheThreshold) {
  // 128 x 8192 outputs in 128x128 tiles: 64 tiles in all, under 66 even as one band.
  const auto small = operands(128, 8192, 512, 128);
  for (auto v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kOneShot,
                 AllReduceVariant::kTwoShot}) {
    SCOPED_TRACE(ccl::variant_name(v));
    EXPECT_TRUE(plan_matmul_all_reduce(small, blocks(128, 128, v), 2, kSms).unfused);
    EXPECT_FALSE(plan_matmul_all_reduce(small, blocks(128, 128, v), 1, kSms).unfused) << "one rank: the GEMM alone";
    // A lower threshold pipelines 256 rows (atomic and spinlock band whole tile rows: they need two).
    FusedConfig low = blocks(128, 128, v);
    low.min_band_tiles = 8;
    EXPECT_FALSE(plan_matmul_all_reduce(operands(256, 8192, 512, 256), low, 2, kSms).unfused);
    // 1024 x 8192: two_shot's bands of 512 rows hold 256 tiles; one_shot's 4 bands 128 each.
    EXPECT_FALSE(plan_matmul_all_reduce(operands(1024, 8192, 512, 1024), blocks(128, 128, v), 2, kSms).unfused);
  }
  EXPECT_EQ(plan_matmul_all_reduce(small, blocks(128, 128), 2, kSms).min_band_tiles, 66);
  // matmul_reduce_scatter at 256 rows: each rank's band of 128 rows has 64 tiles.
  EXPECT_TRUE(plan_matmul_reduce_scatter(operands(256, 8192, 512, 128), blocks(128, 128), 2, kSms).unfused);
  EXPECT_FALSE(plan_matmul_reduce_scatter(operands(512, 8192, 512, 256), blocks(128, 128), 2, kSms).unfused);
  // The gathering ops: by this rank's rows (128 of 256 -> 64 tiles).
  EXPECT_TRUE(plan_all_gather_matmul(operands(128, 8192, 512, 256), blocks(128, 128), 2, kSms).unfused);
  EXPECT_TRUE(plan_matmul_all_gather(operands(128, 8192, 512, 256), blocks(128, 128), 2, kSms).unfused);
  EXPECT_FALSE(plan_all_gather_matmul(operands(256, 8192, 512, 512), blocks(128, 128), 2, kSms).unfused);
  // matmul_all_gather cuts bands of whole tile rows: 512 rows of 8192 in 128x128 tiles are 4 tile rows
  // of 64 tiles, so 4 or 3 bands would have a 64-tile band (< 66): 2 bands of 128 tiles.
  EXPECT_FALSE(plan_matmul_all_gather(operands(512, 8192, 512, 1024), blocks(128, 128), 2, kSms).unfused);
  // all_gather_matmul_k_sharded has no iris::ccl collective to fall back on (none gathers columns): never
  // unfused, and its plan holds no collective.
  const FusedPlan ks = plan_all_gather_matmul_k_sharded(
      operands(128, 8192, 256, 128, DType::kBFloat16, DType::kBFloat16, /*b_is_nk=*/false, /*b_k=*/512),
      blocks(128, 128), 2, kSms);
  EXPECT_FALSE(ks.unfused);
  EXPECT_EQ(ks.collective.flags + ks.collective.staging_bytes + ks.collective.locks, 0u);
}

// The threshold counts a band's tiles of work (rows x cols over the tile's, rounded up), not the tiles it
// touches. Before 2026-12-05 a band of 1 to 32 rows in the 64x64 tiles that decode outputs pick touched a
// whole tile row (128 tiles at N = 8192) and passed the threshold that 128 rows (bands of 64 rows in
// 64x128 tiles, 64 tiles) did not: matmul_all_reduce two_shot, matmul_reduce_scatter and all_gather_matmul
// ran decode shapes as W band GEMMs that each read all of B, where the unfused path's GEMM reads it once.
TEST(OpsFusedPlan, DecodeBandsCountTheirRowsNotTheTilesTheyTouch) {
  const FusedConfig defaults;
  for (int w : {2, 4, 8}) {
    for (int64_t m : {1, 2, 8, 16, 32, 64}) {
      SCOPED_TRACE(testing::Message() << "W " << w << ", M " << m);
      const FusedPlan ar = plan_matmul_all_reduce(operands(m, 8192, 4096, m), defaults, w, kSms);
      EXPECT_EQ(ar.tile, kGemmTileTiny);  // the fused tile of outputs of at most 64 rows here
      EXPECT_TRUE(ar.unfused);
      // Each rank keeps m rows of the W m x 8192 sum; each gathers W blocks of m rows.
      EXPECT_TRUE(plan_matmul_reduce_scatter(operands(m * w, 8192, 4096, m), defaults, w, kSms).unfused);
      EXPECT_TRUE(plan_all_gather_matmul(operands(m, 8192, 4096, m * w), defaults, w, kSms).unfused);
      EXPECT_TRUE(plan_matmul_all_gather(operands(m, 8192, 4096, m * w), defaults, w, kSms).unfused);
    }
  }
  // The count, at its edge: two_shot's band of ceil(M / 2) rows in 64x64 tiles at N = 8192 is
  // ceil(rows / 64 x 128) tiles of work, against the H200's 66.
  const FusedConfig tiny = blocks(64, 64);
  EXPECT_TRUE(plan_matmul_all_reduce(operands(64, 8192, 512, 64), tiny, 2, kSms).unfused);   // 32 rows: 64
  EXPECT_FALSE(plan_matmul_all_reduce(operands(65, 8192, 512, 65), tiny, 2, kSms).unfused);  // 33 rows: 66
  // Whole tile rows count as before: bands of 64 rows at N = 16384 in 64x128 tiles, 128 tiles each.
  EXPECT_FALSE(plan_matmul_all_reduce(operands(128, 16384, 512, 128), blocks(64, 128), 2, kSms).unfused);
  // The ops that cut bands of whole tile rows (matmul_all_gather, one_shot, atomic, spinlock) count each band
  // by its rows too: 129 rows in 128x128 tiles would be a band of 128 rows and one of a single row.
  const FusedConfig big = blocks(128, 128);
  EXPECT_TRUE(plan_matmul_all_gather(operands(129, 16384, 512, 258), big, 2, kSms).unfused);
  EXPECT_TRUE(
      plan_matmul_all_reduce(operands(129, 16384, 512, 129), blocks(128, 128, AllReduceVariant::kOneShot), 2, kSms)
          .unfused);
  EXPECT_FALSE(plan_matmul_all_gather(operands(257, 16384, 512, 514), big, 2, kSms).unfused);  // 128 + 129 rows
  // A threshold of 1 (the GPU tests' band pipeline at any size) still bands a one-row band.
  EXPECT_FALSE(plan_matmul_all_reduce(operands(1, 64, 512, 1), banded(64, 64), 2, kSms).unfused);
  EXPECT_FALSE(plan_all_gather_matmul(operands(1, 64, 512, 2), banded(64, 64), 2, kSms).unfused);
}

// The band pipeline's arrays (UnfusedStagesOnlyWhatItsPathUses below for the calls under the threshold).
TEST(OpsFusedPlan, NeedsByOpAndVariant) {
  const int w = 2;
  // matmul_all_reduce: C 512 x 256 bf16, 128x128 blocks: T = 8.
  auto mar = [&](AllReduceVariant v) {
    return plan_matmul_all_reduce(operands(512, 256, 128, 512), banded(128, 128, v), w, kSms).needs;
  };
  // atomic, spinlock: ready by source + arrivals by (tile, source) + done by tile, then atomic's
  // accumulators-zeroed words by owner or spinlock's first-writer marks by tile; each rank owns 4 of the 8
  // tiles: 4 float32 accumulators, then 4 bf16 results.
  EXPECT_EQ(mar(AllReduceVariant::kAtomic).flags, 2u + 2 * 8 + 8 + 2);
  EXPECT_EQ(mar(AllReduceVariant::kSpinlock).flags, 2u + 2 * 8 + 8 + 8);
  for (auto v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock}) {
    EXPECT_EQ(mar(v).locks, 8u);
    EXPECT_EQ(mar(v).staging_bytes, 4u * 128 * 128 * 4 + 4u * 128 * 128 * 2);
  }
  // Three ranks own ceil(8 / 3) = 3 tiles each (rank 2 one fewer; the arrays are sized alike).
  const auto three =
      plan_matmul_all_reduce(operands(512, 256, 128, 512), banded(128, 128, AllReduceVariant::kAtomic), 3, kSms).needs;
  EXPECT_EQ(three.flags, 3u + 3 * 8 + 8 + 3);
  EXPECT_EQ(three.staging_bytes, 3u * 128 * 128 * 4 + 3u * 128 * 128 * 2);
  // one_shot: ready by source + data by (source, band of 4); one 512 x 256 slot per rank.
  EXPECT_EQ(mar(AllReduceVariant::kOneShot).flags, 2u + 2 * 4);
  EXPECT_EQ(mar(AllReduceVariant::kOneShot).staging_bytes, 2u * 512 * 256 * 2);
  // two_shot: ready by source, data by (ring step, sub-band of 2), gathered by (source, sub-band of 2);
  // 3W - 2 bands of 256 x 256 (W - 1 sent sums, W - 1 received, W gather slots).
  EXPECT_EQ(mar(AllReduceVariant::kTwoShot).flags, 2u + 1 * 2 + 2 * 2);
  EXPECT_EQ(mar(AllReduceVariant::kTwoShot).staging_bytes, 4u * 256 * 256 * 2);
  const auto two_shot3 =
      plan_matmul_all_reduce(operands(512, 256, 128, 512), banded(128, 128, AllReduceVariant::kTwoShot), 3, kSms).needs;
  EXPECT_EQ(two_shot3.flags, 3u + 2 * 2 + 3 * 2);
  EXPECT_EQ(two_shot3.staging_bytes, 7u * 171 * 256 * 2) << "bands of ceil(512 / 3) = 171 rows";
  for (auto v : {AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot}) EXPECT_EQ(mar(v).locks, 8u);
  // matmul_reduce_scatter: A 512 x 128 per rank, C 256 x 256 per rank; GEMM tiles over 512 x 256.
  auto p = plan_matmul_reduce_scatter(operands(512, 256, 128, 256), banded(128, 128), w, kSms);
  EXPECT_EQ(p.sig.op, OpKind::kMatmulReduceScatter);
  EXPECT_EQ(p.sig.rows, 512);
  EXPECT_EQ(p.tiles, 8);
  EXPECT_EQ(p.needs.locks, 8u);
  EXPECT_EQ(p.needs.flags, 2u + 1 * 2) << "ready by source rank, data by (ring step, sub-band of 2)";
  EXPECT_EQ(p.needs.staging_bytes, 2u * 256 * 256 * 2) << "W - 1 sent and W - 1 received sums of 256 x 256";
  p = plan_matmul_reduce_scatter(operands(768, 256, 128, 256), banded(128, 128), 3, kSms);
  EXPECT_EQ(p.needs.flags, 3u + 2 * 2);
  EXPECT_EQ(p.needs.staging_bytes, 4u * 256 * 256 * 2);
  // all_gather_matmul: A 100 x 64 per rank gathered to 200 x 64, C 200 x 256 fp32; A crosses ranks.
  p = plan_all_gather_matmul(operands(100, 256, 64, 200, DType::kFloat16, DType::kFloat32), banded(64, 128), w, kSms);
  EXPECT_EQ(p.sig.op, OpKind::kAllGatherMatmul);
  EXPECT_EQ(p.sig.dtype, DType::kFloat16);
  EXPECT_EQ(p.sig.rows, 200);
  EXPECT_EQ(p.tiles, 4 * 2);
  EXPECT_EQ(p.needs.flags, 2u * 2) << "ready and data by source rank";
  EXPECT_EQ(p.needs.staging_bytes, 200u * 64 * 2) << "the gathered 200 x 64 fp16 A";
  // matmul_all_gather: A 100 x 64 per rank; each GEMM computes 100 x 256, C is 200 x 256.
  p = plan_matmul_all_gather(operands(100, 256, 64, 200), banded(64, 128), w, kSms);
  EXPECT_EQ(p.sig.op, OpKind::kMatmulAllGather);
  EXPECT_EQ(p.sig.rows, 200);
  EXPECT_EQ(p.tiles, 2 * 2);
  EXPECT_EQ(p.needs.locks, 4u);
  EXPECT_EQ(p.needs.flags, 2u * (1 + 4)) << "ready by source, data by (source, band of 4)";
  EXPECT_EQ(p.needs.staging_bytes, 200u * 256 * 2) << "one 100 x 256 slot per rank";
  // all_gather_matmul_k_sharded: A 100 x 64 per rank (columns of a 100 x 128 A), B 128 x 256 (nk: 256 x
  // 128), C 100 x 256 fp32 on every rank; A crosses ranks, gathered into 100 x 128.
  for (bool nk : {false, true}) {
    p = plan_all_gather_matmul_k_sharded(operands(100, 256, 64, 100, DType::kFloat16, DType::kFloat32, nk, 128),
                                         banded(64, 128), w, kSms);
    EXPECT_EQ(p.sig.op, OpKind::kAllGatherMatmulKSharded);
    EXPECT_EQ(p.sig.dtype, DType::kFloat16);
    EXPECT_EQ(p.sig.rows, 100);
    EXPECT_EQ(p.sig.cols, 256);
    EXPECT_EQ(p.sig.depth, 64) << "this rank's K";
    EXPECT_EQ(p.tiles, 2 * 2);
    EXPECT_EQ(p.needs.locks, 4u);
    EXPECT_EQ(p.needs.flags, 2u * (1 + 4)) << "ready by source, data by (source, band of 4)";
    EXPECT_EQ(p.needs.staging_bytes, 100u * 128 * 2) << "the gathered 100 x 128 fp16 A (whole 256-byte units)";
  }
  // Four ranks: a 4 x 64 = 256-deep B.
  p = plan_all_gather_matmul_k_sharded(operands(100, 256, 64, 100, DType::kBFloat16, DType::kBFloat16, false, 256),
                                       banded(64, 128), 4, kSms);
  EXPECT_EQ(p.needs.flags, 4u * (1 + 4));
  EXPECT_EQ(p.needs.staging_bytes, 100u * 256 * 2);
}

// One rank runs its GEMM alone: no op stages anything (before 2026-12-03 matmul_all_reduce atomic sized
// float32 accumulators and results, 6 bytes per element of C, that one rank never touched). Locks and
// flags keep their sizes, so the capacity refusals are those of any world size.
TEST(OpsFusedPlan, OneRankNeedsNoStaging) {
  const auto ops = operands(512, 256, 128, 512);
  for (auto v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kOneShot,
                 AllReduceVariant::kTwoShot}) {
    SCOPED_TRACE(ccl::variant_name(v));
    const auto one = plan_matmul_all_reduce(ops, banded(128, 128, v), 1, kSms).needs;
    const auto two = plan_matmul_all_reduce(ops, banded(128, 128, v), 2, kSms).needs;
    EXPECT_EQ(one.staging_bytes, 0u);
    EXPECT_GT(two.staging_bytes, 0u);
    EXPECT_EQ(one.locks, two.locks);
    EXPECT_GT(one.flags, 0u);
  }
  EXPECT_EQ(plan_all_gather_matmul(operands(100, 256, 64, 100), banded(64, 128), 1, kSms).needs.staging_bytes, 0u);
  EXPECT_EQ(plan_matmul_all_gather(operands(100, 256, 64, 100), banded(64, 128), 1, kSms).needs.staging_bytes, 0u);
  EXPECT_EQ(plan_all_gather_matmul_k_sharded(operands(100, 256, 64, 100, DType::kBFloat16, DType::kBFloat16, false, 64),
                                             banded(64, 128), 1, kSms)
                .needs.staging_bytes,
            0u);
}

// Unfused, a call also holds the iris::ccl collective's workspace: the plan sizes it as iris::ccl does
// for the collective the op runs (all_reduce in place on C, reduce_scatter of the M x N product, all_gather
// of A or of C's rows), and heap_bytes counts both; fused, or with one rank, there is no collective.
TEST(OpsFusedPlan, HeapBytesCountTheUnfusedCollective) {
  const int w = 2;
  const ccl::Config auto_config;
  auto expect_needs = [](const ccl::WorkspaceNeeds& got, const ccl::WorkspaceNeeds& want, const char* what) {
    EXPECT_EQ(got.locks, want.locks) << what;
    EXPECT_EQ(got.flags, want.flags) << what;
    EXPECT_EQ(got.staging_bytes, want.staging_bytes) << what;
    EXPECT_EQ(got.block_state, want.block_state) << what;
  };
  auto expect_heap = [](const FusedPlan& p) {
    EXPECT_EQ(heap_bytes(p), ccl::heap_bytes(p.needs) + ccl::heap_bytes(p.collective));
    EXPECT_EQ(heap_bytes(p, 256), ccl::heap_bytes(p.needs, 256) + ccl::heap_bytes(p.collective, 256));
    EXPECT_GT(heap_bytes(p), ccl::heap_bytes(p.needs)) << "the collective takes heap too";
  };
  // matmul_all_reduce, 128 x 8192 (64 tiles of 128x128: unfused): all_reduce in place on C.
  const auto mar = operands(128, 8192, 512, 128);
  const FusedPlan p_mar = plan_matmul_all_reduce(mar, blocks(128, 128), w, kSms);
  ASSERT_TRUE(p_mar.unfused);
  expect_needs(p_mar.collective, ccl::all_reduce_needs(mar.c, mar.c, auto_config, w), "matmul_all_reduce");
  expect_heap(p_mar);
  // matmul_reduce_scatter, 256 x 8192: reduce_scatter of the 256 x 8192 product into C (128 x 8192).
  const auto mrs = operands(256, 8192, 512, 128);
  const FusedPlan p_mrs = plan_matmul_reduce_scatter(mrs, blocks(128, 128), w, kSms);
  ASSERT_TRUE(p_mrs.unfused);
  expect_needs(p_mrs.collective,
               ccl::reduce_scatter_needs(mrs.c, Tensor::matrix(nullptr, DType::kBFloat16, 256, 8192), auto_config, w),
               "matmul_reduce_scatter");
  expect_heap(p_mrs);
  // all_gather_matmul, 128 rows of A per rank: all_gather of A (128 x 512) into 256 x 512.
  const auto agm = operands(128, 8192, 512, 256);
  const FusedPlan p_agm = plan_all_gather_matmul(agm, blocks(128, 128), w, kSms);
  ASSERT_TRUE(p_agm.unfused);
  expect_needs(p_agm.collective,
               ccl::all_gather_needs(Tensor::matrix(nullptr, DType::kBFloat16, 256, 512), agm.a, auto_config, w),
               "all_gather_matmul");
  expect_heap(p_agm);
  // matmul_all_gather, 128 rows per rank: all_gather of this rank's 128 rows of C into C, in place.
  const auto mag = operands(128, 8192, 512, 256);
  const FusedPlan p_mag = plan_matmul_all_gather(mag, blocks(128, 128), w, kSms);
  ASSERT_TRUE(p_mag.unfused);
  expect_needs(p_mag.collective,
               ccl::all_gather_needs(mag.c, Tensor::matrix(nullptr, DType::kBFloat16, 128, 8192), auto_config, w),
               "matmul_all_gather");
  expect_heap(p_mag);
  // The band pipeline (a lower threshold) and one rank hold no collective.
  FusedConfig low = blocks(128, 128);
  low.min_band_tiles = 8;
  const FusedPlan fused = plan_matmul_all_reduce(operands(256, 8192, 512, 256), low, w, kSms);
  ASSERT_FALSE(fused.unfused);
  expect_needs(fused.collective, ccl::WorkspaceNeeds{}, "fused");
  EXPECT_EQ(heap_bytes(fused), ccl::heap_bytes(fused.needs));
  const FusedPlan one = plan_matmul_all_reduce(mar, blocks(128, 128), 1, kSms);
  expect_needs(one.collective, ccl::WorkspaceNeeds{}, "one rank");
  EXPECT_EQ(heap_bytes(one), ccl::heap_bytes(one.needs));
}

// Unfused, the ops whose collective runs in place on C stage nothing of their own. Before 2026-12-05 they
// kept the band pipeline's size, which the call never touched: W copies of C for matmul_all_reduce
// one_shot. matmul_reduce_scatter and all_gather_matmul keep the band pipeline's staging, which holds
// their unfused path's M x N product or gathered A (a workspace's arrays never grow, so a smaller size
// would refuse the banded call of the same shape). Locks and flags keep their sizes.
TEST(OpsFusedPlan, UnfusedStagesOnlyWhatItsPathUses) {
  // matmul_all_reduce, 128 x 8192 in 128x128 tiles (64 tiles): unfused in every variant, at 2 and 4 ranks.
  const auto mar = operands(128, 8192, 512, 128);
  for (int w : {2, 4}) {
    for (auto v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kOneShot,
                   AllReduceVariant::kTwoShot}) {
      SCOPED_TRACE(testing::Message() << ccl::variant_name(v) << ", " << w << " ranks");
      const FusedPlan p = plan_matmul_all_reduce(mar, blocks(128, 128, v), w, kSms);
      ASSERT_TRUE(p.unfused);
      EXPECT_EQ(p.needs.staging_bytes, 0u) << "all_reduce in place on C";
      EXPECT_EQ(p.needs.locks, 64u);
      // Two tile rows through the band pipeline do stage (one tile row cannot be banded).
      const FusedPlan fused = plan_matmul_all_reduce(operands(256, 8192, 512, 256), banded(128, 128, v), w, kSms);
      ASSERT_FALSE(fused.unfused);
      EXPECT_GT(fused.needs.staging_bytes, 0u);
    }
  }
  const FusedPlan one_shot4 = plan_matmul_all_reduce(mar, blocks(128, 128, AllReduceVariant::kOneShot), 4, kSms);
  EXPECT_EQ(one_shot4.needs.flags, 4u + 4 * 4) << "the band pipeline's flags, as fused";
  // matmul_reduce_scatter at 4 ranks: 512 x 8192 product, 128 rows each (64 tiles: unfused). The band
  // pipeline's 2(W-1) = 6 bands of 128 x 8192, as banded, which hold the 512 x 8192 product.
  const auto mrs = operands(512, 8192, 512, 128);
  const FusedPlan mrs4 = plan_matmul_reduce_scatter(mrs, blocks(128, 128), 4, kSms);
  ASSERT_TRUE(mrs4.unfused);
  EXPECT_EQ(mrs4.needs.staging_bytes, 6u * 128 * 8192 * 2);
  EXPECT_EQ(mrs4.needs.staging_bytes, plan_matmul_reduce_scatter(mrs, banded(128, 128), 4, kSms).needs.staging_bytes);
  EXPECT_GE(mrs4.needs.staging_bytes, 512u * 8192 * 2) << "the M x N product, C's type";
  EXPECT_EQ(mrs4.needs.flags, 4u + 3 * 2);
  // all_gather_matmul, 128 rows of A (128 x 512, fp16) per rank: the gathered A, as fused.
  const FusedPlan agm = plan_all_gather_matmul(operands(128, 8192, 512, 512, DType::kFloat16, DType::kFloat32),
                                               blocks(128, 128), 4, kSms);
  ASSERT_TRUE(agm.unfused);
  EXPECT_EQ(agm.needs.staging_bytes, 512u * 512 * 2) << "the gathered 512 x 512 fp16 A";
  // matmul_all_gather, 128 rows per rank: gathered in place on C.
  const FusedPlan mag = plan_matmul_all_gather(operands(128, 8192, 512, 256), blocks(128, 128), 2, kSms);
  ASSERT_TRUE(mag.unfused);
  EXPECT_EQ(mag.needs.staging_bytes, 0u) << "all_gather in place on C";
  EXPECT_EQ(mag.needs.flags, 2u * (1 + 4));
}

TEST(OpsFusedPlan, OpShapesAreChecked) {
  EXPECT_EQ(error_of([&] { plan_matmul_all_reduce(operands(512, 256, 128, 256), FusedConfig{}, 2, kSms); }),
            "matmul_all_reduce: C is 256x256 but must be 512x256 (M x N, M = the rows of A).");
  EXPECT_EQ(error_of([&] { plan_matmul_reduce_scatter(operands(510, 256, 128, 255), FusedConfig{}, 4, kSms); }),
            "matmul_reduce_scatter: M = 510 (the rows of A) is not a multiple of the world size 4; each rank receives "
            "M / world_size rows.");
  EXPECT_EQ(error_of([&] { plan_matmul_reduce_scatter(operands(512, 256, 128, 512), FusedConfig{}, 2, kSms); }),
            "matmul_reduce_scatter: C is 512x256 but must be 256x256 (M / world_size x N: rank r receives rows "
            "[r*256, (r+1)*256) of the 512x256 product).");
  EXPECT_EQ(error_of([&] { plan_all_gather_matmul(operands(100, 256, 64, 100), FusedConfig{}, 2, kSms); }),
            "all_gather_matmul: C is 100x256 but must be 200x256 (world_size * M_rank x N: the gathered rows of every "
            "rank's 100-row A).");
  EXPECT_EQ(error_of([&] { plan_matmul_all_gather(operands(100, 256, 64, 100), FusedConfig{}, 2, kSms); }),
            "matmul_all_gather: C is 100x256 but must be 200x256 (world_size * M_rank x N: every rank's 100 rows of A "
            "@ B, by rank).");
  EXPECT_EQ(error_of([&] {
              plan_all_gather_matmul_k_sharded(
                  operands(100, 256, 64, 200, DType::kBFloat16, DType::kBFloat16, false, 128), FusedConfig{}, 2, kSms);
            }),
            "all_gather_matmul_k_sharded: C is 200x256 but must be 100x256 (M x N, M = the rows of A).");
  // B holds the whole K: W times A's columns.
  EXPECT_EQ(error_of([&] { plan_all_gather_matmul_k_sharded(operands(100, 256, 64, 100), FusedConfig{}, 2, kSms); }),
            "all_gather_matmul_k_sharded: A is 100x64 (this rank's 64 columns of the gathered 100x128 A) but B is "
            "64x256 (stored K x N); B's K must be 2 x 64 = 128.");
  EXPECT_EQ(error_of([&] {
              plan_all_gather_matmul_k_sharded(
                  operands(100, 256, 64, 100, DType::kBFloat16, DType::kBFloat16, true, 64), FusedConfig{}, 4, kSms);
            }),
            "all_gather_matmul_k_sharded: A is 100x64 (this rank's 64 columns of the gathered 100x256 A) but B is "
            "256x64 (stored N x K); B's K must be 4 x 64 = 256.");
  // Each rank's columns start 16-byte aligned in the gathered A: its K is a multiple of 8.
  EXPECT_EQ(
      error_of([&] {
        plan_all_gather_matmul_k_sharded(operands(100, 256, 36, 100, DType::kBFloat16, DType::kBFloat16, false, 72),
                                         FusedConfig{}, 2, kSms);
      }),
      "all_gather_matmul_k_sharded: K = 36 is not a multiple of 8: TMA needs 16-byte aligned rows, so K must be a "
      "multiple of 8 for 16-bit inputs.");
  // GEMM operand rules, named after the op.
  EXPECT_EQ(error_of([&] { plan_matmul_reduce_scatter(operands(512, 256, 100, 256), FusedConfig{}, 2, kSms); }),
            "matmul_reduce_scatter: K = 100 is not a multiple of 8: TMA needs 16-byte aligned rows, so K must be a "
            "multiple of 8 for 16-bit inputs.");
  EXPECT_EQ(error_of([&] {
              plan_all_gather_matmul(operands(100, 256, 64, 200, DType::kFloat32, DType::kFloat32), FusedConfig{}, 2,
                                     kSms);
            }),
            "all_gather_matmul: A is float32; the GEMM core takes bfloat16 or float16 inputs.");
  // The config first.
  EXPECT_EQ(error_of([&] { plan_matmul_all_gather(operands(100, 256, 64, 100), blocks(0, 128), 2, kSms); }),
            "block_size_m must be positive, got 0 (or leave block_size_m, block_size_n and block_size_k all 0 for the "
            "tile chosen by shape)");
}

// With the default config each op runs the tile select_fused_tile advises for its rank's GEMM, whose M
// and K depend on the op: all_gather_matmul's GEMM has the gathered rows (W times A's), matmul_all_gather's
// A's own rows, all_gather_matmul_k_sharded's the gathered K (W times A's columns).
TEST(OpsFusedPlan, DefaultTileIsTheFusedTileOfEachRanksGemm) {
  const int w = 2;
  struct Case {
    const char* op;
    FusedPlan plan;
    int64_t m, n, k;
  };
  const Case cases[] = {
      {"matmul_all_reduce", plan_matmul_all_reduce(operands(8192, 8192, 4096, 8192), FusedConfig{}, w, kSms), 8192,
       8192, 4096},
      {"matmul_reduce_scatter", plan_matmul_reduce_scatter(operands(8192, 8192, 4096, 4096), FusedConfig{}, w, kSms),
       8192, 8192, 4096},
      {"all_gather_matmul", plan_all_gather_matmul(operands(4096, 8192, 8192, 8192), FusedConfig{}, w, kSms), 8192,
       8192, 8192},
      {"matmul_all_gather", plan_matmul_all_gather(operands(4096, 8192, 8192, 8192), FusedConfig{}, w, kSms), 4096,
       8192, 8192},
      {"all_gather_matmul_k_sharded",
       plan_all_gather_matmul_k_sharded(
           operands(8192, 8192, 4096, 8192, DType::kBFloat16, DType::kBFloat16, false, 8192), FusedConfig{}, w, kSms),
       8192, 8192, 8192},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    EXPECT_EQ(c.plan.tile, select_fused_tile(c.m, c.n, c.k, false, kSms));
    EXPECT_EQ(c.plan.sig.block_size_m, c.plan.tile.m);
    EXPECT_EQ(c.plan.sig.block_size_n, c.plan.tile.n);
  }
  // K = 4096: 128x128 for matmul_all_reduce and matmul_reduce_scatter; all_gather_matmul's gathered
  // 8192 x 8192 x 8192: 128x256; matmul_all_gather's 4096 x 8192 output (2^25 elements, not above): the
  // wave rule's 128x128; all_gather_matmul_k_sharded's gathered K = 8192: 128x256.
  EXPECT_EQ(cases[0].plan.tile, kGemmTileSmall);
  EXPECT_EQ(cases[1].plan.tile, kGemmTileSmall);
  EXPECT_EQ(cases[2].plan.tile, kGemmTileLarge);
  EXPECT_EQ(cases[3].plan.tile, kGemmTileSmall);
  EXPECT_EQ(cases[4].plan.tile, kGemmTileLarge);
}

// ---- workspaces: the founding regressions ---------------------------------------------------------

// A workspace prepared with 128x128 blocks for a 512x512 output (16 tiles) must refuse 64x64 blocks
// (64 tiles) in the preamble and at launch: Iris compared no block sizes and the kernel wrote lock
// entries past the array into the next heap object.
TEST(OpsFusedWorkspace, test_matmul_reduce_scatter_lock_too_small) {
  FakeWorkspaceHost host;
  FusedWorkspace ws;
  const auto mm = operands(512, 512, 256, 512);  // world 1: this rank receives all 512 rows
  const auto big = plan_matmul_reduce_scatter(mm, blocks(128, 128), 1, kSms);
  ws.prepare(host, big.sig, big.needs);  // the preamble's collective part, on the fake heap
  EXPECT_EQ(ws.lock_capacity(), 16u);
  for (size_t i = 0; i < ws.lock_capacity(); ++i) ASSERT_EQ(ws.locks()[i], 0u) << "locks start zeroed";
  const int allocs = host.allocs;
  const auto small = plan_matmul_reduce_scatter(mm, blocks(64, 64), 1, kSms);
  EXPECT_EQ(error_of([&] { ws.prepare(host, small.sig, small.needs); }), kLock16Need64);
  EXPECT_EQ(host.allocs, allocs) << "a rejected preamble allocates nothing";
  EXPECT_TRUE(ws.matches(big.sig)) << "and leaves the workspace as it was";
  // The launch-time check, whether or not the preamble ran.
  EXPECT_EQ(error_of([&] { check_fused_workspace(small, ws); }), kLock16Need64);
  EXPECT_NO_THROW(check_fused_workspace(big, ws));
  ws.release(host);
  EXPECT_EQ(host.live, 0);
}

TEST(OpsFusedWorkspace, test_matmul_all_reduce_lock_too_small) {
  for (auto v : {AllReduceVariant::kAtomic, AllReduceVariant::kSpinlock, AllReduceVariant::kOneShot,
                 AllReduceVariant::kTwoShot}) {
    SCOPED_TRACE(ccl::variant_name(v));
    FakeWorkspaceHost host;
    FusedWorkspace ws;
    const auto mm = operands(512, 512, 256, 512);
    const auto big = plan_matmul_all_reduce(mm, blocks(128, 128, v), 1, kSms);
    ws.prepare(host, big.sig, big.needs);
    EXPECT_EQ(ws.lock_capacity(), 16u);
    const auto small = plan_matmul_all_reduce(mm, blocks(64, 64, v), 1, kSms);
    EXPECT_EQ(error_of([&] { ws.prepare(host, small.sig, small.needs); }), kLock16Need64);
    EXPECT_EQ(error_of([&] { check_fused_workspace(small, ws); }), kLock16Need64);
    ws.release(host);
    EXPECT_EQ(host.live, 0);
  }
}

TEST(OpsFusedWorkspace, LockTooSmallForEveryOp) {
  // Outputs of 512x512 tiles in every op (world 1), prepared at 128x128, launched at 64x64.
  using PlanFn = FusedPlan (*)(const MatmulOperands&, const FusedConfig&, int, int);
  for (PlanFn plan : {plan_matmul_all_reduce, plan_matmul_reduce_scatter, plan_all_gather_matmul,
                      plan_matmul_all_gather, plan_all_gather_matmul_k_sharded}) {
    FakeWorkspaceHost host;
    FusedWorkspace ws;
    const auto mm = operands(512, 512, 256, 512);
    const auto big = plan(mm, blocks(128, 128), 1, kSms);
    SCOPED_TRACE(ccl::op_name(big.sig.op));
    ws.prepare(host, big.sig, big.needs);
    const auto small = plan(mm, blocks(64, 64), 1, kSms);
    EXPECT_EQ(error_of([&] { ws.prepare(host, small.sig, small.needs); }), kLock16Need64);
    EXPECT_EQ(error_of([&] { check_fused_workspace(small, ws); }), kLock16Need64);
    ws.release(host);
  }
}

TEST(OpsFusedWorkspace, FlagsTooSmallButTheBlockStateServesAnySplit) {
  FakeWorkspaceHost host;
  FusedWorkspace ws;
  const auto mm = operands(512, 512, 256, 512);
  // Prepared for 132 SMs (GEMM 132 + comm 16 blocks); launched with the same tiles on 200 SMs (200 + 25)
  // and with more comm_sms. The block state is sized by the world size alone (only its epoch word is
  // read): before 2026-12-03 it took 2 words per block and these launches were refused as "too small".
  FusedConfig c = blocks(128, 128);
  const auto p = plan_matmul_reduce_scatter(mm, c, 1, kSms);
  ws.prepare(host, p.sig, p.needs);
  EXPECT_NO_THROW(check_fused_workspace(plan_matmul_reduce_scatter(mm, c, 1, 200), ws));
  FusedConfig more = c;
  more.comm_sms = 64;
  EXPECT_NO_THROW(check_fused_workspace(plan_matmul_reduce_scatter(mm, more, 1, kSms), ws));
  // A variant whose flags outgrow the array, with the locks already large enough.
  ws.release(host);
  const auto atomic = plan_matmul_all_reduce(mm, blocks(128, 128, AllReduceVariant::kAtomic), 1, kSms);
  ws.prepare(host, atomic.sig, atomic.needs);
  EXPECT_EQ(ws.flag_capacity(), 34u) << "1 ready + 16 arrivals + 16 done + 1 zeroed";
  auto one_shot =
      plan_matmul_all_reduce(operands(512, 512, 256, 512), blocks(128, 128, AllReduceVariant::kOneShot), 8, kSms);
  EXPECT_EQ(one_shot.needs.flags, 8u * 5) << "8 ready + 8 x 4 data flags";
  EXPECT_EQ(error_of([&] { ws.check_capacity(one_shot.needs); }),
            "Flags array too small: have 34 but need 40. Pre-allocate workspace with the smallest block sizes you "
            "intend to use.");
  ws.release(host);
  EXPECT_EQ(host.live, 0);
}

TEST(OpsFusedWorkspace, MatchesIsFalseWhenOnlyBlockSizesDiffer) {
  FakeWorkspaceHost host;
  FusedWorkspace ws;
  const auto mm = operands(512, 512, 256, 512);
  const auto p = plan_matmul_all_reduce(mm, blocks(128, 128), 1, kSms);
  EXPECT_FALSE(ws.matches(p.sig)) << "an unprepared workspace matches nothing";
  ws.prepare(host, p.sig, p.needs);
  EXPECT_TRUE(ws.matches(p.sig));
  EXPECT_TRUE(ws.matches(plan_matmul_all_reduce(mm, blocks(128, 128), 1, kSms).sig));
  EXPECT_FALSE(ws.matches(plan_matmul_all_reduce(mm, blocks(64, 128), 1, kSms).sig)) << "block_size_m alone differs";
  EXPECT_FALSE(ws.matches(plan_matmul_all_reduce(mm, blocks(128, 256), 1, kSms).sig)) << "block_size_n alone differs";
  EXPECT_FALSE(ws.matches(plan_matmul_all_reduce(mm, blocks(128, 128, AllReduceVariant::kOneShot), 1, kSms).sig));
  EXPECT_FALSE(ws.matches(plan_matmul_all_reduce(operands(512, 512, 128, 512), blocks(128, 128), 1, kSms).sig))
      << "K alone differs";
  EXPECT_FALSE(ws.matches(plan_matmul_reduce_scatter(mm, blocks(128, 128), 1, kSms).sig)) << "another op";
  ws.release(host);
}

TEST(OpsFusedWorkspace, LargerWorkspaceIsKept) {
  FakeWorkspaceHost host;
  FusedWorkspace ws;
  const auto mm = operands(512, 512, 256, 256);
  const auto small_blocks = plan_matmul_reduce_scatter(mm, blocks(64, 64), 2, kSms);
  ws.prepare(host, small_blocks.sig, small_blocks.needs);
  uint32_t* locks = ws.locks();
  uint64_t* flags = ws.flags();
  void* staging = ws.staging();
  const int allocs = host.allocs;
  const auto big_blocks = plan_matmul_reduce_scatter(mm, blocks(128, 128), 2, kSms);
  ws.prepare(host, big_blocks.sig, big_blocks.needs);
  EXPECT_EQ(host.allocs, allocs) << "nothing reallocated";
  EXPECT_EQ(ws.locks(), locks);
  EXPECT_EQ(ws.flags(), flags);
  EXPECT_EQ(ws.staging(), staging);
  EXPECT_EQ(ws.lock_capacity(), 64u);
  EXPECT_TRUE(ws.matches(big_blocks.sig));
  EXPECT_FALSE(ws.matches(small_blocks.sig));
  EXPECT_NO_THROW(check_fused_workspace(big_blocks, ws));
  EXPECT_NO_THROW(check_fused_workspace(small_blocks, ws)) << "the arrays still hold the 64x64 plan";
  ws.release(host);
  EXPECT_EQ(host.live, 0);
}

// A workspace for calls of several shapes (a server's prefill chunks): the default tile changes with the
// shape, so the largest call's preamble need not size every array. At 2 ranks, matmul_all_reduce of 5120 x
// 8192 (K 8192 a rank) runs 128x256 tiles, 1280 locks; 4096 x 8192 runs 128x128, 2048. Prepared for 5120 rows
// first, the 4096-row preamble is refused; reserved for both plans' needs (iris::ccl::reserve_workspace with
// FusedPlan::needs, fused.hpp), every preamble fits, in any order.
TEST(OpsFusedWorkspace, AWorkspaceReservedForSeveralShapesServesEachInAnyOrder) {
  const FusedConfig defaults;
  const FusedPlan big = plan_matmul_all_reduce(operands(5120, 8192, 8192, 5120), defaults, 2, kSms);
  const FusedPlan mid = plan_matmul_all_reduce(operands(4096, 8192, 8192, 4096), defaults, 2, kSms);
  ASSERT_EQ(big.tile, kGemmTileLarge);
  ASSERT_EQ(mid.tile, kGemmTileSmall);
  EXPECT_EQ(big.needs.locks, 1280u);
  EXPECT_EQ(mid.needs.locks, 2048u);
  {
    FakeWorkspaceHost host;
    FusedWorkspace ws;
    ws.prepare(host, big.sig, big.needs);
    EXPECT_EQ(error_of([&] { ws.prepare(host, mid.sig, mid.needs); }),
              "Lock array too small: have 1280 but need 2048. Pre-allocate workspace with the smallest block sizes "
              "you intend to use.");
    ws.release(host);
  }
  ccl::WorkspaceNeeds most = big.needs;
  most.include(mid.needs);
  for (bool big_first : {true, false}) {
    FakeWorkspaceHost host;
    FusedWorkspace ws;
    ws.reserve(host, most);
    const int allocs = host.allocs;
    for (const FusedPlan* p : big_first ? std::vector{&big, &mid} : std::vector{&mid, &big}) {
      ws.prepare(host, p->sig, p->needs);
      EXPECT_NO_THROW(check_fused_workspace(*p, ws));
    }
    EXPECT_EQ(host.allocs, allocs) << "a preamble allocated";
    ws.release(host);
    EXPECT_EQ(host.live, 0);
  }
}

TEST(OpsFusedWorkspace, LaunchRequiresThisOpsPreamble) {
  FakeWorkspaceHost host;
  FusedWorkspace ws;
  const auto mm = operands(512, 512, 256, 512);
  const auto rs = plan_matmul_reduce_scatter(mm, blocks(128, 128), 1, kSms);
  EXPECT_EQ(error_of([&] { check_fused_workspace(rs, ws); }),
            "matmul_reduce_scatter: the workspace was never prepared; call matmul_reduce_scatter_preamble with the "
            "same arguments and this workspace first (on every rank).");
  const auto ar = plan_matmul_all_reduce(mm, blocks(128, 128), 1, kSms);
  ws.prepare(host, ar.sig, ar.needs);
  EXPECT_EQ(
      error_of([&] { check_fused_workspace(rs, ws); }),
      "matmul_reduce_scatter: the workspace was last prepared for matmul_all_reduce; call "
      "matmul_reduce_scatter_preamble with it first (on every rank), or give matmul_reduce_scatter a workspace of "
      "its own.");
  ws.release(host);
}

// Two ranks (threads on fake hosts) prepare a FusedWorkspace with plan_of(rank): what each raised ("" if
// nothing), and how many arrays each allocated.
struct TwoRanks {
  std::vector<std::string> errors = std::vector<std::string>(2);
  std::vector<int> allocs = std::vector<int>(2, -1);
};
template <typename PlanOf>
TwoRanks prepare_on_two_ranks(PlanOf plan_of) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  TwoRanks out;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeWorkspaceHost host(bootstraps[r]);
      FusedWorkspace ws;
      const FusedPlan p = plan_of(r);
      out.errors[r] = error_of([&] { ws.prepare(host, p.sig, p.needs); });
      out.allocs[r] = host.allocs;
    });
  for (auto& t : threads) t.join();
  return out;
}

// release() frees the fused arrays and the nested collective's only once no kernel of any rank can reach
// them (one wait for its rank's device, then for every rank, for both). A rank whose device failed frees
// everything too, so its peer does not wait for it, and raises the device's error.
TEST(OpsFusedWorkspace, ReleaseOnARankWhoseDeviceFailedStillFreesEverythingWithItsPeer) {
  auto bootstraps = make_thread_bootstraps(2, std::chrono::seconds(10));
  std::string errors[2];
  int live[2] = {-1, -1}, syncs[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeWorkspaceHost host(bootstraps[r]);
      FusedWorkspace ws;
      const FusedPlan p = plan_matmul_reduce_scatter(operands(256, 512, 128, 128), blocks(128, 128), 2, kSms);
      ws.prepare(host, p.sig, p.needs);
      ws.collective().prepare(host, p.sig, p.needs);
      host.device_failed = r == 1;
      try {
        ws.release(host);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      live[r] = host.live;
      syncs[r] = host.device_syncs;
      EXPECT_FALSE(ws.prepared()) << "rank " << r;
      EXPECT_FALSE(ws.collective().prepared()) << "rank " << r;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "fake device: a sticky CUDA error");
  EXPECT_EQ(live[0], 0);
  EXPECT_EQ(live[1], 0);
  EXPECT_EQ(syncs[0], 1) << "one wait for both workspaces";
  EXPECT_EQ(syncs[1], 1);
}

// Two ranks whose plans (plan_of(rank)) have the signatures described by sig0 and sig1: each raises naming
// both, and neither allocates anything.
template <typename PlanOf>
void expect_every_rank_raises(PlanOf plan_of, const std::string& sig0, const std::string& sig1) {
  const auto [errors, allocs] = prepare_on_two_ranks(plan_of);
  const std::string tail = ". Every rank must call with the same shapes and config.";
  EXPECT_EQ(errors[0],
            "Collective parameters differ across ranks: rank 0 has " + sig0 + " but rank 1 has " + sig1 + tail);
  EXPECT_EQ(errors[1],
            "Collective parameters differ across ranks: rank 1 has " + sig1 + " but rank 0 has " + sig0 + tail);
  EXPECT_EQ(allocs[0], 0) << "nothing allocated on a disagreement";
  EXPECT_EQ(allocs[1], 0);
}

TEST(OpsFusedWorkspace, RanksThatDisagreeOnKAllRaiseTogether) {
  expect_every_rank_raises(
      [](int r) {
        return plan_all_gather_matmul(operands(256, 512, r == 0 ? 128 : 64, 512), blocks(128, 128), 2, kSms);
      },
      "all_gather_matmul 512x512 k 128 bfloat16 world 2 blocks 128x128 min_band_tiles 66",
      "all_gather_matmul 512x512 k 64 bfloat16 world 2 blocks 128x128 min_band_tiles 66");
}

// The operand type that does not cross ranks is compared too: ranks with float32 C whose A and B are bf16 on one
// and fp16 on the other (the products cross in float32), and ranks whose gathered A is bf16 but whose C is bf16
// on one and float32 on the other, all raise, naming the types (before 2026-12-07 both passed: a fused-ops
// audit's finding).
TEST(OpsFusedWorkspace, RanksThatDisagreeOnTheOtherOperandTypeAllRaiseTogether) {
  expect_every_rank_raises(
      [](int r) {
        return plan_matmul_all_reduce(
            operands(512, 256, 128, 512, r == 0 ? DType::kBFloat16 : DType::kFloat16, DType::kFloat32),
            blocks(128, 128, AllReduceVariant::kOneShot), 2, kSms);
      },
      "matmul_all_reduce 512x256 k 128 float32 (A and B bfloat16) world 2 variant one_shot blocks 128x128 "
      "min_band_tiles 66",
      "matmul_all_reduce 512x256 k 128 float32 (A and B float16) world 2 variant one_shot blocks 128x128 "
      "min_band_tiles 66");
  expect_every_rank_raises(
      [](int r) {
        return plan_all_gather_matmul(
            operands(256, 512, 128, 512, DType::kBFloat16, r == 0 ? DType::kBFloat16 : DType::kFloat32),
            blocks(128, 128), 2, kSms);
      },
      "all_gather_matmul 512x512 k 128 bfloat16 world 2 blocks 128x128 min_band_tiles 66",
      "all_gather_matmul 512x512 k 128 bfloat16 (C float32) world 2 blocks 128x128 min_band_tiles 66");
}

// The fusion threshold decides whether a call runs the band pipeline or the GEMM then the collective, and
// into how many bands: ranks whose thresholds differ (FusedConfig::min_band_tiles, or the device's SMs it
// resolves from) would take different paths over one workspace and wait for each other into the timeout.
// They disagree in the preamble instead, all of them, naming the field.
TEST(OpsFusedWorkspace, RanksThatDisagreeOnTheFusionThresholdAllRaiseTogether) {
  expect_every_rank_raises(
      [](int r) {
        FusedConfig c = blocks(128, 128);
        c.min_band_tiles = r == 0 ? 1 : 0;  // rank 1: the default, 132 / 2
        return plan_matmul_reduce_scatter(operands(512, 512, 128, 256), c, 2, kSms);
      },
      "matmul_reduce_scatter 512x512 k 128 bfloat16 world 2 blocks 128x128 min_band_tiles 1",
      "matmul_reduce_scatter 512x512 k 128 bfloat16 world 2 blocks 128x128 min_band_tiles 66");
}

// Peers write matmul_all_gather's (and two_shot's) rows straight into a symmetric C at the heap offset of
// their own C: ranks whose C lies at different offsets disagree in the preamble, all of them, before
// anything is allocated, instead of writing into whatever lies at the other offset.
TEST(OpsFusedWorkspace, RanksWithCAtDifferentHeapOffsetsAllRaiseTogether) {
  expect_every_rank_raises(
      [](int r) {
        auto p = plan_matmul_all_gather(operands(128, 512, 128, 256), blocks(128, 128), 2, kSms);
        p.sig.symmetric_output = true;  // as context_plan finds a contiguous C on the heap
        p.sig.output_offset = r == 0 ? 4096 : 1 << 20;
        return p;
      },
      "matmul_all_gather 256x512 k 128 bfloat16 world 2 blocks 128x128 C on the symmetric heap at offset 4096 "
      "min_band_tiles 66",
      "matmul_all_gather 256x512 k 128 bfloat16 world 2 blocks 128x128 C on the symmetric heap at offset 1048576 "
      "min_band_tiles 66");
}

// The bias is part of what ranks agree on: the reducing ops add it once, from rank 0 (one_shot, atomic,
// spinlock, the unfused path) or from each band's owner (two_shot, matmul_reduce_scatter), so a bias passed
// on some ranks only would be added to some rows only, or to none. Ranks that differ all raise.
TEST(OpsFusedWorkspace, RanksThatDisagreeOnTheBiasAllRaiseTogether) {
  auto with_bias = [](MatmulOperands mm, bool bias) {
    mm.bias = bias ? fake_ptr(5) : nullptr;
    return mm;
  };
  const auto p = plan_matmul_all_reduce(with_bias(operands(512, 512, 128, 512), true), blocks(128, 128), 2, kSms);
  EXPECT_TRUE(p.sig.bias);
  EXPECT_FALSE(plan_matmul_all_reduce(operands(512, 512, 128, 512), blocks(128, 128), 2, kSms).sig.bias);
  expect_every_rank_raises(
      [&](int r) {
        return plan_matmul_reduce_scatter(with_bias(operands(512, 512, 128, 256), r == 0), blocks(128, 128), 2, kSms);
      },
      "matmul_reduce_scatter 512x512 k 128 bfloat16 world 2 blocks 128x128 with bias min_band_tiles 66",
      "matmul_reduce_scatter 512x512 k 128 bfloat16 world 2 blocks 128x128 min_band_tiles 66");
}

}  // namespace
}  // namespace iris::ops
