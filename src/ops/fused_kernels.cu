// Communication kernels of the fused ops: epoch begin/wait/signal, 2-D copies to and from peers, and
// the rank-ordered reduction of staged partial products. See fused_kernels.hpp for the protocol.
#include "ops/fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

__global__ void fused_begin_kernel(const __grid_constant__ FusedSync s, int ready_base) {
  if (threadIdx.x != 0) return;
  const uint64_t epoch = current_epoch(s.state) + 1;
  dev::store<dev::Order::kRelaxed, dev::Scope::kGpu>(s.state, epoch);
  for (int p = 0; p < s.ctx.world_size; ++p)
    if (p != s.ctx.rank) dev::signal<dev::Order::kRelease, dev::Scope::kSys>(s.ctx, s.flags + ready_base + s.ctx.rank, epoch, p);
}

__global__ void fused_wait_kernel(const __grid_constant__ FusedSync s, int first, int count, int stride, int skip,
                                  int what) {
  const uint64_t epoch = current_epoch(s.state);
  const char* op = what == 0 ? "fused op: wait for a peer's ready flag"
                   : what == 1 ? "fused op: wait for a peer's data"
                               : "fused op: wait for a peer's reduced rows";
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    if (i == skip) continue;
    (void)dev::wait_until<dev::Order::kAcquire, dev::Scope::kSys>(s.ctx, s.flags + first + i * stride,
                                                                  dev::Cmp::kReached, epoch, op);
  }
}

__global__ void fused_signal_kernel(const __grid_constant__ FusedSync s, int index, int to) {
  if (threadIdx.x != 0) return;
  const uint64_t epoch = current_epoch(s.state);
  // The stream's earlier kernels (the copies this flag publishes) have completed; the system-scope fence
  // makes their writes, which this thread did not make, visible before the flag (release is cumulative).
  __threadfence_system();
  for (int p = 0; p < s.ctx.world_size; ++p)
    if (p != s.ctx.rank && (to < 0 || p == to))
      dev::signal<dev::Order::kRelease, dev::Scope::kSys>(s.ctx, s.flags + index, epoch, p);
}

// Four independent vectors per thread per step: more loads in flight for the remote (NVLink) side.
template <typename V>
__global__ void __launch_bounds__(kCopyThreads) copy_2d_kernel(const __grid_constant__ Copy2D c) {
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
  T* out2 = static_cast<T*>(r.out2);
  const int64_t per_row = r.cols / kN;
  const int64_t total = r.rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row, col = (i - row * per_row) * kN;
    const int64_t at = row * r.cols + col;
    float acc[kN];
    for (int s = 0; s < r.world; ++s) {
      const T* slot = s == r.own_index ? static_cast<const T*>(r.own) : slots + s * r.slot_elems;
      const Vec v = *reinterpret_cast<const Vec*>(slot + at);
#pragma unroll
      for (int k = 0; k < kN; ++k) acc[k] = s == 0 ? Acc<T>::in(v.v[k]) : acc[k] + Acc<T>::in(v.v[k]);
    }
    Vec o;
#pragma unroll
    for (int k = 0; k < kN; ++k) o.v[k] = Acc<T>::out(acc[k]);
    *reinterpret_cast<Vec*>(out + row * r.out_stride + col) = o;
    if (out2 != nullptr) *reinterpret_cast<Vec*>(out2 + at) = o;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
void reduce_typed(const ReduceSlots& r, int blocks, cudaStream_t stream) {
  constexpr int kN = 16 / sizeof(T);
  const bool vec = r.cols % kN == 0 && r.out_stride % kN == 0 && r.slot_elems % kN == 0 && aligned16(r.slots) &&
                   aligned16(r.out) && (r.out2 == nullptr || aligned16(r.out2)) &&
                   (r.own_index < 0 || aligned16(r.own));
  if (vec)
    reduce_slots_kernel<T, kN><<<blocks, kReduceThreads, 0, stream>>>(r);
  else
    reduce_slots_kernel<T, 1><<<blocks, kReduceThreads, 0, stream>>>(r);
}

}  // namespace

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

}  // namespace iris::ops::detail
