// iris::ops fused GEMM + communication ops: the host layer (configs, workspace plans, preambles,
// validation) and the ops. Each op overlaps a Hopper GEMM (the core of iris/ops/gemm.hpp) with the
// communication of its output (or input), band by band.
//
//   iris::ops::MatmulOperands mm{.a = a, .b = w, .c = c, .b_is_nk = true};
//   iris::ops::FusedConfig config;                       // tiles, SM split, variant
//   iris::ops::FusedWorkspace ws;
//   iris::ops::matmul_all_reduce_preamble(ctx, mm, config, ws);   // collective, once (allocates)
//   iris::ops::matmul_all_reduce(ctx, mm, config, ws, stream);    // stream-ordered
//
// The caller's stream: `stream`, or ctx.stream() for nullptr (not CUDA's legacy default stream: pass
// cudaStreamLegacy for that); one of another device than ctx.device() is refused (Context::op_stream), as are
// operands the device cannot reach (Context::reach_problem).
// How they overlap (the band pipeline, src/ops/fused.cc). Each call forks the context's side stream
// (Context::side_stream) off the caller's stream with events and joins it back before returning. The
// GEMM core runs on the caller's stream, one band of output rows at a time; the communication of a
// finished band (a copy-engine copy into peers' staging, or copy kernels of comm_sms blocks beside a
// GEMM on gemm_sms SMs, then a release flag) runs on the side stream while the GEMM computes the next. Ranks order
// their writes with epoch-valued flags: a rank writes into a peer's staging only after the peer said
// "ready" for the call, so no barrier, no re-zeroing, and CUDA-graph replays work. The overlap is by
// band (W bands, or 4), not yet by single tile inside one persistent kernel. The lock array is sized
// per tile as below and checked; only spinlock indexes it.
//   matmul_all_reduce one_shot   GEMM in up to 4 bands of whole tile rows; each band pushed to every
//                                peer; each rank reduces the W partial products in rank order
//                                (bitwise-identical results).
//   matmul_all_reduce two_shot   the ring reduce-scatter of matmul_reduce_scatter over bands of
//                                ceil(M/W) rows; each sub-band of the own band's total is pushed to
//                                every peer (straight into the peers' C when C is on the symmetric
//                                heap and contiguous) while the next computes. Every rank holds the
//                                owners' bits.
//   matmul_all_reduce atomic     GEMM into C in up to 4 bands of tile rows; after each band, comm_sms
//                                blocks beside the GEMM add its tiles into their owners' (rank t % W)
//                                float32 accumulators with 16-byte remote reductions; each owner then
//                                adds its own partial, publishes, and every rank copies the tiles it
//                                does not own. The communication always runs on SMs (copy_engine does
//                                not apply: a copy engine cannot add). The float32 atomics flush
//                                subnormal sums (below 2^-126) to zero, as all_reduce atomic's.
//   matmul_all_reduce spinlock   the same, but a peer takes the owner's per-tile lock and overwrites
//                                (first writer of the call) or adds into the accumulator with plain
//                                accesses. For both, every rank gets the owner's bits (identical across
//                                ranks); with W > 2 peers' partials reach an accumulator in varying order.
//   matmul_reduce_scatter        a ring over the W bands whose additions run in the GEMM's epilogue
//                                (GemmArguments::source): at step j rank r computes band r - 1 - j, adds
//                                the running sum rank r - 1 pushed, and pushes the result on to r + 1,
//                                in two sub-bands so one travels while the next computes; the last
//                                step is the own band, whose total the GEMM writes straight into C.
//                                The sum is rounded to C's type once per hop, in a fixed order.
//   all_gather_matmul            A pushed to every peer while the GEMM computes the local rows; then
//                                the GEMM of each peer's rows once they have arrived, peer by peer in
//                                ring order (rank r - 1 first): a late peer holds back the peers after it.
//   matmul_all_gather            GEMM in up to 4 bands of whole tile rows; each band copied into C and
//                                pushed to every peer (straight into the peers' C when C is on the
//                                symmetric heap and contiguous).
//   all_gather_matmul_k_sharded  (Iris's all_gather_matmul: A sharded on K) each rank writes its columns of A
//                                into its column block of every rank's gathered M x K A, in up to 4 bands
//                                of whole tile rows; the GEMM of a band of rows starts once every rank's
//                                columns of it arrived, while the next band is on its way. One GEMM over
//                                the whole K per band, as the sequential path's GEMM over the gathered A.
// A band GEMM must have FusedConfig::min_band_tiles tiles of work to pay for its launch (rows x cols over the
// tile's, rounded up: a band of a few rows counts a few rows' worth, not the whole tile row it touches);
// below, an op cuts fewer
// bands, down to the unfused order: one GEMM, then the iris::ccl collective (FusedPlan::unfused), which
// is faster than NCCL at the sizes where that happens. all_gather_matmul_k_sharded has no iris::ccl
// collective that gathers columns: below the threshold it runs one band (the whole gather, then one
// GEMM), which is the sequential order. With one rank every op is its GEMM, run as
// ops::gemm runs an automatic choice (the GEMM core's own tile, not block_size_m/n, and its automatic
// split of K). A workspace serves one stream at a time. Where peers write straight into C (C contiguous on the
// symmetric heap: matmul_all_gather, matmul_all_reduce two_shot), they write at the heap offset of their own C:
// the preamble records C's offset, which must be the same on every rank (else every rank raises), and a call
// with C at another offset is refused until the preamble has seen that C. Only the band pipeline with peers
// writes into peers' C: an unfused call (FusedPlan::unfused) and one rank take C anywhere, call after call.
//
// Shapes (W = world size; every rank passes the same shapes, dtypes and config):
//   matmul_all_reduce      C (M x N)   = sum over r of A_r (M x K) @ B_r (K x N)
//   matmul_reduce_scatter  C (M/W x N) = rows [rank*M/W, (rank+1)*M/W) of sum over r of A_r (M x K) @ B_r
//   all_gather_matmul      C (M x N)   = concat_rows over r of A_r (M/W x K), times this rank's B (K x N)
//   matmul_all_gather      C (M x N)   = concat_rows over r of A_r (M/W x K) @ B (K x N)
//   all_gather_matmul_k_sharded
//                          C (M x N)   = concat_columns over r of A_r (M x K_r) @ B (W K_r x N): A sharded on K
//                                        (rank r holds columns [r K_r, (r+1) K_r) of the M x W K_r A), every
//                                        rank the whole product; with the same B everywhere (Iris's form), the
//                                        same C everywhere
// B is given K x N, or N x K (as LLM layers store weights) with b_is_nk. A and B are bfloat16 or
// float16 (the same); C is A's type or float32; bias (optional) has N elements of C's type and is
// added once to the result: every rank passes the same bias, or none (the reducing ops take it from
// rank 0 or from the rank that owns a band, depending on the variant; the preamble refuses a bias on
// some ranks only). The GEMM core's layout rules hold: K and N multiples of 8, 16-byte aligned
// data and row strides. Unlike iris::ops::gemm, K is the per-rank K (matmul_all_reduce,
// matmul_reduce_scatter and all_gather_matmul_k_sharded shard K: the global K is W times it; B of
// all_gather_matmul_k_sharded has the global K).
//
// Workspace (an iris::ccl::Workspace: see iris/ccl/workspace.hpp for prepare, matches and the
// capacity errors). T = ceil(rows / block_size_m) * ceil(cols / block_size_n) over the output tile
// grid each rank's GEMM computes, with the plan's tile (FusedPlan::tile: the config's, or by default
// select_fused_tile's for the GEMM, so shapes that pick different tiles need different arrays): M x N
// (matmul_all_reduce, matmul_reduce_scatter, all_gather_matmul, all_gather_matmul_k_sharded) or M/W x N
// (matmul_all_gather). Every op has one lock word per tile and the block state every iris::ccl op has (8 + 3W
// words, by the world size alone; word 0 holds the call's epoch). Flags (64-bit, epoch-valued) and staging:
//   matmul_all_reduce one_shot           flags W + 4W (ready; data by source and band)  staging W slots of M x N
//   matmul_all_reduce two_shot           flags W + 2(W-1) + 2W (ready; data by ring step and sub-band;
//                                        gathered by source and sub-band)  staging 3W - 2 bands of ceil(M/W) x N
//   matmul_all_reduce atomic             flags W + W*T + T + W (ready; arrivals by tile and source; done;
//                                        accumulators zeroed, by owner)
//                                        staging ceil(T/W) tiles float32 + ceil(T/W) tiles of C's type
//   matmul_all_reduce spinlock           flags W + W*T + T + T (as atomic, but the first writer's mark by
//                                        tile in place of the zeroed words)
//   matmul_reduce_scatter                flags W + 2(W-1) (ready; data by ring step and sub-band)
//                                        staging 2(W-1) bands of M/W x N (sent and received sums)
//   all_gather_matmul                    flags 2W (ready, data)           staging M x K of A's type (W slots)
//   matmul_all_gather                    flags 5W (ready; data by band)   staging W slots of M_rank x N
//   all_gather_matmul_k_sharded          flags 5W (ready; data by band)   staging M x W K_r of A's type (the
//                                                                         gathered A, rank r's columns at r K_r)
// Below the fusion threshold (FusedPlan::unfused) matmul_all_reduce and matmul_all_gather stage nothing
// (their collective runs in place on C); matmul_reduce_scatter and all_gather_matmul keep the staging
// above, which holds what their unfused path puts there (the M x N product, the gathered A), so that the
// same workspace also serves the banded call of the shape. With one rank no op stages anything (its GEMM
// runs alone). Locks and flags keep the sizes above on every path.
// Staging holds C's type unless said otherwise; every slot and band starts on 256 bytes, but for
// all_gather_matmul's slots of A, back to back on 16 bytes (K is a multiple of 8: TMA's rows). The workspace
// signature holds the shape, K, world size, block sizes, the all_reduce variant, and the type that
// crosses ranks (C's; A's for the all_gather_matmul forms). The preamble allocates what is missing, keeps larger
// arrays and rejects smaller ones, e.g. a workspace prepared with 128x128 blocks for a 512x512 output
// (16 locks) used with 64x64 blocks (64 tiles):
//   Lock array too small: have 16 but need 64. Pre-allocate workspace with the smallest block sizes you intend to use.
// The ops check capacity again right before launch, whether or not the preamble ran, and then that the
// block sizes are a tile the fused kernels run (kFusedTiles).
//
// One workspace for calls of several shapes (a server's batch sizes or prefill chunks, each captured in a
// graph): the default tile changes with the shape, so the largest call's preamble need not size every array
// (at 2 ranks, matmul_all_reduce of 5120 x 8192 x 8192 takes 1280 locks in 128x256 tiles, 4096 rows 2048 in
// 128x128). Reserve the band pipeline's arrays for all of them first, then run every shape's preamble
// before any capture (an unfused shape's preamble grows the collective's workspace and the GEMM's split-K
// buffer, which it refuses once a call was captured):
//
//   iris::ccl::WorkspaceNeeds most;
//   for (const MatmulOperands& mm : shapes)
//     most.include(iris::ops::plan_matmul_all_reduce(mm, config, ctx.world_size(), device_sms).needs);
//   iris::ccl::reserve_workspace(ctx, ws, most);   // collective, on a fresh workspace
//   for (const MatmulOperands& mm : shapes) iris::ops::matmul_all_reduce_preamble(ctx, mm, config, ws);
//
// Not for the calls whose peers write straight into C (a banded matmul_all_reduce two_shot or
// matmul_all_gather with C contiguous on the symmetric heap): such a call runs only with the C its
// workspace's last preamble saw, so give each such shape a workspace of its own, or keep its C off the heap.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/tensor.hpp"
#include "iris/ops/gemm.hpp"

namespace iris::ops {

// The GEMM core's tiles the fused kernels run: those of kGemmTiles with 64 rows or more. The 16- and
// 32-row tiles of decode outputs serve the GEMM alone; a call too small for fusion (FusedPlan::unfused)
// runs its GEMM with the GEMM core's automatic tile, which takes them where they fit.
inline constexpr std::array<GemmTile, 4> kFusedTiles{kGemmTileLarge, kGemmTileSmall, kGemmTileSkinny, kGemmTileTiny};

// The tile a fused op runs for a rank's M x N x K GEMM when FusedConfig leaves the block sizes 0 (the
// default), and the block sizes to set by hand for the same choice: the GEMM core's choice
// (select_gemm_tile) when the fused kernels run it; for outputs of at most 32 rows, where that choice is
// a swapped 16- or 32-row decode tile, kGemmTileTiny (64x64: of the fused tiles, the one that wastes the
// fewest rows and gives the most tiles). Always one of kFusedTiles. Throws std::invalid_argument as
// select_gemm_tile does.
GemmTile select_fused_tile(int64_t m, int64_t n, int64_t k, bool b_is_nk = false, int sm_count = kGemmDefaultSmCount);

// A fused op's workspace: the arrays of its band pipeline (a ccl::Workspace: prepare, matches and the
// capacity checks apply to them) and, for calls too small for fusion to pay (FusedPlan::unfused), the
// workspace of the iris::ccl collective the op then runs after its GEMM, which the op's preamble
// prepares when its plan is unfused (re-allocating it, collectively, when a call's collective needs more
// than an earlier call's left: iris::ccl's auto may pick another variant for another size). Its staging
// is on the heap too: about the size of the collective's tensor, twice for all_gather (see
// iris/ccl/collectives.hpp), so size the heap for it where calls run unfused (heap_bytes(plan) below
// counts it).
// The unfused path's GEMM, and with one rank every op's GEMM, also gets device memory of this rank's own
// (cudaMalloc, not the heap) for the GEMM core's split-K partials (GemmArguments::split_k), sized by the
// preamble.
class FusedWorkspace : public ccl::Workspace {
 public:
  FusedWorkspace() = default;
  FusedWorkspace(FusedWorkspace&& other) noexcept;
  FusedWorkspace& operator=(FusedWorkspace&& other) noexcept;
  ~FusedWorkspace();  // frees the GEMM workspace (the heap arrays go with release() or the Context)

  ccl::Workspace& collective() { return collective_; }
  const ccl::Workspace& collective() const { return collective_; }
  void* gemm_workspace() const { return gemm_workspace_; }
  size_t gemm_workspace_bytes() const { return gemm_workspace_bytes_; }
  // Makes gemm_workspace() hold at least `bytes` (allocating; call with no GEMM of this workspace in flight).
  // Throws InvalidArgument naming `op` when that would re-allocate it after a call was captured (captured()).
  void reserve_gemm_workspace(size_t bytes, const char* op = "fused op");
  // Collective: frees every array, the collective's and the GEMM's too. A CUDA graph captured with the
  // workspace must not be replayed after it (its kernels hold the freed arrays). When it raises having freed
  // nothing (ranks out of step, arrays of another context's heap), the workspace is as it was, captured().
  void release(ccl::WorkspaceHost& host);
  // True once a call with this workspace was captured into a CUDA graph (until release()). The graph's
  // replays use the buffers the call was captured with, so from then on a preamble that would re-allocate
  // one (the GEMM's split-K buffer, or the collective's arrays of an unfused call) raises instead of
  // freeing it under the graph: give each captured shape a workspace of its own.
  bool captured() const { return captured_; }
  void mark_captured() { captured_ = true; }

 private:
  void free_gemm_workspace() noexcept;
  ccl::Workspace collective_;
  void* gemm_workspace_ = nullptr;
  size_t gemm_workspace_bytes_ = 0;
  bool captured_ = false;
};

// Communication SMs an op takes when FusedConfig::comm_sms is 0: one in eight of the device's (16 of
// an H100's or H200's 132), at least 1.
int default_comm_sms(int device_sms);

struct FusedConfig {
  // The GEMM tile (block_size_m x block_size_n outputs, block_size_k deep per stage); also the tile
  // of communication, so locks and flags are sized by the tile count. Hopper wgmma tiles: block_size_m
  // 64, 128 or 256; block_size_n and block_size_k multiples of 16 up to 256. All three 0 (the default):
  // the tile select_fused_tile advises for this rank's GEMM, resolved in the plan (FusedPlan::tile), so
  // the preamble and the call of one shape agree. On one H200 the large tile (128x256) is 2-8% slower
  // than 128x128 at K <= 4096 and 2-3x slower than the 64-row tiles at 128 rows (gemm_bench).
  int block_size_m = 0;
  int block_size_n = 0;
  int block_size_k = 0;
  // Moves each finished band to peers with the copy engines (cudaMemcpy2DAsync over NVLink, 397 GB/s
  // one way on 2 x H200 in BASELINES.md) instead of copy kernels: the GEMM keeps every SM. When false,
  // copy kernels of comm_sms blocks run beside a GEMM on gemm_sms SMs.
  bool copy_engine = true;
  // SMs the GEMM may occupy; 0 = all of them with copy_engine, else every SM not given to comm_sms.
  int gemm_sms = 0;
  // Blocks of the kernels that run beside the GEMM: the copy kernels when copy_engine is false, the
  // pushes of matmul_all_reduce atomic and spinlock always. 0 = default_comm_sms(device SMs), twice that
  // for atomic and spinlock: their pushes move float32 from SMs and limit the op. On 2 x H200 at
  // (8192, 8192, 8192), atomic / spinlock took 1987 / 2020 us with 16 blocks, 1655 / 1503 with 32 and
  // 1690 / 1584 with 48 (iris-bench --fused-comm-sms).
  int comm_sms = 0;
  // The fusion threshold: a band GEMM of fewer output tiles than this is not worth its own launch, so
  // the op cuts fewer bands, down to one GEMM followed by the communication (no overlap). Tiles of work:
  // a band's rows x cols over the tile's, rounded up (since 2026-12-05; before, every tile a band touched
  // counted whole, so bands of 1 to 32 rows in 64x64 tiles counted as many tiles as 64 rows, and decode
  // shapes ran the band pipeline, whose band GEMMs each read all of B). 0 = half the
  // device's SMs (66 on an H200), from iris-bench --fused on 2 x H200: at (128, 8192, 8192) every op
  // was 2-6x slower cut into bands of 32-64 rows (32 tiles each) than cuBLAS + NCCL, while bands of
  // 128+ tiles won from (2048, 8192, 8192) up.
  int min_band_tiles = 0;
  // matmul_all_reduce only: atomic, spinlock, one_shot or two_shot (auto and ring are not fused variants).
  // atomic and spinlock run their communication on comm_sms blocks beside the GEMM whatever copy_engine says.
  ccl::AllReduceVariant all_reduce_variant = ccl::AllReduceVariant::kTwoShot;

  // Throws InvalidArgument naming the field, its value and what is allowed, for a call of `op` (the
  // all_reduce_variant is checked for matmul_all_reduce only: the other ops ignore it).
  void validate(int world_size, ccl::OpKind op = ccl::OpKind::kMatmulAllReduce) const;
  // True when the plan picks the tile (all three block sizes 0).
  bool auto_tile() const { return block_size_m == 0 && block_size_n == 0 && block_size_k == 0; }
  // The tile set here (all zero when auto_tile()).
  GemmTile tile() const { return GemmTile{block_size_m, block_size_n, block_size_k}; }
};

// The operands of one rank's GEMM (see the shapes above).
struct MatmulOperands {
  Tensor a;
  Tensor b;                    // K x N, or N x K when b_is_nk
  Tensor c;                    // this rank's output
  const void* bias = nullptr;  // N elements of c's type, or null
  bool b_is_nk = false;
};

// What one call needs: the workspace signature (compared across ranks by the preamble), the arrays,
// and the launch split. Computed from the arguments alone (no GPU, no communication), so every rank
// computes the same plan, and tests and users can size workspaces and the heap ahead (heap_bytes below;
// the plans read the views' shapes, types and alignment, and that C overlaps neither input, never their
// memory, so stand-in addresses do).
struct FusedPlan {
  ccl::OpSignature sig;
  ccl::WorkspaceNeeds needs;
  GemmTile tile;           // the GEMM tile: config.tile(), or select_fused_tile's when config.auto_tile()
  int64_t tiles = 0;       // T above
  int gemm_sms = 0;        // resolved
  int comm_sms = 0;        // resolved
  int device_sms = 0;      // the device's SMs the plan was made for
  int min_band_tiles = 0;  // resolved (FusedConfig::min_band_tiles)
  // Below the fusion threshold: the GEMM on every SM, then the iris::ccl collective on the same stream
  // (all_reduce in place on C, reduce_scatter of the M x N product, all_gather of A or of C's rows),
  // with the variant iris::ccl's auto picks for its size, through FusedWorkspace::collective(). The GEMM
  // runs the GEMM core's own tile choice (select_gemm_tile; no lock or flag is indexed by tile on this
  // path) and its automatic split of K (select_split_k), in FusedWorkspace::gemm_workspace(). Never with
  // one rank (every op is then its GEMM).
  bool unfused = false;
  // Unfused: what the iris::ccl collective's workspace (FusedWorkspace::collective()) needs for this call
  // when fresh (iris::ccl's *_needs for the collective above); empty otherwise.
  ccl::WorkspaceNeeds collective;
};

// Heap bytes a fresh FusedWorkspace takes for this call (its preamble's allocations): the band pipeline's
// arrays and, unfused, the collective's (ccl::heap_bytes of plan.needs and plan.collective, with
// `guard_bytes` per array as there). The GEMM's split-K workspace is the rank's own device memory, not
// the heap.
size_t heap_bytes(const FusedPlan& plan, size_t guard_bytes = 0);

// The plans. Validate the config and the operands (throwing InvalidArgument naming the op) and size
// the workspace. device_sms is the device's multiprocessor count (132 on H100/H200 SXM).
FusedPlan plan_matmul_all_reduce(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms);
FusedPlan plan_matmul_reduce_scatter(const MatmulOperands& mm, const FusedConfig& config, int world_size,
                                     int device_sms);
FusedPlan plan_all_gather_matmul(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms);
FusedPlan plan_matmul_all_gather(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms);
FusedPlan plan_all_gather_matmul_k_sharded(const MatmulOperands& mm, const FusedConfig& config, int world_size,
                                           int device_sms);

// The check every op makes right before launch: the workspace was prepared (by this op's preamble)
// and its arrays hold plan.needs; throws InvalidArgument with the capacity messages otherwise.
void check_fused_workspace(const FusedPlan& plan, const FusedWorkspace& ws);

// ---- the ops and their preambles (collective: every rank calls with the same arguments) ----------
void matmul_all_reduce_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws);
void matmul_all_reduce(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream = nullptr);

void matmul_reduce_scatter_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config,
                                    FusedWorkspace& ws);
void matmul_reduce_scatter(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                           cudaStream_t stream = nullptr);

void all_gather_matmul_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws);
void all_gather_matmul(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream = nullptr);

void matmul_all_gather_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws);
void matmul_all_gather(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream = nullptr);

// Iris's all_gather_matmul: A sharded on K (see the shapes above).
void all_gather_matmul_k_sharded_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config,
                                          FusedWorkspace& ws);
void all_gather_matmul_k_sharded(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                                 cudaStream_t stream = nullptr);

}  // namespace iris::ops
