// broadcast: out = root's in on every rank.
//
// Scatter, then forward (so the root sends the tensor about once instead of W-1 times). The flat
// tensor is cut into chunks (CopyPlan); the chunks form W-1 contiguous runs of per_owner chunks, run i
// owned by rank root+1+i (mod W). Every rank's flags are W done words (word s: rank s's last call of which this
// rank was the root is over), then one flag per chunk. Block b of the grid takes chunks c = b, b + G, ... on
// every rank:
//   root       copies chunk c of in into its out (unless in place) and into the staging of owner(c),
//              then bar.sync and a release (system scope) of flag c on owner(c), valued with the call's
//              tagged epoch (collective_kernels.hpp: the epoch and a tag of the call's key); then block 0
//              waits for every peer's done word (below);
//   owner(c)   waits for its local flag c (acquire, system scope; a tag other than this call's records
//              that the calls differ, naming the signaller, and ends the kernel), copies chunk c from its staging
//              into its out and into the staging of every rank but the root and itself, then bar.sync
//              and one release of flag c on each of them;
//   the rest   wait for their local flag c and copy chunk c from their staging into their out.
// A non-root's last block (end_call_published), once every block of its call is over, releases its done word
// on the root with the call's tagged epoch, unless a wait of the call gave up (call_gave_up): the root's wait
// then gives up too, naming this rank as stopped. A non-root block forwards its own chunks before it waits for
// anyone else's. Every wait within the call is for the same block index on the root (whose chunk loop never
// waits) or on an owner (which waits only for the root), and the root's block 0 waits for the peers' ends only
// after its own chunks, so no block waits for one that cannot run. (Before their chunk loop the root's blocks
// also wait until every peer's previous call is over, which depends on no block of this call.)
//
// The root waits for its peers' done words so that ranks whose calls differ raise on the root too: a peer
// whose call has another tag (another shape, dtype or root) fails its tagged wait there, and ranks that each
// name themselves the root (at two ranks nobody else waits for a flag) wait for done words nobody sets, then
// give up and read each other's call words (timeout.cuh). Before 2026-12-06 the root waited for no flag: it
// raised nothing, and ranks that each passed themselves as the root returned their own input without an error.
// The root's call now ends when its peers' do, about one NVLink store later (a non-root's end did not move).
//
// Reuse without a barrier. Every rank's staging and chunk flags are written only by call e's root and
// owners, in that causal order: an owner forwards chunk c only after acquiring the root's flag c.
// The root's chunk loop waits for no one, so it alone could run ahead; before writing anything, each root block
// makes sure that every peer's call e - 1 is over, every read of its staging included: from the peer's done
// word when this rank was the root of call e - 1 too (a local load, the usual case of a fixed root), else by
// waiting until the peer's published epoch (state[0], stored with a release at system scope by the peer's last
// block, end_call_published) reaches e - 1. Every write of call e into a peer comes after that (the
// root's directly, an owner's through the root's flag), so one staging slot and one flag per chunk
// suffice, and flag c holds at most e - 1 until call e's writer stores e. A rank that was the root in
// call e - 1 received nothing then; a different root in call e waits for its epoch all the same. A done word
// is written once per call the rank is root of, after that call's chunks, and a peer's next write to it comes
// at the end of a later call of this root's, which cannot start before this call ends.
// In place on the root (out == in): the root only reads in.
#include "ccl/ccl_common.cuh"
#include "ccl/collective_kernels.hpp"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

template <typename U, bool kVec>
__global__ void __launch_bounds__(kThreads) broadcast_kernel(const __grid_constant__ BroadcastArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size, root = a.root;
  const uint64_t epoch = begin_call(a.ctx, a.state, "broadcast");
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  // After an LL call (its staging layout), nobody writes a peer's staging before every rank has ended it.
  if (!layout_fence_after_a_call(ctx, a.state, a.layout_key, epoch, "broadcast")) {
    end_call_published(a.state, epoch);
    return;
  }
  const uint64_t flag_word = tagged_epoch(ctx.call_key, epoch);  // what this call's flags carry
  U* const stage = static_cast<U*>(a.staging);
  uint64_t* const done = a.flags;                 // [W] done words
  uint64_t* const chunk_flags = a.flags + world;  // [nchunks]
  const View<U> out{static_cast<U*>(a.out), a.cols, a.out_stride};
  auto length = [&](int64_t c) { return min(a.chunk, a.numel - c * a.chunk); };
  auto owner = [&](int64_t c) { return ring_peer(root, 1 + static_cast<int>(c / a.per_owner), world); };

  if (me == root) {
    const View<const U> in{static_cast<const U*>(a.in), a.cols, a.in_stride};
    // Peer i's call e - 1 is over: its done word says so when this rank was the root of that call, else wait for
    // its published epoch.
    auto previous_call_of = [&](int i) -> const uint64_t* {
      const int s = ring_peer(root, i + 1, world);
      const uint64_t word = dev::load<dev::Order::kAcquire, dev::Scope::kSys>(done + s);
      return tagged_epoch_reached(word, tagged_epoch(0, epoch - 1)) ? nullptr : dev::translate(ctx, a.state, s);
    };
    if (world > 1 && !block_wait_each(ctx, world - 1, previous_call_of, epoch - 1,
                                      "broadcast (root waits for a peer's previous call)")) {
      end_call_published(a.state, epoch);
      return;
    }
    const int to_peer = world > 1 ? 1 : 0;
    const int ndst = to_peer + (a.in_place ? 0 : 1);
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
      const int64_t base = c * a.chunk;
      const int d = to_peer ? owner(c) : me;
      block_fanout<U, kVec>(
          [&](int64_t e) { return in.at(base + e); }, ndst,
          [&](int i, int64_t e) { return i < to_peer ? dev::translate(ctx, stage + base, d) + e : out.at(base + e); },
          length(c));
      if (to_peer) block_signal(ctx, chunk_flags + c, flag_word, d);
    }
    if (world > 1 && blockIdx.x == 0 &&
        !block_wait_each_tagged(
            ctx, world - 1, [&](int i) { return done + ring_peer(root, i + 1, world); },
            [&](int i) { return ring_peer(root, i + 1, world); }, epoch,
            "broadcast (root waits for its peers' ends)")) {
      end_call_published(a.state, epoch);
      return;
    }
  } else {
    // Forward targets: ranks at distance 1..W-1 from me, skipping the root (at distance rk).
    const int rk = root > me ? root - me : root - me + world;
    auto target = [&](int i) { return ring_peer(me, 1 + i + (1 + i >= rk ? 1 : 0), world); };
    const int ntargets = world - 2;
    // 1. forward the chunks I own (waiting only for the root).
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
      if (owner(c) != me) continue;
      if (!block_wait_tagged(ctx, chunk_flags + c, epoch, root, "broadcast (owner waits for the root)")) {
        end_call_published(a.state, epoch);
        return;
      }
      const int64_t base = c * a.chunk;
      const U* src = stage + base;
      block_fanout<U, kVec>([&](int64_t e) { return src + e; }, ntargets + 1,
                            [&](int i, int64_t e) {
                              return i < ntargets ? dev::translate(ctx, stage + base, target(i)) + e : out.at(base + e);
                            },
                            length(c));
      block_signal_each(
          ctx, ntargets, [&](int) { return chunk_flags + c; }, target, flag_word);
    }
    // 2. copy the chunks other owners forwarded to me.
    for (int64_t c = blockIdx.x; c < a.nchunks; c += gridDim.x) {
      if (owner(c) == me) continue;
      if (!block_wait_tagged(ctx, chunk_flags + c, epoch, owner(c), "broadcast (waits for a chunk's owner)")) {
        end_call_published(a.state, epoch);
        return;
      }
      const int64_t base = c * a.chunk;
      const U* src = stage + base;
      block_copy_to<U, kVec>([&](int64_t e) { return out.at(base + e); }, [&](int64_t e) { return src + e; },
                             length(c));
    }
    // 3. the last block tells the root that this rank's call is over, unless a wait of another block gave up.
    end_call_published(a.state, epoch, a.layout_key, [&] {
      if (!call_gave_up(ctx, epoch))
        dev::signal<dev::Order::kRelease, dev::Scope::kSys>(ctx, done + me, flag_word, root);
    });
    return;
  }
  end_call_published(a.state, epoch, a.layout_key);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(broadcast_kernel<uint16_t, true>)

void launch_broadcast(const BroadcastArgs& args, DType dtype, int blocks, cudaStream_t stream) {
  dispatch_bits(dtype, args.vec, [&](auto u, auto v) {
    launch_collective(broadcast_kernel<decltype(u), decltype(v)::value>, blocks, kThreads, stream, args);
  });
}

}  // namespace iris::ccl::detail
