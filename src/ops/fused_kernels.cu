// Communication kernels of the fused ops: epoch begin/wait/signal, 2-D copies to and from peers, the
// rank-ordered reduction of staged partial products, and the tile reduction of matmul_all_reduce
// atomic/spinlock. See fused_kernels.hpp for the protocols.
#include "ops/fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ccl/ccl_common.cuh"
#include "ccl/collective_kernels.hpp"
#include "core/kernel_modules.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/device.cuh"

namespace iris::ops::detail {
namespace {

namespace dev = iris::device;
constexpr int kCopyThreads = 512;
constexpr int kReduceThreads = 512;

__device__ __forceinline__ uint64_t current_epoch(const uint64_t* state) {
  return dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(state);
}

// The epoch of the call a kernel after fused_begin_kernel belongs to (that kernel stored it), or 0 (no call's:
// epochs start at 1) when the workspace has stopped, by an earlier call or a wait of this one: the kernel then
// returns at once. The epoch is loaded before the stop word, as each kernel did on its own before 2026-12-06.
__device__ __forceinline__ uint64_t running_epoch(const uint64_t* state, const DeviceContext& ctx) {
  const uint64_t epoch = current_epoch(state);
  return ccl::detail::workspace_stopped(ctx) ? 0 : epoch;
}

__global__ void fused_begin_kernel(const __grid_constant__ FusedSync s, int ready_base) {
  if (threadIdx.x != 0) return;
  const uint64_t epoch = current_epoch(s.state) + 1;
  dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(s.state, epoch);
  // A workspace stopped by a failed call (ccl_common.cuh, begin_call): no ready flag, and the call's later
  // kernels return at once (workspace_stopped), as they do once a wait of this call gives up.
  if (const uint64_t stop = ccl::detail::stopped_by(s.ctx, epoch); stop != 0) {
    ccl::detail::skip_call(s.ctx, epoch, stop, "fused op");
    return;
  }
  // The call words, as a collective's begin_call stores them (ccl_common.cuh): every later kernel of the
  // call is ordered after this one, so a wait of theirs that gives up finds this call's words here.
  ccl::detail::store_call_words(s.ctx, epoch, s.ctx.call_key);
  // The ready flag carries a tag of the call key beside the epoch (ccl/collective_kernels.hpp, tagged_epoch), so
  // that every peer's ready wait compares this rank's call with its own before either moves data.
  const uint64_t ready = ccl::detail::tagged_epoch(s.ctx.call_key, epoch);
  for (int p = 0; p < s.ctx.world_size; ++p)
    if (p != s.ctx.rank)
      dev::signal<dev::Order::kRelease, dev::Scope::kSys>(s.ctx, s.flags + ready_base + s.ctx.rank, ready, p);
}

__global__ void fused_wait_kernel(const __grid_constant__ FusedSync s, int first, int count, int stride, int skip,
                                  int what) {
  const uint64_t epoch = running_epoch(s.state, s.ctx);
  if (epoch == 0) return;
  const char* op = what == 0 ? "fused op: wait for a peer's ready flag"
                   : what == 1 ? "fused op: wait for a peer's data"
                               : "fused op: wait for a peer's reduced rows";
  if (what != static_cast<int>(FusedWait::kReady)) {
    for (int i = threadIdx.x; i < count; i += blockDim.x)
      if (i != skip)
        (void)dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(s.ctx, s.flags + first + i * stride,
                                                                      dev::Cmp::kReached, epoch, op);
    return;
  }
  // The ready flags of ranks i, tagged with their calls' keys. A tag that differs is recorded only once every
  // thread's wait has ended: recorded at once, it would end the other threads' waits (they give up on any
  // error of this rank) while a third rank may still be in its previous call, and the call's copy-engine copies,
  // which no device word can stop (the later kernels, copy kernels included, return at once), would write into
  // its staging under it. (At two ranks the one peer's flag has reached this epoch when its tag is seen.)
  __shared__ int differs;  // the first i whose tag differs, or -1
  __shared__ uint64_t differs_word;
  if (threadIdx.x == 0) differs = -1;
  __syncthreads();
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    if (i == skip) continue;
    const uint64_t* flag = s.flags + first + i * stride;
    uint64_t seen = 0;
    if (ccl::detail::wait_tagged_epoch(s.ctx, flag, epoch, op, seen) &&
        seen >> ccl::detail::kTaggedEpochBits != ccl::detail::call_tag(s.ctx.call_key) &&
        atomicCAS(&differs, -1, i) == -1)
      differs_word = seen;
  }
  __syncthreads();
  if (threadIdx.x == 0 && differs >= 0)
    ccl::detail::record_tag_mismatch(s.ctx, s.flags + first + differs * stride, differs_word, epoch, differs, op);
}

__global__ void fused_signal_kernel(const __grid_constant__ FusedSync s, int index, int to) {
  if (threadIdx.x != 0) return;
  const uint64_t epoch = running_epoch(s.state, s.ctx);
  if (epoch == 0) return;
  // The stream's earlier work (the copies this flag publishes: copy kernels, or copy-engine copies with
  // cudaMemcpy2DAsync) has completed before this kernel starts. That the completed writes, which this thread
  // neither made nor observed, are visible at the peer before the flag rests on stream order: a completed
  // operation's writes are performed, NVLink ones included, which CUDA's stream semantics imply rather than
  // state for a peer polling a flag (NCCL's copy-engine collectives rely on the same: data copies, then the
  // flag, on one stream). The fence and the release order nothing for writes this thread did not observe;
  // they order this kernel's own earlier work, and cost one fence per signal.
  __threadfence_system();
  for (int p = 0; p < s.ctx.world_size; ++p)
    if (p != s.ctx.rank && (to < 0 || p == to))
      dev::signal<dev::Order::kRelease, dev::Scope::kSys>(s.ctx, s.flags + index, epoch, p);
}

// Four independent vectors per thread per step: more loads in flight for the remote (NVLink) side.
template <typename V>
__global__ void __launch_bounds__(kCopyThreads) copy_2d_kernel(const __grid_constant__ Copy2D c) {
  // A stopped workspace: this call or an earlier one failed here, and the copy may target a peer that is not in it.
  if (c.stop != nullptr && dev::load<dev::Order::kRelaxed, dev::Scope::kGpu>(c.stop) != 0) return;
  constexpr int kUnroll = 4;
  const int64_t per_row = c.row_bytes / static_cast<int64_t>(sizeof(V));
  const int64_t total = c.rows * per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto src_at = [&](int64_t i) {
    const int64_t r = i / per_row;
    return reinterpret_cast<const V*>(static_cast<const char*>(c.src) + r * c.src_pitch) + (i - r * per_row);
  };
  auto dst_at = [&](int64_t i) {
    const int64_t r = i / per_row;
    return reinterpret_cast<V*>(static_cast<char*>(c.dst) + r * c.dst_pitch) + (i - r * per_row);
  };
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * step < total; i += kUnroll * step) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = *src_at(i + u * step);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) *dst_at(i + u * step) = v[u];
  }
  for (; i < total; i += step) *dst_at(i) = *src_at(i);
}

template <typename T>
struct Acc {
  __device__ __forceinline__ static float in(T v) { return static_cast<float>(v); }
  __device__ __forceinline__ static T out(float v) { return static_cast<T>(v); }
};
template <>
struct Acc<__half> {
  __device__ __forceinline__ static float in(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half out(float v) { return __float2half_rn(v); }
};
template <>
struct Acc<__nv_bfloat16> {
  __device__ __forceinline__ static float in(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 out(float v) { return __float2bfloat16_rn(v); }
};

// kN elements per access: 16 bytes when every row start is 16-byte aligned, else 1.
template <typename T, int kN>
__global__ void __launch_bounds__(kReduceThreads) reduce_slots_kernel(const __grid_constant__ ReduceSlots r) {
  struct alignas(kN * sizeof(T)) Vec {
    T v[kN];
  };
  const T* slots = static_cast<const T*>(r.slots);
  T* out = static_cast<T*>(r.out);
  const int64_t per_row = r.cols / kN;
  const int64_t total = r.rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row, col = (i - row * per_row) * kN;
    const int64_t at = row * r.cols + col;
    float acc[kN];
    for (int s = 0; s < r.world; ++s) {
      const T* slot = slots + s * r.slot_elems;
      const Vec v = *reinterpret_cast<const Vec*>(slot + at);
#pragma unroll
      for (int k = 0; k < kN; ++k) acc[k] = s == 0 ? Acc<T>::in(v.v[k]) : acc[k] + Acc<T>::in(v.v[k]);
    }
    Vec o;
#pragma unroll
    for (int k = 0; k < kN; ++k) o.v[k] = Acc<T>::out(acc[k]);
    *reinterpret_cast<Vec*>(out + row * r.out_stride + col) = o;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- matmul_all_reduce atomic / spinlock: the tile reduction (protocol in fused_kernels.hpp) --------

using ccl::detail::block_signal;
using ccl::detail::block_wait_flag;
using ccl::detail::Elem;

using TileAt = ccl::detail::TileRect;

// Row-major over the tile grid (fused_kernels.hpp).
__device__ __forceinline__ TileAt tile_at(const TileReduce& r, int64_t t) {
  return ccl::detail::tile_rect(t, r.rows, r.cols, r.block_m, r.block_n, /*swizzle=*/1);
}

template <int kN>
struct Floats {
  float v[kN];
};

// For each 16-byte pack of the tile (kN elements at (row, col); tile widths are multiples of kN, see
// launch_tile), the block's threads taking turns, in batches of kBatch packs per thread: load(row, col)
// for each pack of the batch, then use(row, col, loaded) for each, so that kBatch loads (local, or a
// peer's over NVLink) are in flight at once instead of one.
template <int kN, int kBatch = 4, typename Load, typename Use>
__device__ __forceinline__ void for_tile_packs_batched(const TileAt& g, Load&& load, Use&& use) {
  const int per_row = g.w / kN;
  const int count = g.h * per_row;
  const int step = static_cast<int>(blockDim.x);
  for (int j0 = threadIdx.x; j0 < count; j0 += kBatch * step) {
    decltype(load(0, 0)) v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = j0 + u * step;
      if (j < count) v[u] = load(j / per_row, (j % per_row) * kN);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = j0 + u * step;
      if (j < count) use(j / per_row, (j % per_row) * kN, v[u]);
    }
  }
}

__device__ __forceinline__ int64_t arrive_flag(const TileReduce& r, int64_t t, int s) {
  return r.ctx.world_size + t * r.ctx.world_size + s;
}
__device__ __forceinline__ int64_t done_flag(const TileReduce& r, int64_t t) {
  return r.ctx.world_size + r.ctx.world_size * r.tiles + t;
}
__device__ __forceinline__ int64_t mark_flag(const TileReduce& r, int64_t t) {
  return r.ctx.world_size + r.ctx.world_size * r.tiles + r.tiles + t;
}
__device__ __forceinline__ int64_t zeroed_flag(const TileReduce& r, int o) {
  return r.ctx.world_size + r.ctx.world_size * r.tiles + r.tiles + o;
}

template <typename T>
__global__ void __launch_bounds__(kReduceThreads) tile_push_kernel(const __grid_constant__ TileReduce r) {
  using P = ccl::detail::Pack<T, true>;
  constexpr int kN = P::kN;
  const DeviceContext& ctx = r.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const uint64_t epoch = running_epoch(r.state, ctx);
  if (epoch == 0) return;
  const int64_t tile_elems = int64_t{r.block_m} * r.block_n;
  const T* c = static_cast<const T*>(r.c);
  // atomic: every owner's accumulators are zeroed for this call before any add (fused.cc,
  // run_matmul_all_reduce_tiles); one local word per owner, set long before in the common case.
  if (!r.spinlock &&
      !ccl::detail::block_wait_each(
          ctx, world, [&](int o) { return o == me ? nullptr : r.flags + zeroed_flag(r, o); }, epoch,
          "matmul_all_reduce(atomic): an owner's zeroed accumulators"))
    return;
  __shared__ int s_first, s_ok;
  for (int64_t t = r.tile_begin + blockIdx.x; t < r.tile_end; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    if (o == me) continue;
    const TileAt g = tile_at(r, t);
    float* acc = dev::translate(ctx, r.acc + (t / world) * tile_elems, o);
    // This rank's partial of a pack, as floats (plus, for a spinlock writer after the first, what acc holds).
    auto partial = [&](int row, int col) {
      Floats<kN> f;
      const P v = ccl::detail::load_pack<T, true>(c + (g.r0 + row) * r.c_stride + g.c0 + col);
#pragma unroll
      for (int k = 0; k < kN; ++k) f.v[k] = Elem<T>::to_acc(v.v[k]);
      return f;
    };
    auto acc_at = [&](int row, int col) { return reinterpret_cast<float4*>(acc + int64_t{row} * r.block_n + col); };
    if (!r.spinlock) {
      for_tile_packs_batched<kN>(g, partial, [&](int row, int col, const Floats<kN>& f) {
        float4* to = acc_at(row, col);
#pragma unroll
        for (int k = 0; k < kN / 4; ++k)
          dev::reduce_add_v4<dev::Order::kRelaxed, dev::Scope::kSys>(
              reinterpret_cast<float*>(to + k), make_float4(f.v[4 * k], f.v[4 * k + 1], f.v[4 * k + 2], f.v[4 * k + 3]));
      });
    } else {
      uint32_t* lock = dev::translate(ctx, r.locks + t, o);
      uint64_t* mark = dev::translate(ctx, r.flags + mark_flag(r, t), o);
      if (threadIdx.x == 0) {
        // The owner's lock for this tile (the previous holder's writes to acc are visible).
        s_ok = ccl::detail::acquire_spinlock(ctx, lock, "matmul_all_reduce(spinlock): a tile lock") ? 1 : 0;
        // Still holding no value of this call: overwrite (acc holds an older call's sum).
        if (s_ok) s_first = dev::load<dev::Order::kRelaxed, dev::Scope::kSys>(mark) < epoch;
      }
      __syncthreads();
      if (!s_ok) return;  // the timeout is recorded; the host raises it
      const bool first = s_first != 0;
      auto sum = [&](int row, int col) {
        Floats<kN> f = partial(row, col);
        if (!first) {
          const float4* from = acc_at(row, col);
#pragma unroll
          for (int k = 0; k < kN / 4; ++k) {
            const float4 b = from[k];
            f.v[4 * k] += b.x;
            f.v[4 * k + 1] += b.y;
            f.v[4 * k + 2] += b.z;
            f.v[4 * k + 3] += b.w;
          }
        }
        return f;
      };
      for_tile_packs_batched<kN>(g, sum, [&](int row, int col, const Floats<kN>& f) {
        float4* to = acc_at(row, col);
#pragma unroll
        for (int k = 0; k < kN / 4; ++k) to[k] = make_float4(f.v[4 * k], f.v[4 * k + 1], f.v[4 * k + 2], f.v[4 * k + 3]);
      });
      __syncthreads();  // the block's writes to acc come before the mark, the arrival and the unlock
      if (threadIdx.x == 0) {
        if (first) dev::store<dev::Order::kRelaxed, dev::Scope::kSys>(mark, epoch);
        ccl::detail::release_spinlock(lock);
      }
    }
    // Every thread's adds (or stores) are ordered before thread 0's release of the arrival.
    block_signal(ctx, r.flags + arrive_flag(r, t, me), epoch, o);
    __syncthreads();  // s_first / s_ok are rewritten for the next tile
  }
}

template <typename T>
__global__ void __launch_bounds__(kReduceThreads) tile_finish_kernel(const __grid_constant__ TileReduce r) {
  using P = ccl::detail::Pack<T, true>;
  constexpr int kN = P::kN;
  const DeviceContext& ctx = r.ctx;
  const int me = ctx.rank, world = ctx.world_size;
  const uint64_t epoch = running_epoch(r.state, ctx);
  if (epoch == 0) return;
  const int64_t tile_elems = int64_t{r.block_m} * r.block_n;
  T* c = static_cast<T*>(r.c);
  T* res = static_cast<T*>(r.res);
  // 1. The tiles this rank owns: own partial + the peers' sum in acc, into C and res; tell the peers.
  __shared__ int s_ok;
  const int64_t owned = (r.tiles - me + world - 1) / world;
  for (int64_t l = blockIdx.x; l < owned; l += gridDim.x) {
    const int64_t t = l * world + me;
    if (threadIdx.x == 0) {
      s_ok = 1;
      for (int s = 0; s < world && s_ok; ++s)
        if (s != me &&
            !dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(
                ctx, r.flags + arrive_flag(r, t, s), dev::Cmp::kReached, epoch,
                r.spinlock ? "matmul_all_reduce(spinlock): a peer's tile" : "matmul_all_reduce(atomic): a peer's tile"))
          s_ok = 0;
    }
    __syncthreads();
    if (!s_ok) return;
    const TileAt g = tile_at(r, t);
    const float* acc = r.acc + l * tile_elems;
    auto reduced = [&](int row, int col) {
      const P own = ccl::detail::load_pack<T, true>(c + (g.r0 + row) * r.c_stride + g.c0 + col);
      const float* a = acc + int64_t{row} * r.block_n + col;
      P out;
#pragma unroll
      for (int k = 0; k < kN; k += 4) {
        const float4 peers = *reinterpret_cast<const float4*>(a + k);
        out.v[k] = Elem<T>::from_acc(Elem<T>::to_acc(own.v[k]) + peers.x);
        out.v[k + 1] = Elem<T>::from_acc(Elem<T>::to_acc(own.v[k + 1]) + peers.y);
        out.v[k + 2] = Elem<T>::from_acc(Elem<T>::to_acc(own.v[k + 2]) + peers.z);
        out.v[k + 3] = Elem<T>::from_acc(Elem<T>::to_acc(own.v[k + 3]) + peers.w);
      }
      return out;
    };
    for_tile_packs_batched<kN>(g, reduced, [&](int row, int col, const P& out) {
      ccl::detail::store_pack<T, true>(c + (g.r0 + row) * r.c_stride + g.c0 + col, out);
      ccl::detail::store_pack<T, true>(res + l * tile_elems + int64_t{row} * r.block_n + col, out);
    });
    for (int k = 1; k < world; ++k) block_signal(ctx, r.flags + done_flag(r, t), epoch, (me + k) % world);
    __syncthreads();  // s_ok is rewritten for the next tile
  }
  // 2. The others: copy each from its owner's res once published.
  for (int64_t t = blockIdx.x; t < r.tiles; t += gridDim.x) {
    const int o = static_cast<int>(t % world);
    if (o == me) continue;
    if (!block_wait_flag(ctx, r.flags + done_flag(r, t), epoch,
                         r.spinlock ? "matmul_all_reduce(spinlock): an owner's result"
                                    : "matmul_all_reduce(atomic): an owner's result"))
      return;
    const TileAt g = tile_at(r, t);
    const T* from = dev::translate(ctx, res + (t / world) * tile_elems, o);
    for_tile_packs_batched<kN>(
        g, [&](int row, int col) { return ccl::detail::load_pack<T, true>(from + int64_t{row} * r.block_n + col); },
        [&](int row, int col, const P& v) {
          ccl::detail::store_pack<T, true>(c + (g.r0 + row) * r.c_stride + g.c0 + col, v);
        });
  }
}


template <typename T>
void reduce_typed(const ReduceSlots& r, int blocks, cudaStream_t stream) {
  constexpr int kN = 16 / sizeof(T);
  const bool vec =
      r.cols % kN == 0 && r.out_stride % kN == 0 && r.slot_elems % kN == 0 && aligned16(r.slots) && aligned16(r.out);
  if (vec)
    reduce_slots_kernel<T, kN><<<blocks, kReduceThreads, 0, stream>>>(r);
  else
    reduce_slots_kernel<T, 1><<<blocks, kReduceThreads, 0, stream>>>(r);
}


// Every 16-byte pack of C lies inside one tile row: C's rows start on 16 bytes and the column counts
// are multiples of 16 bytes (the GEMM core's layout rules, checked before any launch).
template <template <typename> class K>
void launch_tile(const TileReduce& r, DType dtype, int blocks, cudaStream_t stream) {
  const int64_t n = 16 / static_cast<int64_t>(dtype_size(dtype));
  IRIS_ASSERT(aligned16(r.c) && r.c_stride % n == 0 && r.cols % n == 0 && r.block_n % n == 0 && aligned16(r.acc) &&
                  aligned16(r.res),
              "the tile reduction needs 16-byte rows (the GEMM core's layout rules)");
  switch (dtype) {
    case DType::kBFloat16:
      K<__nv_bfloat16>::launch(r, blocks, stream);
      break;
    case DType::kFloat16:
      K<__half>::launch(r, blocks, stream);
      break;
    case DType::kFloat32:
      K<float>::launch(r, blocks, stream);
      break;
    default:
      throw InvalidArgument("fused ops reduce bfloat16, float16 or float32 outputs");
  }
  IRIS_CUDA_CHECK_LAUNCH();
}
template <typename T>
struct PushLaunch {
  static void launch(const TileReduce& r, int blocks, cudaStream_t s) {
    tile_push_kernel<T><<<blocks, kReduceThreads, 0, s>>>(r);
  }
};
template <typename T>
struct FinishLaunch {
  static void launch(const TileReduce& r, int blocks, cudaStream_t s) {
    tile_finish_kernel<T><<<blocks, kReduceThreads, 0, s>>>(r);
  }
};

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(fused_begin_kernel)

void launch_fused_begin(const FusedSync& s, int ready_base, cudaStream_t stream) {
  fused_begin_kernel<<<1, 32, 0, stream>>>(s, ready_base);
  IRIS_CUDA_CHECK_LAUNCH();
}

void launch_fused_wait(const FusedSync& s, int first, int count, int stride, int skip, FusedWait what,
                       cudaStream_t stream) {
  fused_wait_kernel<<<1, 32, 0, stream>>>(s, first, count, stride, skip, static_cast<int>(what));
  IRIS_CUDA_CHECK_LAUNCH();
}

void launch_fused_signal(const FusedSync& s, int index, int to, cudaStream_t stream) {
  fused_signal_kernel<<<1, 32, 0, stream>>>(s, index, to);
  IRIS_CUDA_CHECK_LAUNCH();
}

void launch_copy_2d(const Copy2D& c, int blocks, cudaStream_t stream) {
  if (c.rows == 0 || c.row_bytes == 0) return;
  const bool vec = c.row_bytes % 16 == 0 && c.src_pitch % 16 == 0 && c.dst_pitch % 16 == 0 && aligned16(c.src) &&
                   aligned16(c.dst);
  if (vec)
    copy_2d_kernel<uint4><<<blocks, kCopyThreads, 0, stream>>>(c);
  else
    copy_2d_kernel<uint16_t><<<blocks, kCopyThreads, 0, stream>>>(c);  // elements are 2 or 4 bytes
  IRIS_CUDA_CHECK_LAUNCH();
}

void launch_reduce_slots(const ReduceSlots& r, DType dtype, int blocks, cudaStream_t stream) {
  if (r.rows == 0 || r.cols == 0) return;
  switch (dtype) {
    case DType::kBFloat16:
      reduce_typed<__nv_bfloat16>(r, blocks, stream);
      break;
    case DType::kFloat16:
      reduce_typed<__half>(r, blocks, stream);
      break;
    case DType::kFloat32:
      reduce_typed<float>(r, blocks, stream);
      break;
    default:
      throw InvalidArgument("fused ops reduce bfloat16, float16 or float32 outputs");
  }
  IRIS_CUDA_CHECK_LAUNCH();
}

void launch_tile_push(const TileReduce& r, DType dtype, int blocks, cudaStream_t stream) {
  if (r.tile_end <= r.tile_begin) return;
  launch_tile<PushLaunch>(r, dtype, blocks, stream);
}

void launch_tile_finish(const TileReduce& r, DType dtype, int blocks, cudaStream_t stream) {
  if (r.tiles == 0) return;
  launch_tile<FinishLaunch>(r, dtype, blocks, stream);
}

}  // namespace iris::ops::detail
