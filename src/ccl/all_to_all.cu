// all_to_all: in and out are (W*m x n); rows [j*m, (j+1)*m) of in go to rank j, where they land in
// rows [me*m, (me+1)*m) of its out.
//
// Push through the receivers' staging, like all_gather but with a different block for each peer. One
// block of rows is cut into chunks (CopyPlan); block b of the grid takes chunks c = b, b + G, ... on
// every rank, as a two-stage pipeline (pipelined_chunks: push chunk c_i, then receive chunk c_{i-1}):
//   1. push     for every k = 1..W-1 copies chunk c of input block me+k into slot [k-1] of rank me+k's
//               staging, copies chunk c of input block me into output block me; then bar.sync and one
//               release per peer (system scope) of flag (k, c) on that peer, valued with the call's
//               tagged epoch (collective_kernels.hpp);
//   2. receive  for every source me-k: waits for its local flag (k, c) to reach the epoch (acquire,
//               system scope), checks its tag (as all_gather's) and copies the chunk from its staging
//               into output block me-k.
// A receive waits only for the peers' pushes of its chunk, which come after their receives of lower
// chunks only, so no block waits for one that cannot make progress (pipelined_chunks).
//
// Reuse without a barrier (staging and flags come in two parities; call e uses e & 1): a peer s writes
// our parity-(e & 1) slots again in call e + 2. It starts call e + 2 after finishing call e + 1, which
// needed our pushes of call e + 1 (its block of our input), which we make only after our call e ended,
// reads included. So the slots we read in call e are not overwritten under us, and our flag (k, c) of
// parity e & 1 holds e - 2 or e (never e + 2) while we wait for e.
// in and out must not overlap (checked on the host): block j of in is read while block j of out is
// being received.
#include "ccl/ccl_common.cuh"
#include "ccl/collective_kernels.hpp"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

template <typename U, bool kVec>
__global__ void __launch_bounds__(kThreads) all_to_all_kernel(const __grid_constant__ ExchangeArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size, peers = world - 1;
  const uint64_t epoch = begin_call(a.ctx, a.state, "all_to_all");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  const ExchangeStaging<U> stage(a, epoch);
  auto in_block = [&](int r) {
    return View<const U>{static_cast<const U*>(a.in) + r * a.block_rows * a.in_stride, a.cols, a.in_stride};
  };
  auto out_block = [&](int r) {
    return View<U>{static_cast<U*>(a.out) + r * a.block_rows * a.out_stride, a.cols, a.out_stride};
  };

  // 1. push block me+k of my input into rank me+k's staging; copy my own block locally;
  // 2. copy what every peer pushed into my staging into its output block (on timeout, just end).
  auto push = [&](int64_t c) {
    const int64_t base = c * a.chunk, len = min(a.chunk, a.numel - base);
    for (int k = 1; k < world; ++k) {
      const int to = ring_peer(me, k, world);
      const View<const U> src = in_block(to);
      U* dst = dev::translate(ctx, stage.slot_of(k) + base, to);
      block_copy_to<U, kVec>([&](int64_t e) { return dst + e; }, [&](int64_t e) { return src.at(base + e); }, len);
    }
    const View<const U> src = in_block(me);
    const View<U> dst = out_block(me);
    block_copy_to<U, kVec>([&](int64_t e) { return dst.at(base + e); }, [&](int64_t e) { return src.at(base + e); },
                           len);
    block_signal_each(
        ctx, peers, [&](int i) { return stage.flag(i + 1, c); }, [&](int i) { return ring_peer(me, i + 1, world); },
        tagged_epoch(ctx.call_key, epoch));
  };
  (void)pipelined_chunks(a.nchunks, push, [&](int64_t c) {
    return receive_pushed_chunk<U, kVec>(a, stage, epoch, out_block, "all_to_all", c);
  });
  end_call(a.state, epoch);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(all_to_all_kernel<uint16_t, true>)

void launch_all_to_all(const ExchangeArgs& args, DType dtype, int blocks, cudaStream_t stream) {
  dispatch_bits(dtype, args.vec, [&](auto u, auto v) {
    launch_collective(all_to_all_kernel<decltype(u), decltype(v)::value>, blocks, kThreads, stream, args);
  });
}

}  // namespace iris::ccl::detail
