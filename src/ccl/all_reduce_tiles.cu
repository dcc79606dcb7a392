// all_reduce tile variants, on 2-D tiles of block_size_m x block_size_n (Iris's schedules):
//
//   atomic    every rank adds its tile into the owner's accumulator (Elem<T>::Acc: float for the 16-bit
//             floats, 32 bits for int8 and uint8, the element type for the others) with remote atomics and
//             counts itself on the owner's arrival word; the owner, once all W arrived, converts the
//             tile, zeroes the accumulator and publishes the result; peers pull it.
//   spinlock  like atomic, but each rank takes the owner's per-tile lock, overwrites (first arrival)
//             or adds into the accumulator with plain accesses, counts itself and unlocks. Locks: one
//             word per tile. Works for every op (sum, prod, max, min, avg).
//   ring      reduce-scatter then all-gather around a ring, per tile and per column slice: the tile
//             travels owner+1 -> ... -> owner accumulating (RS), then owner -> ... -> owner-1 (AG).
//             RS partials travel in the accumulator type (float for 16-bit types), so a 16-bit sum is
//             rounded once, by the owner, as in the other variants; the AG result travels as T.
//             Bandwidth-optimal in elements (each rank sends about 2(W-1)/W of them; for 16-bit types
//             the RS half at 4 bytes each, 1.5x NCCL's bytes, which accumulates in the type), pipelined
//             over tiles (each block runs its tiles' RS steps, then their AG steps), slices and blocks;
//             `all_reduce_num_rings` rings alternate direction.
//
// Tile t is owned by rank t % W. Every block walks tiles t = blockIdx.x, blockIdx.x + gridDim.x, ...
// in the same order on every rank, so waits only ever go to the same block on another rank for the
// same tile, and the chains start with a rank that waits for nobody.
//
// atomic/spinlock reuse across calls: a rank adds into the owner's accumulator for call e + 1 only
// after it received every tile of call e, and the owner zeroes (atomic) or stops reading (spinlock)
// the accumulator before it publishes. Arrival words count monotonically (W per call), done words
// and ring flags carry the epoch, so nothing is reset.
//
// ring reuse: staging slots and flags come in two parities (e & 1). A peer writes slot [p][t] of
// call e + 2 only after finishing call e + 1, whose tile t passed through this rank, which started
// call e + 1 only after finishing call e. Within a call, the AG message of tile t overwrites the RS
// message in the same slot only after this rank forwarded its RS partial (the AG exists only once the
// reduction, which needed that partial, is complete). Ring flag values: 2e + 1 (RS), 2e + 2 (AG).
#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_common.cuh"

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
    if (!block_wait_flag(ctx, a.flags + t, epoch * world, op)) return false;
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
    for (int k = 1; k < world; ++k) block_signal(ctx, a.flags + a.tiles + t, epoch, (me + k) % world);
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
    if (!block_wait_flag(ctx, a.flags + a.tiles + t, epoch, op)) return false;
    const Tile tile = tile_at(a, t);
    const T* res = dev::translate(ctx, res_stage + (t / world) * tile_elems, o);
    for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
      store_pack<T, kVec>(io.out(tile, row, col), load_pack<T, kVec>(res + io.local(row, col)));
    });
  }
  return true;
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
  const uint64_t epoch = begin_call(a.state);
  if (!layout_fence(ctx, a.state, a.layout_key, epoch, "all_reduce(atomic)")) {
    end_call(a.state, epoch);
    return;
  }
  // 1. add my tile into its owner's accumulator; count myself.
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    const Tile tile = tile_at(a, t);
    Acc* acc = dev::translate(ctx, acc_stage + (t / world) * tile_elems, o);
    for_tile_packs<P::kN>(tile, 0, tile.w, [&](int row, int col) {
      const P v = load_pack<T, kVec>(io.in(tile, row, col));
#pragma unroll
      for (int k = 0; k < P::kN; ++k)
        dev::atomic_add<dev::Order::kRelaxed, dev::Scope::kSys>(acc + io.local(row, col) + k, E::to_acc(v.v[k]));
    });
    // The block's atomics are ordered before thread 0's release (bar.sync; the release is cumulative).
    __syncthreads();
    if (threadIdx.x == 0)
      dev::atomic_add<dev::Order::kRelease, dev::Scope::kSys>(dev::translate(ctx, a.flags + t, o), uint64_t{1});
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
  const uint64_t epoch = begin_call(a.state);
  if (!layout_fence(ctx, a.state, a.layout_key, epoch, "all_reduce(spinlock)")) {
    end_call(a.state, epoch);
    return;
  }
  __shared__ int s_first, s_ok;
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    const Tile tile = tile_at(a, t);
    uint32_t* lock = dev::translate(ctx, a.locks + t, o);
    uint64_t* arrivals = dev::translate(ctx, a.flags + t, o);
    if (threadIdx.x == 0) {
      // Take the owner's lock for this tile (the previous holder's writes are visible).
      s_ok = acquire_spinlock(ctx, lock, "all_reduce(spinlock) lock") ? 1 : 0;
      if (s_ok) {
        const uint64_t seen = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(arrivals);
        s_first = seen == (epoch - 1) * world;  // nobody has written this call's value yet
      }
    }
    __syncthreads();
    if (!s_ok) break;
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
    __syncthreads();  // the block's writes to the accumulator come before the count and the unlock
    if (threadIdx.x == 0) {
      dev::atomic_add<dev::Order::kRelease, dev::Scope::kSys>(arrivals, uint64_t{1});
      release_spinlock(lock);
    }
    __syncthreads();  // s_first / s_ok are rewritten for the next tile
  }
  if (finish_owned_tiles<T, kOp, kVec, /*kZeroAfter=*/false>(a, epoch, acc_stage, res_stage,
                                                             "all_reduce(spinlock) reduce"))
    pull_results<T, kVec>(a, epoch, res_stage, "all_reduce(spinlock) gather");
  end_call(a.state, epoch, a.layout_key);
}

// One tile of the ring on this rank: its direction, this rank's places on the tile's two chains, its
// staging slot here and at the next rank, and its flags (one per column slice).
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
  uint64_t* flags;

  __device__ __forceinline__ RingTile(const TileArgs& a, int64_t t, int parity) {
    const DeviceContext& ctx = a.ctx;
    const int me = ctx.rank, world = ctx.world_size;
    tile = tile_at(a, t);
    const int dir = (t % a.rings) % 2 == 0 ? 1 : world - 1;  // +1 or -1 around the ring
    next = (me + dir) % world;
    const int owner = static_cast<int>(t % world);
    const int start = (owner + dir) % world;
    pos = ((me - start + world) % world) * (dir == 1 ? 1 : world - 1) % world;
    apos = ((me - owner + world) % world) * (dir == 1 ? 1 : world - 1) % world;
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
    flags = a.flags + (parity * a.tiles + t) * a.slices;
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
  const uint64_t epoch = begin_call(a.state);
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
  const uint64_t rs_mark = 2 * epoch + 1, ag_mark = 2 * epoch + 2;
  // Pass 1: reduce-scatter. The owner ends the chain: it rounds the sum into `out` and starts the AG.
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const RingTile<T> r(a, t, parity);
    const bool is_owner = r.pos == world - 1;
    for (int s = 0; s < a.slices; ++s) {
      const int c_lo = s * slice_n, c_hi = min(r.tile.w, (s + 1) * slice_n);
      if (c_lo >= c_hi) break;
      if (r.pos > 0 && !block_wait_flag(ctx, r.flags + s, rs_mark, "all_reduce(ring) reduce-scatter")) {
        end_call(a.state, epoch);
        return;
      }
      for_tile_packs<P::kN>(r.tile, c_lo, c_hi, [&](int row, int col) {
        const P v = load_pack<T, kVec>(io.in(r.tile, row, col));
        AccPack<A, P::kN> acc;
        if (r.pos > 0) {
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
      block_signal(ctx, r.flags + s, is_owner ? ag_mark : rs_mark, r.next);
    }
  }
  // Pass 2: all-gather, on every rank but the owner of each tile.
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const RingTile<T> r(a, t, parity);
    if (r.apos == 0) continue;
    const bool forward = r.apos < world - 1;
    for (int s = 0; s < a.slices; ++s) {
      const int c_lo = s * slice_n, c_hi = min(r.tile.w, (s + 1) * slice_n);
      if (c_lo >= c_hi) break;
      if (!block_wait_flag(ctx, r.flags + s, ag_mark, "all_reduce(ring) all-gather")) {
        end_call(a.state, epoch);
        return;
      }
      for_tile_packs<P::kN>(r.tile, c_lo, c_hi, [&](int row, int col) {
        const P v = load_pack<T, kVec>(r.ag_slot + ag_local(row, col, c_lo));
        store_pack<T, kVec>(io.out(r.tile, row, col), v);
        if (forward) store_pack<T, kVec>(r.ag_next + ag_local(row, col, c_lo), v);
      });
      if (forward) block_signal(ctx, r.flags + s, ag_mark, r.next);
    }
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

void launch_ring(const TileArgs& a, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_reduction(dtype, op, tile_vec(a, dtype), [&](auto t, auto o, auto v) {
    launch_collective(ring_kernel<decltype(t), decltype(o)::value, decltype(v)::value>, blocks, kThreads, stream, a);
  });
}

}  // namespace iris::ccl::detail
