// all_reduce one_shot, simple protocol: for tensors too large for LL lines (ll_exchange.cu), whose
// words carry 4 data bytes in 8 and so double the NVLink traffic.
//
// The flat tensor is cut into segments (SegmentPlan: fixed by the size, not by the grid). Block b takes
// segments g = b, b + G, ... in two phases, as the LL kernel does:
//   1. push    for each of its segments, every thread loads 16-byte packs of the input once and stores
//              them into slot [me] of every peer's staging (parity e & 1); then bar.sync and, from
//              thread i, a release at system scope of flags[me][g] = e on peer i (block_signal_each).
//              Only the releasing threads wait for the stores to land; the rest of the block goes on
//              with the next segment, so the flag's round trip overlaps the next segment's stores.
//   2. reduce  for each of its segments, thread i waits (acquire, system scope) until flags[s][g] of
//              peer s reaches e, bar.sync, then the block reduces the W parts in rank order 0..W-1 (its
//              own from the input, the others from its local staging; float32 accumulation for 16-bit
//              types) into out. Every rank reduces the same parts in the same order, so all ranks are
//              bitwise identical.
// Data is published by a release/acquire pair per segment (DESIGN.md rules 1 and 2): bar.sync orders
// every thread's stores before the releasing thread's cumulative release, and the waiting thread's
// acquire and the bar.sync after it order the block's staging loads after it.
//
// Reuse across calls without a barrier, as in the LL kernel: call e writes parity e & 1. A peer starts
// call e + 1 only after its call e, which needed all our segments of call e, and we push those only
// after our call e - 1 ended (stream order), i.e. after we finished reading parity (e - 1) & 1 =
// (e + 1) & 1. So the parity a peer overwrites in call e + 1 is one we no longer read; two parities
// are enough. Flags only grow (they hold epochs), and a waiter needs "reached e", so a peer already in
// call e + 1 (which wrote e + 1 after our segment's data of call e) lets us through correctly.
// In place (out == in) is safe: a segment of `in` is pushed by the one block that later reduces it,
// before that block writes it. Every block pushes all its segments before it waits for any, so a wait
// depends only on the peer's blocks pushing, never on this rank's other blocks; as for the LL kernel,
// the peer's blocks must all get to run, which a launch of at most one 512-thread block per
// multiprocessor (comm_block_limit refuses more) guarantees once other kernels make room.
#include <algorithm>

#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_common.cuh"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

constexpr int kUnroll = 4;  // 16-byte packs per thread in flight

template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

// Elements [i, i + kPack) of a view as 16 bytes: one access when the view is contiguous and 16-byte
// aligned (kVec), element by element otherwise. Staging is always contiguous and aligned.
template <typename T, bool kVec>
__device__ __forceinline__ uint4 load16(const View<const T>& v, int64_t i) {
  if constexpr (kVec) {
    return dev::load(reinterpret_cast<const uint4*>(v.data + i));
  } else {
    T x[kPack<T>];
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) x[k] = *v.at(i + k);
    uint4 w;
    memcpy(&w, x, 16);
    return w;
  }
}

template <typename T, bool kVec>
__device__ __forceinline__ void store16(const View<T>& v, int64_t i, uint4 w) {
  if constexpr (kVec) {
    dev::store(reinterpret_cast<uint4*>(v.data + i), w);
  } else {
    T x[kPack<T>];
    memcpy(x, &w, 16);
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) *v.at(i + k) = x[k];
  }
}

template <typename T, ReduceOp kOp>
__device__ __forceinline__ void accumulate(typename Elem<T>::Acc (&acc)[kPack<T>], uint4 w, bool first) {
  T x[kPack<T>];
  memcpy(x, &w, 16);
#pragma unroll
  for (int k = 0; k < kPack<T>; ++k)
    acc[k] = first ? Elem<T>::to_acc(x[k]) : combine<kOp>(acc[k], Elem<T>::to_acc(x[k]));
}

template <typename T, ReduceOp kOp>
__device__ __forceinline__ uint4 pack_result(const typename Elem<T>::Acc (&acc)[kPack<T>], int world) {
  T x[kPack<T>];
#pragma unroll
  for (int k = 0; k < kPack<T>; ++k) x[k] = reduced<T, kOp>(acc[k], world);
  uint4 w;
  memcpy(&w, x, 16);
  return w;
}

constexpr const char* kOpName = "all_reduce(one_shot simple)";

template <typename T, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) one_shot_simple_kernel(const __grid_constant__ OneShotArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  using Acc = typename Elem<T>::Acc;
  constexpr int kN = kPack<T>;
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const View<const T> in{static_cast<const T*>(a.io.in), a.io.cols, a.io.in_stride};
  const View<T> out{static_cast<T*>(a.io.out), a.io.cols, a.io.out_stride};
  const int64_t seg = a.plan.seg, nsegs = a.plan.nsegs, slot = a.plan.slot;
  const uint64_t epoch = begin_call(a.ctx, a.state, kOpName);
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  if (!layout_fence(ctx, a.state, a.layout_key, epoch, kOpName)) {
    end_call(a.state, epoch);
    return;
  }
  T* const stage = static_cast<T*>(a.staging) + static_cast<int64_t>(epoch & 1) * world * slot;
  auto peer = [&](int i) { return me + 1 + i < world ? me + 1 + i : me + 1 + i - world; };
  const int64_t threads = blockDim.x;

  // 1. Push every segment of this block to every peer, one release per (segment, peer).
  for (int64_t g = blockIdx.x; g < nsegs; g += gridDim.x) {
    const int64_t base = g * seg, len = min(seg, a.io.numel - base), packs = len / kN;
    T* const mine = stage + me * slot + base;  // our slot, at this segment, in any rank's staging
    int64_t j = threadIdx.x;
    for (; j + (kUnroll - 1) * threads < packs; j += kUnroll * threads) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load16<T, kVec>(in, base + (j + u * threads) * kN);
      for (int i = 0; i < world - 1; ++i) {
        T* const dst = dev::translate(ctx, mine, peer(i));
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) dev::store(reinterpret_cast<uint4*>(dst + (j + u * threads) * kN), v[u]);
      }
    }
    for (; j < packs; j += threads) {
      const uint4 v = load16<T, kVec>(in, base + j * kN);
      for (int i = 0; i < world - 1; ++i)
        dev::store(reinterpret_cast<uint4*>(dev::translate(ctx, mine, peer(i)) + j * kN), v);
    }
    for (int64_t e = packs * kN + threadIdx.x; e < len; e += threads) {
      const T v = *in.at(base + e);
      for (int i = 0; i < world - 1; ++i) dev::translate(ctx, mine, peer(i))[e] = v;
    }
    block_signal_each(
        ctx, world - 1, [&](int) { return a.flags + me * nsegs + g; }, peer, epoch);
  }

  // 2. Reduce every segment of this block once every peer's part of it has arrived.
  for (int64_t g = blockIdx.x; g < nsegs; g += gridDim.x) {
    if (!block_wait_each(
            ctx, world - 1, [&](int i) { return a.flags + peer(i) * nsegs + g; }, epoch, kOpName)) {
      end_call(a.state, epoch);  // a timeout: end
      return;
    }
    const int64_t base = g * seg, len = min(seg, a.io.numel - base), packs = len / kN;
    int64_t j = threadIdx.x;
    for (; j + (kUnroll - 1) * threads < packs; j += kUnroll * threads) {
      Acc acc[kUnroll][kN];
      for (int s = 0; s < world; ++s) {
        uint4 w[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + (j + u * threads) * kN;
          w[u] = s == me ? load16<T, kVec>(in, i) : dev::load(reinterpret_cast<const uint4*>(stage + s * slot + i));
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) accumulate<T, kOp>(acc[u], w[u], s == 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        store16<T, kVec>(out, base + (j + u * threads) * kN, pack_result<T, kOp>(acc[u], world));
    }
    for (; j < packs; j += threads) {
      Acc acc[kN];
      const int64_t i = base + j * kN;
      for (int s = 0; s < world; ++s)
        accumulate<T, kOp>(
            acc, s == me ? load16<T, kVec>(in, i) : dev::load(reinterpret_cast<const uint4*>(stage + s * slot + i)),
            s == 0);
      store16<T, kVec>(out, i, pack_result<T, kOp>(acc, world));
    }
    for (int64_t e = packs * kN + threadIdx.x; e < len; e += threads) {
      Acc acc{};
      for (int s = 0; s < world; ++s) {
        const T v = s == me ? *in.at(base + e) : stage[s * slot + base + e];
        acc = s == 0 ? Elem<T>::to_acc(v) : combine<kOp>(acc, Elem<T>::to_acc(v));
      }
      *out.at(base + e) = reduced<T, kOp>(acc, world);
    }
  }
  end_call(a.state, epoch, a.layout_key);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(one_shot_simple_kernel<float, ReduceOp::kSum, true>)

SegmentPlan plan_segments(int64_t numel, DType dtype) {
  // About 2 x 128 segments (two per block of a full launch, so a block's second segment's stores
  // overlap its first flag's round trip), each between 8 KiB (one store per thread of a block) and
  // 64 KiB. Not tuned on 2 GPUs yet.
  const int64_t esz = static_cast<int64_t>(dtype_size(dtype));
  const int64_t pack = 16 / esz;
  const int64_t bytes = numel * esz;
  int64_t seg_bytes = std::clamp<int64_t>(bytes / 256, 8 << 10, 64 << 10);
  SegmentPlan p;
  p.seg = (seg_bytes / esz + pack - 1) / pack * pack;
  p.nsegs = std::max<int64_t>(1, (numel + p.seg - 1) / p.seg);
  p.slot = p.nsegs * p.seg;
  return p;
}

int segment_blocks(const SegmentPlan& plan, int limit) {
  return static_cast<int>(std::clamp<int64_t>((plan.nsegs + 1) / 2, 1, limit));
}

void launch_one_shot_simple(const OneShotArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_reduction(dtype, op, args.vec, [&](auto t, auto o, auto v) {
    launch_collective(one_shot_simple_kernel<decltype(t), decltype(o)::value, decltype(v)::value>, blocks, kThreads,
                      stream, args);
  });
}

}  // namespace iris::ccl::detail
