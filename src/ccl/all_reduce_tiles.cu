// all_reduce tile variants, on 2-D tiles of block_size_m x block_size_n (Iris's schedules):
//
//   atomic    every rank adds its tile into the owner's accumulator (Elem<T>::Acc: float for the 16-bit
//             floats, 32 bits for int8 and uint8, the element type for the others) with remote atomics and
//             marks its arrival on the owner's word for (tile, itself); the owner, once all W arrived,
//             converts the tile, zeroes the accumulator and publishes the result; peers pull it.
//   spinlock  like atomic, but each rank takes the owner's per-tile lock, overwrites (first arrival)
//             or adds into the accumulator with plain accesses, unlocks and marks its arrival. Locks:
//             one word per tile. Works for every op (sum, prod, max, min, avg).
//   ring      reduce-scatter then all-gather around a ring, per tile and per column slice: the tile
//             travels owner+1 -> ... -> owner accumulating (RS), then owner -> ... -> owner-1 (AG).
//             RS partials travel in the accumulator type (float for 16-bit types), so a 16-bit sum is
//             rounded once, by the owner, as in the other variants; the AG result travels as T.
//             Bandwidth-optimal in elements (each rank sends about 2(W-1)/W of them; for 16-bit types
//             the RS half at 4 bytes each, 1.5x NCCL's bytes, which accumulates in the type), pipelined
//             over tiles (each block runs its tiles' RS steps, then their AG steps, in batches of tiles
//             that share one wait and one signal), slices and blocks; `all_reduce_num_rings` rings
//             alternate direction.
//
// Tile t is owned by rank t % W. Every block walks tiles t = blockIdx.x, blockIdx.x + gridDim.x, ...
// in the same order on every rank, so the ring's steps and atomic's wait for a zeroed accumulator only
// ever wait on the same block of another rank for the same tile, and the chains start with a rank that
// waits for nobody. An owner's finish waits on every rank's adds, which wait on no finish. The ring's
// grid is a multiple of W where it can be (ring_blocks), so that a block's walk stays on one chain.
//
// Flags: every word holds the epoch of the call that last wrote it, never more, so what one layout (or
// op) leaves in them is below every later call's epoch and no wait of a later call passes on it. One
// workspace thus serves every variant and shape in any order (the layout fence orders the staging).
//   atomic, spinlock  [tiles][W] arrivals by (tile, source): source s has added its share of tile t;
//                     [tiles] done: the owner has published tile t's result;
//                     [tiles] atomic: the owner has zeroed tile t's accumulator at a change of layout
//                     (cleared); spinlock: the call whose value tile t's accumulator holds (first-writer
//                     mark: a writer that finds an older call's there overwrites it).
//   ring              [2][tiles][slices]: reduce-scatter, then all-gather flags, by (tile, slice).
//
// atomic/spinlock reuse across calls: a rank adds into the owner's accumulator for call e + 1 only
// after it received every tile of call e, and the owner zeroes (atomic) or stops reading (spinlock)
// the accumulator before it publishes. What another layout left in the accumulators is not zero: at a
// change of layout (layout_fence, the first call on a workspace included) atomic's owners zero their
// accumulator tiles first and signal it, and adders wait for that before adding.
//
// ring reuse: staging slots come in two parities (e & 1). A peer writes slot [p][t] of call e + 2 only
// after finishing call e + 1, whose tile t passed through this rank, which started call e + 1 only after
// finishing call e. Within a call, the AG message of tile t overwrites the RS message in the same slot
// only after this rank forwarded its RS partial (the AG exists only once the reduction, which needed
// that partial, is complete). Flags need no parity: no rank writes a flag of call e + 1 into this rank
// before this rank has consumed call e's (an RS message of e + 1 comes from a rank that finished call e,
// which needed this rank's RS step of e for the tile; an AG message of e + 1 needs this rank's RS step of
// e + 1), whichever way the tile's ring turns in each call (all_reduce_num_rings is not in the layout).
#include <algorithm>
#include <numeric>

#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_common.cuh"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

using Tile = TileRect;

__device__ __forceinline__ Tile tile_at(const TileArgs& a, int64_t t) {
  return tile_rect(t, a.rows, a.cols, a.tile_m, a.tile_n, a.swizzle);
}

// Calls f(row, col) for each pack of a tile's column range [c_lo, c_hi), every thread of the block
// taking its share. Packs never straddle rows (the host picks kVec only when they cannot).
template <int kN, typename F>
__device__ __forceinline__ void for_tile_packs(const Tile& tile, int c_lo, int c_hi, F&& f) {
  const int per_row = (c_hi - c_lo) / kN;
  const int count = tile.h * per_row;
  for (int j = threadIdx.x; j < count; j += blockDim.x) {
    const int row = j / per_row;
    f(row, c_lo + (j - row * per_row) * kN);
  }
}

template <typename T, bool kVec>
struct TileIo {
  const TileArgs& a;
  __device__ __forceinline__ const T* in(const Tile& t, int row, int col) const {
    return static_cast<const T*>(a.in) + (t.r0 + row) * a.in_stride + t.c0 + col;
  }
  __device__ __forceinline__ T* out(const Tile& t, int row, int col) const {
    return static_cast<T*>(a.out) + (t.r0 + row) * a.out_stride + t.c0 + col;
  }
  // Tile-local layout in staging: tile_n elements per row.
  __device__ __forceinline__ int64_t local(int row, int col) const { return int64_t{row} * a.tile_n + col; }
};

// atomic and spinlock flags (see the top of the file): arrivals by (tile, source), done by tile, and the
// per-tile word that atomic's clearing and spinlock's first-writer mark use.
__device__ __forceinline__ uint64_t* arrival_flag(const TileArgs& a, int64_t t, int source) {
  return a.flags + t * a.ctx.world_size + source;
}
__device__ __forceinline__ uint64_t* done_flag(const TileArgs& a, int64_t t) {
  return a.flags + a.tiles * a.ctx.world_size + t;
}
__device__ __forceinline__ uint64_t* tile_word(const TileArgs& a, int64_t t) {
  return a.flags + a.tiles * (a.ctx.world_size + 1) + t;
}

// kN accumulators in a row, moved as Pack<A, kVec>s: whole 16-byte words when kVec (kN is then a
// multiple of 16 / sizeof(A) and the slot offsets of 16 bytes), else one by one.
template <typename A, int kN>
struct AccPack {
  A v[kN];
};

template <typename A, int kN, bool kVec>
__device__ __forceinline__ AccPack<A, kN> load_acc_pack(const A* p) {
  constexpr int kPer = Pack<A, kVec>::kN;
  static_assert(kN % kPer == 0, "accumulators come in whole packs");
  AccPack<A, kN> out;
#pragma unroll
  for (int w = 0; w < kN; w += kPer) {
    const Pack<A, kVec> x = load_pack<A, kVec>(p + w);
#pragma unroll
    for (int k = 0; k < kPer; ++k) out.v[w + k] = x.v[k];
  }
  return out;
}

template <typename A, int kN, bool kVec>
__device__ __forceinline__ void store_acc_pack(A* p, const AccPack<A, kN>& v) {
  constexpr int kPer = Pack<A, kVec>::kN;
  static_assert(kN % kPer == 0, "accumulators come in whole packs");
#pragma unroll
  for (int w = 0; w < kN; w += kPer) {
    Pack<A, kVec> x;
#pragma unroll
    for (int k = 0; k < kPer; ++k) x.v[k] = v.v[w + k];
    store_pack<A, kVec>(p + w, x);
  }
}

// The owner side shared by atomic and spinlock: wait for W arrivals, convert the accumulator, publish.
template <typename T, ReduceOp kOp, bool kVec, bool kZeroAfter>
__device__ bool finish_owned_tiles(const TileArgs& a, uint64_t epoch, typename Elem<T>::Acc* acc_stage, T* res_stage,
                                   const char* op) {
  using E = Elem<T>;
  using P = Pack<T, kVec>;
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const int64_t tile_elems = int64_t{a.tile_m} * a.tile_n;
  const TileIo<T, kVec> io{a};
  for (int64_t l = blockIdx.x; l < a.tiles_per_rank; l += gridDim.x) {
    const int64_t t = l * world + me;
    if (t >= a.tiles) continue;
    const auto arrival = [&](int s) { return arrival_flag(a, t, s); };
    if (!block_wait_each(ctx, world, arrival, epoch, op)) return false;
    const Tile tile = tile_at(a, t);
    typename E::Acc* acc = acc_stage + l * tile_elems;
    T* res = res_stage + l * tile_elems;
    for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
      P r;
#pragma unroll
      for (int k = 0; k < P::kN; ++k) {
        r.v[k] = reduced<T, kOp>(acc[io.local(row, col) + k], world);
        if constexpr (kZeroAfter) acc[io.local(row, col) + k] = typename E::Acc{};
      }
      store_pack<T, kVec>(io.out(tile, row, col), r);
      if (world > 1) store_pack<T, kVec>(res + io.local(row, col), r);
    });
    block_signal_each(
        ctx, world - 1, [&](int) { return done_flag(a, t); }, [&](int i) { return (me + 1 + i) % world; }, epoch);
  }
  return true;
}

// Every rank pulls the tiles it does not own from their owners' result staging.
template <typename T, bool kVec>
__device__ bool pull_results(const TileArgs& a, uint64_t epoch, T* res_stage, const char* op) {
  using P = Pack<T, kVec>;
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const int64_t tile_elems = int64_t{a.tile_m} * a.tile_n;
  const TileIo<T, kVec> io{a};
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    if (o == me) continue;
    if (!block_wait_flag(ctx, done_flag(a, t), epoch, op)) return false;
    const Tile tile = tile_at(a, t);
    const T* res = dev::translate(ctx, res_stage + (t / world) * tile_elems, o);
    for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
      store_pack<T, kVec>(io.out(tile, row, col), load_pack<T, kVec>(res + io.local(row, col)));
    });
  }
  return true;
}

// atomic at a change of layout: the accumulator tiles hold what the last layout (or op) left in the same
// bytes. Each block zeroes this rank's tiles among those it walks (the tiles whose adds it makes) and
// tells every peer, whose same block waits for it before adding (atomic_kernel).
template <typename Acc>
__device__ void clear_owned_accumulators(const TileArgs& a, uint64_t epoch, Acc* acc_stage) {
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const int64_t tile_elems = int64_t{a.tile_m} * a.tile_n;
  const bool vec = tile_elems * static_cast<int64_t>(sizeof(Acc)) % 16 == 0;  // the stage is 256-byte aligned
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    if (t % world != me) continue;
    Acc* acc = acc_stage + (t / world) * tile_elems;
    if (vec) {
      const int64_t n = tile_elems * static_cast<int64_t>(sizeof(Acc)) / 16;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) reinterpret_cast<uint4*>(acc)[j] = make_uint4(0, 0, 0, 0);
    } else {
      for (int64_t j = threadIdx.x; j < tile_elems; j += blockDim.x) acc[j] = Acc{};
    }
    block_signal_each(
        ctx, world - 1, [&](int) { return tile_word(a, t); }, [&](int i) { return (me + 1 + i) % world; }, epoch);
  }
  __syncthreads();  // with one rank, this block's own adds follow its zeroing
}

// kOp: kSum or kAvg (the atomics add; the owner divides for kAvg).
template <typename T, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) atomic_kernel(const __grid_constant__ TileArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  using E = Elem<T>;
  using Acc = typename E::Acc;
  using P = Pack<T, kVec>;
  const DeviceContext& ctx = a.ctx;
  const int world = ctx.world_size;
  const int64_t tile_elems = int64_t{a.tile_m} * a.tile_n;
  Acc* acc_stage = static_cast<Acc*>(a.stage);
  T* res_stage = reinterpret_cast<T*>(static_cast<char*>(a.stage) +
                                      (a.tiles_per_rank * tile_elems * int64_t{sizeof(Acc)} + 255) / 256 * 256);
  const TileIo<T, kVec> io{a};
  const uint64_t epoch = begin_call(a.ctx, a.state, "all_reduce(atomic)");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  bool fenced = false;
  if (!layout_fence(ctx, a.state, a.layout_key, epoch, "all_reduce(atomic)", &fenced)) {
    end_call(a.state, epoch);
    return;
  }
  if (fenced) clear_owned_accumulators(a, epoch, acc_stage);
  // 1. add my tile into its owner's accumulator (after the owner zeroed it, at a change of layout); arrive.
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    if (fenced && o != ctx.rank && !block_wait_flag(ctx, tile_word(a, t), epoch, "all_reduce(atomic) clear")) {
      end_call(a.state, epoch);
      return;
    }
    const Tile tile = tile_at(a, t);
    Acc* acc = dev::translate(ctx, acc_stage + (t / world) * tile_elems, o);
    for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
      const P v = load_pack<T, kVec>(io.in(tile, row, col));
#pragma unroll
      for (int k = 0; k < P::kN; ++k)
        dev::atomic_add<dev::Order::kRelaxed, dev::Scope::kSys>(acc + io.local(row, col) + k, E::to_acc(v.v[k]));
    });
    // The block's atomics are ordered before thread 0's release (bar.sync; the release is cumulative).
    block_signal(ctx, arrival_flag(a, t, ctx.rank), epoch, o);
  }
  // 2. owners publish; 3. everyone pulls.
  if (finish_owned_tiles<T, kOp, kVec, /*kZeroAfter=*/true>(a, epoch, acc_stage, res_stage,
                                                            "all_reduce(atomic) reduce"))
    pull_results<T, kVec>(a, epoch, res_stage, "all_reduce(atomic) gather");
  end_call(a.state, epoch, a.layout_key);
}

template <typename T, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) spinlock_kernel(const __grid_constant__ TileArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  using E = Elem<T>;
  using Acc = typename E::Acc;
  using P = Pack<T, kVec>;
  const DeviceContext& ctx = a.ctx;
  const int world = ctx.world_size;
  const int64_t tile_elems = int64_t{a.tile_m} * a.tile_n;
  Acc* acc_stage = static_cast<Acc*>(a.stage);
  T* res_stage = reinterpret_cast<T*>(static_cast<char*>(a.stage) +
                                      (a.tiles_per_rank * tile_elems * int64_t{sizeof(Acc)} + 255) / 256 * 256);
  const TileIo<T, kVec> io{a};
  const uint64_t epoch = begin_call(a.ctx, a.state, "all_reduce(spinlock)");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  if (!layout_fence(ctx, a.state, a.layout_key, epoch, "all_reduce(spinlock)")) {
    end_call(a.state, epoch);
    return;
  }
  __shared__ int s_first, s_ok;
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    const Tile tile = tile_at(a, t);
    uint32_t* lock = dev::translate(ctx, a.locks + t, o);
    uint64_t* mark = dev::translate(ctx, tile_word(a, t), o);
    if (threadIdx.x == 0) {
      // Take the owner's lock for this tile (the previous holder's writes, its mark included, are visible).
      s_ok = acquire_spinlock(ctx, lock, "all_reduce(spinlock) lock") ? 1 : 0;
      // Nobody has written this call's value yet: overwrite what an older call (or layout) left.
      if (s_ok) s_first = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(mark) < epoch;
    }
    __syncthreads();
    if (!s_ok) {  // gave up (the error is recorded): end here, as the atomic kernel does, recording no layout
      end_call(a.state, epoch);
      return;
    }
    const bool first = s_first != 0;
    Acc* acc = dev::translate(ctx, acc_stage + (t / world) * tile_elems, o);
    for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
      const P v = load_pack<T, kVec>(io.in(tile, row, col));
#pragma unroll
      for (int k = 0; k < P::kN; ++k) {
        Acc* slot = acc + io.local(row, col) + k;
        *slot = first ? E::to_acc(v.v[k]) : combine<kOp>(*slot, E::to_acc(v.v[k]));
      }
    });
    __syncthreads();  // the block's writes to the accumulator come before the mark, the unlock and the arrival
    if (threadIdx.x == 0) {
      if (first) dev::store<dev::Order::kRelaxed, dev::Scope::kSys>(mark, epoch);
      release_spinlock(lock);
    }
    block_signal(ctx, arrival_flag(a, t, ctx.rank), epoch, o);
    __syncthreads();  // s_first / s_ok are rewritten for the next tile
  }
  if (finish_owned_tiles<T, kOp, kVec, /*kZeroAfter=*/false>(a, epoch, acc_stage, res_stage,
                                                             "all_reduce(spinlock) reduce"))
    pull_results<T, kVec>(a, epoch, res_stage, "all_reduce(spinlock) gather");
  end_call(a.state, epoch, a.layout_key);
}

// One tile of the ring on this rank: its direction, this rank's places on the tile's two chains, its
// staging slot here and at the next rank, and its flags (one per column slice, for each half).
template <typename T>
struct RingTile {
  using A = typename Elem<T>::Acc;
  Tile tile;
  int next;
  int pos;   // 0 .. W-1 along the reduce-scatter chain; W-1 is the owner
  int apos;  // 0 (the owner) .. W-1 along the all-gather chain
  A* rs_slot;
  A* rs_next;
  T* ag_slot;
  T* ag_next;
  uint64_t* rs_flags;  // [slices]: the upstream rank's partial of the slice is here
  uint64_t* ag_flags;  // [slices]: the result of the slice is here

  RingTile() = default;
  __device__ __forceinline__ RingTile(const TileArgs& a, int64_t t, int parity) {
    const DeviceContext& ctx = a.ctx;
    const int me = ctx.rank, world = ctx.world_size;
    tile = tile_at(a, t);
    const RingPlace place = ring_place(t, me, world, a.rings);
    next = place.next;
    pos = place.pos;
    apos = place.apos;
    // One slot per tile and parity, sized for accumulators: RS partials travel as Acc (float for 16-bit
    // types, so the sum is rounded once, by the owner), the AG result as T in the same bytes, each row's
    // slice of it inside the bytes of the same row's slice of RS partials (ag_local). So an AG slice
    // overwrites only RS bytes of its own slice, which this rank read before forwarding its partial,
    // which the owner needed before that AG slice existed; other slices' partials are untouched.
    char* slot = static_cast<char*>(a.stage) +
                 (parity * a.tiles + t) * int64_t{a.tile_m} * a.tile_n * static_cast<int64_t>(sizeof(A));
    rs_slot = reinterpret_cast<A*>(slot);
    rs_next = dev::translate(ctx, rs_slot, next);
    ag_slot = reinterpret_cast<T*>(slot);
    ag_next = dev::translate(ctx, ag_slot, next);
    rs_flags = a.flags + t * a.slices;
    ag_flags = a.flags + (a.tiles + t) * a.slices;
  }
};

// Two passes over the block's tiles: first every tile's reduce-scatter step, then every tile's all-gather
// step. A rank's reduce-scatter steps wait only on other ranks' reduce-scatter steps (of the same tile,
// upstream), so the first pass streams: while the owner of tile t waits for its partial, the block has
// already pushed its partials of later tiles it does not own, and a wait costs one flag latency per pass,
// not one round trip per tile. (One pass per tile, reduce-scatter then all-gather, waited for the owner's
// result before starting the next tile: a 1-D buffer's block went through its tiles one round trip each.)
// The all-gather chains start at the owners, in the first pass: a first-pass wait depends only on other
// ranks' first passes, a second-pass wait only on first passes and on the same tile's second-pass steps
// upstream, so no rank waits in a cycle.
template <typename T, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) ring_kernel(const __grid_constant__ TileArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  using E = Elem<T>;
  using A = typename E::Acc;
  static_assert(sizeof(A) >= sizeof(T), "an AG result fits in the bytes of the RS partials (ag_local)");
  using P = Pack<T, kVec>;
  const DeviceContext& ctx = a.ctx;
  const int world = ctx.world_size;
  const int slice_n = a.tile_n / a.slices;
  const TileIo<T, kVec> io{a};
  const uint64_t epoch = begin_call(a.ctx, a.state, "all_reduce(ring)");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  if (!layout_fence(ctx, a.state, a.layout_key, epoch, "all_reduce(ring)")) {
    end_call(a.state, epoch);
    return;
  }
  if (world == 1) {
    for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
      const Tile tile = tile_at(a, t);
      for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
        store_pack<T, kVec>(io.out(tile, row, col), load_pack<T, kVec>(io.in(tile, row, col)));
      });
    }
    end_call(a.state, epoch, a.layout_key);
    return;
  }
  const int parity = static_cast<int>(epoch & 1);
  // T index, in the slot, of AG element (row, col) of the slice starting at column c_lo: at the start
  // of the RS bytes of (row, c_lo), contiguous within the slice (16-byte packs stay whole and aligned).
  const auto ag_local = [&](int row, int col, int c_lo) {
    return io.local(row, c_lo) * static_cast<int64_t>(sizeof(A) / sizeof(T)) + (col - c_lo);
  };
  // A batch: up to a.batch tiles of the block's walk, t0, t0 + G, ... (G = gridDim.x), all on one chain
  // (ring_batch gives a.batch > 1 only when G is a multiple of ring_period), so they share pos, apos and
  // next. One wait for their flags, then every thread takes its share of all their packs at once, then
  // one bar.sync and a release per flag: the flag latency and the fence are paid once per batch.
  __shared__ RingTile<T> batch[kMaxRingBatch];
  __shared__ int first[kMaxRingBatch + 1];  // of the batch's packs in the current slice: tile i's start at first[i]
  // ring_blocks launches at most `tiles` blocks and ring_batch gives 1 .. kMaxRingBatch; the guards keep a
  // wrong launch from walking past the tiles or past batch[].
  const int64_t walk = blockIdx.x < a.tiles ? (a.tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int batch_max = min(max(a.batch, 1), kMaxRingBatch);
  // Fills batch[] with the walk's tiles k0, k0 + 1, ... and returns their count.
  const auto load_batch = [&](int64_t k0) {
    const int n = static_cast<int>(min(static_cast<int64_t>(batch_max), walk - k0));
    if (threadIdx.x < n) batch[threadIdx.x] = RingTile<T>(a, blockIdx.x + (k0 + threadIdx.x) * gridDim.x, parity);
    __syncthreads();
    return n;
  };
  // Thread 0 counts each tile's packs in columns [c_lo, c_lo + slice_n); the wait's bar.sync publishes them.
  const auto count_packs = [&](int n, int c_lo) {
    if (threadIdx.x == 0) {
      first[0] = 0;
      for (int i = 0; i < n; ++i) {
        const int w = max(0, min(batch[i].tile.w, c_lo + slice_n) - c_lo);
        first[i + 1] = first[i] + batch[i].tile.h * (w / P::kN);
      }
    }
  };
  const auto has_cols = [&](int i, int c_lo) { return c_lo < batch[i].tile.w; };
  // Calls f(r, row, col) for each pack of the slice of the batch's tiles, every thread taking its share.
  const auto for_batch_packs = [&](int n, int c_lo, auto&& f) {
    for (int g = threadIdx.x; g < first[n]; g += blockDim.x) {
      int i = 0;
      while (g >= first[i + 1]) ++i;
      const RingTile<T>& r = batch[i];
      const int per_row = (min(r.tile.w, c_lo + slice_n) - c_lo) / P::kN;
      const int j = g - first[i], row = j / per_row;
      f(r, row, c_lo + (j - row * per_row) * P::kN);
    }
  };
  // Pass 1: reduce-scatter. The owner ends the chain: it rounds the sum into `out` and starts the AG.
  for (int64_t k0 = 0; k0 < walk; k0 += batch_max) {
    const int n = load_batch(k0);
    const int pos = batch[0].pos, next = batch[0].next;
    const bool is_owner = pos == world - 1;
    for (int s = 0; s < a.slices; ++s) {
      const int c_lo = s * slice_n;
      count_packs(n, c_lo);
      if (!block_wait_each(
              ctx, pos > 0 ? n : 0,
              [&](int i) -> const uint64_t* { return has_cols(i, c_lo) ? batch[i].rs_flags + s : nullptr; }, epoch,
              "all_reduce(ring) reduce-scatter")) {
        end_call(a.state, epoch);
        return;
      }
      for_batch_packs(n, c_lo, [&](const RingTile<T>& r, int row, int col) {
        const P v = load_pack<T, kVec>(io.in(r.tile, row, col));
        AccPack<A, P::kN> acc;
        if (pos > 0) {
          acc = load_acc_pack<A, P::kN, kVec>(r.rs_slot + io.local(row, col));
#pragma unroll
          for (int k = 0; k < P::kN; ++k) acc.v[k] = combine<kOp>(acc.v[k], E::to_acc(v.v[k]));
        } else {
#pragma unroll
          for (int k = 0; k < P::kN; ++k) acc.v[k] = E::to_acc(v.v[k]);
        }
        if (is_owner) {
          P out;
#pragma unroll
          for (int k = 0; k < P::kN; ++k) out.v[k] = reduced<T, kOp>(acc.v[k], world);
          store_pack<T, kVec>(io.out(r.tile, row, col), out);
          store_pack<T, kVec>(r.ag_next + ag_local(row, col, c_lo), out);  // the owner's AG start
        } else {
          store_acc_pack<A, P::kN, kVec>(r.rs_next + io.local(row, col), acc);  // RS partial
        }
      });
      block_signal_each(
          ctx, n,
          [&](int i) -> uint64_t* {
            return has_cols(i, c_lo) ? (is_owner ? batch[i].ag_flags : batch[i].rs_flags) + s : nullptr;
          },
          [&](int) { return next; }, epoch);
    }
    __syncthreads();  // batch[] and first[] are rewritten for the next batch
  }
  // Pass 2: all-gather, on every rank but the owner of each tile (a batch's tiles share their owner).
  for (int64_t k0 = 0; k0 < walk; k0 += batch_max) {
    const int n = load_batch(k0);
    const int apos = batch[0].apos, next = batch[0].next;
    if (apos == 0) {
      __syncthreads();
      continue;
    }
    const bool forward = apos < world - 1;
    for (int s = 0; s < a.slices; ++s) {
      const int c_lo = s * slice_n;
      count_packs(n, c_lo);
      if (!block_wait_each(
              ctx, n, [&](int i) -> const uint64_t* { return has_cols(i, c_lo) ? batch[i].ag_flags + s : nullptr; },
              epoch, "all_reduce(ring) all-gather")) {
        end_call(a.state, epoch);
        return;
      }
      for_batch_packs(n, c_lo, [&](const RingTile<T>& r, int row, int col) {
        const P v = load_pack<T, kVec>(r.ag_slot + ag_local(row, col, c_lo));
        store_pack<T, kVec>(io.out(r.tile, row, col), v);
        if (forward) store_pack<T, kVec>(r.ag_next + ag_local(row, col, c_lo), v);
      });
      if (forward) {
        block_signal_each(
            ctx, n, [&](int i) -> uint64_t* { return has_cols(i, c_lo) ? batch[i].ag_flags + s : nullptr; },
            [&](int) { return next; }, epoch);
      } else {
        __syncthreads();  // first[] is rewritten for the next slice
      }
    }
    __syncthreads();
  }
  end_call(a.state, epoch, a.layout_key);
}

bool tile_vec(const TileArgs& a, DType dtype) {
  const int64_t n = 16 / static_cast<int64_t>(dtype_size(dtype));
  const int slice_n = a.tile_n / a.slices;
  return reinterpret_cast<uintptr_t>(a.in) % 16 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0 &&
         a.cols % n == 0 && a.in_stride % n == 0 && a.out_stride % n == 0 && a.tile_n % n == 0 && slice_n % n == 0;
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(atomic_kernel<float, ReduceOp::kSum, true>)

void launch_atomic(const TileArgs& a, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) throw InvalidArgument("all_reduce(atomic): only sum and avg");
  dispatch_reduction(dtype, op, tile_vec(a, dtype), [&](auto t, auto o, auto v) {
    // max and min never get here (refused above and by the plan), so they build no kernel of their own.
    constexpr ReduceOp kOp = decltype(o)::value == ReduceOp::kAvg ? ReduceOp::kAvg : ReduceOp::kSum;
    launch_collective(atomic_kernel<decltype(t), kOp, decltype(v)::value>, blocks, kThreads, stream, a);
  });
}

void launch_spinlock(const TileArgs& a, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_reduction(dtype, op, tile_vec(a, dtype), [&](auto t, auto o, auto v) {
    launch_collective(spinlock_kernel<decltype(t), decltype(o)::value, decltype(v)::value>, blocks, kThreads, stream,
                      a);
  });
}

// The walk of block b is t = b, b + G, b + 2G, ... with G blocks, so the owner of its k-th tile is
// (b + kG) % W. When G % W = d is not 0, tile k's chain starts d ranks further along the ring than tile
// k - 1's, and the waits chain up: this rank's step on tile k waits for the upstream's, which waited for
// the upstream's step on tile k - 1, which waited for its own upstream's, ... about d more flag hops for
// every tile of the walk instead of W for the whole walk. At 8 ranks with 14 blocks each (d = 6), a 64 MiB
// bfloat16 ring all_reduce took 46 ms, 38 times two_shot's time (2026-12-03, 8 ranks sharing one H200
// under MPS); 8 H200s of 132 SMs give d = 4. With G a multiple of ring_period (W, and the period of the
// direction, which turns by (t % rings) % 2), every tile of a walk has the same owner and direction, so
// each rank's steps run one step behind its upstream's, W steps of pipeline fill for the whole walk.
// Dropping up to ring_period - 1 blocks costs less than those hops whenever the blocks walk more than one
// tile; a single tile per block has no walk to chain, so then every block runs. (Fewer blocks than a period,
// e.g. 14 at 8 ranks with 3 rings, keep every block and the chaining.) The owners stay t % W whatever the
// grid; the grid itself comes from comm_sms or the device's SM count, and the ranks must launch the same one
// (as before: a rank whose blocks walked other tiles could wait on a peer that waits on it, until the
// timeout), which they do on GPUs of one model.
int64_t ring_period(int world, int rings) {
  world = std::max(world, 1);
  rings = std::max(rings, 1);
  // (t % rings) % 2 repeats every 2 tiles for an even count of rings, every `rings` for an odd one; with
  // two ranks or fewer both directions are the same ring. In 64 bits: in an int, lcm(3, 1431655769) wrapped
  // to 11, and a grid of 121 blocks then batched tiles of different owners and directions behind one wait.
  const int64_t turn = world <= 2 ? 1 : rings % 2 == 0 ? 2 : rings;
  return std::lcm(static_cast<int64_t>(world), turn);
}

int ring_blocks(int64_t tiles, int world, int rings, int limit) {
  const int64_t all = std::clamp<int64_t>(tiles, 1, limit);
  const int64_t period = ring_period(world, rings);
  if (all >= tiles || all < period) return static_cast<int>(all);
  return static_cast<int>(all / period * period);
}

// A walk of k tiles in batches of b takes about k / b + 2(W - 1) batch steps (the two passes' pipeline
// fill), each a flag latency L plus b tiles' transfer c: (k / b + 2(W - 1)) (L + b c), least at
// b = sqrt(k L / (2 (W - 1) c)). Taking L as 4c (an estimate: a flag round trip and a system-scope fence
// against one tile of 2048 elements, the default 32 x 64 blocks), b = sqrt(2 k / (W - 1)): 8 at 2 ranks
// from 32 tiles a walk, 6 at 8 ranks and 128 tiles (a 64 MiB bfloat16 tensor on 8 H200s, 128 blocks), 1
// below 14 tiles at 8 ranks. Measured 2026-12-03 with ranks sharing one H200 under MPS (not NVLink), a
// 64 MiB bfloat16 ring all_reduce against one tile per wait: 406 us against 1.41 ms at 2 ranks (two_shot
// 196 us), 4.21 ms against 16.3 ms at 8 ranks (two_shot 1.20 ms; 46.7 ms before ring_blocks).
int ring_batch(int64_t tiles, int blocks, int world, int rings) {
  const int64_t period = ring_period(world, rings);
  if (world <= 1 || blocks <= 0 || blocks % period != 0) return 1;
  const int64_t walk = (tiles + blocks - 1) / blocks;
  int64_t b = 1;
  while (b < kMaxRingBatch && (b + 1) * (b + 1) * (world - 1) <= 2 * walk) ++b;
  return static_cast<int>(b);
}

void launch_ring(const TileArgs& a, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_reduction(dtype, op, tile_vec(a, dtype), [&](auto t, auto o, auto v) {
    launch_collective(ring_kernel<decltype(t), decltype(o)::value, decltype(v)::value>, blocks, kThreads, stream, a);
  });
}

}  // namespace iris::ccl::detail
