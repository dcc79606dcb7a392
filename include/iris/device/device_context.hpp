// The POD device handle of an iris::Context, passed BY VALUE to kernels (`const __grid_constant__`
// or a plain by-value parameter). Host-includable: no device code here.
//
// Layout of the symmetric window. In every process, the heaps of all ranks are mapped back to back
// in one reserved virtual range:
//
//     heap_base                heap_base + heap_size        heap_base + (W-1)*heap_size
//     | rank 0's heap (H bytes) | rank 1's heap (H bytes) | ... | rank W-1's heap |
//
// so rank r's heap starts at heap_base + r * heap_size in *this* process, and translating a pointer
// into this rank's heap to the same object in rank `to`'s heap is one add, in bytes:
//     remote = (char*)ptr + (to - rank) * heap_size   (on a typed pointer it would step in elements).
// Threads of one process share one window (heap_base is then the same on every rank); separate
// processes each map their own (heap_base differs, the formula does not). No world-size limit, and
// no table of bases to load in a kernel.
//
// The handle is valid while the Context that made it is alive.
#pragma once

#include <cstdint>
#include <type_traits>

namespace iris {

// Written by the first device-side failure (a bounded wait that expired) and read by the host:
// lives in pinned, mapped host memory so the host can read it even while a kernel still runs.
struct DeviceErrorRecord {
  static constexpr int kOpNameSize = 48;
  // 0 = no error; 1 = a bounded wait timed out; 2 = a misuse; 3 to 9 = calls that differ across ranks, a
  // peer not in the call or stopped, or a call skipped (common.cuh). Claimed with an atomic CAS from 0 by the first
  // failure.
  int32_t code;
  int32_t rank;      // rank that observed the failure
  int32_t peer;      // rank that owns the waited-on word (-1 if unknown)
  int32_t block;     // blockIdx.x of the waiting thread
  // 1 once the writer has stored every other field: its last store, a system-scope release after a system
  // fence. The host reads the fields only then (a host thread may read the record while the kernel runs).
  int32_t written;
  // 1 when `observed` and `expected` are a signed word's values (int32 or int64 flags), sign-extended to 64
  // bits: the messages then print them signed (-1, not 4294967295).
  int32_t values_signed;
  uint64_t address;  // address of the word waited on (in the waiting rank's address space)
  uint64_t observed; // last value read
  uint64_t expected; // value compared against
  uint64_t elapsed_ns;
  char op[kOpNameSize];  // name of the waiting operation, NUL-terminated
};

struct DeviceContext {
  char* heap_base;      // start of rank 0's heap in this process (see the layout above)
  uint64_t heap_size;   // bytes per rank's heap; also the distance between consecutive heaps
  int32_t rank;
  int32_t world_size;
  // Host-mapped error record shared by every kernel launched with this handle, and the flag that
  // tells other spinning threads to give up once a failure has been recorded.
  DeviceErrorRecord* error;
  // Bound on every device-side spin, in nanoseconds of %globaltimer.
  uint64_t timeout_ns;
  // Set by iris's collectives for the call their kernel runs, null and 0 in Context::device_context():
  // this rank's three call words of the call's workspace ([0] the epoch of the latest call a kernel started
  // on it, [1] that call's key, a hash of everything the ranks' calls must share, or kStoppedCallKey when it
  // skipped that call; [2] the stop word: 0, or the epoch of a call of this rank on the workspace whose wait
  // gave up) and this call's key. A bounded wait that gives up sets the stop word, so that this rank's later
  // calls on the workspace return at once instead of writing into peers that may still be in an earlier call
  // (ccl_common.cuh, begin_call), until the preamble zeroes it; and it reads its peers' call words to say
  // whether a peer is in another call, has not started this one, or skipped it (timeout.cuh,
  // record_wait_timeout).
  uint64_t* call_words = nullptr;
  uint64_t call_key = 0;
};

static_assert(std::is_trivially_copyable_v<DeviceContext>, "DeviceContext is passed by value to kernels");
static_assert(std::is_standard_layout_v<DeviceContext>);
static_assert(std::is_trivially_copyable_v<DeviceErrorRecord>);

}  // namespace iris
