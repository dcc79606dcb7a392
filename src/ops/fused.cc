// Fused GEMM + communication ops: configs, plans (validation and workspace sizing, pure), preambles,
// the launch-time checks, and the band pipelines that overlap each op's GEMM with its communication.
#include "iris/ops/fused.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ccl/ccl_host.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/error.hpp"
#include "ops/fused_kernels.hpp"
#include "ops/gemm_check.hpp"
#include "runtime/agree.hpp"

namespace iris::ops {
namespace {

using ccl::AllReduceVariant;
using ccl::OpKind;
using ccl::detail::align256;
using iris::detail::str_cat;

// Bands of output rows that matmul_all_reduce one_shot and matmul_all_gather cut their GEMM into, so
// the push of one band overlaps the GEMM of the next.
constexpr int kOneShotBands = 4;
constexpr int kAllGatherBands = 4;
// Sub-bands of each band of the ring reduce-scatter (matmul_reduce_scatter, matmul_all_reduce two_shot):
// two let a band's first half travel while its second half computes.
constexpr int kRingSubBands = 2;

const char* preamble_name(OpKind op) {
  switch (op) {
    case OpKind::kMatmulAllReduce:
      return "matmul_all_reduce_preamble";
    case OpKind::kMatmulReduceScatter:
      return "matmul_reduce_scatter_preamble";
    case OpKind::kAllGatherMatmul:
      return "all_gather_matmul_preamble";
    case OpKind::kMatmulAllGather:
      return "matmul_all_gather_preamble";
    case OpKind::kAllGatherMatmulKSharded:
      return "all_gather_matmul_k_sharded_preamble";
    default:
      return "a preamble";
  }
}

// A preamble that would re-allocate a buffer of a workspace whose calls a CUDA graph captured
// (FusedWorkspace::captured): the graph's replays would keep using the freed buffer.
[[noreturn]] void throw_captured(const char* preamble, const char* which) {
  throw InvalidArgument(str_cat(preamble, ": these operands need a larger ", which,
                                " workspace than this one holds, but a call with this workspace was captured in a "
                                "CUDA graph, whose replays would keep using the buffer a re-allocation frees; give "
                                "each captured shape a workspace of its own (or release() this one first)."));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Checks common to every op, in order: the config, the device SM count, the operands (all but C's
// rows, which depend on the op; k_sharded: A is this rank's columns of an A sharded on K, and B has the
// whole K).
void validate_common(OpKind op, const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms,
                     bool k_sharded = false) {
  const char* name = ccl::op_name(op);
  config.validate(world_size, op);
  IRIS_CHECK_ARG(device_sms > 0, name, ": device_sms must be positive, got ", device_sms, ".");
  if (auto why = detail::check_matmul_operands(name, mm.a, mm.b, mm.b_is_nk, mm.c, mm.bias, k_sharded ? world_size : 1);
      !why.empty())
    throw InvalidArgument(why);
}

// C must have `rows` rows; `rule` says why, for the message.
void check_c_rows(const char* name, const MatmulOperands& mm, int64_t rows, const std::string& rule) {
  IRIS_CHECK_ARG(mm.c.rows == rows, name, ": C is ", mm.c.rows, "x", mm.c.cols, " but must be ", rows, "x", mm.c.cols,
                 " (", rule, ").");
}

// ---- how many bands (the fusion threshold, FusedConfig::min_band_tiles) ---------------------------

int resolve_min_band_tiles(const FusedConfig& config, int device_sms) {
  return config.min_band_tiles > 0 ? config.min_band_tiles : std::max(1, device_sms / 2);
}

// A band's size in whole tiles of work (its rows x cols over a tile's, rounded up), not in the tiles it
// touches: a band of a few rows touches a whole tile row, as many tiles as a band of tile_m rows, for a
// fraction of the work, while every band GEMM reads all of B. Counted by touched tiles, decode shapes
// (matmul_all_reduce two_shot at M <= 64, N = 8192: bands of M / W rows in 64x64 tiles, 128 tiles each)
// passed a threshold that 128 rows (bands of 64 rows in 64x128 tiles, 64 tiles) did not, and ran W band
// GEMMs that each read B, where the unfused path reads it once. The threshold was measured in bands of
// whole tile rows (iris-bench --fused, 2 x H200), where both counts agree.
bool band_pays(int64_t rows, int64_t cols, GemmTile tile, int min_band_tiles) {
  if (rows <= 0 || cols <= 0) return false;
  return ceil_div(rows * cols, static_cast<int64_t>(tile.m) * tile.n) >= min_band_tiles;
}
// Band b of `bands` over `rows` rows in whole tile rows of tile_m: tile rows [T b / bands, T (b + 1) / bands)
// of the T = ceil(rows / tile_m), as {first tile row, tile rows, first row, rows}.
struct TileRowBand {
  int64_t tile_row0 = 0, tile_rows = 0;
  int64_t row0 = 0, rows = 0;
};
TileRowBand tile_row_band(int64_t rows, int tile_m, int bands, int b) {
  const int64_t tiles_m = ceil_div(rows, tile_m);
  const int64_t t0 = tiles_m * b / bands, t1 = tiles_m * (b + 1) / bands;
  const int64_t r0 = t0 * tile_m;
  return {t0, t1 - t0, r0, std::min(rows, t1 * tile_m) - r0};
}
// How many bands the GEMM of `rows` rows is cut into when the op picks (one_shot, atomic, spinlock,
// matmul_all_gather): bands of whole tile rows (tile_row_band), so that no band GEMM computes a partial
// tile row that the next one computes again; the most bands, up to max_bands, of which every one pays
// (band_pays, by its rows' work); 1 when no two would. A band that holds only the partial last tile row (129
// rows in 128-row tiles cut in 2: 128 and 1) is a GEMM of a row that reads all of B again: before 2026-12-05
// the bands were counted in whole tile rows, floor(tiles_m / bands) x tiles_n, which passed it.
int pick_bands(int64_t rows, int64_t cols, int max_bands, GemmTile tile, int min_band_tiles) {
  const int64_t tiles_m = ceil_div(rows, tile.m);
  int bands = static_cast<int>(std::min<int64_t>(max_bands, tiles_m));
  auto all_pay = [&](int count) {
    for (int b = 0; b < count; ++b)
      if (!band_pays(tile_row_band(rows, tile.m, count, b).rows, cols, tile, min_band_tiles)) return false;
    return true;
  };
  while (bands > 1 && !all_pay(bands)) --bands;
  return std::max(bands, 1);
}

// True when matmul_all_reduce adds tiles into peers' accumulators (atomic, spinlock): a copy engine
// cannot, so the communication runs on SMs beside the GEMM whatever copy_engine says.
bool adds_on_sms(OpKind op, const FusedConfig& config) {
  return op == OpKind::kMatmulAllReduce && (config.all_reduce_variant == AllReduceVariant::kAtomic ||
                                            config.all_reduce_variant == AllReduceVariant::kSpinlock);
}
bool comm_on_sms(OpKind op, const FusedConfig& config) { return !config.copy_engine || adds_on_sms(op, config); }

// A tile the fused kernels run (the plan refuses others before it sizes anything: a tile they do not run
// could otherwise ask the heap for arrays sized by it, and fail there instead).
void check_tile(const FusedPlan& p) {
  if (std::find(kFusedTiles.begin(), kFusedTiles.end(), p.tile) == kFusedTiles.end()) {
    std::string supported;  // only on the error path: this check runs on every call
    for (const GemmTile& t : kFusedTiles) supported += str_cat(supported.empty() ? "" : ", ", t.m, "x", t.n, "x", t.k);
    throw InvalidArgument(str_cat(ccl::op_name(p.sig.op), ": block_size_m x block_size_n x block_size_k = ", p.tile.m,
                                  "x", p.tile.n, "x", p.tile.k,
                                  " is not a tile of the GEMM core; the fused kernels run ", supported, "."));
  }
}

// The SM split, the tile and the signature fields every op fills alike. m x n x k: this rank's GEMM (for
// the tile the GEMM core advises when the config leaves it to the plan).
FusedPlan start_plan(OpKind op, const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms,
                     int64_t m, int64_t n, int64_t k) {
  FusedPlan p;
  p.tile = config.auto_tile() ? select_fused_tile(m, n, k, mm.b_is_nk, device_sms) : config.tile();
  p.device_sms = device_sms;
  // atomic and spinlock push float32 tiles from SMs, twice the bytes of the 16-bit copies: twice the
  // default blocks (FusedConfig::comm_sms says what was measured).
  p.comm_sms = config.comm_sms > 0 ? config.comm_sms : default_comm_sms(device_sms) * (adds_on_sms(op, config) ? 2 : 1);
  if (!comm_on_sms(op, config)) {
    // The copies run on the copy engines: the GEMM may take every SM.
    p.gemm_sms = config.gemm_sms > 0 ? config.gemm_sms : device_sms;
    IRIS_CHECK_ARG(p.gemm_sms <= device_sms && p.comm_sms <= device_sms, ccl::op_name(op), ": gemm_sms (", p.gemm_sms,
                   ") and comm_sms (", p.comm_sms, ") must each fit the device's ", device_sms, " SMs.");
  } else {
    p.gemm_sms = config.gemm_sms > 0 ? config.gemm_sms : device_sms - p.comm_sms;
    const char* why = config.copy_engine ? "the atomic and spinlock variants add on SMs" : "copy_engine is false";
    // gemm_sms left 0 takes the SMs comm_sms leaves: refused by comm_sms alone, not by a negative gemm_sms.
    IRIS_CHECK_ARG(config.gemm_sms > 0 || p.comm_sms < device_sms, ccl::op_name(op), ": comm_sms (", p.comm_sms,
                   ") must leave at least one of the device's ", device_sms, " SMs for the GEMM (", why,
                   ": the communication kernels run beside the GEMM).");
    // (compared without adding: gemm_sms + comm_sms could overflow, and pass)
    IRIS_CHECK_ARG(p.gemm_sms >= 1 && p.comm_sms <= device_sms && p.gemm_sms <= device_sms - p.comm_sms,
                   ccl::op_name(op), ": gemm_sms (", p.gemm_sms, ") + comm_sms (", p.comm_sms,
                   ") must leave at least one GEMM SM and fit the device's ", device_sms, " SMs (", why,
                   ": the communication kernels run beside the GEMM).");
  }
  p.sig.op = op;
  check_tile(p);
  p.sig.world_size = world_size;
  p.sig.block_size_m = p.tile.m;
  p.sig.block_size_n = p.tile.n;
  p.sig.depth = mm.a.cols;
  p.sig.bias = mm.bias != nullptr;
  p.sig.operand_dtypes = 256 * static_cast<int>(mm.a.dtype) + static_cast<int>(mm.c.dtype);
  p.needs.block_state = ccl::detail::block_state_words(world_size);  // the epoch is state[0]
  p.min_band_tiles = resolve_min_band_tiles(config, device_sms);
  p.sig.min_band_tiles = p.min_band_tiles;
  return p;
}

// Locks over the GEMM's output tile grid (rows x cols).
void size_tiles(FusedPlan& p, int64_t rows, int64_t cols) {
  p.sig.rows = rows;
  p.sig.cols = cols;
  p.tiles = ccl::tile_count(rows, cols, p.sig.block_size_m, p.sig.block_size_n);
  p.needs.locks = static_cast<size_t>(p.tiles);
}

// The GEMM's N: B's columns (K x N) or rows (N x K).
int64_t gemm_n(const MatmulOperands& mm) { return mm.b_is_nk ? mm.b.rows : mm.b.cols; }

Tensor rows_of(const Tensor& t, int64_t row0, int64_t rows) {
  return Tensor::matrix(static_cast<char*>(t.data) + row0 * t.stride * static_cast<int64_t>(t.element_size()), t.dtype,
                        rows, t.cols, t.stride);
}

// ---- below the fusion threshold: the GEMM, then the iris::ccl collective (FusedPlan::unfused) --------

// The collective's output and input: all_reduce in place on C; reduce_scatter of the M x N product (P,
// at the start of the staging) into C; all_gather of A into the gather buffer (the staging), or of this
// rank's rows of C into C (in place).
struct CollectiveViews {
  Tensor out, in;
};
CollectiveViews collective_views(OpKind op, const MatmulOperands& mm, void* staging, int rank, int world) {
  switch (op) {
    case OpKind::kMatmulAllReduce:
      return {mm.c, mm.c};
    case OpKind::kMatmulReduceScatter:
      return {mm.c, Tensor::matrix(staging, mm.c.dtype, mm.a.rows, mm.c.cols, mm.c.cols)};
    case OpKind::kAllGatherMatmul:
      return {Tensor::matrix(staging, mm.a.dtype, world * mm.a.rows, mm.a.cols, mm.a.cols), mm.a};
    case OpKind::kMatmulAllGather:
      return {mm.c, rows_of(mm.c, rank * mm.a.rows, mm.a.rows)};
    default:
      IRIS_ASSERT(false, "not a fused op");
      return {};
  }
}

// The iris::ccl collective of an op's unfused path, in one place: its sizing, preamble, checks and call, each
// with the auto config (and the sum: the reducing ops' only reduction). Before 2026-12-06 four switches over
// the op each picked the collective anew (sizing, preamble, checks, run).
struct UnfusedCollective {
  ccl::WorkspaceNeeds (*needs)(const Tensor& out, const Tensor& in, int world);
  void (*preamble)(Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws);
  // The call's own checks, without its launch (ccl::detail::check_*_call).
  void (*check)(const Context& ctx, const Tensor& out, const Tensor& in, const ccl::Workspace& ws);
  void (*call)(Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws, cudaStream_t stream);
  ccl::OpKind kind;  // the collective
  bool before_gemm;  // all_gather_matmul gathers A, then multiplies; the others reduce or gather C after the GEMM
};

template <bool kBeforeGemm>
constexpr UnfusedCollective kUnfusedAllGather{
    [](const Tensor& out, const Tensor& in, int world) { return ccl::all_gather_needs(out, in, ccl::Config{}, world); },
    [](Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws) {
      ccl::all_gather_preamble(ctx, out, in, ccl::Config{}, ws);
    },
    [](const Context& ctx, const Tensor& out, const Tensor& in, const ccl::Workspace& ws) {
      ccl::detail::check_all_gather_call(ctx, out, in, ccl::Config{}, ws);
    },
    [](Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws, cudaStream_t stream) {
      ccl::all_gather(ctx, out, in, ccl::Config{}, ws, stream);
    },
    ccl::OpKind::kAllGather,
    kBeforeGemm};

const UnfusedCollective& unfused_collective(OpKind op) {
  static constexpr UnfusedCollective all_reduce{
      [](const Tensor& out, const Tensor& in, int world) {
        return ccl::all_reduce_needs(out, in, ccl::Config{}, world);
      },
      [](Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws) {
        ccl::all_reduce_preamble(ctx, out, in, ccl::Config{}, ws);
      },
      [](const Context& ctx, const Tensor& out, const Tensor& in, const ccl::Workspace& ws) {
        ccl::detail::check_all_reduce_call(ctx, out, in, ccl::Config{}, ws);
      },
      [](Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws, cudaStream_t stream) {
        ccl::all_reduce(ctx, out, in, ccl::Config{}, ws, stream);
      },
      ccl::OpKind::kAllReduce,
      false};
  static constexpr UnfusedCollective reduce_scatter{
      [](const Tensor& out, const Tensor& in, int world) {
        return ccl::reduce_scatter_needs(out, in, ccl::Config{}, world);
      },
      [](Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws) {
        ccl::reduce_scatter_preamble(ctx, out, in, ccl::Config{}, ws);
      },
      [](const Context& ctx, const Tensor& out, const Tensor& in, const ccl::Workspace& ws) {
        ccl::detail::check_reduce_scatter_call(ctx, out, in, ccl::Config{}, ws);
      },
      [](Context& ctx, const Tensor& out, const Tensor& in, ccl::Workspace& ws, cudaStream_t stream) {
        ccl::reduce_scatter(ctx, out, in, ccl::Config{}, ws, stream);
      },
      ccl::OpKind::kReduceScatter,
      false};
  switch (op) {
    case OpKind::kMatmulAllReduce:
      return all_reduce;
    case OpKind::kMatmulReduceScatter:
      return reduce_scatter;
    case OpKind::kAllGatherMatmul:
      return kUnfusedAllGather<true>;
    case OpKind::kMatmulAllGather:
      return kUnfusedAllGather<false>;
    default:  // all_gather_matmul_k_sharded is never unfused
      IRIS_ASSERT(false, "no unfused path");
      return all_reduce;
  }
}

// The unfused path's collective (run_unfused) sized ahead, as iris::ccl's auto plans it for a fresh
// workspace; the views' addresses do not matter (the staging is not allocated yet).
ccl::WorkspaceNeeds collective_needs(OpKind op, const MatmulOperands& mm, int world) {
  const CollectiveViews v = collective_views(op, mm, nullptr, 0, world);
  return unfused_collective(op).needs(v.out, v.in, world);
}

// Every plan's last step. An unfused call holds its collective's workspace. The ops whose collective runs
// in place on C (matmul_all_reduce, matmul_all_gather) then stage nothing of their own, where the band
// pipeline's slots would go unused (matmul_all_reduce one_shot's are W copies of C, 8 at W = 8): a
// workspace that never held staging allocates it at the first preamble that needs it. The others keep
// the band pipeline's staging, which holds what run_unfused puts there (collective_views: the M x N
// product, at most 2(W - 1) bands of M/W rows, for matmul_reduce_scatter; the gathered A, the same
// buffer, for all_gather_matmul), because a workspace's arrays never grow: a smaller one would make the
// same workspace refuse the banded call of the same shape. One rank runs its GEMM alone (single_rank_gemm)
// and stages nothing (matmul_all_reduce atomic would take 6 bytes per element of C for float32
// accumulators and results). Locks and flags are still sized, so that a workspace refuses the same calls
// with the same messages at any world size and on either path.
void finish_plan(FusedPlan& p, const MatmulOperands& mm, int world_size) {
  if (p.unfused) {
    p.collective = collective_needs(p.sig.op, mm, world_size);
    if (p.sig.op == OpKind::kMatmulAllReduce || p.sig.op == OpKind::kMatmulAllGather) p.needs.staging_bytes = 0;
  }
  if (world_size == 1) p.needs.staging_bytes = 0;
}

}  // namespace

int default_comm_sms(int device_sms) { return std::max(1, device_sms / 8); }

GemmTile select_fused_tile(int64_t m, int64_t n, int64_t k, bool b_is_nk, int sm_count) {
  const GemmTile t = select_gemm_tile(m, n, k, b_is_nk, sm_count);
  return std::find(kFusedTiles.begin(), kFusedTiles.end(), t) != kFusedTiles.end() ? t : kGemmTileTiny;
}

void FusedConfig::validate(int world_size, OpKind op) const {
  IRIS_CHECK_ARG(world_size >= 1, "world_size must be at least 1, got ", world_size);
  if (!auto_tile()) {  // a tile set by hand: every block size, whole
    auto positive = [](const char* field, int v) {
      IRIS_CHECK_ARG(v > 0, field, " must be positive, got ", v,
                     " (or leave block_size_m, block_size_n and block_size_k all 0 for the tile chosen by shape)");
    };
    positive("block_size_m", block_size_m);
    positive("block_size_n", block_size_n);
    positive("block_size_k", block_size_k);
    IRIS_CHECK_ARG(block_size_m == 64 || block_size_m == 128 || block_size_m == 256,
                   "block_size_m must be 64, 128 or 256 (a Hopper wgmma tile), got ", block_size_m);
    IRIS_CHECK_ARG(block_size_n % 16 == 0 && block_size_n <= 256,
                   "block_size_n must be a multiple of 16 up to 256 (a Hopper wgmma tile), got ", block_size_n);
    IRIS_CHECK_ARG(block_size_k % 16 == 0 && block_size_k <= 256,
                   "block_size_k must be a multiple of 16 up to 256 (a Hopper wgmma tile), got ", block_size_k);
  }
  IRIS_CHECK_ARG(gemm_sms >= 0, "gemm_sms must be 0 (automatic) or positive, got ", gemm_sms);
  IRIS_CHECK_ARG(comm_sms >= 0, "comm_sms must be 0 (automatic) or positive, got ", comm_sms);
  IRIS_CHECK_ARG(min_band_tiles >= 0, "min_band_tiles must be 0 (automatic) or positive, got ", min_band_tiles);
  // matmul_all_reduce's alone: the other ops ignore it, so a config shared with them may hold any variant.
  IRIS_CHECK_ARG(op != OpKind::kMatmulAllReduce || all_reduce_variant == AllReduceVariant::kAtomic ||
                     all_reduce_variant == AllReduceVariant::kSpinlock ||
                     all_reduce_variant == AllReduceVariant::kOneShot ||
                     all_reduce_variant == AllReduceVariant::kTwoShot,
                 "all_reduce_variant must be atomic, spinlock, one_shot or two_shot for matmul_all_reduce, got ",
                 ccl::variant_name(all_reduce_variant));
}

FusedPlan plan_matmul_all_reduce(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  const OpKind op = OpKind::kMatmulAllReduce;
  const char* name = ccl::op_name(op);
  validate_common(op, mm, config, world_size, device_sms);
  const int64_t m = mm.a.rows;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, "M x N, M = the rows of A");
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms, m, n, mm.a.cols);
  size_tiles(p, m, n);
  p.sig.dtype = mm.c.dtype;  // the partial products cross ranks in C's type
  p.sig.variant = config.all_reduce_variant;
  switch (config.all_reduce_variant) {
    case AllReduceVariant::kOneShot:
      p.unfused = pick_bands(m, n, kOneShotBands, p.tile, p.min_band_tiles) == 1;
      break;
    case AllReduceVariant::kTwoShot:
      p.unfused = !band_pays(ceil_div(m, world_size), n, p.tile, p.min_band_tiles);
      break;
    default:  // atomic, spinlock
      p.unfused = pick_bands(m, n, kOneShotBands, p.tile, p.min_band_tiles) == 1;
  }
  p.unfused = p.unfused && world_size > 1;
  const size_t t = static_cast<size_t>(p.tiles);
  const size_t w = static_cast<size_t>(world_size);
  const size_t mn = static_cast<size_t>(m * n);
  const size_t esz = mm.c.element_size();
  switch (config.all_reduce_variant) {
    case AllReduceVariant::kAtomic:
    case AllReduceVariant::kSpinlock: {
      // Ready by source, arrivals by (tile, source), done by tile, then (spinlock) the first-writer marks
      // by tile or (atomic) the accumulators-zeroed words by owner; the owned tiles' float32 accumulators,
      // then their results in C's type.
      const bool spin = config.all_reduce_variant == AllReduceVariant::kSpinlock;
      const size_t owned = static_cast<size_t>(ceil_div(p.tiles, world_size));
      const size_t tile_elems = static_cast<size_t>(p.tile.m) * static_cast<size_t>(p.tile.n);
      p.needs.flags = w + w * t + t + (spin ? t : w);
      p.needs.staging_bytes = align256(owned * tile_elems * sizeof(float)) + align256(owned * tile_elems * esz);
      break;
    }
    case AllReduceVariant::kOneShot:  // ready by source, data by (source, band); W slots of M x N
      p.needs.flags = w + w * kOneShotBands;
      p.needs.staging_bytes = w * align256(mn * esz);
      break;
    case AllReduceVariant::kTwoShot:  // the ring's, then gathered by (source, sub-band); W gather slots
      p.needs.flags = w + (w - 1) * kRingSubBands + w * kRingSubBands;
      p.needs.staging_bytes = (2 * (w - 1) + w) * align256(static_cast<size_t>(ceil_div(m, world_size) * n) * esz);
      break;
    default:
      IRIS_ASSERT(false, "FusedConfig::validate admits only the fused variants");
  }
  finish_plan(p, mm, world_size);
  return p;
}

FusedPlan plan_matmul_reduce_scatter(const MatmulOperands& mm, const FusedConfig& config, int world_size,
                                     int device_sms) {
  const OpKind op = OpKind::kMatmulReduceScatter;
  const char* name = ccl::op_name(op);
  validate_common(op, mm, config, world_size, device_sms);
  const int64_t m = mm.a.rows;
  const int64_t n = gemm_n(mm);
  IRIS_CHECK_ARG(m % world_size == 0, name, ": M = ", m, " (the rows of A) is not a multiple of the world size ",
                 world_size, "; each rank receives M / world_size rows.");
  const int64_t rows = m / world_size;
  check_c_rows(name, mm, rows,
               str_cat("M / world_size x N: rank r receives rows [r*", rows, ", (r+1)*", rows, ") of the ", m, "x", n,
                       " product"));
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms, m, n, mm.a.cols);
  size_tiles(p, m, n);  // each rank's GEMM computes the whole M x N partial product
  p.sig.dtype = mm.c.dtype;
  p.unfused = world_size > 1 && !band_pays(rows, n, p.tile, p.min_band_tiles);
  // Ready, then data by (ring step, sub-band); W - 1 send and W - 1 receive slots of M/W x N.
  const size_t w = static_cast<size_t>(world_size);
  p.needs.flags = w + (w - 1) * kRingSubBands;
  p.needs.staging_bytes = 2 * (w - 1) * align256(static_cast<size_t>(rows * n) * mm.c.element_size());
  finish_plan(p, mm, world_size);
  return p;
}

FusedPlan plan_all_gather_matmul(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  const OpKind op = OpKind::kAllGatherMatmul;
  const char* name = ccl::op_name(op);
  validate_common(op, mm, config, world_size, device_sms);
  const int64_t m_rank = mm.a.rows;
  const int64_t m = m_rank * world_size;
  const int64_t k = mm.a.cols;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, str_cat("world_size * M_rank x N: the gathered rows of every rank's ", m_rank, "-row A"));
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms, m, n, k);
  size_tiles(p, m, n);
  p.sig.dtype = mm.a.dtype;  // A crosses ranks
  p.unfused = world_size > 1 && !band_pays(m_rank, n, p.tile, p.min_band_tiles);
  // Ready and data by source; W slots of M_rank x K back to back (A gathered).
  p.needs.flags = 2 * static_cast<size_t>(world_size);
  p.needs.staging_bytes = align256(static_cast<size_t>(m * k) * mm.a.element_size());
  finish_plan(p, mm, world_size);
  return p;
}

FusedPlan plan_all_gather_matmul_k_sharded(const MatmulOperands& mm, const FusedConfig& config, int world_size,
                                           int device_sms) {
  const OpKind op = OpKind::kAllGatherMatmulKSharded;
  const char* name = ccl::op_name(op);
  validate_common(op, mm, config, world_size, device_sms, /*k_sharded=*/true);
  const int64_t m = mm.a.rows;
  const int64_t k = mm.a.cols * world_size;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, "M x N, M = the rows of A");
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms, m, n, k);
  size_tiles(p, m, n);
  p.sig.dtype = mm.a.dtype;  // A crosses ranks
  // No iris::ccl collective gathers columns: below the threshold the pipeline runs one band (the whole
  // gather, then one GEMM), the sequential order, so the plan is never unfused.
  p.unfused = false;
  // Ready by source, data by (source, band); the gathered M x K A.
  p.needs.flags = static_cast<size_t>(world_size) * (1 + kAllGatherBands);
  p.needs.staging_bytes = align256(static_cast<size_t>(m * k) * mm.a.element_size());
  finish_plan(p, mm, world_size);
  return p;
}

FusedPlan plan_matmul_all_gather(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  const OpKind op = OpKind::kMatmulAllGather;
  const char* name = ccl::op_name(op);
  validate_common(op, mm, config, world_size, device_sms);
  const int64_t m_rank = mm.a.rows;
  const int64_t m = m_rank * world_size;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, str_cat("world_size * M_rank x N: every rank's ", m_rank, " rows of A @ B, by rank"));
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms, m_rank, n, mm.a.cols);
  size_tiles(p, m_rank, n);  // each rank's GEMM computes its own M/W x N block
  p.sig.rows = m;            // the signature names the gathered output
  p.sig.dtype = mm.c.dtype;
  p.unfused = world_size > 1 && pick_bands(m_rank, n, kAllGatherBands, p.tile, p.min_band_tiles) == 1;
  // Ready by source, data by (source, band); W slots of M_rank x N.
  p.needs.flags = static_cast<size_t>(world_size) * (1 + kAllGatherBands);
  p.needs.staging_bytes = static_cast<size_t>(world_size) * align256(static_cast<size_t>(m_rank * n) * mm.c.element_size());
  finish_plan(p, mm, world_size);
  return p;
}

size_t heap_bytes(const FusedPlan& plan, size_t guard_bytes) {
  return ccl::heap_bytes(plan.needs, guard_bytes) + ccl::heap_bytes(plan.collective, guard_bytes);
}

void check_fused_workspace(const FusedPlan& plan, const FusedWorkspace& ws) {
  const char* name = ccl::op_name(plan.sig.op);
  ccl::detail::require_op(name, preamble_name(plan.sig.op), ws, plan.sig.op);
  ws.check_capacity(plan.needs);  // whether or not the preamble ran: never index past an array
}

namespace {

using PlanFn = FusedPlan (*)(const MatmulOperands&, const FusedConfig&, int, int);

bool symmetric_view(const Context& ctx, const Tensor& t);

// The plan as this context runs it: matmul_all_gather and matmul_all_reduce two_shot record whether C is
// on the symmetric heap (peers then write their rows straight into it) when they run the band pipeline
// with peers. An unfused call runs the iris::ccl collective, which writes no peer's C, and one rank its
// GEMM alone: their C may move from call to call (a decode step's, in buffers taken in turn).
FusedPlan context_plan(PlanFn plan, const Context& ctx, const MatmulOperands& mm, const FusedConfig& config) {
  FusedPlan p = plan(mm, config, ctx.world_size(), ccl::detail::sm_count(ctx));
  // Operands that lie in the heap lie within one live allocation of this rank's (Context::heap_span_problem):
  // a C described larger than it was allocated would take the GEMM's and the peers' writes into the next
  // heap object.
  const Tensor bias = Tensor::vector(const_cast<void*>(mm.bias), mm.c.dtype, mm.bias != nullptr ? mm.c.cols : 0);
  const std::pair<const char*, const Tensor*> operands[] = {{"A", &mm.a}, {"B", &mm.b}, {"C", &mm.c}, {"bias", &bias}};
  for (auto [name, t] : operands) {
    const std::string where = ctx.heap_span_problem(t->data, t->span_bytes());
    IRIS_CHECK_ARG(where.empty(), ccl::op_name(p.sig.op), ": ", name, " ", t->describe(), " ", where);
    const std::string reach = t->span_bytes() > 0 ? ctx.reach_problem(t->data) : std::string();
    IRIS_CHECK_ARG(reach.empty(), ccl::op_name(p.sig.op), ": ", name, " ", t->describe(), " ", reach);
  }
  // Contiguous too: peers write with this rank's geometry, and the signature holds no row stride.
  const bool peers_write_c = ctx.world_size() > 1 && !p.unfused &&
                             (p.sig.op == OpKind::kMatmulAllGather ||
                              (p.sig.op == OpKind::kMatmulAllReduce && p.sig.variant == AllReduceVariant::kTwoShot));
  if (peers_write_c) p.sig.symmetric_output = mm.c.stride == mm.c.cols && symmetric_view(ctx, mm.c);
  if (p.sig.symmetric_output) p.sig.output_offset = static_cast<int64_t>(ctx.offset_of(mm.c.data));
  return p;
}

void prepare_collective(Context& ctx, const FusedPlan& p, const MatmulOperands& mm, FusedWorkspace& ws);
GemmArguments single_rank_gemm(const MatmulOperands& mm);

// The most events (Context::ordering_event) one call of the band pipeline marks at `world` ranks: the
// reduce-scatter ring forks at each sub-band of its W - 1 steps that push, two_shot once more per sub-band,
// and joins (W kRingSubBands + 1); one_shot and the tile reductions fork after each band and join
// (kOneShotBands + 1); matmul_all_gather the same with kAllGatherBands; all_gather_matmul forks and joins;
// k_sharded forks, marks each band's local copy and joins (kAllGatherBands + 2). One more: a join that throws
// after its mark leaves the call forked, and launch's join_if_forked marks again.
size_t max_marks_per_call(int world) {
  return static_cast<size_t>(
             std::max({world * kRingSubBands + 1, kOneShotBands + 1, kAllGatherBands + 1, kAllGatherBands + 2})) +
         1;
}

// The band pipeline's arrays, and the collective's when the call runs unfused. Every rank computes the
// same plan, so all prepare the collective or none.
void preamble(PlanFn plan, Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  const iris::detail::DeviceGuard device(ctx.device());
  FusedPlan p;
  ccl::detail::prepare_everywhere(ctx, ws, [&] { return p = context_plan(plan, ctx, mm, config); });
  if (p.unfused) prepare_collective(ctx, p, mm, ws);
  // The band pipeline's side stream and ordering events, created here rather than at the first call, which
  // may be captured in a CUDA graph (DESIGN: everything is created up front; nothing on the hot path). Also
  // by an unfused preamble: a banded call of another shape may use its workspace (check_fused_workspace
  // asks for capacity, not for the plan the preamble saw). Agreed, so that a rank whose creation fails tells
  // its peers (a reviewer's note), which would otherwise go on to calls that wait for it.
  if (ctx.world_size() > 1)
    iris::detail::agree(ctx.bootstrap(), "to create its side stream and ordering events", [&] {
      ctx.side_stream();
      ctx.ordering_event(max_marks_per_call(ctx.world_size()) - 1);
    });
  // One rank's GEMM may split K (this rank's memory: nothing to agree on).
  if (ctx.world_size() == 1)
    ws.reserve_gemm_workspace(ops::workspace_size(single_rank_gemm(mm)), preamble_name(p.sig.op));
}

// ---- the band pipeline ---------------------------------------------------------------------------------
//
// Each call forks the context's side stream off the caller's stream and joins it back before returning:
// GEMMs run on the caller's stream with gemm_sms SMs, communication (copies to peers, flag waits) on the
// side stream with comm_sms blocks, so the transfer of one band of output rows overlaps the GEMM of the
// next. Events order the two streams; flags (fused_kernels.hpp) order the ranks.

// The GEMM core's arguments for c = a @ mm.b (+ bias) on `sms` SMs (0: all); a is some rows of A or of a
// gathered A.
GemmArguments gemm_arguments(const MatmulOperands& mm, const Tensor& a, const Tensor& c, const void* bias,
                             GemmTile tile, int sms) {
  GemmArguments g;
  g.a = a;
  g.b = mm.b;
  g.b_is_nk = mm.b_is_nk;
  g.c = c;
  g.bias = bias;
  g.tile = tile;
  g.sm_count = sms;
  return g;
}

void run_gemm(const MatmulOperands& mm, const Tensor& a, const Tensor& c, const void* bias, GemmTile tile, int sms,
              const Tensor& source, cudaStream_t stream) {
  if (a.rows == 0) return;
  GemmArguments g = gemm_arguments(mm, a, c, bias, tile, sms);
  g.source = source;
  ops::gemm(g, nullptr, stream);
}

class Pipeline {
 public:
  Pipeline(Context& ctx, const FusedPlan& plan, bool copy_engine, FusedWorkspace& ws, cudaStream_t stream)
      : ctx_(ctx), plan_(plan), copy_engine_(copy_engine), main_(stream), side_(ctx.side_stream()) {
    sync_.ctx = ccl::detail::call_context(ctx, ws, plan.sig);  // the call words: fused_begin_kernel stores them
    sync_.state = ws.block_state();
    sync_.flags = ws.flags();
    staging_ = static_cast<char*>(ws.staging());
    locks_ = ws.locks();
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int rank() const { return ctx_.rank(); }
  int world() const { return ctx_.world_size(); }
  cudaStream_t main() const { return main_; }
  cudaStream_t side() const { return side_; }
  char* staging(size_t byte_offset) const { return staging_ + byte_offset; }
  uint32_t* locks() const { return locks_; }
  const detail::FusedSync& sync() const { return sync_; }
  template <typename T>
  T* on(T* local, int to) const {
    return to == rank() ? local : ctx_.translate(local, to);
  }

  // Flags: [0, W) ready (by source rank), then data and reduced words per op. The call starts with
  // the epoch and a wait on the caller's stream until every peer is ready for it, so that nothing on
  // the side stream needs an SM before its copies (with copy engines, the GEMM holds every SM).
  void begin_and_wait_ready() {
    detail::launch_fused_begin(sync_, 0, main_);
    detail::launch_fused_wait(sync_, 0, world(), 1, rank(), detail::FusedWait::kReady, main_);
  }
  void wait(cudaStream_t s, int first, int count, int stride, int skip, detail::FusedWait what) {
    detail::launch_fused_wait(sync_, first, count, stride, skip, what, s);
  }
  void signal(cudaStream_t s, int index, int to) { detail::launch_fused_signal(sync_, index, to, s); }
  // An event that completes with everything enqueued on `s` so far: the call's next event of the
  // context's pool (Context::ordering_event), so that a call creates no event once the pool holds as
  // many as the call needs. Every mark is waited on within the call.
  cudaEvent_t mark(cudaStream_t s) {
    cudaEvent_t e = ctx_.ordering_event(events_used_++);
    IRIS_CUDA_CHECK(cudaEventRecord(e, s));
    return e;
  }
  // What is enqueued on `s` from now on happens after `e`.
  void after(cudaEvent_t e, cudaStream_t s) { IRIS_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0)); }
  // Everything enqueued on `from` so far happens before what is enqueued on `to` from now on.
  void order(cudaStream_t from, cudaStream_t to) { after(mark(from), to); }
  void fork() {
    order(main_, side_);
    forked_ = true;
  }
  void join() {
    order(side_, main_);
    forked_ = false;
  }
  // A call that throws after fork() joins the side stream on its way out (launch), so that a capture can
  // still end and later work on the caller's stream follows what the side stream holds.
  void join_if_forked() {
    if (forked_) join();
  }

  // C rows = A rows @ B (+ source) (+ bias) on the caller's stream; source (GemmArguments::source), when
  // given, has C's shape and type.
  void gemm(const MatmulOperands& mm, const Tensor& a, const Tensor& c, bool with_bias, int sms,
            const Tensor& source = {}) {
    run_gemm(mm, a, c, with_bias ? mm.bias : nullptr, plan_.tile, sms, source, main_);
  }
  // A band to a peer (or to C) from the side stream: the copy engines, or copy kernels of comm_sms
  // blocks beside the GEMM (FusedConfig::copy_engine).
  void push(const Tensor& from, void* to, int64_t to_stride_elems) {
    if (!copy_engine_) {
      copy(side_, from, to, to_stride_elems, plan_.comm_sms);
      return;
    }
    if (from.rows == 0) return;
    const size_t width = static_cast<size_t>(from.cols) * from.element_size();
    // A one-row view may carry any stride (a size-1 dimension's): it has no second row, so its pitch is its
    // width (cudaMemcpy2D refuses a pitch below the width).
    auto pitch = [&](int64_t stride) {
      return from.rows <= 1 ? width : static_cast<size_t>(stride) * from.element_size();
    };
    IRIS_CUDA_CHECK(cudaMemcpy2DAsync(to, pitch(to_stride_elems), from.data, pitch(from.stride), width,
                                      static_cast<size_t>(from.rows), cudaMemcpyDefault, side_));
  }
  // The band `part` (in this rank's heap) into the same place of every peer's heap, in ring order from
  // the side stream, each push followed by flags[flag] = epoch on that peer.
  void push_to_peers(const Tensor& part, int flag) {
    for (int j = 1; j < world(); ++j) {
      const int t = (rank() + j) % world();
      push(part, on(static_cast<char*>(part.data), t), part.stride);
      signal(side_, flag, t);
    }
  }
  // A copy kernel of `blocks` blocks on stream s (either side may be a peer's heap); it writes nothing once the
  // workspace has stopped (a wait of this call gave up, say), unlike a copy-engine push.
  void copy(cudaStream_t s, const Tensor& from, void* to, int64_t to_stride_elems, int blocks) {
    detail::Copy2D c;
    c.src = from.data;
    c.dst = to;
    c.rows = from.rows;
    const int64_t esz = static_cast<int64_t>(from.element_size());
    c.row_bytes = from.cols * esz;
    c.src_pitch = from.stride * esz;
    c.dst_pitch = to_stride_elems * esz;
    if (sync_.ctx.call_words != nullptr) c.stop = sync_.ctx.call_words + 2;
    detail::launch_copy_2d(c, blocks, s);
  }

 private:
  Context& ctx_;
  const FusedPlan& plan_;
  bool copy_engine_;
  cudaStream_t main_;
  cudaStream_t side_;
  detail::FusedSync sync_;
  char* staging_ = nullptr;
  uint32_t* locks_ = nullptr;
  size_t events_used_ = 0;  // this call's marks so far: Context::ordering_event [0, events_used_)
  bool forked_ = false;     // the side stream holds work not yet joined to main_
};

// Rows of band b when `total` rows are cut into `bands` bands of ceil(total / bands) rows.
struct Band {
  int64_t row0 = 0;
  int64_t rows = 0;
};
Band band(int64_t total, int bands, int b) {
  const int64_t per = ceil_div(total, bands);
  const int64_t r0 = std::min<int64_t>(total, per * b);
  return {r0, std::min<int64_t>(total, r0 + per) - r0};
}

// Blocks of the kernels that run after the GEMMs, alone on the device (reductions, copies into C).
int tail_blocks(const FusedPlan& p) { return p.gemm_sms + p.comm_sms; }

// One rank: every op is its GEMM (C = A @ B + bias), with the GEMM core's own tile and split of K, as
// ops::gemm would run it (without peers nothing is indexed by tile), in FusedWorkspace::gemm_workspace().
GemmArguments single_rank_gemm(const MatmulOperands& mm) {
  GemmArguments g = gemm_arguments(mm, mm.a, mm.c, mm.bias, GemmTile{}, 0);
  g.split_k = 0;
  return g;
}

// The GEMM core's and the unfused collective's refusals, named after the op, and a workspace that falls short
// also the preamble that sizes it. The lock and flag refusals keep their type and DESIGN.md's sentence whole,
// between the two: its advice of smaller block sizes is not what mends an array that the op's preamble sizes
// from the operands (before 2026-12-07 they came as they were, without the op or its preamble).
template <typename Fn>
void refusals_of(OpKind op, Fn&& fn) {
  auto with_advice = [op](const std::exception& e) {
    return str_cat(ccl::op_name(op), ": ", e.what(), " Call ", preamble_name(op), " with these operands first.");
  };
  try {
    fn();
  } catch (const SyncArrayTooSmall& e) {
    throw SyncArrayTooSmall(with_advice(e));
  } catch (const WorkspaceTooSmall& e) {
    throw WorkspaceTooSmall(with_advice(e));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str_cat(ccl::op_name(op), ": ", e.what()));
  }
}

// The GEMM in the workspace the preamble reserved for these operands. The GEMM core plans the call once
// and checks that capacity right before launch (the sized ops::gemm).
void run_gemm_in(OpKind op, const GemmArguments& g, FusedWorkspace& ws, cudaStream_t stream) {
  refusals_of(op, [&] { ops::gemm(g, ws.gemm_workspace(), ws.gemm_workspace_bytes(), stream); });
}

// What run_gemm_in checks, without the launch: for a GEMM that runs after communication, so that a call
// it refuses is refused before anything is in flight.
void check_gemm_in(OpKind op, const GemmArguments& g, const FusedWorkspace& ws) {
  refusals_of(op, [&] {
    const size_t need = ops::workspace_size(g);  // can_implement's refusal, as gemm() would throw it
    if (auto why = detail::check_gemm_workspace(need, ws.gemm_workspace(), ws.gemm_workspace_bytes()); !why.empty())
      throw WorkspaceTooSmall(why);
  });
}

// The sub-bands of each band of the ring below: the same count for every band, on every rank.
int ring_sub_bands(int64_t band_rows, int64_t n, const FusedPlan& plan) {
  return pick_bands(band_rows, n, kRingSubBands, plan.tile, plan.min_band_tiles);
}

// matmul_reduce_scatter, and the reduce-scatter half of matmul_all_reduce two_shot: a ring whose
// additions happen in the GEMM's epilogue (GemmArguments::source), so no pass over the partial
// products is left after the last GEMM. Band t of the M rows (`band_rows` each) is rank t's. At step
// j = 0 .. W-1 rank r computes band t = r - 1 - j (mod W): at step 0 its own partial product of the band,
// at step j > 0 its partial plus the running sum of steps 0 .. j-1 that rank r - 1 pushed into its
// receive slot j - 1, so that the sum of band t passes ranks t + 1, t + 2, ..., and its last step, on
// rank t itself, writes the band's total straight into `out`. Each step runs in up to kRingSubBands
// sub-bands of whole tile rows (pick_bands over a band): sub-band s of step j waits only for sub-band s
// of the upstream step, which the upstream rank computed a sub-band or more earlier, so the GEMM
// streams while each finished sub-band travels (copy engines, or copy kernels beside the GEMM).
// Each band's sum is rounded to C's type once per hop (W - 1 times, as a ring reduce-scatter does) and
// always in the same order, so results repeat bitwise. The bias is added at step 0, once per band.
// Staging: W - 1 send slots (this rank's step j result) then W - 1 receive slots (rank r - 1's), each
// band_rows x N on 256 bytes; C's type. Flags: [0, W) ready, then data of (step j, sub-band s) at
// W + j * kRingSubBands + s, written by rank r - 1.
// `finished(s, sub_band)` runs after the GEMM of the own band's sub-band s (its rows of `out`).
template <typename Finished>
void reduce_scatter_ring(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan, int64_t band_rows,
                         const Tensor& out, Finished&& finished) {
  const int me = pl.rank(), w = pl.world();
  const int64_t m = mm.a.rows, n = mm.c.cols;
  const DType ct = mm.c.dtype;
  const size_t esz = dtype_size(ct);
  const size_t slot_bytes = align256(static_cast<size_t>(band_rows * n) * esz);
  const int next = (me + 1) % w;
  const int subs = ring_sub_bands(band_rows, n, plan);
  auto slot = [&](bool recv, int j) { return pl.staging((static_cast<size_t>(recv ? w - 1 : 0) + j) * slot_bytes); };
  auto data_flag = [&](int j, int s) { return w + j * kRingSubBands + s; };
  pl.begin_and_wait_ready();
  for (int j = 0; j < w; ++j) {
    const int t = ((me - 1 - j) % w + w) % w;
    const int64_t t0 = std::min<int64_t>(m, band_rows * t);
    const int64_t t_rows = std::min<int64_t>(m, t0 + band_rows) - t0;
    for (int s = 0; s < subs; ++s) {
      const TileRowBand sb = tile_row_band(t_rows, plan.tile.m, subs, s);
      const int64_t off = sb.row0 * n * static_cast<int64_t>(esz);
      const Tensor c =
          j + 1 < w ? Tensor::matrix(slot(false, j) + off, ct, sb.rows, n, n) : rows_of(out, sb.row0, sb.rows);
      Tensor upstream;
      if (j > 0) {
        pl.wait(pl.main(), data_flag(j - 1, s), 1, 1, -1, detail::FusedWait::kData);
        upstream = Tensor::matrix(slot(true, j - 1) + off, ct, sb.rows, n, n);
      }
      pl.gemm(mm, rows_of(mm.a, t0 + sb.row0, sb.rows), c, j == 0, plan.gemm_sms, upstream);
      if (j + 1 < w) {
        pl.fork();
        pl.push(c, pl.on(slot(true, j) + off, next), n);
        pl.signal(pl.side(), data_flag(j, s), next);
      } else {
        finished(s, sb);
      }
    }
  }
}

void run_matmul_reduce_scatter(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan) {
  reduce_scatter_ring(pl, mm, plan, mm.a.rows / pl.world(), mm.c, [](int, const TileRowBand&) {});
  pl.join();
}

// two_shot: the ring reduce-scatter above leaves the own band's total in its rows of C, sub-band by
// sub-band; each is then pushed from there to every peer (straight into the peers' C when C is on the
// symmetric heap and contiguous, else into gather slot `rank` of their staging) while the next
// sub-band computes, and flagged. Every rank waits for the peers' sub-bands and, without a symmetric
// C, copies them from its gather slots into C. Every rank thus holds the owner's bits. Staging: as
// above (bands of ceil(M/W) rows), then W gather slots. Flags: as above, then gathered (source r,
// sub-band s) at W + (W - 1) kRingSubBands + r kRingSubBands + s.
void run_matmul_all_reduce_two_shot(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan, bool c_symmetric) {
  const int me = pl.rank(), w = pl.world();
  const int64_t m = mm.a.rows, n = mm.c.cols;
  const int64_t band_rows = ceil_div(m, w);
  const size_t esz = mm.c.element_size();
  const size_t slot_bytes = align256(static_cast<size_t>(band_rows * n) * esz);
  char* gather = pl.staging(2 * static_cast<size_t>(w - 1) * slot_bytes);
  auto gathered_flag = [&](int r, int s) { return w + (w - 1) * kRingSubBands + r * kRingSubBands + s; };
  const Band mine = band(m, w, me);
  const Tensor own = rows_of(mm.c, mine.row0, mine.rows);
  const int subs = ring_sub_bands(band_rows, n, plan);
  reduce_scatter_ring(pl, mm, plan, band_rows, own, [&](int s, const TileRowBand& sb) {
    pl.fork();
    const Tensor part = rows_of(own, sb.row0, sb.rows);
    for (int j = 1; j < w; ++j) {
      const int t = (me + j) % w;
      char* to = c_symmetric ? static_cast<char*>(part.data)
                             : gather + static_cast<size_t>(me) * slot_bytes + sb.row0 * n * static_cast<int64_t>(esz);
      // A rank whose band is empty (M < W ceil(M / W)) pushes nothing: its part's data is one past C's end,
      // which need not translate to a peer (offset_of refuses a C that ends the heap), and a push of no
      // rows returns anyway. Its signal still counts.
      if (part.rows > 0) pl.push(part, pl.on(to, t), c_symmetric ? mm.c.stride : n);
      pl.signal(pl.side(), gathered_flag(me, s), t);
    }
  });
  for (int j = 1; j < w; ++j) {
    const int r = (me - j + w) % w;  // rank r's sub-bands reach us in its ring order
    pl.wait(pl.main(), gathered_flag(r, 0), subs, 1, -1, detail::FusedWait::kReduced);
    if (c_symmetric) continue;
    const Band b = band(m, w, r);
    const Tensor from = Tensor::matrix(gather + static_cast<size_t>(r) * slot_bytes, mm.c.dtype, b.rows, n, n);
    pl.copy(pl.main(), from, rows_of(mm.c, b.row0, b.rows).data, mm.c.stride, tail_blocks(plan));
  }
  pl.join();
}

// one_shot: the GEMM computes the whole partial product into this rank's receive slot, in up to
// kOneShotBands bands of whole tile rows (pick_bands); after each band the side stream pushes it into
// the same slot of every peer and signals. Each rank then reduces all W slots in rank order into C: every rank gets
// bitwise-identical results. Staging: W slots of M x N. Flags: [0, W) ready, [W, W + W * kOneShotBands)
// data by (source, band).
void run_matmul_all_reduce_one_shot(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan) {
  const int me = pl.rank(), w = pl.world();
  const int64_t m = mm.a.rows, n = mm.c.cols;
  const DType ct = mm.c.dtype;
  const size_t esz = dtype_size(ct);
  const size_t slot_bytes = align256(static_cast<size_t>(m * n) * esz);
  const int bands = pick_bands(m, n, kOneShotBands, plan.tile, plan.min_band_tiles);
  char* mine = pl.staging(me * slot_bytes);
  pl.begin_and_wait_ready();
  for (int b = 0; b < bands; ++b) {
    const TileRowBand rows = tile_row_band(m, plan.tile.m, bands, b);
    const Tensor part = Tensor::matrix(mine + rows.row0 * n * esz, ct, rows.rows, n, n);
    pl.gemm(mm, rows_of(mm.a, rows.row0, rows.rows), part, me == 0, plan.gemm_sms);
    pl.fork();
    pl.push_to_peers(part, w + me * kOneShotBands + b);
  }
  for (int s = 0; s < w; ++s)
    if (s != me) pl.wait(pl.main(), w + s * kOneShotBands, bands, 1, -1, detail::FusedWait::kData);
  detail::ReduceSlots r;
  r.slots = pl.staging(0);
  r.slot_elems = static_cast<int64_t>(slot_bytes / esz);
  r.world = w;
  r.rows = m;
  r.cols = n;
  r.out = mm.c.data;
  r.out_stride = mm.c.stride;
  detail::launch_reduce_slots(r, ct, tail_blocks(plan), pl.main());
  pl.join();
}

// atomic and spinlock: the tile reduction of fused_kernels.hpp. The GEMM computes this rank's partial
// product straight into C in up to kOneShotBands bands of whole tile rows; after each band a push
// kernel on the side stream (comm_sms blocks beside a GEMM on gemm_sms SMs: a copy engine cannot add)
// adds the band's tiles into their owners' accumulators; the last band's push, with no GEMM beside it,
// runs on the caller's stream with every SM. Once every band is pushed, the finish kernel
// reduces the owned tiles and copies the others from their owners. atomic zeroes the owned
// accumulators once every peer is ready for the call, and then tells its peers (flags[zeroed(rank)] =
// epoch), whose push kernels wait for that word of each owner before they add: the zeroing may not
// come before the ready wait, because a peer may still be reading this rank's res of the previous call
// (the finish kernel's copies), and a call of another shape puts acc where res was. (Before 2026-12-06 it
// came first: a larger call after a smaller one on one workspace could zero tiles a peer was still
// copying, with no error; found by reading the code.) spinlock needs no zeroing (the first writer of a
// call overwrites). Staging: acc (float32), then res (C's type), each holding ceil(T / W) tiles of
// block_size_m x block_size_n.
void run_matmul_all_reduce_tiles(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan, bool spinlock) {
  const int me = pl.rank(), w = pl.world();
  const int64_t m = mm.a.rows, n = mm.c.cols;
  const int64_t tiles_n = ceil_div(n, plan.tile.n);
  const size_t owned = static_cast<size_t>(ceil_div(plan.tiles, w));
  const size_t tile_elems = static_cast<size_t>(plan.tile.m) * static_cast<size_t>(plan.tile.n);
  const size_t acc_bytes = owned * tile_elems * sizeof(float);
  detail::TileReduce r;
  r.ctx = pl.sync().ctx;
  r.state = pl.sync().state;
  r.flags = pl.sync().flags;
  r.locks = pl.locks();
  r.c = mm.c.data;
  r.c_stride = mm.c.stride;
  r.rows = m;
  r.cols = n;
  r.block_m = plan.tile.m;
  r.block_n = plan.tile.n;
  r.tiles = plan.tiles;
  r.acc = reinterpret_cast<float*>(pl.staging(0));
  r.res = pl.staging(align256(acc_bytes));
  r.spinlock = spinlock;
  const int bands = pick_bands(m, n, kOneShotBands, plan.tile, plan.min_band_tiles);
  pl.begin_and_wait_ready();
  if (!spinlock) {
    IRIS_CUDA_CHECK(cudaMemsetAsync(r.acc, 0, acc_bytes, pl.main()));
    pl.signal(pl.main(), static_cast<int>(w + w * plan.tiles + plan.tiles + me), -1);  // zeroed(me): fused_kernels.hpp
  }
  for (int b = 0; b < bands; ++b) {
    const TileRowBand band_b = tile_row_band(m, plan.tile.m, bands, b);
    pl.gemm(mm, rows_of(mm.a, band_b.row0, band_b.rows), rows_of(mm.c, band_b.row0, band_b.rows), me == 0,
            plan.gemm_sms);
    r.tile_begin = band_b.tile_row0 * tiles_n;
    r.tile_end = (band_b.tile_row0 + band_b.tile_rows) * tiles_n;
    if (b + 1 < bands) {
      pl.fork();
      detail::launch_tile_push(r, mm.c.dtype, plan.comm_sms, pl.side());
    } else {
      // No GEMM left to run beside: the last band's push takes every SM, after the earlier pushes (the
      // finish overwrites C, which they read).
      if (bands > 1) pl.join();
      detail::launch_tile_push(r, mm.c.dtype, tail_blocks(plan), pl.main());
    }
  }
  detail::launch_tile_finish(r, mm.c.dtype, tail_blocks(plan), pl.main());
}

// all_gather_matmul: the side stream pushes this rank's A into slot `rank` of every peer's gather buffer
// (W slots of M_rank x K back to back) and signals it. Meanwhile the GEMM computes the rows of C that
// need only the local A, then each peer's rows from the gather buffer, peer by peer in ring order (rank
// r - 1 first, the order the peers push in): a late peer holds back the GEMMs of the peers after it.
// Flags: [0, W) ready, [W, 2W) data by source.
void run_all_gather_matmul(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan) {
  const int me = pl.rank(), w = pl.world();
  const int64_t mr = mm.a.rows, k = mm.a.cols;
  const size_t slot_bytes = static_cast<size_t>(mr * k) * mm.a.element_size();  // a multiple of 16 (K % 8 == 0)
  pl.begin_and_wait_ready();
  pl.fork();
  for (int j = 1; j < w; ++j) {
    const int t = (me + j) % w;
    pl.push(mm.a, pl.on(pl.staging(me * slot_bytes), t), k);
    pl.signal(pl.side(), w + me, t);
  }
  pl.gemm(mm, mm.a, rows_of(mm.c, me * mr, mr), true, plan.gemm_sms);
  for (int j = 1; j < w; ++j) {
    const int s = (me - j + w) % w;  // peer s pushes to us at its step j
    pl.wait(pl.main(), w + s, 1, 1, -1, detail::FusedWait::kData);
    const Tensor a = Tensor::matrix(pl.staging(s * slot_bytes), mm.a.dtype, mr, k, k);
    pl.gemm(mm, a, rows_of(mm.c, s * mr, mr), true, plan.gemm_sms);
  }
  pl.join();
}

// matmul_all_gather: the GEMM computes this rank's M_rank rows in up to kAllGatherBands bands of whole
// tile rows (pick_bands); after each band the side stream pushes it to every peer and signals. When C is
// on the symmetric heap and contiguous, the bands go straight from this rank's rows of C into the same
// rows of every peer's C. Otherwise they go through slot `rank` of the staging (W slots of M_rank x N): the side stream also
// copies each band into C, and each rank copies the peers' slots into C once their bands arrived.
// Flags: [0, W) ready, then data by (source, band).
void run_matmul_all_gather(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan, bool c_symmetric) {
  const int me = pl.rank(), w = pl.world();
  const int64_t mr = mm.a.rows, n = mm.c.cols;
  const DType ct = mm.c.dtype;
  const size_t esz = dtype_size(ct);
  const size_t slot_bytes = align256(static_cast<size_t>(mr * n) * esz);
  const int bands = pick_bands(mr, n, kAllGatherBands, plan.tile, plan.min_band_tiles);
  char* mine = pl.staging(me * slot_bytes);
  pl.begin_and_wait_ready();
  for (int b = 0; b < bands; ++b) {
    const TileRowBand rows = tile_row_band(mr, plan.tile.m, bands, b);
    const Tensor c_rows = rows_of(mm.c, me * mr + rows.row0, rows.rows);
    const Tensor part = c_symmetric ? c_rows : Tensor::matrix(mine + rows.row0 * n * esz, ct, rows.rows, n, n);
    pl.gemm(mm, rows_of(mm.a, rows.row0, rows.rows), part, true, plan.gemm_sms);
    pl.fork();
    if (!c_symmetric) pl.push(part, c_rows.data, mm.c.stride);
    pl.push_to_peers(part, w + me * kAllGatherBands + b);
  }
  for (int j = 1; j < w; ++j) {
    const int s = (me - j + w) % w;
    pl.wait(pl.main(), w + s * kAllGatherBands, bands, 1, -1, detail::FusedWait::kData);
    if (c_symmetric) continue;
    const Tensor from = Tensor::matrix(pl.staging(s * slot_bytes), ct, mr, n, n);
    pl.copy(pl.main(), from, rows_of(mm.c, s * mr, mr).data, mm.c.stride, tail_blocks(plan));
  }
  pl.join();
}

// all_gather_matmul_k_sharded: the staging is the gathered A (M x K, K = W K_r, row-major), rank r's
// columns at [r K_r, (r+1) K_r). In up to kAllGatherBands bands of whole tile rows (pick_bands), the side
// stream copies this rank's columns of the band into its own gathered A, then pushes them into the same
// place of every peer's and signals data (source, band). The GEMM of a band, on the caller's stream,
// waits for that local copy (an event) and for every peer's data flag of the band, and runs over the
// whole K, while the next band is on its way. Flags: [0, W) ready, then data by (source, band).
void run_all_gather_matmul_k_sharded(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& plan) {
  const int me = pl.rank(), w = pl.world();
  const int64_t m = mm.a.rows, kr = mm.a.cols, k = kr * w;
  const int64_t esz = static_cast<int64_t>(mm.a.element_size());
  const int bands = pick_bands(m, mm.c.cols, kAllGatherBands, plan.tile, plan.min_band_tiles);
  char* gathered = pl.staging(0);
  pl.begin_and_wait_ready();
  pl.fork();
  std::vector<cudaEvent_t> local(static_cast<size_t>(bands));
  for (int b = 0; b < bands; ++b) {
    const TileRowBand rows = tile_row_band(m, plan.tile.m, bands, b);
    const Tensor mine = rows_of(mm.a, rows.row0, rows.rows);
    char* to = gathered + (rows.row0 * k + me * kr) * esz;  // 16-byte aligned: K_r % 8 == 0
    pl.push(mine, to, k);
    local[b] = pl.mark(pl.side());
    for (int j = 1; j < w; ++j) {
      const int t = (me + j) % w;
      pl.push(mine, pl.on(to, t), k);
      pl.signal(pl.side(), w + me * kAllGatherBands + b, t);
    }
  }
  for (int b = 0; b < bands; ++b) {
    const TileRowBand rows = tile_row_band(m, plan.tile.m, bands, b);
    pl.after(local[b], pl.main());
    pl.wait(pl.main(), w + b, w, kAllGatherBands, me, detail::FusedWait::kData);
    const Tensor a = Tensor::matrix(gathered + rows.row0 * k * esz, mm.a.dtype, rows.rows, k, k);
    pl.gemm(mm, a, rows_of(mm.c, rows.row0, rows.rows), true, plan.gemm_sms);
  }
  pl.join();
}

// ---- below the fusion threshold (FusedPlan::unfused; the views and sizing are with the plans) --------

// The unfused path's GEMM: the GEMM core's own tile and split of K, every SM. Bias: on rank 0's
// partial product for the reducing ops (added once), on every rank's GEMM for the gathering ones.
GemmArguments unfused_gemm(const FusedPlan& p, const MatmulOperands& mm, const CollectiveViews& v, int rank) {
  switch (p.sig.op) {
    case OpKind::kMatmulAllReduce:
      return gemm_arguments(mm, mm.a, mm.c, rank == 0 ? mm.bias : nullptr, GemmTile{}, 0);
    case OpKind::kMatmulReduceScatter:
      return gemm_arguments(mm, mm.a, v.in, rank == 0 ? mm.bias : nullptr, GemmTile{}, 0);
    case OpKind::kAllGatherMatmul:
      return gemm_arguments(mm, v.out, mm.c, mm.bias, GemmTile{}, 0);
    default:  // matmul_all_gather
      return gemm_arguments(mm, mm.a, v.in, mm.bias, GemmTile{}, 0);
  }
}
GemmArguments unfused_gemm_split_k(const FusedPlan& p, const MatmulOperands& mm, const CollectiveViews& v, int rank) {
  GemmArguments g = unfused_gemm(p, mm, v, rank);
  g.split_k = 0;  // the automatic split: K cut into slices where the output's tiles leave SMs idle
  return g;
}

// Collective, from the op's preamble when its plan is unfused: the collective's own preamble. The
// collective's workspace is the op's own business: auto may pick another variant for another size, whose
// arrays the workspace prepared for an earlier call cannot hold. Then every rank raised together (the
// fused preamble has just agreed on the operands, so the collective's parameters and capacities are the
// same everywhere), and every rank frees it, once no call may still use it, reserves it anew with arrays
// that hold both what it held and this call's needs, and prepares it.
void prepare_collective(Context& ctx, const FusedPlan& p, const MatmulOperands& mm, FusedWorkspace& ws) {
  const CollectiveViews v = collective_views(p.sig.op, mm, ws.staging(), ctx.rank(), ctx.world_size());
  auto prepare = [&] { unfused_collective(p.sig.op).preamble(ctx, v.out, v.in, ws.collective()); };
  // The GEMM's split-K partials, this rank's memory, in an agreed step: cudaMalloc can fail on one rank only (a
  // GPU fuller than its peers', a KV cache's), whose peers would otherwise wait in the collective's preamble
  // below until the bootstrap timeout.
  iris::detail::agree(ctx.bootstrap(), "to allocate its GEMM's split-K workspace", [&] {
    ws.reserve_gemm_workspace(ops::workspace_size(unfused_gemm_split_k(p, mm, v, ctx.rank())), preamble_name(p.sig.op));
  });
  if (!ws.collective().prepared()) {
    prepare();
    return;
  }
  try {
    prepare();
  } catch (const WorkspaceTooSmall&) {
    // Whether a call of the workspace was captured is this rank's own state: agreed, so that a rank that
    // refuses tells its peers, which would otherwise wait for it in the release below.
    iris::detail::agree(ctx.bootstrap(), "to re-allocate its collective workspace", [&] {
      if (ws.captured()) throw_captured(preamble_name(p.sig.op), "collective");
    });
    // Arrays grown to hold both what the workspace held and this call's needs: prepared afresh for this
    // call only, an earlier shape's call would no longer fit (before 2026-12-06: the preambles of shapes whose
    // collectives need more staging and more flags, in turn, each freed what the other needed).
    ccl::WorkspaceNeeds grown = ws.collective().capacity();
    grown.include(p.collective);  // the plan's (collective_needs), which heap_bytes counts too
    ccl::ContextWorkspaceHost host(ctx);
    ws.collective().release(host);  // waits until no call of any rank still reaches the arrays
    ccl::reserve_workspace(ctx, ws.collective(), grown);
    prepare();
  }
}

// The unfused path's two steps, built once per call: the collective's views and the GEMM's arguments.
struct UnfusedSteps {
  CollectiveViews v;
  GemmArguments gemm;
};
UnfusedSteps unfused_steps(const Context& ctx, const MatmulOperands& mm, const FusedPlan& p, const FusedWorkspace& ws) {
  const CollectiveViews v = collective_views(p.sig.op, mm, ws.staging(), ctx.rank(), ctx.world_size());
  return {v, unfused_gemm_split_k(p, mm, v, ctx.rank())};
}

// Everything the unfused path's two steps check, before either launches (launch): the collective's
// workspace prepared, the GEMM's workspace, then the collective's call as iris::ccl checks it. Otherwise
// a refusal of the second step would come after the first had written C (the reducing ops, or
// matmul_all_gather) or a peer's gather buffer (all_gather_matmul). Each refusal names the op and, for a
// workspace that falls short, its preamble (refusals_of).
void check_unfused(const Context& ctx, const UnfusedSteps& s, OpKind op, const FusedWorkspace& ws) {
  IRIS_CHECK_ARG(ws.collective().prepared(), ccl::op_name(op),
                 ": this call is below the fusion threshold and runs its GEMM, then the iris::ccl collective, "
                 "but the workspace was prepared for the band pipeline only; call ",
                 preamble_name(op), " with these operands first.");
  // Another op's preamble on this FusedWorkspace moves its collective over to that op's collective: named
  // here as this op's, not as the collective's own refusal (which names a call and a preamble never made).
  const UnfusedCollective& collective = unfused_collective(op);
  const ccl::OpKind mine = collective.kind, last = ws.collective().signature().op;
  IRIS_CHECK_ARG(last == mine, ccl::op_name(op),
                 ": this call is below the fusion threshold and runs its GEMM, then the iris::ccl ", ccl::op_name(mine),
                 ", but another op's preamble on this workspace last prepared its collective for ", ccl::op_name(last),
                 "; call ", preamble_name(op),
                 " with these operands first (on every rank), or give each op a FusedWorkspace of its own.");
  check_gemm_in(op, s.gemm, ws);
  refusals_of(op, [&] { collective.check(ctx, s.v.out, s.v.in, ws.collective()); });
}

// The GEMM and the collective, one after the other on the caller's stream (the gathering op of A
// gathers first); check_unfused has checked both.
void run_unfused(Context& ctx, const UnfusedSteps& s, OpKind op, FusedWorkspace& ws, cudaStream_t stream) {
  const UnfusedCollective& collective = unfused_collective(op);
  if (!collective.before_gemm) run_gemm_in(op, s.gemm, ws, stream);
  collective.call(ctx, s.v.out, s.v.in, ws.collective(), stream);
  if (collective.before_gemm) run_gemm_in(op, s.gemm, ws, stream);
}

// True when every byte of the view is in this rank's heap (so peers can write it).
bool symmetric_view(const Context& ctx, const Tensor& t) {
  if (t.numel() == 0 || !ctx.is_symmetric(t.data)) return false;
  const char* last = static_cast<const char*>(t.data) + t.span_bytes() - 1;
  return ctx.is_symmetric(last);
}

// Everything a call checks of its arguments against its workspace before the comparison across ranks
// (checked_call); below the threshold, launch() then runs check_unfused.
void check_launch(const Context& ctx, const MatmulOperands& mm, const FusedPlan& p, const FusedWorkspace& ws) {
  check_fused_workspace(p, ws);
  ccl::detail::require_of_context(ctx, ccl::op_name(p.sig.op), preamble_name(p.sig.op), ws);
  // A call below the threshold runs the iris::ccl collective, which writes no peer's C: it takes its C
  // wherever it is, whatever the last preamble saw (check_unfused checks what it needs instead, after the
  // comparison across ranks, so that calls that differ are named as such first). But whether a device error
  // was raised since the collective's workspace was prepared is this rank's own state (a banded call's
  // preamble since starts the band arrays over, not the collective's): checked here, within the comparison
  // (IRIS_CHECK_CALLS), so that a rank that refuses tells its peers. Before 2026-12-06 only check_unfused
  // read it: the peers went on into the collective's own checked call, which met that rank's next collective
  // call instead ("Calls differ across ranks"), and the ranks fell out of step (without IRIS_CHECK_CALLS the
  // peers still launch, and time out waiting for that rank).
  if (p.unfused && ctx.world_size() > 1 && ws.collective().prepared())
    ccl::detail::require_no_timeout_since_prepare(ctx, ccl::op_name(p.sig.op), preamble_name(p.sig.op),
                                                  ws.collective());
  if (p.unfused) return;
  // Every rank must take the path its peers prepared for (see OpSignature::symmetric_output). Peers write
  // their rows at the offset of the C they prepared with: a C elsewhere would miss them, and they would
  // land on whatever lies at that offset now.
  if (p.sig.symmetric_output != ws.signature().symmetric_output) {
    // The variant first: a variant that stages would miss the C its peers prepared for wherever this C is
    // (before 2026-12-07 a one_shot call with a C off the heap blamed only where C was).
    const bool variant_stages = p.sig.op == OpKind::kMatmulAllReduce && p.sig.variant != AllReduceVariant::kTwoShot;
    const std::string why =
        p.sig.symmetric_output ? std::string("C is on the symmetric heap")
        : variant_stages       ? str_cat("this call's variant (", ccl::variant_name(p.sig.variant),
                                         ") stages peers' rows instead of writing them into C")
        : !symmetric_view(ctx, mm.c)
            ? std::string("C is not on the symmetric heap")
            : std::string("C is not contiguous (peers write rows straight into a contiguous C only)");
    throw InvalidArgument(str_cat(ccl::op_name(p.sig.op), ": ", why, " but the workspace was prepared with C ",
                                  ws.signature().symmetric_output
                                      ? "on it"
                                      : "not on it, or for a call below the fusion threshold (which writes no "
                                        "peer's C)",
                                  "; call ", preamble_name(p.sig.op), " again with these operands."));
  }
  IRIS_CHECK_ARG(p.sig.output_offset == ws.signature().output_offset, ccl::op_name(p.sig.op), ": C is at heap offset ",
                 p.sig.output_offset, " but the workspace was prepared with C at heap offset ",
                 ws.signature().output_offset,
                 " (peers write their rows straight into C at the offset they prepared with); call ",
                 preamble_name(p.sig.op), " again with this C.");
}

// The band pipeline of a fused op with peers, on pl's streams (launch: between the call's begin and end).
void run_pipeline(Pipeline& pl, const MatmulOperands& mm, const FusedPlan& p, const FusedConfig& config) {
  switch (p.sig.op) {
    case OpKind::kMatmulAllReduce:
      switch (config.all_reduce_variant) {
        case AllReduceVariant::kOneShot:
          run_matmul_all_reduce_one_shot(pl, mm, p);
          break;
        case AllReduceVariant::kTwoShot:
          run_matmul_all_reduce_two_shot(pl, mm, p, p.sig.symmetric_output);
          break;
        default:  // atomic, spinlock (FusedConfig::validate admits nothing else)
          run_matmul_all_reduce_tiles(pl, mm, p, config.all_reduce_variant == AllReduceVariant::kSpinlock);
      }
      break;
    case OpKind::kMatmulReduceScatter:
      run_matmul_reduce_scatter(pl, mm, p);
      break;
    case OpKind::kAllGatherMatmul:
      run_all_gather_matmul(pl, mm, p);
      break;
    case OpKind::kMatmulAllGather:
      run_matmul_all_gather(pl, mm, p, p.sig.symmetric_output);
      break;
    case OpKind::kAllGatherMatmulKSharded:
      run_all_gather_matmul_k_sharded(pl, mm, p);
      break;
    default:
      IRIS_ASSERT(false, "not a fused op");
  }
}

void launch(PlanFn plan_fn, Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
            cudaStream_t stream) {
  const iris::detail::DeviceGuard device(ctx.device());
  const FusedPlan p = ccl::detail::checked_call(
      ctx, ws,
      [&] {
        FusedPlan plan = context_plan(plan_fn, ctx, mm, config);
        stream = ctx.op_stream(ccl::op_name(plan.sig.op), stream);
        check_launch(ctx, mm, plan, ws);
        return plan;
      },
      [](const FusedPlan& plan) -> const ccl::OpSignature& { return plan.sig; });
  if (mm.c.numel() == 0) return;
  // The paths' own checks, after the comparison across ranks (IRIS_CHECK_CALLS), so that calls that differ
  // are named as such first; every rank then has the same plan and preamble, and all refuse here or none.
  // And before the workspace is marked captured: a call refused during a capture put nothing in the graph.
  std::optional<GemmArguments> single;
  std::optional<UnfusedSteps> unfused;
  if (ctx.world_size() == 1) {
    single = single_rank_gemm(mm);
    check_gemm_in(p.sig.op, *single, ws);
  } else if (p.unfused) {
    unfused = unfused_steps(ctx, mm, p, ws);
    check_unfused(ctx, *unfused, p.sig.op, ws);
  }
  const cudaStream_t on = stream;  // ctx.op_stream's, above
  if (iris::detail::capturing(on)) ws.mark_captured();
  // The GEMM's split-K buffer, the flags and the staging serve one call at a time: a call on another stream
  // than the last waits for it (iris::CallOrder). The pipeline's side stream forks off `on` after this wait
  // and joins it before end_call.
  ws.begin_call(on);
  std::optional<Pipeline> pipeline;
  try {
    if (single) {
      run_gemm_in(p.sig.op, *single, ws, on);
    } else if (unfused) {
      run_unfused(ctx, *unfused, p.sig.op, ws, on);
    } else {
      run_pipeline(pipeline.emplace(ctx, p, config.copy_engine, ws, on), mm, p, config);
    }
  } catch (...) {
    // A throw once some of the call's work is queued (a launch or a copy that failed, or an error left
    // from earlier work that a launch check reports): the side stream joins the caller's (a capture cannot
    // end with it unjoined, and later work on the caller's stream must follow it), and the call ends, so
    // that the workspace's next call on another stream waits for what was queued (CallOrder). Errors here
    // are dropped: the first one is what the caller hears.
    auto quietly = [](auto step) {
      try {
        step();
      } catch (...) {
      }
    };
    quietly([&] {
      if (pipeline) pipeline->join_if_forked();
    });
    quietly([&] { ws.end_call(on); });
    throw;
  }
  ws.end_call(on);
}


}  // namespace

FusedWorkspace::FusedWorkspace(FusedWorkspace&& other) noexcept
    : ccl::Workspace(std::move(other)),
      collective_(std::move(other.collective_)),
      gemm_workspace_(std::exchange(other.gemm_workspace_, nullptr)),
      gemm_workspace_bytes_(std::exchange(other.gemm_workspace_bytes_, 0)),
      captured_(std::exchange(other.captured_, false)) {}

FusedWorkspace& FusedWorkspace::operator=(FusedWorkspace&& other) noexcept {
  if (this == &other) return *this;
  free_gemm_workspace();
  ccl::Workspace::operator=(std::move(other));
  collective_ = std::move(other.collective_);
  gemm_workspace_ = std::exchange(other.gemm_workspace_, nullptr);
  gemm_workspace_bytes_ = std::exchange(other.gemm_workspace_bytes_, 0);
  captured_ = std::exchange(other.captured_, false);
  return *this;
}

FusedWorkspace::~FusedWorkspace() { free_gemm_workspace(); }

void FusedWorkspace::free_gemm_workspace() noexcept {
  if (gemm_workspace_ != nullptr) cudaFree(gemm_workspace_);
  gemm_workspace_ = nullptr;
  gemm_workspace_bytes_ = 0;
}

void FusedWorkspace::reserve_gemm_workspace(size_t bytes, const char* op) {
  if (bytes <= gemm_workspace_bytes_) return;
  if (captured_) throw_captured(op, "GEMM split-K");
  IRIS_CUDA_CHECK(cudaDeviceSynchronize());  // no GEMM of an earlier call still uses the old buffer
  free_gemm_workspace();
  IRIS_CUDA_CHECK(cudaMalloc(&gemm_workspace_, bytes));
  gemm_workspace_bytes_ = bytes;
}

void FusedWorkspace::release(ccl::WorkspaceHost& host) {
  // One wait, for this rank's device (so no GEMM still uses the split-K buffer either) and for every rank,
  // then both workspaces' arrays are freed. A rank whose device failed frees too, so that its peers do not
  // wait for it, and raises the error last.
  std::exception_ptr failed;
  try {
    ccl::Workspace::release_all(host, {&collective_, static_cast<ccl::Workspace*>(this)});
  } catch (...) {
    failed = std::current_exception();
  }
  // A release that freed nothing (ranks out of step, arrays of another heap) leaves both workspaces as they
  // were: a graph captured with them may still run, on the split-K buffer too, and growing them stays refused.
  if (failed && (any_array() != nullptr || collective_.any_array() != nullptr)) std::rethrow_exception(failed);
  free_gemm_workspace();
  captured_ = false;
  if (failed) std::rethrow_exception(failed);
}

void matmul_all_reduce_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  preamble(plan_matmul_all_reduce, ctx, mm, config, ws);
}
void matmul_all_reduce(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream) {
  launch(plan_matmul_all_reduce, ctx, mm, config, ws, stream);
}

void matmul_reduce_scatter_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config,
                                    FusedWorkspace& ws) {
  preamble(plan_matmul_reduce_scatter, ctx, mm, config, ws);
}
void matmul_reduce_scatter(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                           cudaStream_t stream) {
  launch(plan_matmul_reduce_scatter, ctx, mm, config, ws, stream);
}

void all_gather_matmul_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  preamble(plan_all_gather_matmul, ctx, mm, config, ws);
}
void all_gather_matmul(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream) {
  launch(plan_all_gather_matmul, ctx, mm, config, ws, stream);
}

void matmul_all_gather_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  preamble(plan_matmul_all_gather, ctx, mm, config, ws);
}
void matmul_all_gather(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream) {
  launch(plan_matmul_all_gather, ctx, mm, config, ws, stream);
}

void all_gather_matmul_k_sharded_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config,
                                          FusedWorkspace& ws) {
  preamble(plan_all_gather_matmul_k_sharded, ctx, mm, config, ws);
}
void all_gather_matmul_k_sharded(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                                 cudaStream_t stream) {
  launch(plan_all_gather_matmul_k_sharded, ctx, mm, config, ws, stream);
}

}  // namespace iris::ops
