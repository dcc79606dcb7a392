// A barrier across ranks, built on epoch words that are never reset.
//
// State: for each of `num_slots` independent slots, one 64-bit word per rank in every rank's heap:
//     epochs[slot * world_size + r]  in rank q's heap
//         r != q: the last epoch at which rank r arrived at q's barrier (written only by rank r);
//         r == q: rank q's own epoch: how many times it has passed this slot (written only by q).
// A crossing of the slot: read the own epoch e-1, set it to e, store e into every peer's word for
// this rank with a system-scope release, then wait (system-scope acquire, bounded) until every peer's
// word in this heap has reached e (wrap-safe compare: a fast peer may already be at e+1, never
// further, since it cannot pass e+1 without this rank). Nothing is ever zeroed, and the epoch lives in
// device memory and is advanced by the kernel, so a captured CUDA graph replays correctly.
//
// Guarantee: when barrier_block returns true on rank q, every rank has entered the same crossing of
// the slot, and everything the calling block on each rank wrote (or observed, e.g. the results of
// earlier kernels in its stream) before entering is visible to the calling block on q.
//
// Host side: iris::DeviceBarrier (iris/device_barrier.hpp) allocates the words and hands out a
// DeviceBarrierHandle; its arrive_and_wait(stream) runs one crossing of slot 0 as a stream operation.
#pragma once

#include <cstdint>
#include <type_traits>

#include "iris/device/common.cuh"
#include "iris/device/memory.cuh"
#include "iris/device/signal.cuh"
#include "iris/device/timeout.cuh"

namespace iris {

// POD handle of a DeviceBarrier, passed by value to kernels. Valid while the DeviceBarrier lives.
struct DeviceBarrierHandle {
  uint64_t* epochs;   // this rank's [num_slots][world_size] words, in its symmetric heap
  int32_t num_slots;  // independent barriers; a slot is used by one block per rank at a time
};

static_assert(std::is_trivially_copyable_v<DeviceBarrierHandle>, "DeviceBarrierHandle is passed by value to kernels");
static_assert(std::is_standard_layout_v<DeviceBarrierHandle>);

}  // namespace iris

#if defined(IRIS_DEVICE_COMPILE)

namespace iris::device {

// One crossing of `slot` by the calling block: every thread of the block calls it, and on each rank
// exactly one block uses a given slot at a time, each rank crossing the slot the same number of times.
// Blocks that want their own barrier (e.g. block b syncing with block b of every peer) use slot b.
// Returns true for every thread of the block once all ranks have arrived; false for every thread if
// the wait gave up (timeout, recorded for the host as op "barrier_block") or if slot is outside
// [0, num_slots) (recorded as a misuse). After false the slot's epochs are out of step across ranks.
[[nodiscard]] IRIS_DEVICE_INLINE bool barrier_block(const DeviceContext& ctx, const DeviceBarrierHandle& barrier,
                                                    int slot = 0) {
  const uint32_t tid = ThisBlock::index();
  const uint32_t threads = ThisBlock::size();
  const int world = ctx.world_size;
  const int me = ctx.rank;
  if (slot < 0 || slot >= barrier.num_slots) {
    if (tid == 0)
      record_device_error(ctx, kDeviceErrorMisuse, "barrier_block: slot out of range", barrier.epochs,
                          static_cast<uint64_t>(slot), static_cast<uint64_t>(barrier.num_slots), 0);
    __syncthreads();
    return false;
  }
  uint64_t* words = barrier.epochs + static_cast<size_t>(slot) * world;
  // Plain read: the own word is written only by this block, and the previous crossing ended with a
  // block-wide barrier (or a kernel boundary) after that write.
  const uint64_t epoch = load(words + me) + 1;
  // (1) every thread has read the old epoch before it is advanced below; (2) everything the block
  // wrote before the barrier happens before the releases below (bar.sync, and release is cumulative).
  __syncthreads();
  for (int r = static_cast<int>(tid); r < world; r += static_cast<int>(threads)) {
    if (r == me) {
      store(words + me, epoch);  // read back only by this block, after the block-wide barrier below
    } else {
      store<Order::kRelease, Scope::kSys>(translate(ctx, words + me, r), epoch);
    }
  }
  bool ok = true;
  for (int r = static_cast<int>(tid); r < world && ok; r += static_cast<int>(threads)) {
    if (r != me) ok = wait_until<Order::kAcquire, Scope::kSys>(ctx, words + r, Cmp::kReached, epoch, "barrier_block");
  }
  // All threads learn the outcome; bar.sync also orders every waiter's acquire before the block's
  // later accesses, so what peers published is visible to all threads.
  return __syncthreads_or(ok ? 0 : 1) == 0;
}

}  // namespace iris::device

#endif  // IRIS_DEVICE_COMPILE
