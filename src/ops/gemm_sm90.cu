// GEMM core entry points: argument validation (pure, testable without a GPU), tile choice, and dispatch
// to the CUTLASS instantiations of gemm_sm90_<in>_<layout>.cu. Built without CUTLASS (no
// IRIS_HAVE_CUTLASS), everything but the launch still works and gemm() says how to get the headers.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "iris/ccl/workspace.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/ops/gemm.hpp"
#include "ops/gemm_check.hpp"
#include "ops/gemm_sm90_kernel.hpp"
#include "ops/gemm_split_k.hpp"

namespace iris::ops {
namespace {

using iris::detail::str_cat;

bool is_16bit_float(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }

std::string tile_name(const GemmTile& t) { return str_cat(t.m, "x", t.n, "x", t.k); }

std::string supported_tiles() {
  std::string s;
  for (const auto& t : kGemmTiles) s += (s.empty() ? "" : ", ") + tile_name(t);
  return s;
}

// The row pitch TMA is given for a view. A one-row view may carry any stride (Tensor::vector) but has
// no second row to step to, so its pitch is its row length (a multiple of 8 elements once validated).
int64_t row_pitch(const Tensor& t) { return t.rows <= 1 ? t.cols : t.stride; }

// The view itself: shape, stride, data. Returns the reason it is malformed, or "".
std::string check_view(const char* op, const char* name, const Tensor& t) {
  std::string why = t.problem();
  return why.empty() ? why : str_cat(op, ": ", name, " ", why);
}

// What TMA needs of a view beyond its row length: 16-byte aligned data and row pitch, and strides below 2^40
// bytes (cuTensorMapEncodeTiled refuses larger ones; CUTLASS only asserts it, which -DNDEBUG compiles out,
// so a refused descriptor would launch anyway): the descriptor's strides are the row pitch and, for one
// batch, the whole view (rows x pitch: gemm_sm90_impl.hpp's batch stride).
std::string check_tma(const char* op, const char* name, const Tensor& t) {
  if (t.numel() == 0) return "";
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return str_cat(op, ": ", name, " data ", t.data,
                   " is not 16-byte aligned (TMA reads and writes 16-byte aligned rows).");
  const int64_t pitch_bytes = row_pitch(t) * static_cast<int64_t>(t.element_size());
  if (t.rows > 1 && pitch_bytes % 16 != 0)
    return str_cat(op, ": ", name, " row stride ", row_pitch(t), " elements (", pitch_bytes,
                   " bytes) is not a multiple of 16 bytes (TMA reads and writes 16-byte aligned rows).");
  constexpr int64_t kTmaStrideLimit = int64_t{1} << 40;
  if (pitch_bytes >= kTmaStrideLimit || t.rows > (kTmaStrideLimit - 1) / pitch_bytes)
    return str_cat(op, ": ", name, " is ", t.rows, " rows of ", pitch_bytes,
                   " bytes: TMA describes a tensor by strides below 2^40 bytes (1 TiB), its row pitch and its "
                   "whole extent; split the call into smaller ones.");
  return "";
}

// What an automatic choice resolves to on `sm_count` SMs, whether the stream-K kernel runs, and the split
// of K.
struct Choice {
  GemmTile tile;
  bool stream_k = false;
  int splits = 1;
};

// Stream-K runs only for an explicit 128x128 tile of 16-bit output (its own output tiles, computed by
// the stream-K kernel) whose output leaves at least half the SMs the GEMM may use idle for a long K loop;
// CUTLASS's stream-K heuristic then picks the split. Measured on one H200 (bf16, iris / cuBLAS, B as
// K x N / N x K, timed in turns; bench/results/2026-12-01-h200-gemm-bf16.txt): with the 128x128 tile,
// data-parallel -> stream-K, 128 x 4096 x 8192 (32 tiles) 0.59 / 0.64 -> 0.77 / 0.84 and 128 x 8192 x
// 8192 (64 tiles) 0.67 / 0.74 -> 0.78 / 0.83; on 2026-11-29, 128 x 8192 x 4096 (64 tiles, half the K)
// 0.78 / 0.78 -> 0.72 / 0.75, hence the K bound. The automatic choice never takes it: its 64-row tiles,
// data-parallel, beat it wherever it would run: 64x64 against stream-K 128x128 at 128 x 2048 x 8192
// 1.04 / 1.07 against 0.60 / 0.60, 64 x 4096 x 8192 1.07 / 1.09 against 0.67 / 0.69, 128 x 1024 x 8192
// 1.07 / 1.07 against 0.44 / 0.43, 64 x 1024 x 8192 1.02 / 1.06 against 0.41 / 0.42.
bool has_source(const GemmArguments& g) { return g.source.data != nullptr || g.source.numel() > 0; }
bool is_swapped(const GemmTile& t) { return t == kGemmTileRows16 || t == kGemmTileRows32; }

// With a source (validated: no stream-K, no split, no swapped tile asked for), the automatic choice
// trades a swapped tile for kGemmTileTiny and never splits K.
Choice choose(const GemmArguments& g, int sm_count) {
  const int64_t m = g.a.rows, n = g.b_is_nk ? g.b.rows : g.b.cols, k = g.a.cols;
  const bool source = has_source(g);
  Choice c;
  c.tile = g.tile.is_auto() ? select_gemm_tile(m, n, k, g.b_is_nk, sm_count) : g.tile;
  if (source && is_swapped(c.tile)) c.tile = kGemmTileTiny;
  c.stream_k = g.stream_k && g.tile == kGemmTileSmall && is_16bit_float(g.c.dtype) && k >= 8192 &&
               2 * ccl::tile_count(m, n, c.tile.m, c.tile.n) <= sm_count;
  if (!c.stream_k) c.splits = source ? 1 : g.split_k == 0 ? select_split_k(m, n, k, c.tile, sm_count) : g.split_k;
  return c;
}

// The SM count an automatic choice is made for, as make_problem resolves it for the launch: the
// caller's sm_count clamped to the device, or the device's; without a device (the host-side checks and
// tests), the caller's or kGemmDefaultSmCount.
int choice_sm_count(const GemmArguments& g) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();  // clear the failed query: it belongs to no caller
    // At least one 2-CTA cluster, as make_problem clamps the launch's (a caller's 1 chose another tile on a
    // host than the GEMM runs: a reviewer's finding).
    return g.sm_count > 0 ? std::max(g.sm_count, 2) : kGemmDefaultSmCount;
  }
  return g.sm_count > 0 ? std::clamp(g.sm_count, 2, std::max(sms, 2)) : sms;
}

#if defined(IRIS_HAVE_CUTLASS)
using detail::GemmProblem;
using detail::kTileLarge;
using detail::kTileRows16;
using detail::kTileRows32;
using detail::kTileSkinny;
using detail::kTileSmall;
using detail::kTileSmallStreamK;
using detail::kTileTiny;
using detail::Sm90Gemm;

struct Sm90Instance {
  DType in;
  DType out;
  bool b_is_nk;
  int tile;
  bool source;  // reads GemmProblem::c
  size_t (*workspace_size)(const GemmProblem&);
  void (*run)(const GemmProblem&, void*, cudaStream_t);
};

template <DType kIn, DType kOut, bool kBIsNK, int kTile, bool kSource = detail::kernel_reads_source(kOut, kTile)>
constexpr Sm90Instance instance() {
  using G = Sm90Gemm<kIn, kOut, kBIsNK, kTile, kSource>;
  return {kIn, kOut, kBIsNK, kTile, G::kReadsSource, &G::workspace_size, &G::run};
}

// The complete set: every tile for 16-bit and float32 outputs (gemm_sm90_<in>_<layout>.cu for the
// large tile and the 128x128 tile's 16-bit output, _m64.cu for the 64-row tiles' 16-bit output, _f32.cu
// for the float32 outputs of the others, _rows.cu for both outputs of the swapped 16- and 32-row tiles),
// and the stream-K kernel for 16-bit outputs; then the twins with a source (kernel_reads_source). About
// 35 s of compile each on 2 cores, so the set stays small.
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kF32 = DType::kFloat32;
constexpr Sm90Instance kSm90Instances[] = {
    // gemm_sm90_bf16_kn.cu
    instance<kBF16, kBF16, false, kTileLarge>(),
    instance<kBF16, kF32, false, kTileLarge>(),
    instance<kBF16, kBF16, false, kTileSmall>(),
    instance<kBF16, kBF16, false, kTileSmallStreamK>(),
    // gemm_sm90_bf16_kn_m64.cu
    instance<kBF16, kBF16, false, kTileSkinny>(),
    instance<kBF16, kBF16, false, kTileTiny>(),
    // gemm_sm90_bf16_kn_f32.cu
    instance<kBF16, kF32, false, kTileSmall>(),
    instance<kBF16, kF32, false, kTileSkinny>(),
    instance<kBF16, kF32, false, kTileTiny>(),
    // gemm_sm90_bf16_nk.cu
    instance<kBF16, kBF16, true, kTileLarge>(),
    instance<kBF16, kF32, true, kTileLarge>(),
    instance<kBF16, kBF16, true, kTileSmall>(),
    instance<kBF16, kBF16, true, kTileSmallStreamK>(),
    // gemm_sm90_bf16_nk_m64.cu
    instance<kBF16, kBF16, true, kTileSkinny>(),
    instance<kBF16, kBF16, true, kTileTiny>(),
    // gemm_sm90_bf16_nk_f32.cu
    instance<kBF16, kF32, true, kTileSmall>(),
    instance<kBF16, kF32, true, kTileSkinny>(),
    instance<kBF16, kF32, true, kTileTiny>(),
    // gemm_sm90_bf16_kn_rows.cu
    instance<kBF16, kBF16, false, kTileRows16>(),
    instance<kBF16, kF32, false, kTileRows16>(),
    instance<kBF16, kBF16, false, kTileRows32>(),
    instance<kBF16, kF32, false, kTileRows32>(),
    // gemm_sm90_bf16_nk_rows.cu
    instance<kBF16, kBF16, true, kTileRows16>(),
    instance<kBF16, kF32, true, kTileRows16>(),
    instance<kBF16, kBF16, true, kTileRows32>(),
    instance<kBF16, kF32, true, kTileRows32>(),
    // gemm_sm90_f16_kn.cu
    instance<kF16, kF16, false, kTileLarge>(),
    instance<kF16, kF32, false, kTileLarge>(),
    instance<kF16, kF16, false, kTileSmall>(),
    instance<kF16, kF16, false, kTileSmallStreamK>(),
    // gemm_sm90_f16_kn_m64.cu
    instance<kF16, kF16, false, kTileSkinny>(),
    instance<kF16, kF16, false, kTileTiny>(),
    // gemm_sm90_f16_kn_f32.cu
    instance<kF16, kF32, false, kTileSmall>(),
    instance<kF16, kF32, false, kTileSkinny>(),
    instance<kF16, kF32, false, kTileTiny>(),
    // gemm_sm90_f16_nk.cu
    instance<kF16, kF16, true, kTileLarge>(),
    instance<kF16, kF32, true, kTileLarge>(),
    instance<kF16, kF16, true, kTileSmall>(),
    instance<kF16, kF16, true, kTileSmallStreamK>(),
    // gemm_sm90_f16_nk_m64.cu
    instance<kF16, kF16, true, kTileSkinny>(),
    instance<kF16, kF16, true, kTileTiny>(),
    // gemm_sm90_f16_nk_f32.cu
    instance<kF16, kF32, true, kTileSmall>(),
    instance<kF16, kF32, true, kTileSkinny>(),
    instance<kF16, kF32, true, kTileTiny>(),
    // gemm_sm90_f16_kn_rows.cu
    instance<kF16, kF16, false, kTileRows16>(),
    instance<kF16, kF32, false, kTileRows16>(),
    instance<kF16, kF16, false, kTileRows32>(),
    instance<kF16, kF32, false, kTileRows32>(),
    // gemm_sm90_f16_nk_rows.cu
    instance<kF16, kF16, true, kTileRows16>(),
    instance<kF16, kF32, true, kTileRows16>(),
    instance<kF16, kF16, true, kTileRows32>(),
    instance<kF16, kF32, true, kTileRows32>(),
    // gemm_sm90_<in>_<layout>_src.cu: the 128-row tiles' 16-bit output with a source (after the
    // source-free kernels, which find_instance takes first for calls without one)
    instance<kBF16, kBF16, false, kTileLarge, true>(),
    instance<kBF16, kBF16, false, kTileSmall, true>(),
    instance<kBF16, kBF16, true, kTileLarge, true>(),
    instance<kBF16, kBF16, true, kTileSmall, true>(),
    instance<kF16, kF16, false, kTileLarge, true>(),
    instance<kF16, kF16, false, kTileSmall, true>(),
    instance<kF16, kF16, true, kTileLarge, true>(),
    instance<kF16, kF16, true, kTileSmall, true>(),
};

int tile_id(const GemmTile& t) {
  for (int i = 0; i < static_cast<int>(kGemmTiles.size()); ++i)
    if (kGemmTiles[i] == t) return i;
  throw Error(str_cat("iris internal error: tile ", tile_name(t), " passed validation but is not in kGemmTiles."));
}

// The first kernel of the table for these types and tile that reads a source when one is given.
const Sm90Instance& find_instance(DType in, DType out, bool b_is_nk, int tile, bool source = false) {
  for (const auto& inst : kSm90Instances)
    if (inst.in == in && inst.out == out && inst.b_is_nk == b_is_nk && inst.tile == tile && (inst.source || !source))
      return inst;
  throw Error(str_cat("iris internal error: no GEMM instantiation for validated arguments (", dtype_name(in), " -> ",
                      dtype_name(out), ", tile id ", tile, source ? ", with a source" : "", ")."));
}

// The device's Hopper check and SM count (cudaDeviceGetAttribute is a cached lookup, not a driver call).
GemmProblem make_problem(const GemmArguments& g) {
  GemmProblem p;
  IRIS_CUDA_CHECK(cudaGetDevice(&p.device));
  int major = 0, minor = 0, sms = 0;
  IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, p.device));
  IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, p.device));
  IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device));
  if (major != 9 || minor != 0)
    throw Error(str_cat("gemm: the GEMM core is built for sm_90a (H100/H200) but device ", p.device, " is sm_", major,
                        minor, "."));
  p.m = static_cast<int>(g.a.rows);
  p.k = static_cast<int>(g.a.cols);
  p.n = static_cast<int>(g.b_is_nk ? g.b.rows : g.b.cols);
  p.a = g.a.data;
  p.lda = row_pitch(g.a);
  p.b = g.b.data;
  p.ldb = row_pitch(g.b);
  p.d = g.c.data;
  p.ldd = row_pitch(g.c);
  if (has_source(g)) {
    p.c = g.source.data;
    p.ldc = row_pitch(g.source);
  }
  p.bias = g.bias;
  p.alpha = g.alpha;
  // At least one 2-CTA cluster; at most the device.
  p.sm_count = g.sm_count > 0 ? std::clamp(g.sm_count, 2, std::max(sms, 2)) : sms;
  return p;
}

// What gemm() launches for validated arguments: one kernel over C, or, with K split, the kernel of the
// tile's float32 output over the packed partials at the start of the workspace, then the sum into C.
struct Launch {
  const Sm90Instance* inst = nullptr;
  GemmProblem p;             // split: d is set at launch (the workspace), ldd = N, no bias
  size_t partial_bytes = 0;  // split: the partials' room at the start of the workspace
  size_t workspace = 0;      // all the workspace the call needs
};

constexpr size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

Launch plan_launch(const GemmArguments& g) {
  Launch l;
  l.p = make_problem(g);
  const Choice c = choose(g, l.p.sm_count);
  if (c.stream_k) {
    l.inst = &find_instance(g.a.dtype, g.c.dtype, g.b_is_nk, kTileSmallStreamK);
  } else if (c.splits == 1) {
    l.inst = &find_instance(g.a.dtype, g.c.dtype, g.b_is_nk, tile_id(c.tile), l.p.c != nullptr);
  } else {
    l.inst = &find_instance(g.a.dtype, DType::kFloat32, g.b_is_nk, tile_id(c.tile));
    l.p.splits = c.splits;
    l.p.d = nullptr;
    l.p.ldd = l.p.n;
    l.p.bias = nullptr;
    l.partial_bytes = align256(static_cast<size_t>(c.splits) * static_cast<size_t>(l.p.m) * static_cast<size_t>(l.p.n) *
                               sizeof(float));
  }
  l.workspace = l.partial_bytes + l.inst->workspace_size(l.p);
  return l;
}
#endif  // IRIS_HAVE_CUTLASS

#if !defined(IRIS_HAVE_CUTLASS)
[[noreturn]] void throw_unavailable() {
  throw Error(
      "gemm: the CUTLASS headers were not found when iris was configured, so this build has no GEMM core. Run `bash "
      "scripts/setup.sh` (it unpacks them from the nvidia-cutlass==4.2.0.0 PyPI wheel into .deps/cutlass/include) or "
      "configure with -DIRIS_CUTLASS_INCLUDE_DIR=<path to CUTLASS's include folder>, then rebuild.");
}
#endif

}  // namespace

// The automatic tile. Measured on one H200 (bf16, iris / cuBLAS, B as K x N / N x K, CUDA-graph replays
// timed in turns; bench/results/2026-12-01-h200-gemm-*.txt): from 2048 rows up the choice is 1.01-1.04 /
// 1.02-1.03. Large outputs take 128x256 only where both N and K are at least 8192, whatever B's layout. At
// K <= 4096, 128x128 was faster at every large output in two invocations on one lease, both layouts (us,
// 128x256 -> 128x128, bench/results/2026-12-02-h200-gemm-bf16-tile-k-sweep.txt): 8192 x 8192 x 4096
// 852 -> 827, 857 -> 841; 16384 x 8192 x 4096 1696 -> 1661, 1733 -> 1685; 8192 x 16384 x 4096 1739 ->
// 1695, 1748 -> 1704; 8192 x 8192 x 2048 444 -> 409, 439 -> 409 (K x N, N x K; the second invocation
// agrees within 2%); at K = 8192 128x256 won: 8192^3 1673 -> 1726, 1669 -> 1781; 16384 x 8192 x 8192
// 3396 -> 3799, 3404 -> 3900. K between 4096 and 8192 is not measured. With N < 8192 the rule of
// 2026-11-29 gave B as N x K 128x256, and 128x128 was as fast or faster in every run since (us, 128x256 -> 128x128,
// bench/results/2026-12-02-h200-gemm-bf16-tiles-n4096.txt and -bands.txt, two leases): 16384 x 4096 x 4096
// 901 -> 860 and 836 -> 806, 8192 x 4096 x 8192 873 -> 853 and 813 -> 805, 16384 x 4096 x 8192 1713 ->
// 1654 (float32 out 1681 -> 1627); in the eight 12-01/12-02 runs of 16384 x 4096 x 8192 before, faster by
// 0.3-2% in six and within 0.1% in two. Outputs of few rows: 128 x 8192 x 8192: 64x128 (128 tiles) 0.94 /
// 0.98 against 0.87 / 0.86 (64x64), 0.67 / 0.74 (128x128); 128 x 8192 x 4096: 64x128 0.95 / 0.95 against 0.90 / 0.91,
// 0.77 / 0.79; 128 x 4096 x 8192: 64x64 (128 tiles) 1.09 / 1.13 against 0.99 / 1.04 (64x128), 0.59 / 0.64; 64 x 8192 x
// 8192: 64x64 0.99 / 1.07 against 0.96 / 1.07, 0.64 / 0.72; at 256 x 8192 x 8192 (the configuration sweep) 128x128 (128
// tiles) 1.00-1.02 against 0.99 (64x128).
// Outputs of at most 32 rows (decode) take the swapped tiles: a 64-row tile there spends three quarters
// of its MMA and of every pipeline stage's A panel on rows that do not exist, so fewer stages of B are in
// flight and the GEMM, bound by reading B, streams it at half of DRAM's rate (ncu: 51% of DRAM
// throughput against 60% for cuBLAS's swapped 64x16 kernel at 16 x 4096 x 4096). Measured
// (bench/results/2026-12-01-h200-gemm-bf16-rows-*.txt), unsplit, K x N, 64x64 -> 16x64 / 32x64 (64 deep,
// the first version), us, cuBLAS in brackets: 16 x 4096 x 4096 17.5 -> 9.2 / 10.9 (9.2); 16 x 8192 x 8192
// 41.0 -> 33.1 / 33.3 (32.8); 1 x 8192 x 8192 44.4 -> 32.8 / 35.1 (32.9); 8 x 4096 x 4096 18.4 -> 9.4 /
// 12.2 (8.5); 32 x 8192 x 8192 38.6 -> 35.7 / 33.6 (33.3); 32 x 2048 x 8192 20.3 -> 15.7 / 14.5 (9.6),
// with the split of K 9.6 against 13.6 for 64x64's. So 16x64 up to 16 rows, 32x64 up to 32 (at 24 x
// 4096 x 4096 two rows of 16x64 were 8% faster, at 32 x 8192 x 8192 3-5% slower); above 32 rows the
// 64-row tiles (at 64 x 1024 x 8192 16x64 read 0.46-0.59 of cuBLAS, 64x64 split 8 ways 0.86-1.0). The
// sweep of their configurations (-rows-sweep.txt): 128 deep beat 64 deep everywhere, by 1-4% at full
// waves (16 x 28672 x 4096 58.5 against 59.5 us) and up to 27% unsplit at 32 x 2048 x 8192 (11.4 against
// 15.5); a 64x8 tile won only on small problems (1 x 4096 x 4096 9.4 against 10.3) and lost on large ones
// (16 x 8192 x 8192 N x K 38.6 against 35.1), a 2x1 cluster (A multicast) only at 4 x 14336 x 4096.
GemmTile select_gemm_tile(int64_t m, int64_t n, int64_t k, bool b_is_nk, int sm_count) {
  IRIS_CHECK_ARG(m >= 0 && n >= 0 && k >= 0, "select_gemm_tile: M x N x K = ", m, " x ", n, " x ", k,
                 " has a negative size.");
  IRIS_CHECK_ARG(sm_count > 0, "select_gemm_tile: sm_count must be positive, got ", sm_count, ".");
  (void)b_is_nk;
  // (m > 2^25 / n rather than m * n > 2^25, which overflows for huge sizes.)
  if (n > 0 && m > (int64_t{1} << 25) / n) return n >= 8192 && k >= 8192 ? kGemmTileLarge : kGemmTileSmall;
  if (m <= kGemmTileRows16.m) return kGemmTileRows16;
  if (m <= kGemmTileRows32.m) return kGemmTileRows32;
  const int64_t full_wave = (int64_t{sm_count} * 7 + 7) / 8;
  for (const GemmTile& t : {kGemmTileSmall, kGemmTileSkinny})
    if (ccl::tile_count(m, n, t.m, t.n) >= full_wave) return t;
  return kGemmTileTiny;
}

// The automatic split of K. An output of fewer tiles than a wave leaves the GEMM bound by each CTA's K
// loop (a CTA streams its panels of A and B at about 120 GB/s on an H200, far below DRAM's ~3.5 TB/s);
// cutting K into S slices gives S times the CTAs, each with 1/S of the loop, for the cost of S float32
// partials and their sum (a second kernel, about 2 us of the fixed cost). Measured on one H200 (bf16 in
// and out, CUDA-graph replays, timed in turns with cuBLAS; bench/results/2026-12-01-h200-gemm-bf16-split.txt),
// B as K x N, unsplit -> split (slices) against cuBLAS, us: 128 x 1024 x 8192 16.3 -> 9.2 (4) against 9.4;
// 64 x 1024 x 8192 16.2 -> 8.4 (8) against 7.1; 128 x 2048 x 8192 16.8 -> 12.8 (2) against 13.5;
// 32 x 2048 x 8192 20.2 -> 14.5 (4) against 9.7; 128 x 1280 x 8192 16.2 -> 12.2 (2) against 9.5;
// 16 x 4096 x 4096 17.3 -> 15.5 (2) against 9.5. One wave of slices is the most that pays: 4 and 8
// slices of 128 x 2048 x 8192 took 14.0 and 15.6. Where the unsplit tiles already stream B at DRAM's
// rate a split costs a little: 64 x 4096 x 8192 (64 tiles, B 64 MiB) 20.5 -> 22.8 (2), against cuBLAS's
// 22.4; a rule that kept it unsplit by the ratio of the inputs to one CTA's panels also kept 16 x 4096
// x 4096 (the same ratio) unsplit, which gains from the split, so the rule has no such exception.
// The swapped 16- and 32-row tiles stream B about twice as fast per CTA (60-75 GB/s), so a third of the
// SMs' worth of them already reads B near DRAM's rate and splitting it costs the partials' round trip
// for nothing (bench/results/2026-12-01-h200-gemm-bf16-rows-k128.txt, K x N / N x K, unsplit -> split,
// us): 64 tiles, 16 x 4096 x 4096 8.9 / 8.8 -> 8.9 / 9.3 (2), 24 x 4096 x 4096 9.2 / 9.6 -> 9.9 / 10.2
// (2); 48 tiles, 32 x 3072 x 8192 15.6 / 16.4 -> 16.7 / 17.1 (2), 16 x 3072 x 4096 8.6 / 8.7 -> 8.6 /
// 8.6 (2); while fewer still gain: 32 tiles, 32 x 2048 x 8192 13.9 / 14.0 -> 9.7 / 9.8 (4), 16 x 2048 x
// 4096 8.0 / 8.0 -> 6.8 / 6.8 (4); 16 tiles, 16 x 1024 x 8192 11.5 / 11.8 -> 7.2 / 7.3 (8). So they split
// below a third of sm_count tiles (44 of 132).
int select_split_k(int64_t m, int64_t n, int64_t k, GemmTile tile, int sm_count) {
  IRIS_CHECK_ARG(m >= 0 && n >= 0 && k >= 0, "select_split_k: M x N x K = ", m, " x ", n, " x ", k,
                 " has a negative size.");
  IRIS_CHECK_ARG(sm_count > 0, "select_split_k: sm_count must be positive, got ", sm_count, ".");
  IRIS_CHECK_ARG(std::find(kGemmTiles.begin(), kGemmTiles.end(), tile) != kGemmTiles.end(), "select_split_k: tile ",
                 tile_name(tile), " is not supported; the tiles are ", supported_tiles(), ".");
  const int64_t tiles = ccl::tile_count(m, n, tile.m, tile.n);
  const bool swapped = is_swapped(tile);
  const int64_t enough = swapped ? (int64_t{sm_count} + 2) / 3 : (int64_t{sm_count} * 7 + 7) / 8;
  if (tiles == 0 || tiles >= enough) return 1;
  int best = 1;
  for (int s = 2; s <= kGemmMaxSplitK && tiles * s <= sm_count && k / s >= kGemmMinSplitKDepth; ++s)
    if (k % (8 * s) == 0) best = s;
  return best;
}

GemmTile resolved_tile(const GemmArguments& args) {
  if (auto why = can_implement(args); !why.empty()) throw InvalidArgument(why);
  return choose(args, choice_sm_count(args)).tile;
}

int resolved_split_k(const GemmArguments& args) {
  if (auto why = can_implement(args); !why.empty()) throw InvalidArgument(why);
  return choose(args, choice_sm_count(args)).splits;
}

bool gemm_available() {
#if defined(IRIS_HAVE_CUTLASS)
  return true;
#else
  return false;
#endif
}

namespace detail {

std::string check_matmul_operands(const char* op, const Tensor& a, const Tensor& b, bool b_is_nk, const Tensor& c,
                                  const void* bias, int64_t k_shards) {
  if (!is_16bit_float(a.dtype))
    return str_cat(op, ": A is ", dtype_name(a.dtype), "; the GEMM core takes bfloat16 or float16 inputs.");
  if (b.dtype != a.dtype)
    return str_cat(op, ": B is ", dtype_name(b.dtype), " but A is ", dtype_name(a.dtype),
                   "; A and B must have the same type.");
  if (c.dtype != a.dtype && c.dtype != DType::kFloat32)
    return str_cat(op, ": C is ", dtype_name(c.dtype), "; with ", dtype_name(a.dtype), " inputs C must be ",
                   dtype_name(a.dtype), " or float32.");
  const std::pair<const char*, const Tensor*> operands[] = {{"A", &a}, {"B", &b}, {"C", &c}};
  for (auto [name, t] : operands)
    if (auto why = check_view(op, name, *t); !why.empty()) return why;
  const int64_t k = a.cols;
  const int64_t b_k = b_is_nk ? b.cols : b.rows;
  const int64_t n = b_is_nk ? b.rows : b.cols;
  if (b_k != k_shards * k) {
    const char* stored = b_is_nk ? "N x K" : "K x N";
    if (k_shards > 1)
      return str_cat(op, ": A is ", a.rows, "x", k, " (this rank's ", k, " columns of the gathered ", a.rows, "x",
                     k_shards * k, " A) but B is ", b.rows, "x", b.cols, " (stored ", stored, "); B's K must be ",
                     k_shards, " x ", k, " = ", k_shards * k, ".");
    return str_cat(op, ": A is ", a.rows, "x", k, " but B is ", b.rows, "x", b.cols, " (stored ", stored,
                   "); B's K must be ", k, ".");
  }
  if (c.cols != n) return str_cat(op, ": C has ", c.cols, " columns but B has N = ", n, ".");
  if (a.rows > INT_MAX || n > INT_MAX || b_k > INT_MAX)
    return str_cat(op, ": ", a.rows, "x", n, "x", b_k, " has a dimension above 2^31 - 1.");
  if (k == 0) return str_cat(op, ": K is 0 (A is ", a.rows, "x0); the GEMM core needs K >= 1.");
  if (k % 8 != 0)
    return str_cat(op, ": K = ", k,
                   " is not a multiple of 8: TMA needs 16-byte aligned rows, so K must be a multiple of 8 for 16-bit "
                   "inputs.");
  if (n % 8 != 0)
    return str_cat(op, ": N = ", n,
                   " is not a multiple of 8: TMA needs 16-byte aligned rows, so N must be a multiple of 8 for 16-bit "
                   "inputs.");
  for (auto [name, t] : operands)
    if (auto why = check_tma(op, name, *t); !why.empty()) return why;
  if (bias != nullptr && reinterpret_cast<uintptr_t>(bias) % 16 != 0)
    return str_cat(op, ": bias ", bias, " is not 16-byte aligned.");
  // The epilogue reads the bias while other blocks write C: a bias inside C would change under the reads.
  if (bias != nullptr && c.overlaps(Tensor::vector(const_cast<void*>(bias), c.dtype, n)))
    return str_cat(op, ": bias overlaps C; pass a separate bias vector (N elements of C's type).");
  if (c.overlaps(a) || c.overlaps(b)) return str_cat(op, ": C overlaps A or B; pass a separate output buffer.");
  return "";
}

std::string check_gemm_workspace(size_t need, const void* workspace, size_t have) {
  if (need > 0 && workspace == nullptr)
    return str_cat("gemm: these arguments need ", need,
                   " bytes of device workspace (workspace_size(args)) but workspace is null.");
  if (need > have)
    return str_cat("gemm: these arguments need ", need,
                   " bytes of device workspace (workspace_size(args)) but the workspace holds ", have, ".");
  return "";
}

std::string check_gemm_workspace_apart(const GemmArguments& g, const void* workspace, size_t need) {
  if (need == 0 || workspace == nullptr) return "";
  const Tensor w = Tensor::vector(const_cast<void*>(workspace), DType::kUInt8, static_cast<int64_t>(need));
  const int64_t n = g.c.cols;
  const std::pair<const char*, Tensor> operands[] = {
      {"A", g.a},
      {"B", g.b},
      {"C", g.c},
      {"the bias", g.bias != nullptr ? Tensor::vector(const_cast<void*>(g.bias), g.c.dtype, n) : Tensor{}},
      {"the source", has_source(g) ? g.source : Tensor{}}};
  for (const auto& [name, t] : operands)
    if (w.overlaps(t))
      return str_cat("gemm: the workspace (", need, " bytes at ", workspace, ") overlaps ", name,
                     "; the GEMM writes it while it reads its operands. Pass device memory no operand uses.");
  return "";
}

}  // namespace detail

std::string can_implement(const GemmArguments& g) {
  if (auto why = detail::check_matmul_operands("gemm", g.a, g.b, g.b_is_nk, g.c, g.bias); !why.empty()) return why;
  const int64_t m = g.a.rows;
  const int64_t n = g.b_is_nk ? g.b.rows : g.b.cols;
  if (g.c.rows != m) return str_cat("gemm: C is ", g.c.rows, "x", g.c.cols, " but A @ B is ", m, "x", n, ".");
  if (g.sm_count < 0) return str_cat("gemm: sm_count must be 0 (every SM) or positive, got ", g.sm_count, ".");
  if (g.split_k < 0 || g.split_k > kGemmMaxSplitK)
    return str_cat("gemm: split_k must be 0 (the automatic split), 1 (no split) or up to ", kGemmMaxSplitK,
                   " slices, got ", g.split_k, ".");
  if (g.split_k > 1 && g.stream_k)
    return str_cat("gemm: stream_k and split_k = ", g.split_k, " both split K; set one of them.");
  if (g.split_k > 1 && g.a.cols % (8 * g.split_k) != 0)
    return str_cat("gemm: split_k = ", g.split_k, " needs K to be a multiple of ", 8 * g.split_k,
                   " (8 per slice: each slice of A and B starts 16-byte aligned), but K = ", g.a.cols, ".");
  if (!g.tile.is_auto()) {
    if (std::find(kGemmTiles.begin(), kGemmTiles.end(), g.tile) == kGemmTiles.end())
      return str_cat("gemm: tile ", tile_name(g.tile), " is not supported; the tiles are ", supported_tiles(),
                     " (or 0x0x0 for the automatic choice).");
  }
  if (has_source(g)) {
    const Tensor& s = g.source;
    if (s.dtype != g.c.dtype)
      return str_cat("gemm: source is ", dtype_name(s.dtype), " but C is ", dtype_name(g.c.dtype),
                     "; the source must have C's type.");
    if (auto why = check_view("gemm", "source", s); !why.empty()) return why;
    if (s.rows != g.c.rows || s.cols != g.c.cols)
      return str_cat("gemm: source is ", s.rows, "x", s.cols, " but C is ", g.c.rows, "x", g.c.cols,
                     "; the source must have C's shape.");
    if (auto why = check_tma("gemm", "source", s); !why.empty()) return why;
    const bool same = s.data == g.c.data && row_pitch(s) == row_pitch(g.c);
    if (!same && s.overlaps(g.c))
      return "gemm: source overlaps C without being C; pass C itself (C += A @ B) or a separate buffer.";
    if (g.split_k > 1)
      return "gemm: a source is not supported with split_k > 1 (the partial sums of K would each add it); leave K "
             "unsplit.";
    // Refused whether or not stream-K would run for this tile (only an explicit 128x128 tile of 16-bit C
    // takes it), so that a source call's acceptance does not depend on the device's SMs.
    if (g.stream_k)
      return "gemm: a source is not supported with stream_k = true (stream-K splits K where it runs, and the "
             "partial sums of K would each add it); set stream_k = false.";
    if (is_swapped(g.tile))
      return str_cat("gemm: tile ", tile_name(g.tile),
                     " takes no source (the swapped decode tiles have no C operand); use a 64- or 128-row tile or "
                     "the automatic choice.");
  }
  return "";
}

size_t workspace_size(const GemmArguments& args) {
  if (auto why = can_implement(args); !why.empty()) throw InvalidArgument(why);
#if defined(IRIS_HAVE_CUTLASS)
  if (args.c.numel() == 0) return 0;
  return plan_launch(args).workspace;
#else
  return 0;
#endif
}

namespace {

// Both gemm() overloads: validate, plan once, check the workspace against the plan (its capacity too
// when the caller gave one), launch.
void run_gemm(const GemmArguments& args, void* workspace, const size_t* capacity, cudaStream_t stream) {
  if (auto why = can_implement(args); !why.empty()) throw InvalidArgument(why);
#if defined(IRIS_HAVE_CUTLASS)
  if (args.c.numel() == 0) return;
  Launch l = plan_launch(args);
  if (auto why = detail::check_gemm_workspace(l.workspace, workspace,
                                              capacity != nullptr ? *capacity : std::numeric_limits<size_t>::max());
      !why.empty())
    throw WorkspaceTooSmall(why);
  if (auto why = detail::check_gemm_workspace_apart(args, workspace, l.workspace); !why.empty())
    throw InvalidArgument(why);
  // Stream-K's fixup and split-K's partials both read and write the workspace 16 bytes at a time.
  IRIS_CHECK_ARG(l.workspace == 0 || reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "gemm: workspace ", workspace,
                 " is not 16-byte aligned (", l.p.splits > 1 ? "split_k" : "stream_k",
                 " keeps float32 partials there).");
  if (l.p.splits == 1) {
    l.inst->run(l.p, workspace, stream);
    return;
  }
  l.p.d = workspace;
  l.inst->run(l.p, static_cast<char*>(workspace) + l.partial_bytes, stream);
  detail::SplitKReduce r;
  r.partials = static_cast<const float*>(workspace);
  r.splits = l.p.splits;
  r.m = l.p.m;
  r.n = l.p.n;
  r.c = args.c.data;
  r.ldc = row_pitch(args.c);
  r.c_type = args.c.dtype;
  r.bias = args.bias;
  detail::launch_split_k_reduce(r, l.p.sm_count, stream);
#else
  (void)workspace;
  (void)capacity;
  (void)stream;
  throw_unavailable();
#endif
}

}  // namespace

void gemm(const GemmArguments& args, void* workspace, cudaStream_t stream) {
  run_gemm(args, workspace, nullptr, stream);
}

void gemm(const GemmArguments& args, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  run_gemm(args, workspace, &workspace_bytes, stream);
}

}  // namespace iris::ops
