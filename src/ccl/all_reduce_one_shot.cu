// all_reduce, one_shot variant, for small tensors: one kernel, one hop, no separate flag.
//
// Each rank pushes its whole input to every peer and reduces what it receives. The data carries its
// own flag (the LL protocol): every 8-byte word sent is {4 data bytes, low 32 bits of the call's
// epoch}, written with one 64-bit store, which is single-copy atomic. A reader that sees the epoch
// in a word therefore sees that word's data, so no release/acquire pair and no fence is needed
// (DESIGN.md rule 1, the LL exception; tested by the stress tests in tests/test_ccl_all_reduce.cu,
// which replay thousands of calls with fresh data and would catch a torn or stale word).
//
// Staging on every rank: 2 parities x W sources x `words` LL words. Call e writes parity e & 1.
// A peer can only start call e + 1 after receiving our data of call e, which we send before reading
// our staging of call e - 1 ... so the buffer it overwrites in call e + 2 (same parity as e) is one
// we finished reading in call e: before sending our data of call e + 1, which it needed. Two
// parities are therefore enough, and stale words never match: they carry epoch e - 2 or older.
#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_common.cuh"

namespace iris::ccl::detail {
namespace {

// Elements of T packed in one 4-byte LL payload.
template <typename T>
constexpr int kPerWord = 4 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ uint32_t gather_word(const View<const T>& in, int64_t numel, int64_t w) {
  uint32_t bits = 0;
#pragma unroll
  for (int k = 0; k < kPerWord<T>; ++k) {
    const int64_t e = w * kPerWord<T> + k;
    T v = e < numel ? *in.at(e) : T{};
    uint32_t raw = 0;
    memcpy(&raw, &v, sizeof(T));
    bits |= raw << (8 * sizeof(T) * k);
  }
  return bits;
}

template <typename T, ReduceOp kOp>
__global__ void __launch_bounds__(kThreads) one_shot_kernel(const __grid_constant__ OneShotArgs args) {
  using E = Elem<T>;
  using Acc = typename E::Acc;
  const DeviceContext& ctx = args.ctx;
  const View<const T> in{static_cast<const T*>(args.in), args.cols, args.in_stride};
  const View<T> out{static_cast<T*>(args.out), args.cols, args.out_stride};
  const uint64_t epoch = begin_call(args.state);
  const uint64_t tag = (epoch & 0xffffffffull) << 32;
  const int me = ctx.rank, world = ctx.world_size;
  uint64_t* stage = args.staging + (epoch & 1) * static_cast<uint64_t>(world) * args.words;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;

  // 1. Push: this rank's word w into slot [me][w] of every peer.
  for (int64_t w = first; w < args.words; w += step) {
    const uint64_t word = tag | gather_word(in, args.numel, w);
    for (int k = 1; k < world; ++k) {
      const int peer = me + k < world ? me + k : me + k - world;
      dev::store<dev::Order::kRelaxed, dev::Scope::kSys>(dev::translate(ctx, stage + me * args.words + w, peer), word);
    }
  }
  // 2. Reduce in rank order 0..W-1; peers' words are read from our own staging once tagged.
  for (int64_t w = first; w < args.words; w += step) {
    Acc acc[kPerWord<T>];
    for (int s = 0; s < world; ++s) {
      uint32_t bits;
      if (s == me) {
        bits = gather_word(in, args.numel, w);
      } else {
        const uint64_t* slot = stage + s * args.words + w;
        uint64_t v = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(slot);
        if ((v & 0xffffffff00000000ull) != tag) {
          dev::SpinBound bound(ctx);
          do {
            if (!bound.keep_waiting(ctx, "all_reduce(one_shot)", slot, v >> 32, epoch & 0xffffffffull)) {
              end_call(args.state, epoch);
              return;
            }
            v = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(slot);
          } while ((v & 0xffffffff00000000ull) != tag);
        }
        bits = static_cast<uint32_t>(v);
      }
#pragma unroll
      for (int k = 0; k < kPerWord<T>; ++k) {
        T x;
        const uint32_t raw = bits >> (8 * sizeof(T) * k);
        memcpy(&x, &raw, sizeof(T));
        acc[k] = s == 0 ? E::to_acc(x) : combine<kOp>(acc[k], E::to_acc(x));
      }
    }
#pragma unroll
    for (int k = 0; k < kPerWord<T>; ++k) {
      const int64_t e = w * kPerWord<T> + k;
      if (e < args.numel) *out.at(e) = E::from_acc(acc[k]);
    }
  }
  end_call(args.state, epoch);
}

}  // namespace

int64_t one_shot_words(int64_t numel, DType dtype) {
  return (numel * static_cast<int64_t>(dtype_size(dtype)) + 3) / 4;
}

void launch_one_shot(const OneShotArgs& args, DType dtype, ReduceOp op, int blocks, cudaStream_t stream) {
  dispatch_typed(dtype, op, [&](auto t, auto o) {
    using T = decltype(t);
    one_shot_kernel<T, decltype(o)::value><<<blocks, kThreads, 0, stream>>>(args);
  });
}

}  // namespace iris::ccl::detail
