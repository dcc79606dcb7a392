// Bounded spinning: every device-side wait in iris ends, either because its condition held or
// because ctx.timeout_ns of %globaltimer passed (default 10 s; ContextOptions::device_timeout or
// IRIS_DEVICE_TIMEOUT).
//
//   SpinBound bound(ctx);
//   while (!condition()) {
//     if (!bound.keep_waiting(ctx, "my_op", flag, observed, expected)) return;  // give up: end the kernel
//   }
//
// On expiry the waiting thread claims ctx.error->code with a system-scope CAS 0 -> 1 (the first
// failure wins; later ones are dropped), fills in the op name, its rank, the rank owning the waited
// word (-1 when outside the symmetric window), its linear block index, the word's address, the last
// value read, the value waited for and the time waited, prints one line, and returns false. Every
// other thread spinning under a SpinBound of the same context checks ctx.error->code about every
// kErrorPollIntervalNs and gives up as well once it is non-zero, so the whole kernel drains instead
// of hanging. Code written against this API returns from the kernel when a wait gives up.
//
// State afterwards (what the host sees):
//  * ctx.synchronize() / check_device_error() throws iris::TimeoutError with the op, rank, word and
//    values (InvalidArgument naming the value and its range for a misuse, kDeviceErrorMisuse, and the
//    peer for a call that differs from a peer's, kDeviceErrorCallMismatch, or kDeviceErrorCallMismatchLate
//    when the exchange found it beside the data, whose output is then not valid, or kDeviceErrorCallTagMismatch
//    when a chunked exchange or a fused op's ready wait found it in a peer's flag; in an iris collective a
//    wait that gives up first reads its peers' call words, and raises a TimeoutError naming a peer in the
//    same call with another key, kDeviceErrorCallDiffers, or a peer that has not started the call,
//    kDeviceErrorPeerNotInCall, or says that every peer is in the call, kDeviceErrorPeersInCall:
//    record_wait_timeout below), and
//    clears the record. Until it is cleared, every bounded wait launched with this
//    context (in this or later kernels) gives up at its first error poll (within ~100 us), so work
//    queued behind a failed kernel drains quickly instead of each waiting out its own bound.
//  * The kernels that gave up did not finish their work: output buffers hold partial results, and
//    the flags, epochs and counters of the ops involved (including a DeviceBarrier) are out of step
//    between ranks. Peers that were waiting on this rank time out on their own bound and raise their
//    own TimeoutError. Nothing is rolled back.
//  * In an iris collective or fused op, the workspace of a call whose wait gave up stops on this rank (its
//    stop word, stop_later_calls below): this rank's later calls on it, those already queued included, return
//    at once without touching a peer (their outputs keep what they held), and the peers that wait for them
//    raise a TimeoutError naming this rank as stopped. So do the later kernels of a fused op's call whose wait
//    gave up (its waits, signals, copy kernels and tile reductions: a fused call is several kernels in stream
//    order). The fused ops' copies by the copy engine still run, in that call and later ones: no device word
//    can stop them.
//  * The Context itself stays valid (heap, allocations, stream): it can be destroyed collectively as
//    usual. Reusing the affected flags/barriers is not safe; recreate them (collectively) or treat
//    the error as fatal for the job, which is what a timeout usually means: a rank never signalled.
//    iris::ccl and iris::ops workspaces do this themselves: Context::device_timeouts() counts the
//    device errors raised, the ops refuse a workspace prepared before the last one, and its preamble
//    again (on every rank) zeroes it on every rank, epochs included. DeviceBarrier::arrive_and_wait
//    refuses a barrier created before it (create a new one on every rank).
#pragma once

#include <cstdint>

#include "iris/device/common.cuh"
#include "iris/device/memory.cuh"

#if defined(IRIS_DEVICE_COMPILE)
#include <cstdio>

namespace iris::device {

// Bound used when a context carries timeout_ns == 0 (a default-constructed handle): 10 s.
inline constexpr uint64_t kDefaultTimeoutNs = 10'000'000'000ull;
// How often a spinning thread reads ctx.error->code (host memory, over PCIe: too slow for every poll).
inline constexpr uint64_t kErrorPollIntervalNs = 100'000ull;

// %globaltimer: nanoseconds, shared by every SM of the GPU (updated about every microsecond).
IRIS_DEVICE_INLINE uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// True once any thread has recorded an error in ctx.error (relaxed system-scope read of host memory).
IRIS_DEVICE_INLINE bool device_error_raised(const DeviceContext& ctx) {
  return ctx.error != nullptr && load<Order::kRelaxed, Scope::kSys>(&ctx.error->code) != kDeviceErrorNone;
}

// The stop word of the workspace of this kernel's call (DeviceContext::call_words[2]), when an iris collective
// launched it: set to this call's epoch (call_words[0], which every block stored when it started) by the first
// of its threads to give up, and left as it is by the others, so that the word names the call that failed.
// This rank's later calls on the workspace then return at once (ccl_common.cuh, begin_call): a rank whose
// waits give up drains its queued calls within microseconds (every later wait gives up at its first error
// poll), and without the word those calls would still write into their peers' staging and flags, where a
// peer that is still in an earlier call (at three ranks and more, or a peer that is one call behind) would
// read them as its own (2026-12-06). The preamble zeroes the word with the rest of the block state.
IRIS_DEVICE_INLINE void stop_later_calls(const DeviceContext& ctx) {
  if (ctx.call_words == nullptr) return;
  const uint64_t epoch = load<Order::kRelaxed, Scope::kSys>(ctx.call_words);
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device> stop(ctx.call_words[2]);
  uint64_t none = 0;
  stop.compare_exchange_strong(none, epoch, cuda::std::memory_order_relaxed);
}

// Claims ctx.error for this failure (CAS 0 -> code at system scope) and fills it in. Returns false
// when another failure was recorded first (or the context has no error record); the record then
// describes that one. Not inlined: it is the cold path of every wait. `peer`: the rank the record names,
// or -2 for the owner of `address`. `values_signed`: observed and expected are a signed word's values,
// sign-extended (DeviceErrorRecord::values_signed).
inline __device__ __noinline__ bool record_device_error(const DeviceContext& ctx, int32_t code, const char* op,
                                                        const void* address, uint64_t observed, uint64_t expected,
                                                        uint64_t elapsed_ns, int32_t peer = -2,
                                                        bool values_signed = false) {
  // Any failure of a call stops the later calls on its workspace; a skipped call's own record does not.
  if (code != kDeviceErrorCallStopped) stop_later_calls(ctx);
  DeviceErrorRecord* record = ctx.error;
  if (record == nullptr) return false;
  cuda::atomic_ref<int32_t, cuda::thread_scope_system> claim(record->code);
  int32_t free_code = kDeviceErrorNone;
  // Acquire: the fields below are written after the claim saw the host's clearing (released with code = 0).
  if (!claim.compare_exchange_strong(free_code, code, cuda::std::memory_order_acquire)) return false;
  volatile DeviceErrorRecord* out = record;
  out->rank = ctx.rank;
  out->peer = peer != -2 ? peer : rank_of(ctx, address);
  out->block = static_cast<int32_t>(block_index_in_grid());
  out->values_signed = values_signed ? 1 : 0;
  out->address = reinterpret_cast<uint64_t>(address);
  out->observed = observed;
  out->expected = expected;
  out->elapsed_ns = elapsed_ns;
  int i = 0;
  for (; op != nullptr && op[i] != '\0' && i < DeviceErrorRecord::kOpNameSize - 1; ++i) out->op[i] = op[i];
  out->op[i] = '\0';
  // Why: a host thread may read the record while other blocks of this kernel still run (code is
  // already non-zero); push the fields out to host memory now rather than at kernel end, and then say that
  // they are all there (the host waits for `written` before it reads them: take_device_error).
  __threadfence_system();
  cuda::atomic_ref<int32_t, cuda::thread_scope_system>(record->written).store(1, cuda::std::memory_order_release);
  if (code == kDeviceErrorPeerNotInCall) {
    printf(
        "iris: device timeout in %s on rank %d (block %d): rank %d has not started this call (call %llu on the "
        "workspace; its latest there is call %llu), after %llu ms\n",
        op != nullptr ? op : "?", ctx.rank, static_cast<int>(block_index_in_grid()), peer,
        static_cast<unsigned long long>(expected), static_cast<unsigned long long>(observed),
        static_cast<unsigned long long>(elapsed_ns / 1000000));
    return true;
  }
  if (code == kDeviceErrorPeerStopped) {
    printf(
        "iris: device timeout in %s on rank %d (block %d): rank %d stopped its calls on this workspace at its call "
        "%llu, where a wait of its own gave up (this is call %llu), after %llu ms\n",
        op != nullptr ? op : "?", ctx.rank, static_cast<int>(block_index_in_grid()), peer,
        static_cast<unsigned long long>(observed), static_cast<unsigned long long>(expected),
        static_cast<unsigned long long>(elapsed_ns / 1000000));
    return true;
  }
  if (code == kDeviceErrorCallStopped) {
    printf("iris: device error in %s on rank %d: call %llu did not run: call %llu on its workspace failed here\n",
           op != nullptr ? op : "?", ctx.rank, static_cast<unsigned long long>(expected),
           static_cast<unsigned long long>(observed));
    return true;
  }
  if (code == kDeviceErrorCallMismatch || code == kDeviceErrorCallMismatchLate || code == kDeviceErrorCallDiffers ||
      code == kDeviceErrorCallTagMismatch) {
    printf("iris: device error in %s on rank %d (block %d): rank %d's call differs (%llx, this rank's %llx)\n",
           op != nullptr ? op : "?", ctx.rank, static_cast<int>(block_index_in_grid()), peer,
           static_cast<unsigned long long>(observed), static_cast<unsigned long long>(expected));
    return true;
  }
  if (code == kDeviceErrorBadTranslate) return true;  // printed by translate_failed
  if (code == kDeviceErrorMisuse) {
    printf("iris: device error in %s on rank %d (block %d, thread %u): got %lld, which must be in [0, %llu)\n",
           op != nullptr ? op : "?", ctx.rank, static_cast<int>(block_index_in_grid()), thread_index_in_block(),
           static_cast<long long>(observed), static_cast<unsigned long long>(expected));
    return true;
  }
  const char* const name = op != nullptr ? op : "?";
  const int block = static_cast<int>(block_index_in_grid());
  const auto ms = static_cast<unsigned long long>(elapsed_ns / 1000000);
  if (values_signed)
    printf(
        "iris: device timeout in %s on rank %d (block %d, thread %u): word %p owned by rank %d is %lld, waiting "
        "for %lld, after %llu ms\n",
        name, ctx.rank, block, thread_index_in_block(), address, rank_of(ctx, address),
        static_cast<long long>(observed), static_cast<long long>(expected), ms);
  else
    printf(
        "iris: device timeout in %s on rank %d (block %d, thread %u): word %p owned by rank %d is %llu, waiting "
        "for %llu, after %llu ms\n",
        name, ctx.rank, block, thread_index_in_block(), address, rank_of(ctx, address),
        static_cast<unsigned long long>(observed), static_cast<unsigned long long>(expected), ms);
  return true;
}

// A translation that failed its IRIS_DEVICE_CHECKS check (memory.cuh, check_translate): recorded for the host,
// printed, and the kernel stops here, before the access. An error recorded earlier and not yet taken by the host
// keeps the record; this one is then printed only.
inline __device__ __noinline__ void detail::translate_failed(const DeviceContext& ctx, const void* ptr, uint64_t bytes,
                                                             int to) {
  const bool recorded = record_device_error(ctx, kDeviceErrorBadTranslate, "translate", ptr,
                                            static_cast<uint64_t>(static_cast<int64_t>(to)),
                                            static_cast<uint64_t>(ctx.world_size), bytes, rank_of(ctx, ptr), true);
  // Not printed again by the other threads that failed alike (the lanes of one bulk form, say).
  if (recorded || ctx.error == nullptr ||
      load<Order::kRelaxed, Scope::kSys>(&ctx.error->code) != kDeviceErrorBadTranslate)
    printf(
        "iris: device error in translate on rank %d (block %d, thread %u): IRIS_DEVICE_CHECKS stops the kernel: "
        "rank %d of %d ranks, pointer %p (in the heap of rank %d; -1: none), %llu bytes from it\n",
        ctx.rank, static_cast<int>(block_index_in_grid()), thread_index_in_block(), to, ctx.world_size, ptr,
        rank_of(ctx, ptr), static_cast<unsigned long long>(bytes));
  __trap();
}

// What a bounded wait records when it gives up. In a kernel of an iris collective (ctx.call_words set),
// first the peers' call words: a peer in this call (the same epoch) with another key is in another call
// on the workspace (kDeviceErrorCallDiffers: the ranks' calls differ in a way the kernels could not see,
// such as one rank's exchange taking the LL protocol and the other's not), a peer whose latest call
// there is older has not started this one (kDeviceErrorPeerNotInCall: it made fewer calls on the
// workspace, one without elements launching nothing, or waits elsewhere), and, when no peer is found so, a
// peer whose stop word holds this call or an earlier one (a wait of its own gave up there, so it skips its
// later calls: kDeviceErrorPeerStopped). When every peer is in this call with its key and none has stopped,
// kDeviceErrorPeersInCall: the calls agree, and a block of the call has not reached its signal. Otherwise, or
// when a peer's words change while read (it is not stuck), a plain kDeviceErrorTimeout. The call words are
// stored with
// relaxed stores when a kernel starts (ccl_common.cuh, begin_call); they are read here only after a wait
// of ctx.timeout_ns, long after a stuck peer's stores became visible. Each of this kernel's blocks stored
// this call's words before its waits, so this rank's are this call's. Not inlined: the cold path.
inline __device__ __noinline__ bool record_wait_timeout(const DeviceContext& ctx, const char* op, const void* address,
                                                        uint64_t observed, uint64_t expected, uint64_t elapsed_ns,
                                                        bool values_signed = false) {
  if (ctx.call_words != nullptr) {
    const uint64_t epoch = load<Order::kRelaxed, Scope::kSys>(ctx.call_words);
    int behind = -1, stopped = -1, in_call = 0;
    uint64_t behind_epoch = 0, stopped_epoch = 0;
    for (int r = 0; r < ctx.world_size; ++r) {
      if (r == ctx.rank) continue;
      const uint64_t* theirs = translate(ctx, static_cast<const uint64_t*>(ctx.call_words), r);
      const uint64_t e = load<Order::kRelaxed, Scope::kSys>(theirs);
      const uint64_t key = load<Order::kRelaxed, Scope::kSys>(theirs + 1);
      const uint64_t stop = load<Order::kRelaxed, Scope::kSys>(theirs + 2);
      if (load<Order::kRelaxed, Scope::kSys>(theirs) != e) continue;  // moving on: not what holds this wait
      if (e == epoch && key != ctx.call_key && key != kStoppedCallKey)
        return record_device_error(ctx, kDeviceErrorCallDiffers, op, address, key, ctx.call_key, elapsed_ns, r);
      if (stop != 0 && static_cast<int64_t>(epoch - stop) >= 0) {
        // A wait of its call `stop` (this one or an earlier one) gave up: it skips every later call. (One that
        // failed past this call is not what holds this wait.)
        if (stopped < 0) {
          stopped = r;
          stopped_epoch = stop;
        }
        continue;
      }
      if (key == kStoppedCallKey) continue;
      if (behind < 0 && static_cast<int64_t>(epoch - e) > 0) {
        behind = r;
        behind_epoch = e;
      }
      if (e == epoch && key == ctx.call_key) ++in_call;
    }
    if (behind >= 0)
      return record_device_error(ctx, kDeviceErrorPeerNotInCall, op, address, behind_epoch, epoch, elapsed_ns, behind);
    if (stopped >= 0)
      return record_device_error(ctx, kDeviceErrorPeerStopped, op, address, stopped_epoch, epoch, elapsed_ns, stopped);
    if (in_call == ctx.world_size - 1 && ctx.world_size > 1)
      return record_device_error(ctx, kDeviceErrorPeersInCall, op, address, observed, expected, elapsed_ns, -2,
                                 values_signed);
  }
  return record_device_error(ctx, kDeviceErrorTimeout, op, address, observed, expected, elapsed_ns, -2, values_signed);
}

// The bound of one waiting thread: construct it when the wait starts, call keep_waiting() after each
// unsuccessful poll.
class SpinBound {
 public:
  IRIS_DEVICE_INLINE explicit SpinBound(const DeviceContext& ctx)
      : start_(global_timer_ns()),
        timeout_ns_(ctx.timeout_ns != 0 ? ctx.timeout_ns : kDefaultTimeoutNs),
        next_error_poll_(start_ + kErrorPollIntervalNs) {}

  // True: poll again. False: give up, because the bound expired (this thread then tried to record
  // the timeout with the given op, word and values, sign-extended where `values_signed`) or another thread
  // has recorded an error.
  IRIS_DEVICE_INLINE bool keep_waiting(const DeviceContext& ctx, const char* op, const void* address, uint64_t observed,
                                       uint64_t expected, bool values_signed = false) {
    const uint64_t now = global_timer_ns();
    const uint64_t elapsed = now - start_;
    if (elapsed >= timeout_ns_) {
      record_wait_timeout(ctx, op, address, observed, expected, elapsed, values_signed);
      return false;
    }
    if (now >= next_error_poll_) {
      next_error_poll_ = now + kErrorPollIntervalNs;
      if (device_error_raised(ctx)) {
        stop_later_calls(ctx);
        return false;
      }
    }
    return true;
  }

  IRIS_DEVICE_INLINE uint64_t elapsed_ns() const { return global_timer_ns() - start_; }

 private:
  uint64_t start_;
  uint64_t timeout_ns_;
  uint64_t next_error_poll_;
};

}  // namespace iris::device

#endif  // IRIS_DEVICE_COMPILE
