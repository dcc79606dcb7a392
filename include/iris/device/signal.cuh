// Flags between ranks: bounded waits, signals, and put-then-signal.
//
//   // producer (rank p), every thread of the block:
//   dev::put_block_signal_release<dev::Scope::kSys>(ctx, slot, payload, n, ready, generation, consumer);
//   // consumer (rank c), one thread, then __syncthreads():
//   if (!dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(ctx, ready, dev::Cmp::kReached, generation))
//     return;  // timed out (or another thread did): the host raises iris::TimeoutError
//
// The rules (DESIGN.md, memory-ordering rules):
//  1. A flag is a full 32- or 64-bit word. Across GPUs it is written with a release at Scope::kSys and
//     read with an acquire at Scope::kSys; a narrower scope on either side does not order the data.
//  2. Everything the flag publishes is written before the release by threads ordered before the
//     releasing thread (the *_signal_release forms synchronize their group, then one thread releases).
//  3. Flags carry generations that grow every use (wait with Cmp::kReached), never 0/1 values that need
//     re-zeroing, so CUDA-graph replays stay correct.
//  4. A buffer is not overwritten until its readers are done: they acknowledge with their own
//     release-signalled, generation-valued flag.
// Waiting on a word of this rank's own heap (written remotely by the producer) is cheapest: the poll
// stays in local memory and only the producer's store crosses NVLink.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "iris/device/atomics.cuh"
#include "iris/device/common.cuh"
#include "iris/device/memory.cuh"
#include "iris/device/timeout.cuh"

#if defined(IRIS_DEVICE_COMPILE)

namespace iris::device {
namespace detail {

template <typename T>
inline constexpr bool kIsFlagWord = kIsAtomicInteger<T>;

template <typename T>
IRIS_DEVICE_INLINE bool compare(T observed, Cmp cmp, T value) {
  using U = std::make_unsigned_t<T>;
  switch (cmp) {
    case Cmp::kEq:
      return observed == value;
    case Cmp::kNe:
      return observed != value;
    case Cmp::kGe:
      return observed >= value;
    case Cmp::kGt:
      return observed > value;
    case Cmp::kLe:
      return observed <= value;
    case Cmp::kLt:
      return observed < value;
    case Cmp::kReached:
      return static_cast<std::make_signed_t<T>>(static_cast<U>(static_cast<U>(observed) - static_cast<U>(value))) >= 0;
  }
  return false;
}

// A flag's value as the error record holds it: a signed word's sign-extended (printed signed then), an
// unsigned word's zero-extended.
template <typename T>
IRIS_DEVICE_INLINE uint64_t as_u64(T v) {
  if constexpr (std::is_signed_v<T>)
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  else
    return static_cast<uint64_t>(v);
}

}  // namespace detail

// Polls the word at `ptr` (local, or a peer's translated word) with kOrder loads (kAcquire: the usual
// case, later reads see what the signaller published; kRelaxed: only for a flag that publishes
// nothing, with the argument written at the call site) until `*ptr <cmp> value` holds. Returns true
// then. Returns false when the wait gave up: ctx.timeout_ns passed (the failure, named `op`, is
// recorded for the host) or another thread recorded an error; the caller should end its kernel.
// The first poll is not timed, so a satisfied wait costs one load.
template <Order kOrder, Scope kScope, typename T>
[[nodiscard]] IRIS_DEVICE_INLINE bool wait_until(const DeviceContext& ctx, const T* ptr, Cmp cmp,
                                                 std::type_identity_t<T> value, const char* op = "wait_until") {
  static_assert(detail::kIsFlagWord<T>, "flags are full 32- or 64-bit integer words (int32/uint32/int64/uint64)");
  static_assert(kOrder == Order::kAcquire || kOrder == Order::kRelaxed,
                "wait_until polls with Order::kAcquire (or kRelaxed for a flag that publishes nothing)");
  T observed = load<kOrder, kScope>(ptr);
  if (detail::compare(observed, cmp, value)) return true;
  SpinBound bound(ctx);
  while (bound.keep_waiting(ctx, op, ptr, detail::as_u64(observed), detail::as_u64(value), std::is_signed_v<T>)) {
    observed = load<kOrder, kScope>(ptr);
    if (detail::compare(observed, cmp, value)) return true;
  }
  return false;
}

// Stores `value` into `flag`'s word in rank `to`'s heap with kOrder (kRelease: publishes this thread's
// earlier writes and what it observed; kRelaxed: publishes nothing).
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE void signal(const DeviceContext& ctx, T* flag, std::type_identity_t<T> value, int to) {
  static_assert(detail::kIsFlagWord<T>, "flags are full 32- or 64-bit integer words (int32/uint32/int64/uint64)");
  store<kOrder, kScope>(translate(ctx, flag, to), value);
}

// Adds `increment` to `flag`'s word in rank `to`'s heap (many signallers, one waiter counting them);
// returns the previous value.
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T signal_add(const DeviceContext& ctx, T* flag, std::type_identity_t<T> increment, int to) {
  static_assert(detail::kIsFlagWord<T>, "flags are full 32- or 64-bit integer words (int32/uint32/int64/uint64)");
  return atomic_add<kOrder, kScope>(translate(ctx, flag, to), increment);
}

// put + signal: the group copies `count` elements from src (local) into `dst`'s object in rank `to`'s
// heap, synchronizes, and then one thread stores `value` into `flag`'s word in rank `to`'s heap with a
// release at kScope. A waiter that acquires the flag at kScope and sees `value` reads the whole payload.
// Every thread of the group calls with the same arguments.
template <Scope kScope, typename T, typename F>
IRIS_DEVICE_INLINE void put_thread_signal_release(const DeviceContext& ctx, T* dst, const T* src, size_t count, F* flag,
                                                  std::type_identity_t<F> value, int to) {
  put_thread(ctx, dst, src, count, to);
  signal<Order::kRelease, kScope>(ctx, flag, value, to);
}

template <Scope kScope, typename T, typename F>
IRIS_DEVICE_INLINE void put_warp_signal_release(const DeviceContext& ctx, T* dst, const T* src, size_t count, F* flag,
                                                std::type_identity_t<F> value, int to) {
  put_warp(ctx, dst, src, count, to);
  // Every lane's stores happen before lane 0's release (bar.warp.sync orders them; release is cumulative).
  __syncwarp();
  if (ThisWarp::index() == 0) signal<Order::kRelease, kScope>(ctx, flag, value, to);
}

template <Scope kScope, typename T, typename F>
IRIS_DEVICE_INLINE void put_block_signal_release(const DeviceContext& ctx, T* dst, const T* src, size_t count, F* flag,
                                                 std::type_identity_t<F> value, int to) {
  put_block(ctx, dst, src, count, to);
  // Every thread's stores happen before thread 0's release (bar.sync orders them; release is cumulative).
  __syncthreads();
  if (ThisBlock::index() == 0) signal<Order::kRelease, kScope>(ctx, flag, value, to);
}

}  // namespace iris::device

#endif  // IRIS_DEVICE_COMPILE
