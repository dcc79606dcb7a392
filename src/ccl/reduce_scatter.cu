// reduce_scatter: out (m x n) = rows [me*m, (me+1)*m) of the reduction over ranks of in (W*m x n).
//
// The reduce-scatter phase of all_reduce two_shot, with the owner fixed by rows: rank o owns block o.
// One block of rows is cut into chunks (CopyPlan); block b of the grid takes chunks c = b, b + G, ...
// on every rank, as a two-stage pipeline (pipelined_chunks: push chunk c_i, then reduce chunk c_{i-1},
// so the reduction, a local pass, overlaps the transfer of later chunks):
//   1. push    for every k = 1..W-1 copies chunk c of input block me+k into slot [k-1] of rank me+k's
//              staging; then bar.sync and one release per peer (system scope) of flag (k, c) there;
//   2. reduce  waits for its W-1 local flags (k, c) (acquire, system scope, one thread per flag; each
//              valued with the pusher's tagged epoch, whose tag must be this call's, as in all_gather), then
//              reduces the W parts of chunk c in rank order 0..W-1 (its own part read from its input,
//              float32 accumulation for 16-bit types) into its output.
// Every element is reduced once, by its owner, in a fixed order: results are deterministic. A block
// waits only for the peers' pushes of its chunk, which come after their reductions of lower chunks only
// (pipelined_chunks).
//
// Reuse without a barrier (staging and flags come in two parities; call e uses e & 1): a peer s writes
// our parity-(e & 1) slots again in call e + 2. It starts call e + 2 after finishing call e + 1, which
// needed our pushes of call e + 1 (its own block's parts), which we make only after our call e ended,
// reads included. So the parts we reduce in call e are not overwritten under us, and our flag (k, c) of
// parity e & 1 holds e - 2 or e (never e + 2) while we wait for e.
// In place (out is our own block of in): each element of that block is read and then written by the
// same thread; pushes read only the other blocks.
#include "ccl/ccl_common.cuh"
#include "ccl/collective_kernels.hpp"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

template <typename T, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) reduce_scatter_kernel(const __grid_constant__ ExchangeArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  using E = Elem<T>;
  using P = Pack<T, kVec>;
  constexpr int kN = P::kN;
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size, peers = world - 1;
  const uint64_t epoch = begin_call(a.ctx, a.state, "reduce_scatter");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  const ExchangeStaging<T> stage(a, epoch);
  auto in_block = [&](int r) {
    return View<const T>{static_cast<const T*>(a.in) + r * a.block_rows * a.in_stride, a.cols, a.in_stride};
  };
  const View<T> out{static_cast<T*>(a.out), a.cols, a.out_stride};
  const View<const T> mine = in_block(me);

  // 1. push my part of every peer's block into its staging;
  // 2. reduce my block, chunk by chunk, in rank order. Source s's part is in slot (me - s) mod W.
  auto push = [&](int64_t c) {
    const int64_t base = c * a.chunk, len = min(a.chunk, a.numel - base);
    for (int k = 1; k < world; ++k) {
      const int to = ring_peer(me, k, world);
      const View<const T> src = in_block(to);
      T* dst = dev::translate(ctx, stage.slot_of(k) + base, to);
      block_copy_to<T, kVec>([&](int64_t e) { return dst + e; }, [&](int64_t e) { return src.at(base + e); }, len);
    }
    block_signal_each(
        ctx, peers, [&](int i) { return stage.flag(i + 1, c); }, [&](int i) { return ring_peer(me, i + 1, world); },
        tagged_epoch(ctx.call_key, epoch));
  };
  auto reduce = [&](int64_t c) {
    if (!block_wait_each_tagged(
            ctx, peers, [&](int i) { return stage.flag(i + 1, c); },
            [&](int i) { return ring_peer(me, world - 1 - i, world); }, epoch, "reduce_scatter"))
      return false;
    const int64_t base = c * a.chunk, len = min(a.chunk, a.numel - base);
    auto part = [&](int s, int64_t e) -> const T* {
      return s == me ? mine.at(base + e) : stage.slot_of(s < me ? me - s : me - s + world) + base + e;
    };
    for (int64_t j = threadIdx.x; j < len / kN; j += blockDim.x) {
      typename E::Acc acc[kN];
      for (int s = 0; s < world; ++s) {
        const P v = load_pack<T, kVec>(part(s, j * kN));
#pragma unroll
        for (int k = 0; k < kN; ++k) acc[k] = s == 0 ? E::to_acc(v.v[k]) : combine<kOp>(acc[k], E::to_acc(v.v[k]));
      }
      P r;
#pragma unroll
      for (int k = 0; k < kN; ++k) r.v[k] = reduced<T, kOp>(acc[k], world);
      store_pack<T, kVec>(out.at(base + j * kN), r);
    }
    for (int64_t e = (len / kN) * kN + threadIdx.x; e < len; e += blockDim.x) {
      typename E::Acc acc{};
      for (int s = 0; s < world; ++s) acc = s == 0 ? E::to_acc(*part(s, e)) : combine<kOp>(acc, E::to_acc(*part(s, e)));
      *out.at(base + e) = reduced<T, kOp>(acc, world);
    }
    return true;
  };
  (void)pipelined_chunks(a.nchunks, push, reduce);  // on timeout, just end
  end_call(a.state, epoch);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(reduce_scatter_kernel<float, ReduceOp::kSum, true>)

void launch_reduce_scatter(const ExchangeArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_reduction(dtype, op, args.vec, [&](auto t, auto o, auto v) {
    launch_collective(reduce_scatter_kernel<decltype(t), decltype(o)::value, decltype(v)::value>, blocks, kThreads,
                      stream, args);
  });
}

}  // namespace iris::ccl::detail
