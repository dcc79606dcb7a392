// all_gather: out (W*m x n) = every rank's in (m x n), rank r's at rows [r*m, (r+1)*m).
//
// Push through the receivers' staging (inputs and outputs may be anywhere in device memory, so a peer
// cannot read our input or write our output directly). One rank's block is cut into chunks
// (CopyPlan); block b of the grid takes chunks c = b, b + G, ... on every rank, as a two-stage
// pipeline (pipelined_chunks: push chunk c_i, then receive chunk c_{i-1}):
//   1. push     loads chunk c of its input once and stores it into slot [k-1] of rank me+k's staging
//               for every k = 1..W-1 and into its own output block (unless in place); then bar.sync
//               and one release per peer (system scope) of flag (k, c) on that peer, valued with the
//               call's tagged epoch (collective_kernels.hpp: the epoch and a tag of the call's key);
//   2. receive  for every source me-k: waits for its local flag (k, c) to reach the epoch (acquire,
//               system scope; only the pusher's store crosses NVLink), checks that its tag is this call's
//               (else records that the calls differ, naming the source, and ends) and copies the chunk
//               from its staging into the source's output block.
// A receive waits only for the peers' pushes of its chunk, which come after their receives of lower
// chunks only, so no block waits for one that cannot make progress (pipelined_chunks).
//
// Reuse without a barrier (staging and flags come in two parities; call e uses e & 1): a peer s writes
// our parity-(e & 1) slots again in call e + 2. It starts call e + 2 after finishing call e + 1, which
// needed our pushes of call e + 1, which we make only after our call e ended, reads included. So the
// slots we read in call e are not overwritten under us, and our flag (k, c) of parity e & 1 holds e - 2
// or e (never e + 2) while we wait for e: we acquire exactly the release that published call e's chunk.
// In place (in is our own output block): we only read it, and never write that block.
#include "ccl/ccl_common.cuh"
#include "ccl/collective_kernels.hpp"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

template <typename U, bool kVec>
__global__ void __launch_bounds__(kThreads) all_gather_kernel(const __grid_constant__ ExchangeArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size, peers = world - 1;
  const uint64_t epoch = begin_call(a.ctx, a.state, "all_gather");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  const ExchangeStaging<U> stage(a, epoch);
  const View<const U> in{static_cast<const U*>(a.in), a.cols, a.in_stride};
  auto out_block = [&](int r) {
    return View<U>{static_cast<U*>(a.out) + r * a.block_rows * a.out_stride, a.cols, a.out_stride};
  };
  const View<U> mine = out_block(me);

  // 1. push my chunk into every peer's staging (destinations 0..W-2) and my own output block (W-1);
  // 2. copy what every peer pushed into my staging into its output block (on timeout, just end).
  const int ndst = peers + (a.in_place ? 0 : 1);
  auto push = [&](int64_t c) {
    const int64_t base = c * a.chunk, len = min(a.chunk, a.numel - base);
    block_fanout<U, kVec>(
        [&](int64_t e) { return in.at(base + e); }, ndst,
        [&](int d, int64_t e) {
          return d < peers ? dev::translate(ctx, stage.slot_of(d + 1) + base, ring_peer(me, d + 1, world)) + e
                           : mine.at(base + e);
        },
        len);
    block_signal_each(
        ctx, peers, [&](int i) { return stage.flag(i + 1, c); }, [&](int i) { return ring_peer(me, i + 1, world); },
        tagged_epoch(ctx.call_key, epoch));
  };
  (void)pipelined_chunks(a.nchunks, push, [&](int64_t c) {
    return receive_pushed_chunk<U, kVec>(a, stage, epoch, out_block, "all_gather", c);
  });
  end_call(a.state, epoch);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(all_gather_kernel<uint16_t, true>)

void launch_all_gather(const ExchangeArgs& args, DType dtype, int blocks, cudaStream_t stream) {
  dispatch_bits(dtype, args.vec, [&](auto u, auto v) {
    launch_collective(all_gather_kernel<decltype(u), decltype(v)::value>, blocks, kThreads, stream, args);
  });
}

}  // namespace iris::ccl::detail
