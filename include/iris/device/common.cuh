// Shared vocabulary of the iris device API: memory orders, scopes, comparisons, thread groups, and
// the compile guard.
//
// Every header under iris/device/ can be included from a plain C++ (.cc) file: the POD handles and
// enums are always visible, and the __device__ functions only when the file is compiled by a CUDA
// compiler (IRIS_DEVICE_COMPILE). So a host file may include iris/device.cuh to see the types a
// kernel receives, without nvcc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "iris/device/device_context.hpp"

// Checked translation (memory.cuh): define to 1 before the first iris device header, per translation unit.
#ifndef IRIS_DEVICE_CHECKS
#define IRIS_DEVICE_CHECKS 0
#endif

#if defined(__CUDACC__)
#define IRIS_DEVICE_COMPILE 1
#define IRIS_DEVICE_INLINE __device__ __forceinline__
#define IRIS_HOST_DEVICE __host__ __device__
#else
#define IRIS_HOST_DEVICE
#endif

namespace iris::device {

// Memory order of an atomic access (PTX .relaxed / .acquire / .release / .acq_rel).
//   kRelaxed  atomic, no ordering of other accesses.
//   kAcquire  later accesses of this thread stay after it (loads and read-modify-writes).
//   kRelease  earlier accesses of this thread (and what it observed) stay before it (stores and RMWs).
//   kAcqRel   both (read-modify-writes only).
enum class Order { kRelaxed, kAcquire, kRelease, kAcqRel };

// Scope of an atomic access: the set of threads it is atomic with and orders against
// (PTX .cta / .gpu / .sys). Anything another GPU or the host reads or writes needs kSys: a release
// at kGpu is not ordered for a reader on the peer GPU (Iris bug #462).
enum class Scope { kCta, kGpu, kSys };

// Comparison of wait_until: the wait ends when `observed <cmp> value` holds.
//   kReached is the wrap-safe `observed >= value` for counters that only grow (epochs, generations):
//   true when (observed - value), computed modulo 2^bits, is non-negative as a signed number.
enum class Cmp { kEq, kNe, kGe, kGt, kLe, kLt, kReached };

// Codes of DeviceErrorRecord::code written by the device API.
inline constexpr int32_t kDeviceErrorNone = 0;
inline constexpr int32_t kDeviceErrorTimeout = 1;  // a bounded wait expired
// An argument a kernel passed was out of range (e.g. a barrier slot): the record's `observed` holds it (as
// a signed value) and `expected` the exclusive upper bound of [0, expected). The host raises InvalidArgument.
inline constexpr int32_t kDeviceErrorMisuse = 2;
// A peer's call differs from this rank's (a collective's layout fence compares them, ccl_common.cuh): the
// record's `observed` holds the peer's value, `expected` this rank's and `peer` the peer. The host raises
// InvalidArgument.
inline constexpr int32_t kDeviceErrorCallMismatch = 3;
// A peer's call differs from this rank's, found by an exchange that checks the peers' calls beside its
// data instead of before it (the LL exchanges' header lines, ll_exchange.cu): as kDeviceErrorCallMismatch,
// `observed` the peer's call key, `expected` this rank's, `peer` the peer; but this rank's output of the
// call may already hold the peer's data. The host raises InvalidArgument saying so.
inline constexpr int32_t kDeviceErrorCallMismatchLate = 4;
// Found by a collective's bounded wait that gave up (timeout.cuh, record_wait_timeout): a peer's call
// words (DeviceContext::call_words) show it in the same call on the workspace (the same epoch) with another
// call key. `observed` holds the peer's key, `expected` this rank's, `peer` the peer, `address` the word
// waited for. The host raises TimeoutError (a wait past its bound) saying so: the call's output is not valid.
inline constexpr int32_t kDeviceErrorCallDiffers = 5;
// Found the same way: a peer has not started this call on the workspace. `observed` holds the epoch of
// the latest call it started there (0: none since the preamble), `expected` this call's, `peer` the peer,
// `address` the word waited for. The host raises TimeoutError naming the peer and both calls.
inline constexpr int32_t kDeviceErrorPeerNotInCall = 6;
// A peer's call differs from this rank's, found by a chunked exchange's wait (all_gather, reduce_scatter,
// all_to_all, broadcast) or a fused op's ready wait: the flag the peer signalled for this call carries a tag of
// its call key that is not this call's (src/ccl/collective_kernels.hpp, tagged_epoch). `observed` holds the
// peer's tag, `expected` this rank's, `peer` the peer, `address` the flag. An exchange's block ended before it
// read that peer's data, but other blocks may have copied or reduced other chunks; a fused op's later kernels
// and copies ran on. The host raises InvalidArgument.
inline constexpr int32_t kDeviceErrorCallTagMismatch = 7;
// Found by a collective's bounded wait that gave up: a peer's stop word (DeviceContext::call_words[2]) shows
// that a wait of its own gave up in this call or an earlier one on the workspace, so that it skips its later
// calls there. `observed` holds the epoch of the call that failed there, `expected` this call's, `peer` the
// peer. The host raises TimeoutError naming the peer: its own error says why.
inline constexpr int32_t kDeviceErrorPeerStopped = 8;
// This rank's call did not run: a wait of an earlier call on its workspace gave up (the stop word), so its
// kernels returned at once, without touching a peer. Recorded only when no other error is pending: after
// the host raised that one (a CUDA graph that replays calls on the workspace, or a call on another stream).
// `observed` holds the epoch of the call that gave up, `expected` this call's. The host raises InvalidArgument.
inline constexpr int32_t kDeviceErrorCallStopped = 9;

// A translation failed its IRIS_DEVICE_CHECKS check (memory.cuh): `observed` holds the rank asked for (signed),
// `expected` the world size, `address` the pointer, `peer` the rank whose heap holds it (-1: outside the
// symmetric window) and `elapsed_ns` the bytes from it that had to lie in this rank's heap (saturated). The
// kernel then stopped with a trap, which ends the process's CUDA context. The host raises InvalidArgument.
inline constexpr int32_t kDeviceErrorBadTranslate = 10;
// Found by a collective's bounded wait that gave up (timeout.cuh, record_wait_timeout): every peer's call words
// show it in this call on the workspace with this call's key, and none has given up, so the ranks' calls agree
// and a block of this call, here or on a peer, has not reached the signal waited for (one that never got an
// SM: the blocks of every rank's grid must all run at once). The fields are a plain timeout's (`observed` the
// word's last value, `expected` the value waited for, `peer` the rank owning the word). The host raises
// TimeoutError saying so.
inline constexpr int32_t kDeviceErrorPeersInCall = 11;

// IRIS_DEVICE_CHECKS' test of a translation (memory.cuh, check_translate), host-visible so that its edges are
// tested without a GPU: `to` is one of the world's ranks, and `count` objects of `object_bytes` each (0: an
// address, checked as no bytes) from address `p` lie in this rank's heap, [heap_base + rank * heap_size,
// heap_base + (rank + 1) * heap_size). No overflow: a count past the heap is refused, not wrapped.
inline IRIS_HOST_DEVICE bool translation_in_bounds(const DeviceContext& ctx, uintptr_t p, uint64_t count,
                                                   uint64_t object_bytes, int to) {
  const uintptr_t mine = reinterpret_cast<uintptr_t>(ctx.heap_base) + static_cast<uint64_t>(ctx.rank) * ctx.heap_size;
  const uint64_t offset = p - mine;  // past heap_size when p is below this rank's heap too (it wraps)
  const uint64_t size = object_bytes != 0 ? object_bytes : 1;
  if (object_bytes == 0) count = 0;
  const bool fits = offset <= ctx.heap_size && count <= (ctx.heap_size - offset) / size;
  return fits && to >= 0 && to < ctx.world_size;
}

// The call key a collective's kernel stores in its call words when it skips its call on a stopped workspace
// (ccl_common.cuh, begin_call), so that its peers' waits that give up name it. A call's own key (a hash,
// OpSignature::key) equals it with probability 2^-64.
inline constexpr uint64_t kStoppedCallKey = ~uint64_t{0};

}  // namespace iris::device

#if defined(IRIS_DEVICE_COMPILE)

namespace iris::device {

// Cooperative groups of threads for the bulk forms (copy/put/get). Each names the calling thread's
// index in the group and the group's size; every thread of the group calls the bulk function with the
// same arguments.
//   ThisThread  the calling thread alone.
//   ThisWarp    the 32 lanes of the calling warp (all lanes must call; blocks whose size is not a
//               multiple of 32 have a partial last warp that must not use warp forms).
//   ThisBlock   every thread of the block.
//   ThisGrid    every thread of the grid (no synchronization: the grid cannot wait for itself).
struct ThisThread {
  IRIS_DEVICE_INLINE static uint32_t index() { return 0; }
  IRIS_DEVICE_INLINE static uint32_t size() { return 1; }
};

IRIS_DEVICE_INLINE uint32_t thread_index_in_block() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
IRIS_DEVICE_INLINE uint32_t block_size() { return blockDim.x * blockDim.y * blockDim.z; }
// In 64 bits: a grid may hold more than 2^32 blocks (gridDim.x up to 2^31 - 1, times y and z), whose 32-bit
// indices wrapped before 2026-12-07 (blocks then shared ranges of a *_grid copy, and others were skipped).
IRIS_DEVICE_INLINE uint64_t block_index_in_grid() {
  return blockIdx.x + uint64_t{gridDim.x} * (blockIdx.y + uint64_t{gridDim.y} * blockIdx.z);
}
IRIS_DEVICE_INLINE uint64_t grid_size_in_blocks() { return uint64_t{gridDim.x} * gridDim.y * gridDim.z; }

struct ThisWarp {
  IRIS_DEVICE_INLINE static uint32_t index() { return thread_index_in_block() & 31u; }
  IRIS_DEVICE_INLINE static uint32_t size() { return 32; }
};

struct ThisBlock {
  IRIS_DEVICE_INLINE static uint32_t index() { return thread_index_in_block(); }
  IRIS_DEVICE_INLINE static uint32_t size() { return block_size(); }
};

struct ThisGrid {
  IRIS_DEVICE_INLINE static uint64_t index() { return block_index_in_grid() * block_size() + thread_index_in_block(); }
  IRIS_DEVICE_INLINE static uint64_t size() { return grid_size_in_blocks() * block_size(); }
};

}  // namespace iris::device

#endif  // IRIS_DEVICE_COMPILE
