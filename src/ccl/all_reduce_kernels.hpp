// Kernel-facing arguments of the collective kernels and their launchers (one .cu per algorithm).
// Host-only code (the op entry points in *.cc) includes this; nothing here needs nvcc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "iris/ccl/config.hpp"
#include "iris/core/error.hpp"
#include "iris/core/tensor.hpp"
#include "iris/device/device_context.hpp"

namespace iris::ccl::detail {

// Threads per block of every collective kernel.
inline constexpr int kThreads = 512;

// Calls f(T{}, std::integral_constant<ReduceOp, op>{}) for the runtime dtype and op.
template <typename F>
void dispatch_typed(DType dtype, ReduceOp op, F&& f) {
  auto with_op = [&](auto t) {
    switch (op) {
      case ReduceOp::kSum:
        f(t, std::integral_constant<ReduceOp, ReduceOp::kSum>{});
        return;
      case ReduceOp::kMax:
        f(t, std::integral_constant<ReduceOp, ReduceOp::kMax>{});
        return;
      case ReduceOp::kMin:
        f(t, std::integral_constant<ReduceOp, ReduceOp::kMin>{});
        return;
      case ReduceOp::kAvg:
        f(t, std::integral_constant<ReduceOp, ReduceOp::kAvg>{});
        return;
      case ReduceOp::kProd:
        f(t, std::integral_constant<ReduceOp, ReduceOp::kProd>{});
        return;
    }
    throw InvalidArgument("unknown reduce op");
  };
  switch (dtype) {
    case DType::kFloat64:
      with_op(double{});
      return;
    case DType::kFloat32:
      with_op(float{});
      return;
    case DType::kFloat16:
      with_op(__half{});
      return;
    case DType::kBFloat16:
      with_op(__nv_bfloat16{});
      return;
    case DType::kInt32:
      with_op(int32_t{});
      return;
    case DType::kInt64:
      with_op(int64_t{});
      return;
    case DType::kInt8:
      with_op(int8_t{});
      return;
    case DType::kUInt8:
      with_op(uint8_t{});
      return;
    case DType::kFloat8E4M3:
      with_op(__nv_fp8_e4m3{});
      return;
    case DType::kFloat8E5M2:
      with_op(__nv_fp8_e5m2{});
      return;
    default:
      break;  // not a DType: the plans refuse it before any launch
  }
  throw InvalidArgument(std::string("no reduction kernel for ") + dtype_name(dtype));
}

// Calls f(std::bool_constant<vec>{}): the kernels' choice between 16-byte packs and single elements.
template <typename F>
void dispatch_vec(bool vec, F&& f) {
  if (vec)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// dispatch_typed and dispatch_vec in one: f(T{}, op constant, vec constant), for the reduction launchers.
template <typename F>
void dispatch_reduction(DType dtype, ReduceOp op, bool vec, F&& f) {
  dispatch_typed(dtype, op, [&](auto t, auto o) { dispatch_vec(vec, [&](auto v) { f(t, o, v); }); });
}

// ---- LL exchanges: all_reduce one_shot, and all_gather / reduce_scatter / all_to_all of small blocks ----
// Every rank sends one block (block_rows x cols) to every peer: its whole input (all_reduce,
// all_gather) or its input's block p to rank p (reduce_scatter, all_to_all). The receiver reduces the
// W blocks in rank order into out (all_reduce, reduce_scatter) or copies block s into out's block s
// (all_gather, all_to_all). broadcast: the root alone sends its input, the others a header line only, and
// every rank copies the root's block into out. The protocol is in ll_exchange.cu.
enum class LLMode { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kBroadcast };

struct LLArgs {
  DeviceContext ctx;
  const void* in;
  void* out;
  int64_t cols;
  int64_t in_stride;
  int64_t out_stride;
  int64_t block_rows;    // rows of one block
  int64_t numel;         // elements of one block
  int64_t words;         // LL words of the call's data per source: two per 16-byte line of 8 data bytes
  int64_t parity_words;  // words from parity 0 to parity 1: half the staging capacity (even)
  int64_t slot_words;    // words from slot s to slot s + 1: ll_slot_words, the same for every call
  uint64_t* staging;     // this rank's: [2][W][slot_words], slot s written by rank s: header line, then data
  uint64_t call_key;     // ll_call_key of this rank's call: the header line carries it to every peer
  uint64_t* state;       // the workspace's block state (epoch words first)
  uint64_t* clean;       // state + ll_clean_offset: per parity, the epoch of its last clean (ll_exchange.cu)
  bool in_vec8;          // every block of in / out is contiguous and 8-byte aligned: a line is one access
  bool out_vec8;
  bool in_place;        // all_gather: in is out's block `rank` (no local copy); broadcast: in is out on the root
  uint64_t layout_key;  // all_reduce and broadcast: layout_fence (ccl_common.cuh); 0 for the other ops
  int root;             // broadcast: the rank whose input every rank receives (in is read there only)
};
// The tag an LL word of call `epoch` carries in its high 32 bits: the top bit set, over a bijection of the
// epoch's low 31 bits (murmur3's finalizer, on 31 bits), not the epoch itself. A reader takes a line whose
// two words carry its call's tag, so what lies in the staging from before must not carry it: LL lines of
// earlier calls carry the tags of other epochs (a bijection: never this one's, within the period 2^31),
// but a workspace also serves chunked, two_shot, one_shot simple and tile-variant calls, which leave raw
// elements and partial sums in the same bytes. With the epoch as the tag, an int32 element equal to the
// epoch (the 3 of call 3) in both odd positions of a line passed as data of this call when its writer came
// late; with a mixed tag raw bytes pass only by matching it in both words. Both words of a constant match
// together, though, and a bijection of all 32 bits gave some epoch every value: tag 0 was epoch 2^32's, so
// the zeros a two_shot call of zero (padded) inputs left in the staging passed as epoch 2^32's lines (a
// read-only audit's finding, 2026-12-06). With the top bit set no zero, no positive int32 or fp32, and
// no bf16 / fp16 pair whose second element is positive ever carries a tag. ll_epoch_of inverts it (the
// epoch's low 31 bits, for timeout messages).
inline constexpr uint32_t kLLTagBit = 0x80000000u;
inline constexpr uint32_t kLLEpochMask = 0x7fffffffu;  // the tag's period: 2^31 epochs
constexpr uint32_t ll_tag(uint64_t epoch) {
  uint32_t h = static_cast<uint32_t>(epoch) & kLLEpochMask;
  h ^= h >> 16;  // each step is a bijection of 31 bits: xor-shifts, and products by odd numbers mod 2^31
  h = (h * 0x85ebca6bu) & kLLEpochMask;
  h ^= h >> 13;
  h = (h * 0xc2b2ae35u) & kLLEpochMask;
  h ^= h >> 16;
  return kLLTagBit | h;
}
constexpr uint32_t ll_epoch_of(uint32_t tag) {
  uint32_t h = tag & kLLEpochMask;
  h ^= h >> 16;                          // its own inverse on 31 bits
  h = (h * 0x7ed1b41du) & kLLEpochMask;  // the inverse of 0xc2b2ae35 modulo 2^32, so modulo 2^31
  h ^= (h >> 13) ^ (h >> 26);
  h = (h * 0xa5cb9243u) & kLLEpochMask;  // of 0x85ebca6b
  h ^= h >> 16;
  return h;
}
// LL words of the data of a block of `numel` elements, and the staging bytes of a W-rank exchange: 2
// parities x W slots of one header line and the data (kLLHeaderWords + ll_words each).
int64_t ll_words(int64_t numel, DType dtype);
size_t ll_staging_bytes(int64_t numel, DType dtype, int world);
inline constexpr int64_t kLLHeaderWords = 2;
// What the header line of an LL slot carries: the writer's call, so that a reader whose call differs
// (another exchange, dtype, reduction or block size: ranks that disagree on a batch size) learns it
// instead of taking the other call's lines as its own. Hex digits from the top: the exchange (LLMode + 1),
// the dtype, the reduction (0 for the copying exchanges), a zero, then 12 digits of elements per block
// (numel < 2^48: check_needs_fit refuses larger); broadcast's two digits after the dtype hold its root (mod 256),
// so ranks that name different roots differ here too. Never 0.
uint64_t ll_call_key(LLMode mode, DType dtype, ReduceOp op, int64_t numel, int root = 0);
// The grid of an LL launch over `words` LL words per slot between `world` ranks, at most `limit` blocks:
// each block pushes about `block_bytes` (ll_block_bytes()) of lines in all, summed over the W - 1 peers
// it sends to, and each thread one line, until the limit; then blocks of kThreads threads loop.
struct LLLaunch {
  int blocks = 1;
  int threads = kThreads;
};
LLLaunch ll_launch(int64_t words, int world, int limit, size_t block_bytes);
// True when every block of `block_rows` rows of t can move in 8-byte accesses.
bool ll_vec8(const Tensor& t, int64_t block_rows);
void launch_ll(const LLArgs& args, LLMode mode, DType dtype, ReduceOp op, LLLaunch grid, cudaStream_t stream);

// ---- flat chunked schedules (two_shot, and the other collectives) -------------------------------
// Elements are split into `nchunks` chunks of `chunk` elements (the last may be shorter); chunk c is
// owned by rank owner(c): c % W (distribution 0) or c / per_rank (distribution 1).
struct ChunkPlan {
  int64_t chunk = 0;
  int64_t nchunks = 0;
  int64_t per_rank = 0;  // chunks owned per rank (upper bound)
  int distribution = 0;
};
ChunkPlan plan_chunks(int64_t numel, DType dtype, int world, int distribution, int blocks);

// The input and output of a flat schedule (two_shot, one_shot simple): same shape, own row strides.
struct FlatIO {
  const void* in;
  void* out;
  int64_t numel;
  int64_t cols;
  int64_t in_stride;
  int64_t out_stride;
};
inline FlatIO flat_io(const Tensor& out, const Tensor& in) {
  return FlatIO{in.data, out.data, in.numel(), in.cols, in.stride, out.stride};
}

struct TwoShotArgs {
  DeviceContext ctx;
  FlatIO io;
  ChunkPlan plan;
  void* rs_stage;      // this rank's: [per_rank][W][chunk] elements, pushed by peers
  void* ag_stage;      // this rank's: [per_rank][chunk] reduced chunks, pulled by peers
  uint64_t* rs_flags;  // this rank's: [per_rank][W]
  uint64_t* ag_flags;  // this rank's: [nchunks]
  uint64_t* state;
  bool vec;  // 16-byte accesses on in/out
  uint64_t layout_key;  // layout_fence (ccl_common.cuh)
};
void launch_two_shot(const TwoShotArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream);

// ---- one_shot, simple protocol (all_reduce_one_shot.cu) ----------------------------------------------
// The flat tensor is cut into `nsegs` segments of `seg` elements (the last may be shorter), fixed by
// the size alone, so every rank cuts it the same way whatever grid it launches.
struct SegmentPlan {
  int64_t seg = 0;    // elements per segment, a whole number of 16-byte packs
  int64_t nsegs = 0;  // at least 1
  int64_t slot = 0;   // elements of one source's slot: nsegs * seg
};
SegmentPlan plan_segments(int64_t numel, DType dtype);
// Blocks of a launch over the plan: about two segments each, at most `limit`.
int segment_blocks(const SegmentPlan& plan, int limit);

struct OneShotArgs {
  DeviceContext ctx;
  FlatIO io;
  SegmentPlan plan;
  void* staging;    // this rank's: [2 parities][W sources][slot] elements, slot s written by rank s
  uint64_t* flags;  // this rank's: [W sources][nsegs], flags[s][g] = the epoch whose segment g s wrote
  uint64_t* state;
  bool vec;             // 16-byte accesses on in/out
  uint64_t layout_key;  // layout_fence (ccl_common.cuh)
};
void launch_one_shot_simple(const OneShotArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream);

// ---- tile schedules (atomic, spinlock, ring): 2-D tiles of tile_m x tile_n -----------------------
struct TileArgs {
  DeviceContext ctx;
  const void* in;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t in_stride;
  int64_t out_stride;
  int tile_m;  // the plan's tile (all_reduce.cc, tile_of): the config's blocks, widened for short tensors
  int tile_n;
  int swizzle;
  int64_t tiles;  // ceil(rows / tile_m) * ceil(cols / tile_n)
  int64_t tiles_per_rank;
  uint32_t* locks;  // spinlock: [tiles]
  uint64_t* flags;  // atomic/spinlock: [tiles][W] arrivals, [tiles] done, [tiles] cleared / marks; ring:
                    // [2][tiles][slices] (reduce-scatter, all-gather). Epochs only (all_reduce_tiles.cu).
  void* stage;      // see each variant
  uint64_t* state;
  int slices;  // ring: column slices per tile
  int rings;   // ring: concurrent rings
  int batch;   // ring: tiles of a block's walk per wait and signal (ring_batch), 1 .. kMaxRingBatch
  uint64_t layout_key;  // layout_fence (ccl_common.cuh)
};
void launch_atomic(const TileArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream);
void launch_spinlock(const TileArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream);
void launch_ring(const TileArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream);
// Rank `me`'s places on ring tile t's two chains (the kernel's RingTile; the host tests model its waits
// with it): tile t runs +1 round the ring, or -1 for an odd (t % rings), from the rank after its owner
// t % W. pos: the step along the reduce-scatter chain (W - 1 is the owner); apos: along the all-gather
// chain (0 is the owner); next: the rank it sends to; upstream: the rank it waits on.
struct RingPlace {
  int pos, apos, next, upstream;
};
__host__ __device__ inline RingPlace ring_place(int64_t t, int me, int world, int rings) {
  const int dir = (t % rings) % 2 == 0 ? 1 : world - 1;  // +1 or -1 around the ring
  const int owner = static_cast<int>(t % world);
  const int start = (owner + dir) % world;
  const int turn = dir == 1 ? 1 : world - 1;
  return {((me - start + world) % world) * turn % world, ((me - owner + world) % world) * turn % world,
          (me + dir) % world, (me - dir + world) % world};
}
// Blocks of a ring launch over `tiles` tiles: at most `limit`, and, when the blocks must each walk more
// than one tile, a multiple of ring_period(world, rings) where that leaves any (all_reduce_tiles.cu: then every
// tile of a block's walk has the same owner and direction, and the ranks' steps form a pipeline).
int ring_blocks(int64_t tiles, int world, int rings, int limit);
// Tiles after which a ring tile's owner and direction repeat: lcm(world, the direction's period), in 64 bits
// (an odd all_reduce_num_rings near 2^31 makes it exceed an int).
int64_t ring_period(int world, int rings);
// Tiles of a ring block's walk that share one wait and one signal: 1 unless `blocks` is a multiple of
// ring_period(world, rings) (then a walk's tiles are all on one chain; on other grids a batch could hold tiles
// whose chains run opposite ways between two ranks, and each rank would wait for the other), else about
// sqrt(2 k / (world - 1)) for walks of k tiles, at most kMaxRingBatch (all_reduce_tiles.cu says why).
inline constexpr int kMaxRingBatch = 8;
int ring_batch(int64_t tiles, int blocks, int world, int rings);

}  // namespace iris::ccl::detail
