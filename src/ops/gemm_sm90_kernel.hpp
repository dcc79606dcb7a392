// The GEMM core's kernel instantiations, as the dispatcher (gemm_sm90.cu) sees them: no CUTLASS
// types here, so only the instantiation files pay for the CUTLASS headers. Each instantiation (input
// type, output type, B layout, tile) is defined once, in gemm_sm90_<in>_<layout>[_m64|_f32].cu, from
// gemm_sm90_impl.hpp; the dispatcher's table (kSm90Instances in gemm_sm90.cu) lists the complete set,
// and a table entry without its file fails at link time. CMake compiles those files with -DNDEBUG,
// --expt-relaxed-constexpr and sm_90a (CMakeLists.txt).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "iris/core/tensor.hpp"

namespace iris::ops::detail {

// A validated problem: D (M x N) = alpha * A (M x K) @ B + C + bias, row strides in elements; C (the source,
// D's type) is optional: only the kernels kernel_reads_source names, and the _src twins, take one. With splits = S
// > 1, the batched form of split-K: slice s of K (K / S deep, starting at column s K / S of A and at that
// row of B) gives D[s] = alpha * A_s @ B_s, the S outputs packed one after the other (ldd = N, no bias).
struct GemmProblem {
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;  // K x N (ldb = row stride of the K rows) or N x K (ldb = row stride of the N rows)
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  const void* c = nullptr;  // the source, or null (no load of C); not with splits > 1
  int64_t ldc = 0;
  const void* bias = nullptr;
  float alpha = 1.0f;
  int device = 0;
  int sm_count = 0;  // resolved: > 0
  int splits = 1;    // slices of K (K a multiple of 8 splits)
};

// Tile ids: the index into kGemmTiles.
inline constexpr int kTileLarge = 0;   // 128x256x64 cooperative, cluster 2x1
inline constexpr int kTileSmall = 1;   // 128x128x64 ping-pong, cluster 1x2
inline constexpr int kTileSkinny = 2;  // 64x128x64 ping-pong, cluster 1x1
inline constexpr int kTileTiny = 3;    // 64x64x64 ping-pong, cluster 1x1
// Outputs of 16 and 32 rows (decode): C tiles of 16x64 and 32x64, computed with A and B swapped (CUTLASS
// runs C^T = B^T A^T, a 64x16x128 or 64x32x128 tile, so the few rows of A fill wgmma's narrow N and every
// stage of the pipeline carries a 64 x 128 panel of B plus only 16 or 32 rows of A).
inline constexpr int kTileRows16 = 4;
inline constexpr int kTileRows32 = 5;
// Not a tile of its own: kGemmTileSmall's output tiles, computed by a stream-K kernel (128x128x64
// cooperative, cluster 1x1, CUTLASS's stream-K tile scheduler) that splits K across CTAs when the tiles
// are too few to fill the device (GemmArguments::stream_k). 16-bit outputs only.
inline constexpr int kTileSmallStreamK = 6;

// Which instantiations read a source (GemmProblem::c). A kernel with a source operand gives up CUTLASS's
// delayed TMA store and keeps C's stages in shared memory, which cost the 16-bit output of the 128-row
// tiles 1.5-3% at large compute-bound shapes on one H200 (8192 x 8192 x 8192 and 16384 x 4096 x 8192,
// bf16, against cuBLAS in turns: 0.997-1.022x with one, 1.013-1.061x over seven earlier runs without):
// those keep their source-free kernels and have twins with a source (gemm_sm90_<in>_<layout>_src.cu).
// The 64-row tiles (bound by reading B; 64 x 4096 x 8192 and 128 x 8192 x 8192 unchanged within 1%) and
// the float32 outputs take a source in their only kernel; the swapped tiles and stream-K never do.
constexpr bool kernel_reads_source(DType out, int tile) {
  if (tile == kTileRows16 || tile == kTileRows32 || tile == kTileSmallStreamK) return false;
  return out == DType::kFloat32 || tile == kTileSkinny || tile == kTileTiny;
}

template <DType kIn, DType kOut, bool kBIsNK, int kTile, bool kSource = kernel_reads_source(kOut, kTile)>
struct Sm90Gemm {
  static constexpr bool kReadsSource = kSource;
  // Device workspace bytes CUTLASS asks for.
  static size_t workspace_size(const GemmProblem& p);
  // Runs CUTLASS's can_implement, initialize and run; throws iris::Error with CUTLASS's status on failure.
  static void run(const GemmProblem& p, void* workspace, cudaStream_t stream);
  // Registers the instantiation's kernel for loading when a Context is created (core/kernel_modules.hpp).
  static const bool kernel_registered;
};

}  // namespace iris::ops::detail
