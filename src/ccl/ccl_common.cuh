// Shared pieces of the collective kernels: element traits and reduction, flat views of 2-D tensors,
// 16-byte packs, the per-call epoch kept in device memory, and flag helpers.
//
// The per-call epoch. Every flag a collective writes carries the epoch of its call, so flags are
// never reset and a CUDA-graph replay stays correct. The epoch lives in the workspace, in device
// memory: state[0] is the epoch of the last completed call, state[1] counts blocks that finished the
// current one. Every block reads state[0] + 1 when it starts; the last block to finish stores the new
// epoch. All blocks have read it by then (they each counted themselves after reading), and the next
// call on the stream cannot read it before this kernel ends (pdl_wait below), so it reads the new
// value. A one-block launch stores the epoch without counting: its bar.sync already says that every
// thread read it, and the atomic round trip saved is about 0.3 us of a small call. Every rank makes the
// same calls with the same workspace, so every rank computes the same epoch for the same call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "ccl/all_reduce_kernels.hpp"
#include "iris/ccl/config.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device.cuh"

namespace iris::ccl::detail {

namespace dev = iris::device;

// ---- elements and reduction ---------------------------------------------------------------------

template <typename T>
struct Elem {
  using Acc = float;  // float, half, bfloat16 accumulate in float
  __device__ __forceinline__ static Acc to_acc(T v) { return static_cast<float>(v); }
  __device__ __forceinline__ static T from_acc(Acc v) { return static_cast<T>(v); }
};
template <>
struct Elem<__half> {
  using Acc = float;
  __device__ __forceinline__ static Acc to_acc(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half from_acc(Acc v) { return __float2half_rn(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  using Acc = float;
  __device__ __forceinline__ static Acc to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 from_acc(Acc v) { return __float2bfloat16_rn(v); }
};
template <>
struct Elem<double> {
  using Acc = double;
  __device__ __forceinline__ static Acc to_acc(double v) { return v; }
  __device__ __forceinline__ static double from_acc(Acc v) { return v; }
};
template <>
struct Elem<int32_t> {
  using Acc = int32_t;  // wraps on overflow, like NCCL
  __device__ __forceinline__ static Acc to_acc(int32_t v) { return v; }
  __device__ __forceinline__ static int32_t from_acc(Acc v) { return v; }
};
template <>
struct Elem<int64_t> {
  using Acc = int64_t;  // wraps on overflow, like NCCL
  __device__ __forceinline__ static Acc to_acc(int64_t v) { return v; }
  __device__ __forceinline__ static int64_t from_acc(Acc v) { return v; }
};
// int8 and uint8 accumulate in 32 bits (the atomics and the accumulator packs take no narrower word);
// sums and products agree with the element type's own modulo 2^8, so from_acc's wrap gives NCCL's bytes.
template <>
struct Elem<int8_t> {
  using Acc = int32_t;
  __device__ __forceinline__ static Acc to_acc(int8_t v) { return v; }
  __device__ __forceinline__ static int8_t from_acc(Acc v) { return static_cast<int8_t>(v); }
};
template <>
struct Elem<uint8_t> {
  using Acc = uint32_t;
  __device__ __forceinline__ static Acc to_acc(uint8_t v) { return v; }
  __device__ __forceinline__ static uint8_t from_acc(Acc v) { return static_cast<uint8_t>(v); }
};
// float8 accumulates in float and rounds once, to nearest even, saturating at the largest finite value
// (the CUDA conversion's __NV_SATFINITE: e4m3 has no infinity, and a sum past 448 stays finite); NaN stays NaN.
template <>
struct Elem<__nv_fp8_e4m3> {
  using Acc = float;
  __device__ __forceinline__ static Acc to_acc(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
  __device__ __forceinline__ static __nv_fp8_e4m3 from_acc(Acc v) { return __nv_fp8_e4m3(v); }
};
template <>
struct Elem<__nv_fp8_e5m2> {
  using Acc = float;
  __device__ __forceinline__ static Acc to_acc(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
  __device__ __forceinline__ static __nv_fp8_e5m2 from_acc(Acc v) { return __nv_fp8_e5m2(v); }
};

// kAvg combines as a sum; reduced() divides once at the end.
template <ReduceOp kOp, typename A>
__device__ __forceinline__ A combine(A a, A b) {
  using U = std::make_unsigned_t<std::conditional_t<std::is_integral_v<A>, A, int>>;
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) {
    if constexpr (std::is_integral_v<A>)  // two's complement wrap, without signed overflow
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    else
      return a + b;
  } else if constexpr (kOp == ReduceOp::kProd) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    else
      return a * b;
  } else if constexpr (kOp == ReduceOp::kMax) {
    return a > b ? a : b;
  } else {
    return a < b ? a : b;
  }
}

// The element a reduction stores from its accumulator of all `world` ranks' values: for kAvg the
// accumulator divided by the world size (float: IEEE division, then the rounding to T; integers: the sum
// wrapped to T, then divided with truncation toward zero), else the accumulator. Every rank that
// computes a result computes it from the same accumulator, so the bits agree across ranks for kAvg as
// for the other ops.
template <typename T, ReduceOp kOp>
__device__ __forceinline__ T reduced(typename Elem<T>::Acc acc, int world) {
  using Acc = typename Elem<T>::Acc;
  if constexpr (kOp == ReduceOp::kAvg) {
    if constexpr (std::is_integral_v<Acc>) acc = static_cast<Acc>(Elem<T>::from_acc(acc));  // int8, uint8
    acc = acc / static_cast<Acc>(world);
  }
  return Elem<T>::from_acc(acc);
}

// ---- flat views -----------------------------------------------------------------------------------

// A rows x cols tensor with a row stride, addressed by flat (row-major) element index.
template <typename T>
struct View {
  T* data;
  int64_t cols;
  int64_t stride;
  __device__ __forceinline__ T* at(int64_t i) const {
    if (stride == cols) return data + i;
    const int64_t r = i / cols;
    return data + r * stride + (i - r * cols);
  }
};

// kVec: 16 bytes (16 / sizeof(T) elements) per access; the host picks it only when every pointer
// involved is 16-byte aligned and contiguous. Otherwise one element per access.
template <typename T, bool kVec>
struct Pack {
  static constexpr int kN = kVec ? 16 / static_cast<int>(sizeof(T)) : 1;
  T v[kN];
};

template <typename T, bool kVec>
__device__ __forceinline__ Pack<T, kVec> load_pack(const T* p) {
  Pack<T, kVec> out;
  if constexpr (kVec) {
    uint4 w = dev::load(reinterpret_cast<const uint4*>(p));
    memcpy(&out, &w, 16);
  } else {
    out.v[0] = *p;
  }
  return out;
}

template <typename T, bool kVec>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, kVec>& v) {
  if constexpr (kVec) {
    uint4 w;
    memcpy(&w, &v, 16);
    dev::store(reinterpret_cast<uint4*>(p), w);
  } else {
    *p = v.v[0];
  }
}

// ---- programmatic dependent launch -------------------------------------------------------------------
//
// Every collective kernel is launched by launch_collective(), with programmatic stream serialization:
// the GPU may start it while the kernel before it on the stream still runs, once every block of that
// kernel has called pdl_launch_dependents() or ended. Its first statement must be pdl_wait(), which
// returns only when every kernel before it on the stream has completed and its memory operations are
// visible (PTX griddepcontrol.wait), so nothing the kernel reads or writes, the epoch included, can
// race with earlier work; what is saved is the launch latency between the two kernels. Kernels call
// pdl_launch_dependents() right after pdl_wait(), so the next collective is scheduled as early as it
// can be; it still waits for this one to end. IRIS_PDL=0 launches them the plain way.

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

bool pdl_enabled();  // ccl_host.cc: false when IRIS_PDL=0 (read once)

template <typename... Params, typename Args>
void launch_collective(void (*kernel)(Params...), int blocks, int threads, cudaStream_t stream, const Args& args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  IRIS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args));
}

// ---- per-call epoch ---------------------------------------------------------------------------------

// A barrier of the block that the threads of one warp may reach at different places: barrier.sync
// without .aligned (sm_70+), with the memory ordering of __syncthreads(). __syncthreads() is the aligned
// form, which PTX leaves undefined when lanes of a warp reach different instances of it, and ptxas puts
// a WARPSYNC.ALL before each instance: a warp whose lanes end at two of them hangs there. That is how
// kernels whose threads wait one by one end: a thread whose wait gives up leaves through end_call at
// once, while its neighbours in the warp finish their lines and reach the end_call at the kernel's end
// (2026-12-05, one GPU: an LL all_reduce whose peer's call was smaller, so that lines 2000 and up never
// came, hung past 100 s while every wait is bounded at 20 s, so in a barrier; 2000 is lane 16 of its warp.
// A reviewer's run; with this barrier the same test passed on an H200).
__device__ __forceinline__ void sync_block_divergent() { asm volatile("barrier.sync 0;" ::: "memory"); }

// The call words of the call of `epoch`, when the host set them: the key (the call's, or kStoppedCallKey for
// a call skipped on a stopped workspace), then the epoch (the order a reader relies on, timeout.cuh). One
// thread; begin_call's, and the fused ops' first kernel's.
__device__ __forceinline__ void store_call_words(const DeviceContext& ctx, uint64_t epoch, uint64_t key) {
  if (ctx.call_words == nullptr) return;
  dev::store<dev::Order::kRelaxed, dev::Scope::kSys>(ctx.call_words + 1, key);
  dev::store<dev::Order::kRelaxed, dev::Scope::kSys>(ctx.call_words, epoch);
}

// The stop word of the call's workspace (DeviceContext::call_words[2], timeout.cuh: stop_later_calls), when it
// stops the call of `epoch`: the epoch of an earlier call of this rank on the workspace whose wait gave up,
// else 0. A call whose own wait gave up stored its own epoch, which stops none of its blocks; every later call
// finds an older epoch than its own, since the call that failed ended through end_call and advanced the state
// (a skipped call does not: later calls get its epoch again, which is still not the failed call's). So every
// thread of a call decides alike, without a barrier.
__device__ __forceinline__ uint64_t stopped_by(const DeviceContext& ctx, uint64_t epoch) {
  if (ctx.call_words == nullptr) return 0;
  const uint64_t stop = dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(ctx.call_words + 2);
  return stop != epoch ? stop : 0;
}

// True when a wait of this rank's call `epoch` gave up: the stop word holds that epoch. A thread that has
// synchronized with every block of the call (end_call_published's last block) sees every such block's stop.
__device__ __forceinline__ bool call_gave_up(const DeviceContext& ctx, uint64_t epoch) {
  return ctx.call_words != nullptr && dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(ctx.call_words + 2) == epoch;
}

// True when the stop word is set at all: an earlier call on the workspace failed, or a wait of this call gave up.
// The fused ops' kernels after their first (fused_begin_kernel) check it before they write to a peer or signal
// one: their call runs as several kernels and copies in stream order, so a wait that gave up in one of them
// (above all the ready wait, which orders every copy to a peer after it) must stop the rest, or they would push
// into peers that never became ready for the call, which may still be reading their staging for an earlier one.
__device__ __forceinline__ bool workspace_stopped(const DeviceContext& ctx) {
  return ctx.call_words != nullptr && dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(ctx.call_words + 2) != 0;
}

// A call that its workspace's stop word skips (one thread per block): its call words say so to the peers whose
// waits for it give up (timeout.cuh: kDeviceErrorPeerStopped), and block 0 records kDeviceErrorCallStopped,
// which is claimed only when no other error is pending (the one that stopped the workspace usually is).
inline __device__ __noinline__ void skip_call(const DeviceContext& ctx, uint64_t epoch, uint64_t stop, const char* op) {
  store_call_words(ctx, epoch, dev::kStoppedCallKey);
  if (blockIdx.x == 0)
    dev::record_device_error(ctx, dev::kDeviceErrorCallStopped, op, ctx.call_words + 2, stop, epoch, 0, ctx.rank);
}

// The epoch of a call that begin_call skips: no call's (epochs start at 1).
inline constexpr uint64_t kSkippedCall = 0;

// Every thread of every block calls this first (after pdl_wait) and gets the call's epoch. Thread 0 of
// each block also stores the call words (DeviceContext::call_words, when the host set them): the key,
// then the epoch, relaxed, into this rank's own memory. They publish nothing and order nothing; a bounded
// wait that gives up reads them, its own rank's and its peers', to say which peer is in another call, has
// not started this one or skipped it (timeout.cuh, record_wait_timeout). Every block stores them so that each
// block's waits find this call's words whatever the blocks' order (the values are the same).
// Returns kSkippedCall when the workspace has stopped (stopped_by): the kernel must then return at once, before
// it touches its staging, its flags, its output or a peer, and without end_call. `op` names the kernel's call
// in the error recorded then. Cost: one load of the stop word, beside the epoch's.
__device__ __forceinline__ uint64_t begin_call(const DeviceContext& ctx, const uint64_t* state, const char* op) {
  const uint64_t epoch = dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(state) + 1;
  if (const uint64_t stop = stopped_by(ctx, epoch); stop != 0) {
    if (threadIdx.x == 0) skip_call(ctx, epoch, stop, op);
    return kSkippedCall;
  }
  if (threadIdx.x == 0) store_call_words(ctx, epoch, ctx.call_key);
  return epoch;
}

// Every thread of every block calls this last. The count is relaxed on purpose: it orders nothing
// but "this block has read the epoch", which it did before using it at the start, and an acq_rel
// count would put a fence behind thread 0's stores to peers. (On 2 x H200 the one_shot call at
// 8 KiB went from 6.05 to 5.91 us with this change: a small part of the gap to the 3 us target.)
// `layout_key` (all_reduce only; every op's block state has its word and the fence's, block_state_words in
// ccl_host.hpp): when non-zero, stored as the last call's layout next to the epoch (layout_fence below
// reads it).
// Threads may call it from different places (a wait that gave up, the kernel's end): its barrier is
// sync_block_divergent.
// `epoch_at` (the LL exchanges' clean word, ll_exchange.cu): when non-null, the epoch is stored there too, by
// the last block, when every block has read what it held.
__device__ __forceinline__ void end_call(uint64_t* state, uint64_t epoch, uint64_t layout_key = 0,
                                         uint64_t* epoch_at = nullptr) {
  sync_block_divergent();
  if (gridDim.x == 1) {  // one block: it has read the epoch (bar.sync above); no count needed
    if (threadIdx.x == 0) {
      if (layout_key != 0) dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 2, layout_key);
      if (epoch_at != nullptr) dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(epoch_at, epoch);
      dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state, epoch);
    }
    return;
  }
  if (threadIdx.x == 0) {
    const uint64_t done = dev::atomic_add<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 1, uint64_t{1});
    if (done == gridDim.x - 1) {  // the last block: every block has read the epoch already
      if (layout_key != 0) dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 2, layout_key);
      if (epoch_at != nullptr) dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(epoch_at, epoch);
      dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 1, uint64_t{0});
      dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state, epoch);
    }
  }
}

// ---- layout fence (all_reduce, broadcast) ----------------------------------------------------------------------
//
// The reuse arguments of the all_reduce kernels ("a peer is at most one call ahead, so it cannot
// overwrite what we still read") hold between calls with the same staging layout. One workspace may
// serve calls of different variants and shapes (one_shot's LL lines and two_shot's slots and tiles
// overlap in the staging), so when a call's layout differs from the previous call's on this
// workspace, nobody may touch a peer's staging before every rank has finished the previous call.
// The all_reduce state has 1 + 3W more words: state[2] is the layout key of the last call
// (end_call stores it), state[3 + s] the epoch at which rank s last passed a fence (written by s), and
// state[3 + W + 2s + parity] the key of rank s's call at its last fence of that epoch parity (written by
// s before that epoch: a peer is at most one call ahead, so the other parity's word is the only one it
// may overwrite before this rank reads).
// Every rank makes the same calls, so every rank sees the same change and fences in the same call.
// Ranks whose calls differ (a shape, dtype, reduction, variant or config that differs without a preamble to compare
// them) are caught here when each of them changes layout, the first call after a preamble included: each
// reads its peers' keys after their fence words and, on a key other than its own, records a
// kDeviceErrorCallMismatch naming the peer (InvalidArgument on the host) and ends its kernel before it
// touches a peer's data. A rank whose layout did not change does not fence: its peers then wait for its
// fence word and time out (TimeoutError), as does it for their data. one_shot LL's key has no shape (see
// all_reduce.cc's layout_key), so calls of different shapes on it are not caught here.
// Block 0 tells every peer it has started this call (release at system scope: its earlier kernels,
// the previous call included, have completed, and their staging reads are ordered before the word);
// every block waits, with acquire, until every peer said the same. Cost: one NVLink round trip, on
// a change of layout only (the first call on a workspace included). False on timeout (the kernel
// must end). `fenced`, when given, is set to whether this call fenced: the same on every rank, so a
// kernel may do work at a change of layout that its peers wait for (atomic clears its accumulators).
__device__ __forceinline__ bool layout_fence(const DeviceContext& ctx, uint64_t* state, uint64_t layout_key,
                                             uint64_t epoch, const char* op, bool* fenced = nullptr) {
  const bool change = layout_key != 0 && dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 2) != layout_key;
  if (fenced != nullptr) *fenced = change;
  if (!change) return true;
  const int me = ctx.rank, world = ctx.world_size;
  uint64_t* const keys = state + 3 + world + (epoch & 1);  // keys[2 * s]: rank s's key at this parity
  __shared__ int fence_ok;
  if (threadIdx.x == 0) {
    if (blockIdx.x == 0)
      for (int k = 1; k < world; ++k) {
        const int to = (me + k) % world;
        // Ordered before the fence word by the signal's release, so a peer that acquires it reads the key.
        dev::store<dev::Order::kRelaxed, dev::Scope::kSys>(dev::translate(ctx, keys + 2 * me, to), layout_key);
        dev::signal<dev::Order::kRelease, dev::Scope::kSys>(ctx, state + 3 + me, epoch, to);
      }
    bool ok = true;
    for (int k = 1; k < world && ok; ++k) {
      const int from = (me + k) % world;
      ok =
          dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(ctx, state + 3 + from, dev::Cmp::kReached, epoch, op);
      const uint64_t theirs = ok ? dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(keys + 2 * from) : layout_key;
      if (theirs != layout_key) {
        dev::record_device_error(ctx, dev::kDeviceErrorCallMismatch, op, keys + 2 * from, theirs, layout_key, 0, from);
        ok = false;
      }
    }
    fence_ok = ok ? 1 : 0;
  }
  __syncthreads();
  const bool ok = fence_ok != 0;
  __syncthreads();
  return ok;
}

// layout_fence, but not for the first call after a preamble (no layout key stored yet): broadcast's, whose paths
// need a fence only between a call of one and a call of the other (collective_kernels.hpp, kBroadcastLLLayout),
// and whose first call would otherwise wait for every peer to start it before its root sends anything (a rank
// whose peers never make the call would then send nothing for the calls they did make). A preamble lets every
// earlier call on the workspace end first.
__device__ __forceinline__ bool layout_fence_after_a_call(const DeviceContext& ctx, uint64_t* state,
                                                          uint64_t layout_key, uint64_t epoch, const char* op) {
  if (dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 2) == 0) return true;
  return layout_fence(ctx, state, layout_key, epoch, op);
}

// ---- flags ------------------------------------------------------------------------------------------

// One thread of the block waits until the local flag reaches `epoch` (acquire, system scope: the
// writer is a peer GPU), then the block proceeds. Returns false on timeout (the kernel must end).
__device__ __forceinline__ bool block_wait_flag(const DeviceContext& ctx, const uint64_t* flag, uint64_t epoch,
                                                const char* op) {
  __shared__ int ok;
  if (threadIdx.x == 0)
    ok = dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(ctx, flag, dev::Cmp::kReached, epoch, op) ? 1 : 0;
  __syncthreads();
  const bool result = ok != 0;
  __syncthreads();  // `ok` is reused by the next wait
  return result;
}

// After the block's writes to peer `to`: every thread's stores are ordered before thread 0's release
// (bar.sync, then a cumulative release at system scope), so a peer that acquires `epoch` sees them.
__device__ __forceinline__ void block_signal(const DeviceContext& ctx, uint64_t* flag, uint64_t epoch, int to) {
  __syncthreads();
  if (threadIdx.x == 0) dev::signal<dev::Order::kRelease, dev::Scope::kSys>(ctx, flag, epoch, to);
}

// After the block's writes: thread i (i < n) stores `epoch` with a release at system scope into the
// word flag_at(i) of rank rank_at(i); a null flag_at(i) is skipped. bar.sync orders every thread's
// earlier stores before each releasing thread, and a release is cumulative, so a peer that acquires
// the word sees them all (DESIGN.md rules 1 and 2). Every thread of the block calls this.
template <typename FlagAt, typename RankAt>
__device__ __forceinline__ void block_signal_each(const DeviceContext& ctx, int n, FlagAt flag_at, RankAt rank_at,
                                                  uint64_t epoch) {
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (uint64_t* flag = flag_at(i); flag != nullptr)
      dev::signal<dev::Order::kRelease, dev::Scope::kSys>(ctx, flag, epoch, rank_at(i));
}

// Thread i (i < n) waits until the word at flag_at(i) (local, or a translated peer word) reaches
// `epoch`, with acquire loads at system scope; a null flag_at(i) is skipped. Then bar.sync, so every
// thread's later reads see what the signallers published. Returns false on timeout (the kernel must
// end). Every thread calls this.
template <typename FlagAt>
__device__ __forceinline__ bool block_wait_each(const DeviceContext& ctx, int n, FlagAt flag_at, uint64_t epoch,
                                                const char* op) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (const uint64_t* flag = flag_at(i); flag != nullptr && !dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(
                                                                  ctx, flag, dev::Cmp::kReached, epoch, op))
      failed = 1;
  __syncthreads();
  const bool ok = failed == 0;
  __syncthreads();  // `failed` is reset by the next call
  return ok;
}

// ---- tiles --------------------------------------------------------------------------------------------

// A block_m x block_n tile of a rows x cols tensor: first row and column, height and width (the edge
// tiles are cut).
struct TileRect {
  int64_t r0, c0;
  int h, w;
};
// Tile t of the ceil(rows / block_m) x ceil(cols / block_n) grid, `swizzle` tile rows grouped together
// (column-major inside a group); swizzle 1 is row-major.
__device__ __forceinline__ TileRect tile_rect(int64_t t, int64_t rows, int64_t cols, int block_m, int block_n,
                                              int swizzle) {
  const int64_t tiles_n = (cols + block_n - 1) / block_n;
  const int64_t tiles_m = (rows + block_m - 1) / block_m;
  const int64_t group = static_cast<int64_t>(swizzle) * tiles_n;
  const int64_t first_m = (t / group) * swizzle;
  const int64_t group_m = min(tiles_m - first_m, static_cast<int64_t>(swizzle));
  const int64_t in_group = t % group;
  const int64_t tm = first_m + in_group % group_m, tn = in_group / group_m;
  TileRect tile;
  tile.r0 = tm * block_m;
  tile.c0 = tn * block_n;
  tile.h = static_cast<int>(min(static_cast<int64_t>(block_m), rows - tile.r0));
  tile.w = static_cast<int>(min(static_cast<int64_t>(block_n), cols - tile.c0));
  return tile;
}

// ---- per-tile spinlocks (all_reduce spinlock, matmul_all_reduce spinlock) ----------------------------

// One thread takes a lock word (0 free, 1 held; on its owner's heap, already translated) with a bounded
// spin. Acquire at system scope: what the previous holder wrote before release_spinlock is visible to
// this thread, and to its block after a bar.sync. False on timeout (recorded in the device error
// record, so the host raises it; the kernel must end without the lock).
__device__ __forceinline__ bool acquire_spinlock(const DeviceContext& ctx, uint32_t* lock, const char* op) {
  dev::SpinBound bound(ctx);
  while (dev::atomic_cas<dev::Order::kAcquire, dev::Scope::kSys>(lock, 0u, 1u) != 0u)
    if (!bound.keep_waiting(ctx, op, lock, 1, 0)) return false;
  return true;
}
// Frees it (release at system scope: the holder's writes, and its block's before a bar.sync, go first).
__device__ __forceinline__ void release_spinlock(uint32_t* lock) {
  dev::store<dev::Order::kRelease, dev::Scope::kSys>(lock, 0u);
}

}  // namespace iris::ccl::detail
