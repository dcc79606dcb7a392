// Atomic read-modify-writes on local or remote heap words, each returning the value the word held
// just before (the "old" value), and fences.
//
//   namespace dev = iris::device;
//   uint64_t old = dev::atomic_add<dev::Order::kRelease, dev::Scope::kSys>(ctx, counter, 1, peer);
//   int prev = dev::atomic_cas<dev::Order::kAcqRel, dev::Scope::kGpu>(lock, 0, 1);
//
// Order (kRelaxed, kAcquire, kRelease, kAcqRel) and scope (kCta, kGpu, kSys) are template arguments
// and always spelled out; see common.cuh. Each call compiles to one PTX `atom.<op>.<order>.<scope>`
// instruction (through cuda::atomic_ref), so a release RMW publishes this thread's earlier writes
// and an acquire RMW orders its later reads, at the given scope. Words touched by several GPUs need
// Scope::kSys for the accesses to be atomic with each other; kGpu is atomic only among threads of one
// GPU and kCta among threads of one block.
//
// Two forms of each: on a pointer used as given (local, or already translated), and with a context
// and a rank (`ptr` in this rank's heap, applied to its object in rank `to`'s heap).
//
// Types: add/sub take int32/uint32/int64/uint64 and float/double; and/or/xor/min/max take the four
// integer types; xchg/cas take any of them (cas compares bit patterns). Words are naturally aligned.
// Integer add/sub wrap modulo 2^bits. reduce_add_v4 adds four floats with one request and returns nothing.
#pragma once

#include <cstdint>
#include <type_traits>

#include "iris/device/common.cuh"
#include "iris/device/memory.cuh"

#if defined(IRIS_DEVICE_COMPILE)

namespace iris::device {
namespace detail {

template <typename T>
inline constexpr bool kIsAtomicInteger = (sizeof(T) == 4 || sizeof(T) == 8) && std::is_integral_v<T>;
template <typename T>
inline constexpr bool kIsAtomicArithmetic =
    kIsAtomicInteger<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

template <Scope kScope, typename T>
IRIS_DEVICE_INLINE cuda::atomic_ref<T, kCudaScope<kScope>> atomic_ref_of(T* ptr) {
  return cuda::atomic_ref<T, kCudaScope<kScope>>(*ptr);
}

}  // namespace detail

// ---- on a pointer as given -----------------------------------------------------------------------

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_add(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicArithmetic<T>, "atomic_add takes int32/uint32/int64/uint64/float/double");
  return detail::atomic_ref_of<kScope>(ptr).fetch_add(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_sub(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicArithmetic<T>, "atomic_sub takes int32/uint32/int64/uint64/float/double");
  return detail::atomic_ref_of<kScope>(ptr).fetch_sub(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_and(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicInteger<T>, "atomic_and takes int32/uint32/int64/uint64");
  return detail::atomic_ref_of<kScope>(ptr).fetch_and(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_or(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicInteger<T>, "atomic_or takes int32/uint32/int64/uint64");
  return detail::atomic_ref_of<kScope>(ptr).fetch_or(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_xor(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicInteger<T>, "atomic_xor takes int32/uint32/int64/uint64");
  return detail::atomic_ref_of<kScope>(ptr).fetch_xor(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_min(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicInteger<T>, "atomic_min takes int32/uint32/int64/uint64");
  return detail::atomic_ref_of<kScope>(ptr).fetch_min(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_max(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicInteger<T>, "atomic_max takes int32/uint32/int64/uint64");
  return detail::atomic_ref_of<kScope>(ptr).fetch_max(value, detail::kCudaOrder<kOrder>);
}

// Stores `value` and returns the previous value.
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_xchg(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicArithmetic<T>, "atomic_xchg takes int32/uint32/int64/uint64/float/double");
  return detail::atomic_ref_of<kScope>(ptr).exchange(value, detail::kCudaOrder<kOrder>);
}

// Stores `desired` if the word holds `compare`; returns the previous value either way (the swap
// happened iff the result equals `compare`, bitwise). A failed compare is a load with kOrder minus
// its release half (kRelease -> relaxed, kAcqRel -> acquire).
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_cas(T* ptr, std::type_identity_t<T> compare, std::type_identity_t<T> desired) {
  static_assert(detail::kIsAtomicArithmetic<T>, "atomic_cas takes int32/uint32/int64/uint64/float/double");
  T expected = compare;
  detail::atomic_ref_of<kScope>(ptr).compare_exchange_strong(expected, desired, detail::kCudaOrder<kOrder>);
  return expected;
}

// Adds four floats to the four consecutive words at ptr (16-byte aligned, global memory), without
// returning the old values: one PTX `red.<order>.<scope>.global.add.v4.f32` (sm_90). Each word's add is
// atomic on its own; the four are not one atomic unit. Order: kRelaxed or kRelease. Over NVLink this
// moves 16 bytes per request instead of 4, which is what makes remote float accumulation usable.
template <Order kOrder, Scope kScope>
IRIS_DEVICE_INLINE void reduce_add_v4(float* ptr, float4 v) {
  static_assert(kOrder == Order::kRelaxed || kOrder == Order::kRelease, "reduce_add_v4 is relaxed or release");
#define IRIS_RED_V4(sem, scope)                                                                       \
  asm volatile("red." sem "." scope ".global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "f"(v.x), \
               "f"(v.y), "f"(v.z), "f"(v.w)                                                          \
               : "memory")
  constexpr bool kRel = kOrder == Order::kRelease;
  if constexpr (kScope == Scope::kSys) {
    if constexpr (kRel) IRIS_RED_V4("release", "sys");
    else IRIS_RED_V4("relaxed", "sys");
  } else if constexpr (kScope == Scope::kGpu) {
    if constexpr (kRel) IRIS_RED_V4("release", "gpu");
    else IRIS_RED_V4("relaxed", "gpu");
  } else {
    if constexpr (kRel) IRIS_RED_V4("release", "cta");
    else IRIS_RED_V4("relaxed", "cta");
  }
#undef IRIS_RED_V4
}

// ---- on rank `to`'s copy of a heap word ----------------------------------------------------------

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_add(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_add<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_sub(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_sub<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_and(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_and<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_or(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_or<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_xor(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_xor<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_min(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_min<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_max(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_max<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_xchg(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  return atomic_xchg<kOrder, kScope>(translate(ctx, ptr, to), value);
}
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T atomic_cas(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> compare,
                                std::type_identity_t<T> desired, int to) {
  return atomic_cas<kOrder, kScope>(translate(ctx, ptr, to), compare, desired);
}

// ---- fences --------------------------------------------------------------------------------------
// Prefer a release store / acquire load on the flag itself; a fence is for when the ordering point
// is not one access (e.g. after polling with relaxed loads). Callers say why next to each use.

// fence.acq_rel.<scope>: combined with a relaxed flag access it forms a release or acquire pattern.
template <Scope kScope>
IRIS_DEVICE_INLINE void fence_acq_rel() {
  cuda::atomic_thread_fence(cuda::std::memory_order_acq_rel, detail::kCudaScope<kScope>);
}

// fence.sc.<scope>: sequentially consistent fence (orders earlier stores before later loads too).
template <Scope kScope>
IRIS_DEVICE_INLINE void fence_sc() {
  cuda::atomic_thread_fence(cuda::std::memory_order_seq_cst, detail::kCudaScope<kScope>);
}

}  // namespace iris::device

#endif  // IRIS_DEVICE_COMPILE
