// all_reduce, two_shot variant (reduce-scatter, then all-gather), for large tensors.
//
// The flat tensor is cut into chunks; chunk c is owned by one rank (ChunkPlan). One kernel, three
// phases, every block striding over chunks with the same mapping in every phase:
//   1. push    each rank writes its part of chunk c into owner(c)'s rs_stage slot [c][me] and
//              signals rs_flags[c][me] on the owner (bar.sync, then a release at system scope);
//   2. reduce  each owner waits for its chunks' W-1 flags, reduces the W parts in rank order 0..W-1
//              (float32 accumulation for 16-bit types), writes the result into its output and into
//              its own ag_stage, and signals ag_flags[c] on every peer;
//   3. pull    each rank waits for ag_flags[c] of chunks it does not own (a local word: only the
//              owner's store crosses NVLink) and copies the reduced chunk from the owner's ag_stage.
// Every rank's result for an element comes from its one owner, so all ranks are bitwise identical.
//
// Reuse across calls without a barrier: a peer writes our rs_stage for call e + 1 only after it
// finished call e, which needed our reduced chunks of call e, which we wrote after reading our
// rs_stage of call e. A peer pulls our ag_stage of call e before it sends us its part of call e + 1,
// and we overwrite ag_stage only after receiving that part. In-place (out == in) is safe: each
// element of `in` is read (pushed or reduced) by the same block before that block writes it.
#include <algorithm>

#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_common.cuh"

namespace iris::ccl::detail {
namespace {

struct Owner {
  int world;
  ChunkPlan plan;
  __device__ __forceinline__ int of(int64_t c) const {
    return plan.distribution == 0 ? static_cast<int>(c % world) : static_cast<int>(c / plan.per_rank);
  }
  __device__ __forceinline__ int64_t local(int64_t c) const {
    return plan.distribution == 0 ? c / world : c % plan.per_rank;
  }
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
  const View<const T> in{static_cast<const T*>(args.in), args.cols, args.in_stride};
  const View<T> out{static_cast<T*>(args.out), args.cols, args.out_stride};
  const Owner owner{world, args.plan};
  const int64_t chunk = args.plan.chunk, nchunks = args.plan.nchunks;
  T* rs_stage = static_cast<T*>(args.rs_stage);
  T* ag_stage = static_cast<T*>(args.ag_stage);
  const uint64_t epoch = begin_call(args.state);
  if (!layout_fence(ctx, args.state, args.layout_key, epoch, "all_reduce(two_shot)")) {
    end_call(args.state, epoch);
    return;
  }
  auto length = [&](int64_t c) { return min(chunk, args.numel - c * chunk); };

  // 1. push my part of every chunk I do not own into its owner's rs_stage.
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int o = owner.of(c);
    if (o == me) continue;
    const int64_t l = owner.local(c), base = c * chunk;
    T* remote = dev::translate(ctx, rs_stage + (l * world + me) * chunk, o);
    block_copy<T, kVec>([&](int64_t e) { return remote + e; }, [&](int64_t e) { return in.at(base + e); },
                        length(c));
    block_signal(ctx, args.rs_flags + l * world + me, epoch, o);
  }

  // 2. reduce the chunks I own, in rank order, into out and ag_stage; tell every peer.
  for (int64_t l = blockIdx.x; l < args.plan.per_rank; l += gridDim.x) {
    const int64_t c = owner.chunk(me, l);
    if (c >= nchunks) continue;
    for (int s = 0; s < world; ++s)
      if (s != me && !block_wait_flag(ctx, args.rs_flags + l * world + s, epoch, "all_reduce(two_shot) reduce")) {
        end_call(args.state, epoch);
        return;
      }
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
      for (int k = 0; k < kN; ++k) r.v[k] = E::from_acc(acc[k]);
      store_pack<T, kVec>(out.at(base + j * kN), r);
      if (world > 1) store_pack<T, kVec>(staged + j * kN, r);
    }
    for (int64_t e = (len / kN) * kN + threadIdx.x; e < len; e += blockDim.x) {
      typename E::Acc acc{};
      for (int s = 0; s < world; ++s) {
        const T v = s == me ? *in.at(base + e) : parts[s * chunk + e];
        acc = s == 0 ? E::to_acc(v) : combine<kOp>(acc, E::to_acc(v));
      }
      *out.at(base + e) = E::from_acc(acc);
      if (world > 1) staged[e] = E::from_acc(acc);
    }
    for (int k = 1; k < world; ++k) block_signal(ctx, args.ag_flags + c, epoch, (me + k) % world);
  }

  // 3. pull every chunk I do not own from its owner's ag_stage.
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int o = owner.of(c);
    if (o == me) continue;
    if (!block_wait_flag(ctx, args.ag_flags + c, epoch, "all_reduce(two_shot) gather")) {
      end_call(args.state, epoch);
      return;
    }
    const int64_t base = c * chunk;
    const T* remote = dev::translate(ctx, ag_stage + owner.local(c) * chunk, o);
    block_copy<T, kVec>([&](int64_t e) { return out.at(base + e); }, [&](int64_t e) { return remote + e; },
                        length(c));
  }
  end_call(args.state, epoch, args.layout_key);
}

}  // namespace

ChunkPlan plan_chunks(int64_t numel, DType dtype, int world, int distribution, int blocks) {
  ChunkPlan p;
  const int64_t esz = static_cast<int64_t>(dtype_size(dtype));
  const int64_t vec = 16 / esz;
  // Aim for about 4 chunks per block per rank, each between 16 KiB and 256 KiB.
  const int64_t target = numel / std::max<int64_t>(1, int64_t{4} * blocks * world);
  int64_t chunk = std::clamp<int64_t>(target, (16 << 10) / esz, (256 << 10) / esz);
  chunk = (chunk + vec - 1) / vec * vec;
  p.chunk = chunk;
  p.nchunks = std::max<int64_t>(1, (numel + chunk - 1) / chunk);
  p.per_rank = (p.nchunks + world - 1) / world;
  p.distribution = distribution;
  return p;
}

void launch_two_shot(const TwoShotArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_typed(dtype, op, [&](auto t, auto o) {
    using T = decltype(t);
    if (args.vec)
      launch_collective(two_shot_kernel<T, decltype(o)::value, true>, blocks, kThreads, stream, args);
    else
      launch_collective(two_shot_kernel<T, decltype(o)::value, false>, blocks, kThreads, stream, args);
  });
}

}  // namespace iris::ccl::detail
