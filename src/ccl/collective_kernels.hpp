// all_gather, reduce_scatter, all_to_all and broadcast: their chunk plan, kernel-facing arguments and
// launchers (host part, no nvcc needed), host helpers shared by their entry points, and, for the .cu
// files only, the device helpers their kernels share (under __CUDACC__ at the end).
//
// The three exchanges (all_gather, reduce_scatter, all_to_all) share one staging layout. Every rank
// holds, in its workspace:
//   staging  [2 parities][W-1 sources][slot]   data pushed by peers; source slot k-1 holds rank me-k's
//   flags    [2 parities][W-1 sources][nchunks] one call-tagged epoch word per pushed chunk (tagged_epoch)
// or, for small blocks, the LL layout of ll_exchange.cu (staging [2 parities][W sources][ll_slot_words]:
// a header line, then the block's lines; no flags). Call e uses parity e & 1; the reuse argument is in each kernel's
// header comment. Parity p starts at p x half the array's capacity, not at an offset computed from the call's shape, so
// a call never touches the other parity's bytes whatever the shapes on one workspace (or the mix of LL and chunked
// calls): the argument "a peer is at most one call ahead" then covers every mix of calls. broadcast uses one slot and
// done word per rank and one flag per chunk (see broadcast.cu).
//
// Host helpers of these four ops: row_block, vec_ok, dispatch_bits (Tensor has overlaps and same_view); on the device
// side block_fanout, pipelined_chunks and end_call_published (block_signal_each and block_wait_each are
// in ccl_common.cuh, shared with all_reduce). prepare_everywhere and require_op, shared with all_reduce,
// are in ccl_host.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>

#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_host.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/core/tensor.hpp"
#include "iris/device/device_context.hpp"

namespace iris::ccl::detail {

// ---- call-tagged flags --------------------------------------------------------------------------------
//
// The flags of all_gather, reduce_scatter, all_to_all and broadcast carry the signaller's call beside its
// epoch: the word is tag << 48 | (epoch mod 2^48), the tag 14 bits of the call key (DeviceContext::call_key,
// a hash of the call's signature, OpSignature::key) with the top two bits set. A wait takes the word once
// its epoch bits reach this call's (wrap-safe over 48 bits: 2^47 calls, decades of them), then compares the
// tags. A word of this call's epoch was written by the signaller's call of that epoch, so a tag that differs
// says that the ranks' calls differ (a shape, dtype, reduction, root or config that no preamble compared:
// without IRIS_CHECK_CALLS the calls after a preamble are not compared on the host). The wait then records
// kDeviceErrorCallTagMismatch naming the signaller, and its block ends before it reads that peer's data
// (wait_tagged below). Before 2026-12-06 these flags carried the epoch alone, and calls whose differences
// left every wait satisfied (fp16 on one rank and bf16 on another, sum and max, a call on one rank smaller
// than its peer's, whose chunks the peer also sends) returned wrong data without an error on one rank or
// on all. It costs nothing on the path: the signal stores one word as before, and a satisfied wait
// compares the word it loaded anyway. A tag has 14 bits: calls that differ have the same tag by a 2^-14
// chance, and then go on as before (IRIS_CHECK_CALLS compares them all).
// all_reduce's flags hold plain epochs in the same array; Workspace::prepare zeroes the flags when a workspace
// moves to another op, so the two never meet in step. Were one left, neither would be taken for reached:
// the top two bits put a tagged word within 2^62 below 2^64, so `word - e` is negative as a signed number
// for every epoch 0 < e < 2^62 (tagged_word_looks_reached), and a plain epoch has epoch bits below the call's.
inline constexpr int kTaggedEpochBits = 48;
inline constexpr uint64_t kTaggedEpochMask = (uint64_t{1} << kTaggedEpochBits) - 1;

// The tag of a call key: its four 16-bit parts folded, 14 bits kept, the top two set.
constexpr uint64_t call_tag(uint64_t key) {
  return 0xc000u | ((key ^ (key >> 16) ^ (key >> 32) ^ (key >> 48)) & 0x3fffu);
}

// The flag word that call `epoch` of a call with key `key` signals.
constexpr uint64_t tagged_epoch(uint64_t key, uint64_t epoch) {
  return call_tag(key) << kTaggedEpochBits | (epoch & kTaggedEpochMask);
}

// True when the epoch bits of `word` have reached those of `want` (wrap-safe over 48 bits).
constexpr bool tagged_epoch_reached(uint64_t word, uint64_t want) {
  return ((word - want) & kTaggedEpochMask) < (uint64_t{1} << (kTaggedEpochBits - 1));
}

// Whether a plain epoch wait for `epoch` (Cmp::kReached over 64 bits) would take `word`: never for a
// tagged word and 0 < epoch < 2^62 (the host tests check it at the edges).
constexpr bool tagged_word_looks_reached(uint64_t word, uint64_t epoch) {
  return static_cast<int64_t>(word - epoch) >= 0;
}

// ---- chunk plan --------------------------------------------------------------------------------------

// A flat range of `numel` elements cut into `nchunks` chunks of `chunk` elements (the last may be
// shorter). Chunks are 8 KiB to 256 KiB, about numel / 512 elements (4 chunks per block of a 128-block
// launch), a multiple of 16 bytes so 16-byte packs never straddle two chunks. The plan depends on the
// size and dtype only (never on the launch), so one workspace serves any comm_sms.
struct CopyPlan {
  int64_t chunk = 0;
  int64_t nchunks = 0;
};

inline CopyPlan plan_copy_chunks(int64_t numel, DType dtype) {
  const int64_t esz = static_cast<int64_t>(dtype_size(dtype));
  const int64_t target = numel * esz / 512;
  int64_t bytes = std::clamp<int64_t>(target, int64_t{8} << 10, int64_t{256} << 10);
  bytes = (bytes + 15) / 16 * 16;
  CopyPlan p;
  p.chunk = bytes / esz;
  p.nchunks = std::max<int64_t>(1, (numel + p.chunk - 1) / p.chunk);
  return p;
}

// ---- kernel arguments ----------------------------------------------------------------------------------

// all_gather, reduce_scatter, all_to_all. A "block" is one rank's m x cols rows: all_gather's input
// and output blocks, reduce_scatter's input blocks and output, all_to_all's input and output blocks.
struct ExchangeArgs {
  DeviceContext ctx;
  const void* in;
  void* out;
  int64_t cols;
  int64_t in_stride;
  int64_t out_stride;
  int64_t block_rows;  // m
  int64_t numel;       // m * cols, elements of one block
  int64_t chunk;       // CopyPlan of one block
  int64_t nchunks;
  int64_t slot;          // elements between consecutive staging slots (a multiple of 256 bytes)
  int64_t parity_elems;  // staging elements from parity 0 to parity 1 (half the capacity)
  int64_t parity_flags;  // flags from parity 0 to parity 1 (half the capacity)
  void* staging;         // this rank's: [2][W-1][slot] elements
  uint64_t* flags;       // this rank's: [2][W-1][nchunks]
  uint64_t* state;       // epoch (kCollectiveEpochWords)
  bool vec;              // 16-byte packs on in, out and staging
  bool in_place;         // all_gather: in is out's block `rank` (no local copy)
};
static_assert(std::is_trivially_copyable_v<ExchangeArgs>);

void launch_all_gather(const ExchangeArgs& args, DType dtype, int blocks, cudaStream_t stream);
void launch_all_to_all(const ExchangeArgs& args, DType dtype, int blocks, cudaStream_t stream);
void launch_reduce_scatter(const ExchangeArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream);

struct BroadcastArgs {
  DeviceContext ctx;
  const void* in;  // read on the root only
  void* out;
  int64_t numel;
  int64_t cols;
  int64_t in_stride;
  int64_t out_stride;
  int64_t chunk;  // CopyPlan of the whole tensor
  int64_t nchunks;
  int64_t per_owner;  // chunks forwarded by each non-root rank: ceil(nchunks / (W-1))
  int root;
  void* staging;    // this rank's: [nchunks * chunk] elements (slot of chunk c at c * chunk)
  uint64_t* flags;  // this rank's: [W] done words (broadcast.cu), then [nchunks] chunk flags
  uint64_t* state;  // epoch (kCollectiveEpochWords); state[0] is read by the root of later calls
  bool vec;
  bool in_place;        // out == in on the root (no local copy)
  uint64_t layout_key;  // kBroadcastChunkedLayout (layout_fence: a change from the LL path fences)
};
static_assert(std::is_trivially_copyable_v<BroadcastArgs>);

// broadcast's layout keys (ccl_common.cuh, layout_fence), one per path and none with a shape: its LL exchange
// (ll_exchange.cu) and its chunked path (broadcast.cu) lay the staging out differently, and their reuse arguments
// hold only between calls of one path, so a call that takes the other path than the previous call on its
// workspace fences first (layout_fence_after_a_call: not the first call after a preamble). Calls of one path need
// none: the LL parities, and the chunked root's wait for every peer's previous call, cover any change of shape or
// root.
inline constexpr uint64_t kBroadcastLLLayout = 0xb70adca57011ull;
inline constexpr uint64_t kBroadcastChunkedLayout = 0xb70adca57c4dull;

void launch_broadcast(const BroadcastArgs& args, DType dtype, int blocks, cudaStream_t stream);

// Calls f(U{}) with U the unsigned integer as wide as one element: the copy kernels move bits, so one
// instantiation serves every dtype of that width.
template <typename F>
void dispatch_bits(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      f(uint8_t{});
      return;
    case 2:
      f(uint16_t{});
      return;
    case 4:
      f(uint32_t{});
      return;
    case 8:
      f(uint64_t{});
      return;
  }
  throw InvalidArgument("unknown dtype");
}

// dispatch_bits and dispatch_vec in one: f(U{}, vec constant), for the copy launchers.
template <typename F>
void dispatch_bits(DType dtype, bool vec, F&& f) {
  dispatch_bits(dtype, [&](auto u) { dispatch_vec(vec, [&](auto v) { f(u, v); }); });
}

// ---- host helpers -------------------------------------------------------------------------------------

// Rows [first, first + rows) of t, as a view.
inline Tensor row_block(const Tensor& t, int64_t first, int64_t rows) {
  return Tensor{static_cast<char*>(t.data) + static_cast<size_t>(first * t.stride) * t.element_size(), t.dtype, rows,
                t.cols, t.stride};
}

// True when the kernels can move t in 16-byte packs: the data is 16-byte aligned, so is every block of
// `block_rows` rows they address (block_rows = 0: only the first), and a pack never straddles a row
// gap (the rows are back to back, or both cols and stride are multiples of a pack).
inline bool vec_ok(const Tensor& t, int64_t block_rows) {
  const int64_t pack = 16 / static_cast<int64_t>(t.element_size());
  if (t.numel() == 0) return true;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  if ((block_rows * t.stride) % pack != 0) return false;
  return t.stride == t.cols || t.rows <= 1 || (t.cols % pack == 0 && t.stride % pack == 0);
}

// The signature compared across ranks (no variant: these ops have one algorithm each).
inline OpSignature collective_signature(OpKind op, const Tensor& shape, int world, const Config& config, int root = -1,
                                        ReduceOp rop = ReduceOp::kSum) {
  OpSignature sig;
  sig.op = op;
  sig.rows = shape.rows;
  sig.cols = shape.cols;
  sig.dtype = shape.dtype;
  sig.world_size = world;
  sig.block_size_m = config.block_size_m;
  sig.block_size_n = config.block_size_n;
  sig.root = root;
  sig.reduce_op = rop;
  return sig;
}

// Blocks of a launch over `nchunks` chunks.
inline int launch_blocks(const char* op, const PlanScope& scope, const Config& config, int64_t nchunks) {
  return static_cast<int>(std::clamp<int64_t>(nchunks, 1, comm_block_limit(op, scope, config)));
}

// The plan all_gather, all_to_all and reduce_scatter share: every pair of ranks exchanges one block
// of block_rows x cols elements in chunks, through W - 1 staging slots and per-chunk flags on each rank,
// in two parities (the kernels' comments give the reuse argument).
struct ExchangePlan {
  OpSignature sig;
  WorkspaceNeeds needs;
  CopyPlan chunks;
  int64_t block_rows = 0;
  int64_t slot = 0;  // elements between staging slots (a multiple of 256 bytes)
  int blocks = 1;
  int threads = kThreads;  // the LL exchange: ll_launch's; kThreads otherwise
  bool ll = false;       // small blocks: the LL exchange (ll_exchange.cu), no flags
  int64_t ll_words = 0;  // LL words of one block's lines (a staging slot adds the header line)
};

// The staging layout and workspace needs of an exchange of `block_rows` x `cols` blocks between
// `world` ranks (everything in the plan but its signature and launch size; needs no GPU).
inline ExchangePlan plan_exchange_layout(OpKind op, int world, int64_t block_rows, int64_t cols, DType dtype) {
  const size_t esz = dtype_size(dtype);
  const int64_t numel = block_rows * cols;
  ExchangePlan p;
  p.block_rows = block_rows;
  p.chunks = plan_copy_chunks(numel, dtype);
  p.slot = static_cast<int64_t>(align256(static_cast<size_t>(numel) * esz) / esz);
  p.needs.block_state = block_state_words(world);
  // An empty call launches nothing and needs nothing staged (before 2026-12-07 it was planned as an LL
  // exchange of 256 staging bytes, which the first preamble's allocation then fixed, refusing every later call).
  if (numel == 0) return p;
  p.ll = uses_ll_exchange(op, static_cast<size_t>(numel) * esz, world);
  if (p.ll) {
    p.ll_words = ll_words(numel, dtype);
    p.needs.staging_bytes = ll_staging_bytes(numel, dtype, world);
  } else if (world > 1) {
    p.needs.staging_bytes = 2 * static_cast<size_t>(world - 1) * static_cast<size_t>(p.slot) * esz;
    p.needs.flags = 2 * static_cast<size_t>(world - 1) * static_cast<size_t>(p.chunks.nchunks);
  }
  return p;
}

inline ExchangePlan plan_exchange(const PlanScope& scope, const OpSignature& sig, int64_t block_rows, int64_t cols,
                                  DType dtype, const Config& config) {
  ExchangePlan p = plan_exchange_layout(sig.op, scope.world, block_rows, cols, dtype);
  p.sig = sig;
  if (scope.world > 1) p.sig.ll_max_bytes = static_cast<int64_t>(ll_max_bytes(sig.op));
  if (p.ll) {
    const LLLaunch grid =
        ll_launch(p.ll_words, scope.world, comm_block_limit(op_name(sig.op), scope, config), ll_block_bytes());
    p.blocks = grid.blocks;
    p.threads = grid.threads;
  } else {
    p.blocks = launch_blocks(op_name(sig.op), scope, config, p.chunks.nchunks);
  }
  return p;
}

// Where parity 1 starts (collective_kernels.hpp, top): half of each array's capacity, in elements of
// `dtype` for the staging (kept 16-byte aligned) and in words for the flags.
inline int64_t exchange_parity_elems(const Workspace& ws, DType dtype) {
  return static_cast<int64_t>(ws.staging_capacity() / 2 / 16 * 16 / dtype_size(dtype));
}
inline int64_t exchange_parity_flags(const Workspace& ws) { return static_cast<int64_t>(ws.flag_capacity() / 2); }

// The fields the arguments of every exchange kernel share: the call's context (call_context), and in and
// out cut into blocks of `block_rows` rows (numel: elements of one block).
template <typename Args>
void fill_block_views(Args& a, const Context& ctx, const Workspace& ws, const OpSignature& sig, const Tensor& in,
                      const Tensor& out, int64_t block_rows) {
  a.ctx = call_context(ctx, ws, sig);
  a.in = in.data;
  a.out = out.data;
  a.cols = in.cols;
  a.in_stride = in.stride;
  a.out_stride = out.stride;
  a.block_rows = block_rows;
  a.numel = block_rows * in.cols;
}

// The launch arguments of an LL exchange of blocks of `block_rows` rows (`words` LL words per slot), for a
// call of `sig`.
inline LLArgs ll_args(const Context& ctx, const OpSignature& sig, const Tensor& in, const Tensor& out,
                      int64_t block_rows, int64_t words, const Workspace& ws, bool in_place = false) {
  LLArgs a{};
  fill_block_views(a, ctx, ws, sig, in, out, block_rows);
  a.words = words;
  a.parity_words = ll_parity_words(ws);
  a.slot_words = ll_slot_words(a.parity_words, ctx.world_size());
  a.staging = static_cast<uint64_t*>(ws.staging());
  a.state = ws.block_state();
  a.clean = a.state + ll_clean_offset(ctx.world_size());
  a.in_vec8 = ll_vec8(in, block_rows);
  a.out_vec8 = ll_vec8(out, block_rows);
  a.in_place = in_place;
  return a;
}

// The launch arguments of an exchange over `in` and `out`; the caller decides vec and in_place.
inline ExchangeArgs exchange_args(const Context& ctx, const ExchangePlan& p, const Tensor& in, const Tensor& out,
                                  const Workspace& ws) {
  ExchangeArgs a{};
  fill_block_views(a, ctx, ws, p.sig, in, out, p.block_rows);
  a.chunk = p.chunks.chunk;
  a.nchunks = p.chunks.nchunks;
  a.slot = p.slot;
  a.parity_elems = exchange_parity_elems(ws, in.dtype);
  a.parity_flags = exchange_parity_flags(ws);
  a.staging = ws.staging();
  a.flags = ws.flags();
  a.state = ws.block_state();
  return a;
}

}  // namespace iris::ccl::detail

// ---- device helpers (the kernels' .cu files) ----------------------------------------------------------
#if defined(__CUDACC__)
#include "ccl/ccl_common.cuh"

namespace iris::ccl::detail {

// Block-cooperative copy of elements [0, len): each value is loaded once from src_at(e) and stored to
// dst_at(d, e) for every destination d < ndst (local or translated peer pointers). Four packs in flight
// per thread; kVec packs are 16 bytes (the host checked alignment), the tail goes element by element.
template <typename T, bool kVec, typename Src, typename Dst>
__device__ __forceinline__ void block_fanout(Src src_at, int ndst, Dst dst_at, int64_t len) {
  using P = Pack<T, kVec>;
  constexpr int kN = P::kN, kUnroll = 4;
  const int64_t packs = len / kN, step = blockDim.x;
  int64_t j = threadIdx.x;
  for (; j + (kUnroll - 1) * step < packs; j += kUnroll * step) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_pack<T, kVec>(src_at((j + u * step) * kN));
    for (int d = 0; d < ndst; ++d) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) store_pack<T, kVec>(dst_at(d, (j + u * step) * kN), v[u]);
    }
  }
  for (; j < packs; j += step) {
    const P v = load_pack<T, kVec>(src_at(j * kN));
    for (int d = 0; d < ndst; ++d) store_pack<T, kVec>(dst_at(d, j * kN), v);
  }
  for (int64_t e = packs * kN + threadIdx.x; e < len; e += step) {
    const T v = *src_at(e);
    for (int d = 0; d < ndst; ++d) *dst_at(d, e) = v;
  }
}

// One destination.
template <typename T, bool kVec, typename Src, typename Dst>
__device__ __forceinline__ void block_copy_to(Dst dst_at, Src src_at, int64_t len) {
  block_fanout<T, kVec>(
      src_at, 1, [&](int, int64_t e) { return dst_at(e); }, len);
}

// end_call (ccl_common.cuh), with the new epoch stored by a release at system scope, so a peer that
// reads state[0] >= e with an acquire at system scope knows every block of this rank's call e is done,
// including all its reads: each block's accesses are ordered before its acq_rel count (bar.sync), the
// last block's acq_rel count reads every other block's, and its release store is cumulative. (Unlike
// end_call's relaxed count, the acq_rel here is the point: it is what broadcast's root relies on.)
// `then` runs after that store on the last block's thread 0, so a release it makes (broadcast's done word on
// its root) says the same. `layout_key`, when non-zero, is stored as the last call's layout (as end_call's).
template <typename Then>
__device__ __forceinline__ void end_call_published(uint64_t* state, uint64_t epoch, uint64_t layout_key, Then then) {
  sync_block_divergent();  // as end_call's: threads may arrive from different places
  if (threadIdx.x == 0) {
    const uint64_t done = dev::atomic_add<dev::Order::kAcqRel, dev::Scope::kGpu>(state + 1, uint64_t{1});
    if (done == gridDim.x - 1) {
      if (layout_key != 0) dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 2, layout_key);
      dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(state + 1, uint64_t{0});
      dev::store<dev::Order::kRelease, dev::Scope::kSys>(state, epoch);
      then();
    }
  }
}
__device__ __forceinline__ void end_call_published(uint64_t* state, uint64_t epoch, uint64_t layout_key = 0) {
  end_call_published(state, epoch, layout_key, [] {});
}

// The peer whose call left `tag` in a flag this rank waits for in call `epoch`, for the error record: the
// first peer, from `from` on, whose call words (DeviceContext::call_words, stored when its kernel started,
// before its signals, which the caller acquired) name this epoch and a key of that tag; `from` when none
// does. Where the ranks' calls lay their flags out alike (the same chunk count) that is always `from`; where
// they do not, a peer may have signalled into the word meant for `from`. Not inlined: the cold path.
inline __device__ __noinline__ int tag_writer(const DeviceContext& ctx, uint64_t tag, uint64_t epoch, int from) {
  if (ctx.call_words == nullptr) return from;
  for (int k = 0; k < ctx.world_size; ++k) {
    const int r = (from + k) % ctx.world_size;
    if (r == ctx.rank) continue;
    const uint64_t* words = dev::translate(ctx, static_cast<const uint64_t*>(ctx.call_words), r);
    const uint64_t e = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(words);
    const uint64_t key = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(words + 1);
    if (e == epoch && call_tag(key) == tag) return r;
  }
  return from;
}

// One thread: waits (acquire loads at system scope) until the epoch bits of the local word at `flag` reach call
// `epoch`'s, and leaves the word in `seen`. False when the wait gave up (a timeout, recorded with the epoch
// bits, or another thread's error): the kernel must end. Its tag is the caller's to compare (wait_tagged).
__device__ __forceinline__ bool wait_tagged_epoch(const DeviceContext& ctx, const uint64_t* flag, uint64_t epoch,
                                                  const char* op, uint64_t& seen) {
  const uint64_t want = tagged_epoch(ctx.call_key, epoch);
  seen = dev::load<dev::Order::kAcquire, dev::Scope::kSys>(flag);
  if (seen == want || tagged_epoch_reached(seen, want)) return true;  // the usual case: one load
  dev::SpinBound bound(ctx);
  do {
    if (!bound.keep_waiting(ctx, op, flag, seen & kTaggedEpochMask, want & kTaggedEpochMask)) return false;
    seen = dev::load<dev::Order::kAcquire, dev::Scope::kSys>(flag);
  } while (!tagged_epoch_reached(seen, want));
  return true;
}

// Records that the word `seen` at `flag`, which rank `from` signals for call `epoch`, carries another call's tag
// (kDeviceErrorCallTagMismatch: `observed` the peer's tag, `expected` this call's, `peer` the writer,
// tag_writer), unless an error was recorded first.
__device__ __forceinline__ void record_tag_mismatch(const DeviceContext& ctx, const uint64_t* flag, uint64_t seen,
                                                    uint64_t epoch, int from, const char* op) {
  const uint64_t tag = seen >> kTaggedEpochBits;
  dev::record_device_error(ctx, dev::kDeviceErrorCallTagMismatch, op, flag, tag, call_tag(ctx.call_key), 0,
                           tag_writer(ctx, tag, epoch, from));
}

// One thread: waits until the local word at `flag`, which rank `from` signals, carries call `epoch`
// (wait_tagged_epoch), then compares its tag with this call's (ctx.call_key). True when the word is this
// call's tagged epoch; false when the wait gave up or the tag differs (then record_tag_mismatch).
__device__ __forceinline__ bool wait_tagged(const DeviceContext& ctx, const uint64_t* flag, uint64_t epoch, int from,
                                            const char* op) {
  uint64_t seen = 0;
  if (!wait_tagged_epoch(ctx, flag, epoch, op, seen)) return false;
  if (seen >> kTaggedEpochBits == call_tag(ctx.call_key)) return true;
  record_tag_mismatch(ctx, flag, seen, epoch, from, op);
  return false;
}

// block_wait_flag (ccl_common.cuh) for a tagged flag that rank `from` signals. Every thread calls this.
__device__ __forceinline__ bool block_wait_tagged(const DeviceContext& ctx, const uint64_t* flag, uint64_t epoch,
                                                  int from, const char* op) {
  __shared__ int ok;
  if (threadIdx.x == 0) ok = wait_tagged(ctx, flag, epoch, from, op) ? 1 : 0;
  __syncthreads();
  const bool result = ok != 0;
  __syncthreads();  // `ok` is reused by the next wait
  return result;
}

// block_wait_each (ccl_common.cuh) for tagged flags: thread i (i < n) waits for the word at flag_at(i),
// which rank from_at(i) signals, then bar.sync. Every thread calls this.
template <typename FlagAt, typename FromAt>
__device__ __forceinline__ bool block_wait_each_tagged(const DeviceContext& ctx, int n, FlagAt flag_at, FromAt from_at,
                                                       uint64_t epoch, const char* op) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (!wait_tagged(ctx, flag_at(i), epoch, from_at(i), op)) failed = 1;
  __syncthreads();
  const bool ok = failed == 0;
  __syncthreads();  // `failed` is reset by the next call
  return ok;
}

// This block's chunks c_0 = blockIdx.x, c_1 = c_0 + G, ... (G = gridDim.x) as a two-stage software
// pipeline: send(c_i), then take(c_{i-1}); take(c_last) after the loop. send pushes a chunk to peers and
// never waits; take waits for what the peers sent of that chunk, then does the local pass (a copy or a
// reduction). Run one after the other, the whole local pass came after the whole
// transfer; interleaved, blocks that take use HBM while the others keep NVLink busy. Progress: take(c)
// waits only for the peers' sends of chunk c, and a block sends chunk c after its takes of lower chunks
// only, so by induction over the chunk index every send is made, whatever grid each rank launched
// (comm_sms may differ between ranks). False when take fails (a timeout: the kernel must end).
template <typename Send, typename Take>
__device__ __forceinline__ bool pipelined_chunks(int64_t nchunks, Send send, Take take) {
  int64_t prev = -1;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    send(c);
    if (prev >= 0 && !take(prev)) return false;
    prev = c;
  }
  return prev < 0 || take(prev);
}

// Rank at distance k after `me` in a ring of `world`.
__device__ __forceinline__ int ring_peer(int me, int k, int world) { return me + k < world ? me + k : me + k - world; }

// The parity of the exchange staging that call `epoch` uses on this rank. Source k (1..W-1) is the rank
// k before this one; its data lands in slot k-1, its chunk c publishes through flag(k, c).
template <typename T>
struct ExchangeStaging {
  T* slots;
  uint64_t* flags;
  int64_t slot;
  int64_t nchunks;
  __device__ __forceinline__ ExchangeStaging(const ExchangeArgs& a, uint64_t epoch) {
    const int64_t parity = static_cast<int64_t>(epoch & 1);
    slots = static_cast<T*>(a.staging) + parity * a.parity_elems;
    flags = a.flags + parity * a.parity_flags;
    slot = a.slot;
    nchunks = a.nchunks;
  }
  __device__ __forceinline__ T* slot_of(int k) const { return slots + (k - 1) * slot; }
  __device__ __forceinline__ uint64_t* flag(int k, int64_t c) const { return flags + (k - 1) * nchunks + c; }
};

// The take of all_gather and all_to_all (pipelined_chunks): for every source me - k, wait for its flag
// (k, c) to carry this call's tagged epoch (acquire, system scope; a tag that differs ends it), then copy chunk c from
// slot k of the staging into that source's output block, out_block(source). False on timeout (the kernel must end).
template <typename U, bool kVec, typename OutBlock>
__device__ __forceinline__ bool receive_pushed_chunk(const ExchangeArgs& a, const ExchangeStaging<U>& stage,
                                                     uint64_t epoch, OutBlock out_block, const char* op, int64_t c) {
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const int64_t base = c * a.chunk, len = min(a.chunk, a.numel - base);
  for (int k = 1; k < world; ++k) {
    const int from = ring_peer(me, world - k, world);
    if (!block_wait_tagged(ctx, stage.flag(k, c), epoch, from, op)) return false;
    const View<U> dst = out_block(from);
    const U* src = stage.slot_of(k) + base;
    block_copy_to<U, kVec>([&](int64_t e) { return dst.at(base + e); }, [&](int64_t e) { return src + e; }, len);
  }
  return true;
}

}  // namespace iris::ccl::detail
#endif  // __CUDACC__
