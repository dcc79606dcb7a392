// iris::ops GEMM core: one Hopper GEMM (TMA + wgmma, warp-specialized, persistent) built from CUTLASS
// 3.x collectives, shaped like a CUTLASS op: arguments, can_implement with a reason, workspace size, run.
//
//   iris::ops::GemmArguments args;
//   args.a = Tensor::matrix(a, DType::kBFloat16, m, k);        // A: M x K, row-major
//   args.b = Tensor::matrix(w, DType::kBFloat16, n, k);        // B: N x K (weights as layers store them) ...
//   args.b_is_nk = true;                                        // ... or K x N with b_is_nk = false
//   args.c = Tensor::matrix(c, DType::kBFloat16, m, n);        // C: M x N, row-major
//   if (auto why = iris::ops::can_implement(args); !why.empty()) ...
//   void* ws = ... workspace_size(args) bytes of device memory (0, and nullptr will do, unless K is split)
//   iris::ops::gemm(args, workspace, stream);                   // C = alpha * A @ B + bias
//
// Types: A and B are both bfloat16 or both float16; accumulation is float32; C is A's type or float32.
// bias (optional) is a device vector of N elements of C's type, added to every row.
// Layouts: every tensor is a row-major view with a row stride (Tensor::stride, in elements). TMA reads
// and writes whole rows, so each tensor's data must be 16-byte aligned and its row stride a multiple of
// 16 bytes, and the contiguous extents must be multiples of 8 elements: K (the rows of A and, when
// b_is_nk, of B) and N (the rows of B when it is K x N, and of C). M and the tile edges are free:
// CUTLASS predicates partial tiles.
//
// The supported tiles are listed in kGemmTiles (fused ops size their per-tile lock arrays by the tile
// they run with). Every call is asynchronous on `stream`, allocates nothing and is capturable in a
// CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "iris/core/tensor.hpp"

namespace iris::ops {

// A CTA output tile (M x N) and the K depth of one mainloop stage.
struct GemmTile {
  int m = 0;
  int n = 0;
  int k = 0;
  bool operator==(const GemmTile&) const = default;
  bool is_auto() const { return m == 0 && n == 0 && k == 0; }
};

// 128x256x64, warp-specialized cooperative (two consumer warpgroups share a tile), cluster 2x1 (B
// multicast to both CTAs). The large-shape configuration.
inline constexpr GemmTile kGemmTileLarge{128, 256, 64};
// 128x128x64, warp-specialized ping-pong (two consumer warpgroups alternate tiles), cluster 1x2. For
// mid-sized outputs.
inline constexpr GemmTile kGemmTileSmall{128, 128, 64};
// 64x128x64 and 64x64x64, warp-specialized ping-pong, cluster 1x1: for outputs of few rows (decode,
// and the per-rank GEMMs of the fused ops at small M), where 128-row tiles leave most SMs idle and the
// GEMM is bound by reading B.
inline constexpr GemmTile kGemmTileSkinny{64, 128, 64};
inline constexpr GemmTile kGemmTileTiny{64, 64, 64};
// 16x64x128 and 32x64x128 for outputs of at most 16 and 32 rows (decode): A and B swapped (the kernel
// computes C^T = B^T A^T with a 64x16 or 64x32 wgmma tile), so no MMA or shared memory is spent on rows
// that do not exist; 128 deep, as fewer and larger stages of B stream it faster.
inline constexpr GemmTile kGemmTileRows16{16, 64, 128};
inline constexpr GemmTile kGemmTileRows32{32, 64, 128};
// Every tile a GEMM may run with, each for every input and output type.
inline constexpr std::array<GemmTile, 6> kGemmTiles{kGemmTileLarge, kGemmTileSmall,  kGemmTileSkinny,
                                                    kGemmTileTiny,  kGemmTileRows16, kGemmTileRows32};

// The SM count the automatic choice assumes where neither GemmArguments::sm_count nor a device says
// otherwise: H100 SXM and H200.
inline constexpr int kGemmDefaultSmCount = 132;

// The tile an automatic choice (GemmArguments::tile left at {0, 0, 0}) takes for an M x N x K problem on
// `sm_count` SMs, whatever the output type and B's layout (b_is_nk stays in the signature for a rule that
// would need it; none does since the 2026-12-02 measurements). Above 2^25 output elements (4096 x 8192):
// kGemmTileLarge when N and K are both at least 8192, else kGemmTileSmall. Up to there, kGemmTileRows16 for at most 16
// rows and kGemmTileRows32 for at most 32 (decode); above 32 rows, the largest of kGemmTileSmall, kGemmTileSkinny,
// kGemmTileTiny whose output has at least 7/8 of sm_count tiles (a full wave), else kGemmTileTiny (the most
// tiles). Outputs of fewer tiles than a wave with a long K leave SMs idle whatever the tile; there
// GemmArguments::split_k = 0 splits K (select_split_k). The measurements behind the rule are in
// gemm_sm90.cu. Throws std::invalid_argument for a negative size or sm_count < 1.
GemmTile select_gemm_tile(int64_t m, int64_t n, int64_t k, bool b_is_nk = false, int sm_count = kGemmDefaultSmCount);

// The most slices GemmArguments::split_k may cut K into, and the least depth of K an automatic split
// leaves each slice.
inline constexpr int kGemmMaxSplitK = 16;
inline constexpr int64_t kGemmMinSplitKDepth = 1024;

// The split of K an automatic split (GemmArguments::split_k = 0) takes for an M x N x K problem run with
// `tile` on `sm_count` SMs: 1 (no split) when the output has a full wave of tiles (7/8 of sm_count, as
// select_gemm_tile counts; a third of sm_count for kGemmTileRows16 and kGemmTileRows32, whose CTAs read B
// faster) or K is short; otherwise the most slices, up to kGemmMaxSplitK, that keep the
// tiles of all slices within one wave of sm_count, each slice at least kGemmMinSplitKDepth deep and K a
// multiple of 8 slices. The rule and its measurements are in gemm_sm90.cu. Throws std::invalid_argument
// for a negative size, sm_count < 1 or a tile outside kGemmTiles.
int select_split_k(int64_t m, int64_t n, int64_t k, GemmTile tile, int sm_count = kGemmDefaultSmCount);

struct GemmArguments {
  Tensor a;                    // M x K, bfloat16 or float16
  Tensor b;                    // K x N, or N x K when b_is_nk; same dtype as a
  Tensor c;                    // M x N output: a's dtype or float32
  const void* bias = nullptr;  // N elements of c's dtype (device memory, 16-byte aligned), or null
  bool b_is_nk = false;        // b holds B transposed: N rows of K (column-major K x N)
  float alpha = 1.0f;          // C = alpha * (A @ B) + bias
  GemmTile tile{};             // one of kGemmTiles, or {0, 0, 0} for select_gemm_tile
  int sm_count = 0;            // SMs the persistent kernel may occupy (2 at least: one cluster); 0 = all
  // Allows stream-K for an explicit 128x128 tile (kGemmTileSmall) of 16-bit C: when its output has at
  // most sm_count / 2 tiles and K >= 8192 (the measured rule in gemm_sm90.cu), a stream-K kernel splits
  // the K loop across CTAs (CUTLASS's stream-K scheduler and its heuristic) so every SM works; partial
  // sums meet in the workspace (workspace_size(args) bytes, then non-zero) and are reduced in a fixed
  // order. The automatic choice never needs it: its 64-row tiles are faster wherever it would run. Off:
  // one CTA per tile, no workspace.
  bool stream_k = false;
  // An optional source added to the product: C = alpha * A @ B + source + bias, read in the epilogue
  // (CUTLASS's C operand with beta = 1), so a sum of products needs no separate pass. M x N of C's type,
  // 16-byte aligned rows like C; it may be C itself (C += A @ B) but must not overlap it otherwise. Not
  // with a split of K (split_k > 1) or stream_k, nor with the 16- and 32-row tiles: the automatic choice
  // then takes kGemmTileTiny and does not split K. Empty (no data, 0 x 0): no source.
  Tensor source{};
  // Split of K (parallel split-K), for outputs of too few tiles to fill the SMs with a long K loop
  // (decode; the column-parallel layers of tensor parallelism). 1, the default: no split, one CTA per
  // output tile over the whole K. S > 1: K is cut into S slices of K / S (K must be a multiple of 8 S,
  // S at most kGemmMaxSplitK); one batched launch computes every slice's product as a float32 M x N
  // partial in the workspace (S times the tiles to spread over the SMs), then a second kernel sums the
  // partials in slice order (so results are deterministic), adds the bias and writes C. 0: the automatic
  // split, select_split_k for the tile that runs (often 1). A split above 1 needs workspace_size(args)
  // bytes (S * M * N * 4 and CUTLASS's own), 16-byte aligned. Not with stream_k.
  int split_k = 1;
};

// Empty when gemm() can run these arguments; otherwise the reason, naming the tensor and the rule
// (the same text gemm() throws as std::invalid_argument). Checks only the arguments: whether this
// build has the GEMM core at all is gemm_available().
std::string can_implement(const GemmArguments& args);

// Bytes of device workspace gemm() needs for these arguments: 0 (pass nullptr) unless stream_k picks the
// stream-K kernel or K is split (split_k). Throws std::invalid_argument for arguments can_implement
// rejects.
size_t workspace_size(const GemmArguments& args);

// C = alpha * A @ B + bias, asynchronously on `stream`. `workspace` holds workspace_size(args) bytes
// of device memory that no operand (A, B, C, bias, source) shares: those bytes are written while the
// operands are read, and a workspace that overlaps one is refused before launch. Throws std::invalid_argument
// (iris::InvalidArgument) for bad arguments (iris::WorkspaceTooSmall when the call needs workspace and `workspace` is
// null), and iris::Error when this build has no GEMM core or CUTLASS refuses the problem.
// This overload cannot check the workspace's capacity: with sm_count 0 the automatic tile and split follow the
// SM count of the device current at the call, so workspace_size(args) must have been asked with the same device
// current (or a nonzero sm_count); the overload below checks the capacity against the launch's own plan.
// `stream` is used as given (no context: 0 is CUDA's default stream).
void gemm(const GemmArguments& args, void* workspace, cudaStream_t stream);
// The same, with the capacity of `workspace` (workspace_bytes) checked against what these arguments
// need right before launch, from the one plan the launch uses (so a caller that owns a workspace does
// not plan twice through workspace_size). Throws iris::WorkspaceTooSmall (a std::invalid_argument), exactly:
//   gemm: these arguments need N bytes of device workspace (workspace_size(args)) but the workspace holds M.
void gemm(const GemmArguments& args, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// True when iris was built with the CUTLASS headers (the GEMM core exists). When false, gemm() throws
// iris::Error saying how to get them: `bash scripts/setup.sh`, then rebuild.
bool gemm_available();

// The tile gemm() runs these arguments with: args.tile, or the automatic choice (select_gemm_tile with
// args.sm_count, else the current device's SM count, else kGemmDefaultSmCount).
GemmTile resolved_tile(const GemmArguments& args);

// The split of K gemm() runs these arguments with: args.split_k, or for 0 select_split_k with the
// resolved tile and the same SM count as resolved_tile; 1 when stream_k runs instead.
// Both throw std::invalid_argument with can_implement's message for arguments gemm() would refuse.
int resolved_split_k(const GemmArguments& args);

}  // namespace iris::ops
