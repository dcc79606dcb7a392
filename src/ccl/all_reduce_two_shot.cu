// all_reduce, two_shot variant (reduce-scatter, then all-gather), for large tensors.
//
// The flat tensor is cut into chunks; each is owned by one rank (ChunkPlan), and Owner::chunk(o, l) is
// the l-th chunk of owner o. Column l is the l-th chunk of every owner. One kernel; block b
// takes columns l = b, b + G, ... on every rank, as a three-stage software pipeline: at step i it pushes
// column l_i, reduces its own chunk of column l_{i-1} and pulls the rest of column l_{i-2}:
//   1. push    for every owner o != me, my part of o's chunk of the column goes into o's rs_stage slot
//              [l][me] and rs_flags[l][me] is signalled on o (bar.sync, then a release at system scope);
//   2. reduce  the owner waits for the W-1 flags of its chunk, reduces the W parts in rank order
//              0..W-1 (float32 accumulation for 16-bit types), writes the result into its output and
//              into its own ag_stage, and signals ag_flags[c] on every peer;
//   3. pull    for every owner o != me, wait for ag_flags[c] of o's chunk (a local word: only the
//              owner's store crosses NVLink) and copy the reduced chunk from o's ag_stage.
// Every rank's result for an element comes from its one owner, so all ranks are bitwise identical.
// Every step moves one chunk per owner in each direction, so the blocks stay balanced, and the local
// reduction overlaps the NVLink traffic of the other stages (before, the three phases ran one after
// the other). A reduce waits only for the peers' pushes of its column, a pull only for the owners'
// reduces of its column, and a block pushes column l after its reduces and pulls of lower columns only,
// so by induction over the column index every wait ends, whatever grid each rank launched.
//
// Reuse across calls without a barrier: a peer writes our rs_stage for call e + 1 only after it
// finished call e, which needed our reduced chunks of call e, which we wrote after reading our
// rs_stage of call e. A peer pulls our ag_stage of call e before it sends us its part of call e + 1,
// and we overwrite ag_stage only after receiving that part. In-place (out == in) is safe: each
// element of `in` is read (pushed or reduced) by the same block before that block writes it.
#include <algorithm>

#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_common.cuh"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

// Chunk l of `owner`: chunks are dealt to the ranks in turn (distribution 0: chunk l W + owner) or in
// runs of per_rank (distribution 1: chunk owner per_rank + l).
struct Owner {
  int world;
  ChunkPlan plan;
  __device__ __forceinline__ int64_t chunk(int owner, int64_t l) const {
    return plan.distribution == 0 ? l * world + owner : owner * plan.per_rank + l;
  }
};

// Block-cooperative copy of `len` elements starting at flat index `base` of a view into dst
// (contiguous), or from contiguous src into a view. Four 16-byte loads in flight per thread.
template <typename T, bool kVec, typename Src, typename Dst>
__device__ __forceinline__ void block_copy(Dst dst_at, Src src_at, int64_t len) {
  using P = Pack<T, kVec>;
  constexpr int kN = P::kN, kUnroll = 4;
  const int64_t packs = len / kN;
  int64_t j = threadIdx.x;
  for (; j + (kUnroll - 1) * int64_t{blockDim.x} < packs; j += kUnroll * int64_t{blockDim.x}) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_pack<T, kVec>(src_at((j + u * blockDim.x) * kN));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store_pack<T, kVec>(dst_at((j + u * blockDim.x) * kN), v[u]);
  }
  for (; j < packs; j += blockDim.x) store_pack<T, kVec>(dst_at(j * kN), load_pack<T, kVec>(src_at(j * kN)));
  for (int64_t e = packs * kN + threadIdx.x; e < len; e += blockDim.x) *dst_at(e) = *src_at(e);
}

template <typename T, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) two_shot_kernel(const __grid_constant__ TwoShotArgs args) {
  pdl_wait();
  pdl_launch_dependents();
  using E = Elem<T>;
  using P = Pack<T, kVec>;
  constexpr int kN = P::kN;
  const DeviceContext& ctx = args.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const View<const T> in{static_cast<const T*>(args.io.in), args.io.cols, args.io.in_stride};
  const View<T> out{static_cast<T*>(args.io.out), args.io.cols, args.io.out_stride};
  const Owner owner{world, args.plan};
  const int64_t chunk = args.plan.chunk, nchunks = args.plan.nchunks;
  T* rs_stage = static_cast<T*>(args.rs_stage);
  T* ag_stage = static_cast<T*>(args.ag_stage);
  const uint64_t epoch = begin_call(args.ctx, args.state, "all_reduce(two_shot)");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  if (!layout_fence(ctx, args.state, args.layout_key, epoch, "all_reduce(two_shot)")) {
    end_call(args.state, epoch);
    return;
  }
  auto length = [&](int64_t c) { return min(chunk, args.io.numel - c * chunk); };

  // Owner o's chunk of column l, or -1 past the end (the last column may be short).
  auto chunk_of = [&](int o, int64_t l) {
    const int64_t c = owner.chunk(o, l);
    return c < nchunks ? c : int64_t{-1};
  };
  // Peer i = 0..W-2, in ring order from me.
  auto peer = [&](int i) { return (me + 1 + i) % world; };

  // 1. push my part of every chunk of column l I do not own into its owner's rs_stage; one release
  // per owner, all at once.
  auto push = [&](int64_t l) {
    for (int i = 0; i < world - 1; ++i) {
      const int o = peer(i);
      const int64_t c = chunk_of(o, l);
      if (c < 0) continue;
      T* remote = dev::translate(ctx, rs_stage + (l * world + me) * chunk, o);
      block_copy<T, kVec>([&](int64_t e) { return remote + e; }, [&](int64_t e) { return in.at(c * chunk + e); },
                          length(c));
    }
    block_signal_each(
        ctx, world - 1, [&](int i) { return chunk_of(peer(i), l) < 0 ? nullptr : args.rs_flags + l * world + me; },
        peer, epoch);
  };

  // 2. reduce my chunk of column l, in rank order, into out and ag_stage; tell every peer.
  auto reduce = [&](int64_t l) {
    const int64_t c = chunk_of(me, l);
    if (c < 0) return true;
    if (!block_wait_each(
            ctx, world - 1, [&](int i) { return args.rs_flags + l * world + peer(i); }, epoch,
            "all_reduce(two_shot) reduce"))
      return false;
    const int64_t base = c * chunk, len = length(c);
    const T* parts = rs_stage + l * world * chunk;
    T* staged = ag_stage + l * chunk;
    for (int64_t j = threadIdx.x; j < len / kN; j += blockDim.x) {
      typename E::Acc acc[kN];
      for (int s = 0; s < world; ++s) {
        const P v = s == me ? load_pack<T, kVec>(in.at(base + j * kN)) : load_pack<T, kVec>(parts + s * chunk + j * kN);
#pragma unroll
        for (int k = 0; k < kN; ++k) acc[k] = s == 0 ? E::to_acc(v.v[k]) : combine<kOp>(acc[k], E::to_acc(v.v[k]));
      }
      P r;
#pragma unroll
      for (int k = 0; k < kN; ++k) r.v[k] = reduced<T, kOp>(acc[k], world);
      store_pack<T, kVec>(out.at(base + j * kN), r);
      if (world > 1) store_pack<T, kVec>(staged + j * kN, r);
    }
    for (int64_t e = (len / kN) * kN + threadIdx.x; e < len; e += blockDim.x) {
      typename E::Acc acc{};
      for (int s = 0; s < world; ++s) {
        const T v = s == me ? *in.at(base + e) : parts[s * chunk + e];
        acc = s == 0 ? E::to_acc(v) : combine<kOp>(acc, E::to_acc(v));
      }
      const T r = reduced<T, kOp>(acc, world);
      *out.at(base + e) = r;
      if (world > 1) staged[e] = r;
    }
    block_signal_each(
        ctx, world - 1, [&](int) { return args.ag_flags + c; }, peer, epoch);
    return true;
  };

  // 3. pull every chunk of column l I do not own from its owner's ag_stage, once every owner said
  // its chunk is reduced.
  auto pull = [&](int64_t l) {
    if (!block_wait_each(
            ctx, world - 1,
            [&](int i) {
              const int64_t c = chunk_of(peer(i), l);
              return c < 0 ? nullptr : args.ag_flags + c;
            },
            epoch, "all_reduce(two_shot) gather"))
      return false;
    for (int i = 0; i < world - 1; ++i) {
      const int o = peer(i);
      const int64_t c = chunk_of(o, l);
      if (c < 0) continue;
      const int64_t base = c * chunk;
      const T* remote = dev::translate(ctx, ag_stage + l * chunk, o);
      block_copy<T, kVec>([&](int64_t e) { return out.at(base + e); }, [&](int64_t e) { return remote + e; },
                          length(c));
    }
    return true;
  };

  // Step i: push l_i, reduce l_{i-1}, pull l_{i-2} (l_i = b + i G); two more steps drain the pipeline.
  const int64_t columns = args.plan.per_rank, step = gridDim.x;
  for (int64_t l = blockIdx.x; l < columns + 2 * step; l += step) {
    if (l < columns) push(l);
    const int64_t lr = l - step, lp = l - 2 * step;
    if ((lr >= 0 && lr < columns && !reduce(lr)) || (lp >= 0 && lp < columns && !pull(lp))) {
      end_call(args.state, epoch);  // a timeout: end
      return;
    }
  }
  end_call(args.state, epoch, args.layout_key);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(two_shot_kernel<float, ReduceOp::kSum, true>)

ChunkPlan plan_chunks(int64_t numel, DType dtype, int world, int distribution, int blocks) {
  ChunkPlan p;
  const int64_t esz = static_cast<int64_t>(dtype_size(dtype));
  const int64_t vec = 16 / esz;
  // Aim for about 4 columns per block (4 chunks per block per rank), each chunk between a floor and
  // 256 KiB. A block moves a whole column (W chunks) per step, so the floor, 16 KiB at 2 ranks, shrinks
  // as 32 KiB / W down to 4 KiB: at mid sizes with more ranks the columns then stay about as many as
  // the chunks were when every chunk had its own block in the push and pull phases.
  const int64_t floor_bytes = std::max<int64_t>(4 << 10, (32 << 10) / std::max(world, 2));
  const int64_t target = numel / std::max<int64_t>(1, int64_t{4} * blocks * world);
  int64_t chunk = std::clamp<int64_t>(target, floor_bytes / esz, (256 << 10) / esz);
  chunk = (chunk + vec - 1) / vec * vec;
  p.chunk = chunk;
  p.nchunks = std::max<int64_t>(1, (numel + chunk - 1) / chunk);
  p.per_rank = (p.nchunks + world - 1) / world;
  p.distribution = distribution;
  return p;
}

void launch_two_shot(const TwoShotArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_reduction(dtype, op, args.vec, [&](auto t, auto o, auto v) {
    launch_collective(two_shot_kernel<decltype(t), decltype(o)::value, decltype(v)::value>, blocks, kThreads, stream,
                      args);
  });
}

}  // namespace iris::ccl::detail
