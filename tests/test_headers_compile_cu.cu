// Compile check: every public header from CUDA, and every device-API entry point instantiated in a
// kernel that is never launched (so nothing here needs a GPU). The plain C++ counterpart is
// tests/test_headers_compile.cc.
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/element.hpp"
#include "iris/core/error.hpp"
#include "iris/core/log.hpp"
#include "iris/device.cuh"
#include "iris/device/atomics.cuh"
#include "iris/device/barrier.cuh"
#include "iris/device/common.cuh"
#include "iris/device/device_context.hpp"
#include "iris/device/memory.cuh"
#include "iris/device/signal.cuh"
#include "iris/device/timeout.cuh"
#include "iris/device_barrier.hpp"
#include "iris/runtime/bootstrap.hpp"
#if __has_include("iris/core/tensor.hpp")
#include "iris/core/tensor.hpp"
#endif
#if __has_include("iris/ccl/config.hpp")
#include "iris/ccl/config.hpp"
#endif
#if __has_include("iris/ccl/workspace.hpp")
#include "iris/ccl/workspace.hpp"
#endif
#if __has_include("iris/ccl/collectives.hpp")
#include "iris/ccl/collectives.hpp"
#endif
#include "iris/ops/fused.hpp"
#include "iris/ops/gemm.hpp"

#include <gtest/gtest.h>

namespace {

namespace dev = iris::device;
using dev::Order;
using dev::Scope;

template <typename T>
__device__ void every_atomic(const iris::DeviceContext& ctx, T* p, T v, T* out) {
  out[0] = dev::atomic_add<Order::kRelaxed, Scope::kCta>(p, v);
  out[1] = dev::atomic_sub<Order::kAcquire, Scope::kGpu>(ctx, p, v, 0);
  out[2] = dev::atomic_and<Order::kRelease, Scope::kSys>(p, v);
  out[3] = dev::atomic_or<Order::kAcqRel, Scope::kSys>(ctx, p, v, 0);
  out[4] = dev::atomic_xor<Order::kRelaxed, Scope::kGpu>(p, v);
  out[5] = dev::atomic_min<Order::kAcquire, Scope::kSys>(ctx, p, v, 0);
  out[6] = dev::atomic_max<Order::kRelease, Scope::kCta>(p, v);
  out[7] = dev::atomic_xchg<Order::kAcqRel, Scope::kSys>(ctx, p, v, 0);
  out[8] = dev::atomic_cas<Order::kAcqRel, Scope::kSys>(p, v, v);
  out[9] = dev::atomic_cas<Order::kRelease, Scope::kGpu>(ctx, p, v, v, 0);
  out[10] = dev::load<Order::kAcquire, Scope::kSys>(p);
  out[11] = dev::load<Order::kRelaxed, Scope::kGpu>(ctx, p, 0);
  dev::store<Order::kRelease, Scope::kSys>(p, v);
  dev::store<Order::kRelaxed, Scope::kCta>(ctx, p, v, 0);
  out[12] = dev::load_acquire_sys(p);
  dev::store_release_sys(p, v);
}

__global__ void device_api_kernel(iris::DeviceContext ctx, iris::DeviceBarrierHandle barrier, uint4* vec, float* f,
                                  double* d, int32_t* i32, uint32_t* u32, int64_t* i64, uint64_t* u64, char* bytes) {
  int* ip = dev::translate(ctx, reinterpret_cast<int*>(i32), 0);
  const int* cip = dev::translate(ctx, static_cast<const int*>(ip), 0);
  u64[0] = static_cast<uint64_t>(dev::rank_of(ctx, cip)) + (dev::is_local_heap(ctx, cip) ? 1 : 0);
  uint4 v = dev::load(vec);
  dev::store(vec + 1, v);
  dev::store(ctx, vec + 2, dev::load(ctx, vec, 0), 0);
  every_atomic(ctx, i32, 1, i32 + 16);
  every_atomic(ctx, u32, 1u, u32 + 16);
  every_atomic(ctx, i64, int64_t{1}, i64 + 16);
  every_atomic(ctx, u64, uint64_t{1}, u64 + 16);
  f[1] =
      dev::atomic_add<Order::kRelaxed, Scope::kSys>(f, 1.0f) + dev::atomic_sub<Order::kRelaxed, Scope::kSys>(f, 1.0f);
  d[1] = dev::atomic_add<Order::kAcqRel, Scope::kGpu>(ctx, d, 1.0, 0) +
         dev::atomic_xchg<Order::kRelaxed, Scope::kSys>(d, 2.0);
  dev::fence_acq_rel<Scope::kSys>();
  dev::fence_sc<Scope::kGpu>();
  dev::copy_thread(bytes, bytes + 64, 10);
  dev::copy_warp(vec, vec + 4, 2);
  dev::copy_block(f, f + 8, 4);
  dev::copy_grid(d, d + 8, 4);
  dev::put_thread(ctx, bytes, bytes + 64, 3, 0);
  dev::put_warp(ctx, vec, vec + 4, 2, 0);
  dev::put_block(ctx, f, f + 8, 4, 0);
  dev::put_grid(ctx, d, d + 8, 4, 0);
  dev::get_thread(ctx, bytes, bytes + 64, 3, 0);
  dev::get_warp(ctx, vec, vec + 4, 2, 0);
  dev::get_block(ctx, f, f + 8, 4, 0);
  dev::get_grid(ctx, d, d + 8, 4, 0);
  dev::copy_thread(ctx, bytes, 0, bytes + 64, 0, 3);
  dev::copy_warp(ctx, vec, 0, vec + 4, 0, 2);
  dev::copy_block(ctx, f, 0, f + 8, 0, 4);
  dev::copy_grid(ctx, d, 0, d + 8, 0, 4);
  bool ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, u64, dev::Cmp::kReached, 1);
  ok = ok && dev::wait_until<Order::kRelaxed, Scope::kGpu>(ctx, i32, dev::Cmp::kLt, 0, "compile_check");
  dev::signal<Order::kRelease, Scope::kSys>(ctx, u64, 2, 0);
  u64[1] = dev::signal_add<Order::kRelease, Scope::kSys>(ctx, u64, 1, 0);
  dev::put_thread_signal_release<Scope::kSys>(ctx, f, f + 8, 4, u64, 3, 0);
  dev::put_warp_signal_release<Scope::kSys>(ctx, vec, vec + 4, 2, u32, 3u, 0);
  dev::put_block_signal_release<Scope::kGpu>(ctx, d, d + 8, 4, i64, 3, 0);
  ok = ok && dev::barrier_block(ctx, barrier, 0);
  dev::SpinBound bound(ctx);
  ok = ok && bound.keep_waiting(ctx, "compile_check", u64, 0, 1) && !dev::device_error_raised(ctx);
  u64[2] = dev::global_timer_ns() + bound.elapsed_ns() + (ok ? 1 : 0);
  if (!ok) (void)dev::record_device_error(ctx, dev::kDeviceErrorMisuse, "compile_check", u64, 0, 0, 0);
}

TEST(DeviceHeadersCompile, CudaTranslationUnitInstantiatesTheDeviceApi) {
#if !defined(IRIS_DEVICE_COMPILE)
  FAIL() << "IRIS_DEVICE_COMPILE is not defined under nvcc";
#endif
  EXPECT_NE(reinterpret_cast<const void*>(&device_api_kernel), nullptr);
}

}  // namespace
