// LL exchanges: all_reduce one_shot, and all_gather, reduce_scatter, all_to_all and broadcast when one rank's
// block is small. One kernel, one hop, no separate flag.
//
// broadcast (since 2026-12-06) is the same exchange with one source of data: the root pushes its input's lines
// to every peer, the other ranks push their header lines alone, and every rank waits for every peer's header
// (check_keys) and copies the root's lines into out (the root its own input, unless in place). The headers
// are what the reuse argument below needs (a rank ends call e only after every peer started it) and what
// tells ranks that name different roots apart (the root is in the header's key). Before, every broadcast took
// the chunked path (broadcast.cu): the root's chunk, then its flag, to the owner, the owner's copy to its out;
// 5.7-6.2 us on 2 x H200 from 1 to 64 KiB (2026-11-29), against 3.0-5.1 us for all_gather's LL exchange, which
// moves the same lines per peer.
//
// Every rank pushes one block to every peer (its whole input, or input block p to rank p) and then
// reduces or copies what it received. The data carries its own flag (the LL protocol): it travels in
// 16-byte lines of two 8-byte words, each word {4 data bytes, the call's tag: ll_tag(epoch)}. A line
// is written with one 16-byte store and read with one 16-byte load; each 8-byte half is single-copy
// atomic, so a reader that sees the epoch in a word sees that word's data, and no release/acquire pair
// or fence is needed (DESIGN.md rule 1, the LL exception; tested by the graph-replay and back-to-back
// tests in tests/test_ccl_all_reduce.cu and tests/test_ccl_collectives.cu, which replay many calls
// with fresh data and would catch a torn or stale word). The reader checks both words' tags.
//
// Staging on every rank: 2 parities x W source slots (slot s is written by rank s; our own slot is
// unused), each a header line and then the call's `words` LL words. Call e writes parity e & 1, which
// starts at half the staging's capacity for parity 1 whatever the shape (collective_kernels.hpp says
// why), and slot s starts s x ll_slot_words into its parity, also whatever the shape.
//
// The header line carries the writer's call key (ll_call_key: exchange, dtype, reduction, elements per
// block), tagged like the data. Nothing else tells the ranks that their calls differ: LL calls of
// different sizes never fence (all_reduce's layout key has no shape, so that a decode loop of changing
// batch sizes does not pay a round trip per call; broadcast's fences only where it changes path, LL to chunked
// or back; the other exchanges have no fence). Without the key,
// a rank whose call is smaller took the first lines of its peers' larger call as its own and returned a
// wrong result without an error, and its peers waited for lines that never came until their device
// timeout. The grid's first thread pushes the headers with its first lines and, before it checks any
// line of its own, reads every source's header; on a key other than its own it records
// kDeviceErrorCallMismatchLate naming that source, which ends the waits of every thread of this rank's
// kernels (timeout.cuh), and the host raises InvalidArgument saying the call's output is not valid. The
// data may already have been combined by then: the check runs beside the exchange, not before it, so it
// costs one line per peer and one compare instead of a round trip. Slots sit at a stride that does not
// depend on the call, so a peer's header is where this rank looks for it even when their sizes differ. A peer can only
// start call e + 1 after receiving our data of call e, which we send before reading our staging of call e ... so the
// buffer it overwrites in call e + 2 (same parity as e) is one we finished reading in call e: before sending our data
// of call e + 1, which it needed. Two parities are therefore enough, and stale LL words never match: they carry the tag
// of epoch e - 2 or older (ll_tag is a bijection); stale bytes of other protocols match only where both words'
// high halves equal this call's tag, which has its top bit set (ll_tag says why). Every thread pushes all its lines
// before it waits for any, so no wait depends on how the peer's grid maps lines to threads.
//
// The tag is a bijection of the epoch's low 31 bits only (ll_tag), so a line left in the staging by call e
// carries the tag of call e + 2^31, of the same parity (2^31 is even). A line that no call in between
// rewrote (calls of fewer lines, as a decode loop makes for hours) would then pass as that call's data to a
// reader that came before its writer: a wrong result without an error, after about 2.5 hours of
// back-to-back 4 us calls, or days of a server's decode loop (a reviewer's finding, 2026-12-05, when the
// period was 2^32). So an LL call cleans its parity of this rank's staging, after reading it, when the
// workspace's clean word of that parity (block state, ll_clean_offset: the epoch of the parity's last clean,
// 0 after a preamble) is 2^30 or more epochs old. Each thread rewrites the lines of every source slot that
// it read itself (so it needs no barrier with the threads reading others) and those past the call's lines
// (which nobody reads or writes in this call), headers included, with the tag of an epoch of the other
// parity, which no call of this parity matches (their low bits differ by an odd number); the last block
// stores the epoch in the clean word (end_call), after every block has read it. Peers write this parity
// again only in call e + 2, after this kernel has ended (the argument above). A line of call w then meets
// its tag again at w + 2^31 only if no LL call of its parity ran between w + 2^30 and w + 2^31 (any would
// have cleaned): a gap of 2^30 calls of other protocols on the workspace (or none at all) between two LL
// calls. The clean word is read whatever the call, and the clean itself costs one pass over this rank's
// slots every 2^30 calls. Tested by setting a workspace's epoch to just below the wrap
// (AllReduce.LLLinesOfCallsATagPeriodApartOrStaleZerosNeverPassForLines).
//
// Latency is what this path is for, so every thread keeps kLines lines in flight: all its input loads
// are issued before the first store, and all its loads of up to kSources sources before the first tag
// is checked. On 2 x H200 (bf16, CUDA-graph replay) all_reduce one_shot at 8 KiB went from 5.6 us
// (one 8-byte word per thread and loop iteration, an atomic block count at the end, no PDL) to 3.85
// us. A stand-alone probe of the same protocol (u32 sum, cudaMalloc or cuMemCreate buffers alike)
// takes 2.5 us; the 1.3 us between the two is not explained yet (not the buffers, not the code size
// of the wait, not where the PDL trigger sits).
//
// The grid (ll_launch): on 2 x H200 (2026-11-29, bf16, one_shot) a call's time grew with the lines one
// block pushes, whatever the total: one block of 512 threads took 2.95 / 3.07 / 3.33 / 4.05 us for 128
// / 256 / 512 / 1024 lines (1 to 8 KiB), about 15 GB/s per SM, and 8 blocks of 1024 lines each (64
// KiB) 4.48 us, while the link carries the 16 KiB of lines of an 8 KiB call in 0.05 us and the 128
// KiB of the 64 KiB call in 0.36. A block's pushes leave its SM one after another, so the last line
// reaches the peer that much later. The lines are therefore spread over blocks that each push about
// ll_block_bytes() (2 KiB: 128 lines to one peer, 64 to each of three), one line per thread, up to
// comm_sms blocks; only then does a thread take more lines. At 8 KiB that is 8 blocks of 128 threads
// instead of one of 512: the model says about the 1 KiB time (3.0 us) instead of 4.05; not yet
// measured on 2 GPUs (IRIS_LL_BLOCK_BYTES=16K restores the old grid at 2 ranks, for the comparison).
#include <algorithm>

#include "ccl/ccl_common.cuh"
#include "ccl/collective_kernels.hpp"
#include "core/kernel_modules.hpp"

namespace iris::ccl::detail {
namespace {

// Elements of T in one line's 8 data bytes.
template <typename T>
constexpr int kPerLine = 8 / static_cast<int>(sizeof(T));
// Lines per thread in flight, and sources whose lines are loaded before the first check.
constexpr int kLines = 2;
constexpr int kSources = 4;
constexpr uint64_t kTagMask = 0xffffffff00000000ull;
// Epochs between two cleans of a parity (top of the file): half the tag's period (2^31, ll_tag).
constexpr uint64_t kCleanEvery = uint64_t{1} << 30;
static_assert(2 * kCleanEvery == uint64_t{kLLEpochMask} + 1);

// The 8 data bytes of line `line` of a block: one 8-byte access when the block is contiguous and
// 8-byte aligned (kVec) and the line is whole, element by element otherwise (zeros past the end).
template <typename T, bool kVec>
__device__ __forceinline__ uint2 load_line(const View<const T>& in, int64_t numel, int64_t line) {
  const int64_t e0 = line * kPerLine<T>;
  if (kVec && e0 + kPerLine<T> <= numel) return *reinterpret_cast<const uint2*>(in.data + e0);
  T v[kPerLine<T>];
#pragma unroll
  for (int k = 0; k < kPerLine<T>; ++k) v[k] = e0 + k < numel ? *in.at(e0 + k) : T{};
  uint2 bits;
  memcpy(&bits, v, 8);
  return bits;
}

template <typename T, bool kVec>
__device__ __forceinline__ void store_line(const View<T>& out, int64_t numel, int64_t line, uint2 bits) {
  const int64_t e0 = line * kPerLine<T>;
  if (kVec && e0 + kPerLine<T> <= numel) {
    *reinterpret_cast<uint2*>(out.data + e0) = bits;
    return;
  }
  T v[kPerLine<T>];
  memcpy(v, &bits, 8);
#pragma unroll
  for (int k = 0; k < kPerLine<T>; ++k)
    if (e0 + k < numel) *out.at(e0 + k) = v[k];
}

__device__ __forceinline__ void store_ll(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void load_ll(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

__device__ __forceinline__ bool tagged(uint64_t a, uint64_t b, uint64_t tag) {
  return ((a & kTagMask) == tag) & ((b & kTagMask) == tag);
}

// The slow path of a read: poll one line until both words carry the call's tag, within the bound.
// One copy of the spin instead of one per unrolled (source, line) pair.
struct LLWait {
  uint64_t a, b;
  bool ok;
};
__device__ __noinline__ LLWait wait_ll(const DeviceContext& ctx, const uint64_t* slot, uint64_t epoch, const char* op) {
  const uint64_t tag = uint64_t{ll_tag(epoch)} << 32;
  LLWait r{0, 0, true};
  for (int spin = 0; spin < 64; ++spin) {  // most lines arrive within a few polls: no clock yet
    load_ll(slot, r.a, r.b);
    if (tagged(r.a, r.b, tag)) return r;
  }
  dev::SpinBound bound(ctx);
  while (true) {
    load_ll(slot, r.a, r.b);
    if (tagged(r.a, r.b, tag)) return r;
    const uint64_t seen = (r.a & kTagMask) != tag ? r.a : r.b;
    // The message names epochs: the one whose tag the word carries (anything, for bytes of another
    // protocol), and this call's.
    if (!bound.keep_waiting(ctx, op, slot, ll_epoch_of(static_cast<uint32_t>(seen >> 32)), epoch & kLLEpochMask)) {
      r.ok = false;
      return r;
    }
  }
}

// The grid's first thread: the header lines of sources s0 .. s0 + kSources - 1 (but this rank) carry this
// call's key, or a mismatch is recorded (kDeviceErrorCallMismatchLate, naming the first such source).
// The loads go out together. False only when a header's wait gave up (a timeout, or an error recorded
// by another thread): the kernel must end. After a mismatch it returns true and the thread goes on: its
// waits for lines then give up on the recorded error, and its output is void anyway.
__device__ __noinline__ bool check_keys(const DeviceContext& ctx, const LLArgs& a, int s0, const uint64_t* stage,
                                        uint64_t epoch, const char* op) {
  const uint64_t tag = uint64_t{ll_tag(epoch)} << 32;
  uint64_t h[kSources][2];
#pragma unroll
  for (int j = 0; j < kSources; ++j) {
    const int s = s0 + j;
    if (s < ctx.world_size && s != ctx.rank) load_ll(stage + s * a.slot_words, h[j][0], h[j][1]);
  }
#pragma unroll
  for (int j = 0; j < kSources; ++j) {
    const int s = s0 + j;
    if (s >= ctx.world_size || s == ctx.rank) continue;
    const uint64_t* header = stage + s * a.slot_words;
    if (!tagged(h[j][0], h[j][1], tag)) {
      const LLWait r = wait_ll(ctx, header, epoch, op);
      if (!r.ok) return false;
      h[j][0] = r.a;
      h[j][1] = r.b;
    }
    const uint64_t theirs = (h[j][0] & 0xffffffffull) | (h[j][1] << 32);
    if (theirs != a.call_key) {
      dev::record_device_error(ctx, dev::kDeviceErrorCallMismatchLate, op, header, theirs, a.call_key, 0, s);
      return true;
    }
  }
  return true;
}

// Rewrites the lines of `stage` (this rank's staging of call `epoch`'s parity) that thread `first` of a grid
// of `step` threads reads in a call, in every source's slot and past the call's lines, headers by thread 0,
// with the tag of the next epoch: the other parity's, which no call of this parity matches (top of the file).
__device__ __noinline__ void clean_parity(const LLArgs& a, uint64_t* stage, uint64_t epoch, int64_t first,
                                          int64_t step) {
  const uint64_t other = uint64_t{ll_tag(epoch + 1)} << 32;
  const int64_t slot_lines = a.slot_words / 2;  // the header line, then data lines
  for (int s = 0; s < a.ctx.world_size; ++s) {
    if (s == a.ctx.rank) continue;  // no peer writes our own slot
    uint64_t* slot = stage + s * a.slot_words;
    if (first == 0) store_ll(slot, other, other);
    for (int64_t l = first; l + 1 < slot_lines; l += step) store_ll(slot + kLLHeaderWords + 2 * l, other, other);
  }
}

constexpr bool reduces(LLMode m) { return m == LLMode::kAllReduce || m == LLMode::kReduceScatter; }
// Peer p receives input block p (otherwise every peer receives the whole input).
constexpr bool per_peer(LLMode m) { return m == LLMode::kReduceScatter || m == LLMode::kAllToAll; }

constexpr const char* mode_name(LLMode m) {
  switch (m) {
    case LLMode::kAllReduce:
      return "all_reduce(one_shot)";
    case LLMode::kReduceScatter:
      return "reduce_scatter";
    case LLMode::kAllGather:
      return "all_gather";
    case LLMode::kAllToAll:
      return "all_to_all";
    case LLMode::kBroadcast:
      return "broadcast";
  }
  return "?";
}

// T: the element type when reducing, an unsigned integer of the element's width when copying.
template <typename T, LLMode kMode, ReduceOp kOp, bool kVec>
__global__ void __launch_bounds__(kThreads) ll_kernel(const __grid_constant__ LLArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  using E = Elem<T>;
  using Acc = typename E::Acc;
  constexpr int kN = kPerLine<T>;
  constexpr bool kReduce = reduces(kMode);
  constexpr bool kBroadcast = kMode == LLMode::kBroadcast;
  const DeviceContext& ctx = a.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  // broadcast: the root's lines are the only data; the other ranks push their header lines alone.
  const bool sends_data = !kBroadcast || me == a.root;
  auto in_block = [&](int r) {
    const int64_t first_row = per_peer(kMode) ? r * a.block_rows : 0;
    return View<const T>{static_cast<const T*>(a.in) + first_row * a.in_stride, a.cols, a.in_stride};
  };
  auto out_block = [&](int r) {
    const int64_t first_row = kReduce || kBroadcast ? 0 : r * a.block_rows;
    return View<T>{static_cast<T*>(a.out) + first_row * a.out_stride, a.cols, a.out_stride};
  };
  const uint64_t epoch = begin_call(a.ctx, a.state, mode_name(kMode));
  if (epoch == kSkippedCall) return;  // a stopped workspace (begin_call)
  const uint64_t tag = uint64_t{ll_tag(epoch)} << 32;
  // Read by every block before the last one stores this epoch there (end_call): all decide alike.
  const bool clean = epoch - dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(a.clean + (epoch & 1)) >= kCleanEvery;
  const int64_t words = a.words, lines = words / 2, numel = a.numel;
  uint64_t* stage = a.staging + (epoch & 1) * a.parity_words;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
  // Slot s: stage + s * a.slot_words, its header line first; line l of its data at data(s) + 2 * l.
  auto data = [&](int s) { return stage + s * a.slot_words + kLLHeaderWords; };
  // The grid's first thread exchanges the call keys (top of the file); it has line 0, which every call has.
  const bool keyed = first == 0;

  // 1. Push: line l of the block for peer p into slot [me][l] of p's staging. The first lines are
  //    loaded before all_reduce's layout check: they are reads of our own input, and the check's load
  //    then overlaps them instead of coming before them (0.3 us of a small call).
  uint2 d[kLines];
  auto load_batch = [&](int64_t l0, int peer) {
    const View<const T> src = in_block(peer);
#pragma unroll
    for (int u = 0; u < kLines; ++u)
      if (l0 + u * step < lines) d[u] = load_line<T, kVec>(src, numel, l0 + u * step);
  };
  if (sends_data) load_batch(first, world > 1 ? (me + 1) % world : me);
  if constexpr (kMode == LLMode::kAllReduce) {
    if (!layout_fence(ctx, a.state, a.layout_key, epoch, mode_name(kMode))) {
      end_call(a.state, epoch);
      return;
    }
  }
  if constexpr (kMode == LLMode::kBroadcast) {
    if (!layout_fence_after_a_call(ctx, a.state, a.layout_key, epoch, mode_name(kMode))) {
      end_call(a.state, epoch);
      return;
    }
  }
  if (!sends_data && keyed) {
    for (int k = 1; k < world; ++k) {
      const int peer = me + k < world ? me + k : me + k - world;
      store_ll(dev::translate(ctx, data(me), peer) - kLLHeaderWords, tag | (a.call_key & 0xffffffffull),
               tag | (a.call_key >> 32));
    }
  }
  for (int64_t l0 = first; sends_data && l0 < lines; l0 += kLines * step) {
    for (int k = 1; k < world; ++k) {
      const int peer = me + k < world ? me + k : me + k - world;
      if ((k == 1 && l0 != first) || (k > 1 && per_peer(kMode))) load_batch(l0, peer);
      uint64_t* slot = dev::translate(ctx, data(me), peer);
      if (keyed && l0 == first)
        store_ll(slot - kLLHeaderWords, tag | (a.call_key & 0xffffffffull), tag | (a.call_key >> 32));
#pragma unroll
      for (int u = 0; u < kLines; ++u) {
        const int64_t l = l0 + u * step;
        if (l < lines) store_ll(slot + 2 * l, tag | d[u].x, tag | d[u].y);
      }
    }
  }

  // 2. Receive: source s's line l, from our own staging once both words carry the tag (our own block
  //    from the input), reduced in rank order 0..W-1 or copied to out's block s. The thread that pushed
  //    line l reads it, so in-place calls are safe.
  const View<const T> own = in_block(me);
  for (int64_t l0 = first; l0 < lines; l0 += kLines * step) {
    Acc acc[kLines][kN];
    for (int s0 = 0; s0 < world; s0 += kSources) {
      uint64_t w[kSources][kLines][2];
#pragma unroll
      for (int j = 0; j < kSources; ++j) {
        const int s = s0 + j;
#pragma unroll
        for (int u = 0; u < kLines; ++u) {
          const int64_t l = l0 + u * step;
          if (s >= world || l >= lines) continue;
          if (kBroadcast && s != a.root) continue;  // its header alone (check_keys)
          if (s == me) {
            if (!kReduce && a.in_place) continue;
            const uint2 d = load_line<T, kVec>(own, numel, l);
            w[j][u][0] = tag | d.x;
            w[j][u][1] = tag | d.y;
          } else {
            load_ll(data(s) + 2 * l, w[j][u][0], w[j][u][1]);
          }
        }
      }
      // The sources' headers, while their first lines' loads are in flight: before any line is checked,
      // so that a line a differing peer never sends is not waited for first.
      if (keyed && l0 == first && !check_keys(ctx, a, s0, stage, epoch, mode_name(kMode))) {
        end_call(a.state, epoch);
        return;
      }
#pragma unroll
      for (int j = 0; j < kSources; ++j) {
        const int s = s0 + j;
#pragma unroll
        for (int u = 0; u < kLines; ++u) {
          const int64_t l = l0 + u * step;
          if (s >= world || l >= lines) continue;
          if (kBroadcast && s != a.root) continue;
          if (!kReduce && s == me && a.in_place) continue;
          if (!tagged(w[j][u][0], w[j][u][1], tag)) {
            const LLWait r = wait_ll(ctx, data(s) + 2 * l, epoch, mode_name(kMode));
            if (!r.ok) {
              end_call(a.state, epoch);
              return;
            }
            w[j][u][0] = r.a;
            w[j][u][1] = r.b;
          }
          const uint2 bits = make_uint2(static_cast<uint32_t>(w[j][u][0]), static_cast<uint32_t>(w[j][u][1]));
          if constexpr (kReduce) {
            T x[kN];
            memcpy(x, &bits, 8);
#pragma unroll
            for (int k = 0; k < kN; ++k)
              acc[u][k] = s == 0 ? E::to_acc(x[k]) : combine<kOp>(acc[u][k], E::to_acc(x[k]));
          } else {
            store_line<T, kVec>(out_block(s), numel, l, bits);
          }
        }
      }
    }
    if constexpr (kReduce) {
#pragma unroll
      for (int u = 0; u < kLines; ++u) {
        const int64_t l = l0 + u * step;
        if (l >= lines) continue;
        T v[kN];
#pragma unroll
        for (int k = 0; k < kN; ++k) v[k] = reduced<T, kOp>(acc[u][k], world);
        uint2 bits;
        memcpy(&bits, v, 8);
        store_line<T, kVec>(out_block(me), numel, l, bits);
      }
    }
  }
  // 3. Every 2^30 epochs (or more) per parity: clean it, so that no line outlives the tag's period, 2^31
  //    epochs (top of the file).
  if (clean) {
    clean_parity(a, stage, epoch, first, step);
    end_call(a.state, epoch, a.layout_key, a.clean + (epoch & 1));
    return;
  }
  end_call(a.state, epoch, a.layout_key);
}

template <typename T, LLMode kMode, ReduceOp kOp>
void launch_typed(const LLArgs& args, LLLaunch grid, cudaStream_t stream) {
  if (args.in_vec8 && args.out_vec8)
    launch_collective(ll_kernel<T, kMode, kOp, true>, grid.blocks, grid.threads, stream, args);
  else
    launch_collective(ll_kernel<T, kMode, kOp, false>, grid.blocks, grid.threads, stream, args);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(ll_kernel<float, LLMode::kAllReduce, ReduceOp::kSum, true>)

int64_t ll_words(int64_t numel, DType dtype) {
  const int64_t lines = (numel * static_cast<int64_t>(dtype_size(dtype)) + 7) / 8;
  return 2 * lines;
}

size_t ll_staging_bytes(int64_t numel, DType dtype, int world) {
  return align256(2 * static_cast<size_t>(world) * static_cast<size_t>(kLLHeaderWords + ll_words(numel, dtype)) *
                  sizeof(uint64_t));
}

uint64_t ll_call_key(LLMode mode, DType dtype, ReduceOp op, int64_t numel, int root) {
  const uint64_t reduction = reduces(mode) ? static_cast<uint64_t>(op) : 0;
  const uint64_t root_bits = mode == LLMode::kBroadcast ? static_cast<uint64_t>(root) & 0xff : 0;
  return (static_cast<uint64_t>(mode) + 1) << 60 | (static_cast<uint64_t>(dtype) & 0xf) << 56 |
         (reduction & 0xf) << 52 | root_bits << 48 | (static_cast<uint64_t>(numel) & ((uint64_t{1} << 48) - 1));
}

LLLaunch ll_launch(int64_t words, int world, int limit, size_t block_bytes) {
  constexpr int64_t kWarp = 32, kLineBytes = 16;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t lines = std::max<int64_t>(1, words / 2);
  const int64_t peers = std::max(1, world - 1);
  // Lines per block: block_bytes over the lines' 16 bytes and the peers each line goes to, in whole warps.
  const int64_t per_block =
      ceil_div(std::max<int64_t>(1, ceil_div(static_cast<int64_t>(block_bytes), kLineBytes * peers)), kWarp) * kWarp;
  LLLaunch grid;
  grid.blocks = static_cast<int>(std::clamp<int64_t>(ceil_div(lines, per_block), 1, std::max(1, limit)));
  grid.threads =
      static_cast<int>(std::clamp<int64_t>(ceil_div(ceil_div(lines, grid.blocks), kWarp) * kWarp, kWarp, kThreads));
  return grid;
}

bool ll_vec8(const Tensor& t, int64_t block_rows) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  return t.contiguous() && base % 8 == 0 && (static_cast<uint64_t>(block_rows * t.stride) * t.element_size()) % 8 == 0;
}

void launch_ll(const LLArgs& keyless, LLMode mode, DType dtype, ReduceOp op, LLLaunch grid, cudaStream_t stream) {
  LLArgs args = keyless;
  args.call_key = ll_call_key(mode, dtype, op, args.numel, args.root);
  switch (mode) {
    case LLMode::kAllReduce:
      return dispatch_typed(dtype, op, [&](auto t, auto o) {
        launch_typed<decltype(t), LLMode::kAllReduce, decltype(o)::value>(args, grid, stream);
      });
    case LLMode::kReduceScatter:
      return dispatch_typed(dtype, op, [&](auto t, auto o) {
        launch_typed<decltype(t), LLMode::kReduceScatter, decltype(o)::value>(args, grid, stream);
      });
    case LLMode::kAllGather:
      return dispatch_bits(
          dtype, [&](auto u) { launch_typed<decltype(u), LLMode::kAllGather, ReduceOp::kSum>(args, grid, stream); });
    case LLMode::kAllToAll:
      return dispatch_bits(
          dtype, [&](auto u) { launch_typed<decltype(u), LLMode::kAllToAll, ReduceOp::kSum>(args, grid, stream); });
    case LLMode::kBroadcast:
      return dispatch_bits(
          dtype, [&](auto u) { launch_typed<decltype(u), LLMode::kBroadcast, ReduceOp::kSum>(args, grid, stream); });
  }
  throw InvalidArgument("unknown LL mode");
}

}  // namespace iris::ccl::detail
