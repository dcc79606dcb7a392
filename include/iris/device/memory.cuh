// Pointer translation, scalar and 16-byte loads and stores, and bulk copies between ranks' heaps.
//
//   __global__ void k(iris::DeviceContext ctx, float* buf, const float* mine, size_t n) {
//     namespace dev = iris::device;
//     int peer = (ctx.rank + 1) % ctx.world_size;
//     dev::put_block(ctx, buf, mine, n, peer);   // this block writes n floats into peer's `buf`
//   }
//
// Pointers passed with a rank (`to`, `from`) point into THIS rank's heap (an allocation of the
// Context, or anything inside one) and are translated to the same object in that rank's heap:
//     translate(ctx, ptr, r) == (T*)((char*)ptr + (r - ctx.rank) * ctx.heap_size)   (bytes, not elements).
// Pointers passed without a rank are used as they are: this GPU's global memory (its heap, cudaMalloc), or a
// pointer already translated. A rank equal to ctx.rank means the local heap; all forms work for local and remote.
//
// Checked mode: with IRIS_DEVICE_CHECKS defined to 1 before the first iris device header (or
// -DIRIS_DEVICE_CHECKS=1), every form that takes a rank checks, in the kernels of that translation unit, that
// the rank is in [0, world_size) and that the object (for the bulk forms, the whole range of `count` elements)
// lies in this rank's heap. A translation that fails the check records why in the context's error record
// (kDeviceErrorBadTranslate: the host raises InvalidArgument at ctx.synchronize() or check_device_error(),
// naming the rank, the pointer and what is wrong with them), prints it, and stops the kernel with a trap before
// the access: an access through a wrong address would corrupt another object, or another rank's, without a
// word. A trap ends this process's CUDA context (every later CUDA call fails), so the process must end; its
// peers raise their own device timeouts. A debug mode, for finding such a bug: a few instructions per
// translation. Off by default; iris's own kernels have it only in a library configured with the CMake option
// IRIS_DEVICE_CHECKS=ON (iris::library_device_checks() says which build is linked).
// Global memory only, for the 16-byte and bulk forms: they access it with ld.global / st.global, which on a
// __shared__ (or stack) address fault; write a shared-memory tile out with ordinary C++ assignments (not the
// 16-byte load/store below), or copy it to global memory first.
//
// Weak (plain) accesses: load(ptr), store(ptr, v), and the bulk forms. They are not atomic and give
// no ordering: publish them to another rank with a release (signal.cuh) or a barrier (barrier.cuh).
// 16-byte types (uint4, float4, int4, double2, a packed struct of 8 bf16...) load and store as one
// 128-bit access (ld.global.v4 / st.global.v4); the pointer must be 16-byte aligned.
//
// Atomic accesses: load<Order, Scope>(ptr) and store<Order, Scope>(ptr, v) on 4- and 8-byte words
// (int32/uint32/int64/uint64/float/double). Loads take kRelaxed or kAcquire, stores kRelaxed or
// kRelease. A flag that publishes data to another GPU is written with store<kRelease, kSys> and read
// with load<kAcquire, kSys> (DESIGN.md, memory-ordering rule 1); load_acquire_sys / store_release_sys
// spell exactly that.
//
// Bulk forms, for each of copy, put, get:  *_thread (one thread), *_warp (all 32 lanes), *_block
// (every thread of the block), *_grid (every thread of the grid). Every thread of the group passes
// the same arguments. Counts are in elements of T. Each thread moves 16-byte words when the source
// and destination are equally aligned modulo 16 (otherwise the widest word size they share), with
// several loads in flight before the matching stores; the group's threads access consecutive words
// (coalesced). Unaligned heads and tails are copied bytewise. Ranges must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "iris/device/common.cuh"

#if defined(IRIS_DEVICE_COMPILE)
#include <cuda/atomic>

namespace iris::device {

// ---- pointer translation -------------------------------------------------------------------------

namespace detail {

// Records a translation that failed its check, prints it and stops the kernel (timeout.cuh).
__device__ void translate_failed(const DeviceContext& ctx, const void* ptr, uint64_t bytes, int to);

// The bytes an object of T spans; 0 for void (an address, not an object).
template <typename T>
inline constexpr uint64_t kObjectBytes = std::is_void_v<T> ? 0 : sizeof(std::conditional_t<std::is_void_v<T>, char, T>);

// IRIS_DEVICE_CHECKS: `to` is a rank and `count` objects of T from `ptr` lie in this rank's heap, or the kernel
// stops (translate_failed).
template <typename T>
IRIS_DEVICE_INLINE void check_translate([[maybe_unused]] const DeviceContext& ctx, [[maybe_unused]] const T* ptr,
                                        [[maybe_unused]] uint64_t count, [[maybe_unused]] int to) {
#if IRIS_DEVICE_CHECKS
  if (!translation_in_bounds(ctx, reinterpret_cast<uintptr_t>(ptr), count, kObjectBytes<T>, to)) {
    uint64_t bytes = 0;  // saturated: a count past the heap may overflow 64 bits
    if constexpr (kObjectBytes<T> != 0)
      bytes = count > ~uint64_t{0} / kObjectBytes<T> ? ~uint64_t{0} : count * kObjectBytes<T>;
    translate_failed(ctx, ptr, bytes, to);
  }
#endif
}

// The `count` objects from `ptr` (in this rank's heap) as seen in rank `to`'s heap: translate, for the bulk forms,
// which IRIS_DEVICE_CHECKS checks over the whole range.
template <typename T>
IRIS_DEVICE_INLINE T* translate_range(const DeviceContext& ctx, T* ptr, size_t count, int to) {
  check_translate(ctx, ptr, count, to);
  const int64_t shift = (static_cast<int64_t>(to) - ctx.rank) * static_cast<int64_t>(ctx.heap_size);
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(ptr) + static_cast<uintptr_t>(shift));
}

}  // namespace detail

// The object at `ptr` (in this rank's heap) as seen in rank `to`'s heap.
template <typename T>
IRIS_DEVICE_INLINE T* translate(const DeviceContext& ctx, T* ptr, int to) {
  return detail::translate_range(ctx, ptr, 1, to);
}

// The rank whose heap holds `ptr` (any rank's heap, as mapped in this process), or -1 when `ptr` is
// outside the symmetric window.
IRIS_DEVICE_INLINE int rank_of(const DeviceContext& ctx, const void* ptr) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr), base = reinterpret_cast<uintptr_t>(ctx.heap_base);
  if (p < base || ctx.heap_size == 0) return -1;
  const uint64_t r = (p - base) / ctx.heap_size;
  return r < static_cast<uint64_t>(ctx.world_size) ? static_cast<int>(r) : -1;
}

// True when `ptr` points into this rank's own heap.
IRIS_DEVICE_INLINE bool is_local_heap(const DeviceContext& ctx, const void* ptr) {
  return rank_of(ctx, ptr) == ctx.rank;
}

namespace detail {

template <Scope kScope>
inline constexpr cuda::thread_scope kCudaScope = kScope == Scope::kCta   ? cuda::thread_scope_block
                                                 : kScope == Scope::kGpu ? cuda::thread_scope_device
                                                                         : cuda::thread_scope_system;

template <Order kOrder>
inline constexpr cuda::std::memory_order kCudaOrder = kOrder == Order::kRelaxed   ? cuda::std::memory_order_relaxed
                                                      : kOrder == Order::kAcquire ? cuda::std::memory_order_acquire
                                                      : kOrder == Order::kRelease ? cuda::std::memory_order_release
                                                                                  : cuda::std::memory_order_acq_rel;

template <typename T>
inline constexpr bool kIsAtomicWord = (sizeof(T) == 4 || sizeof(T) == 8) && std::is_arithmetic_v<T>;

// One 128-bit global access. The "memory" clobber keeps the compiler from moving other memory
// accesses across it (so a later release still orders it); the hardware still keeps several such
// loads in flight because nothing waits for a loaded register until it is used.
IRIS_DEVICE_INLINE uint4 ld_global_v4(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr)
               : "memory");
  return v;
}
IRIS_DEVICE_INLINE void st_global_v4(void* ptr, const uint4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

template <int kBytes>
struct WordOf;
template <>
struct WordOf<1> {
  using type = uint8_t;
};
template <>
struct WordOf<2> {
  using type = uint16_t;
};
template <>
struct WordOf<4> {
  using type = uint32_t;
};
template <>
struct WordOf<8> {
  using type = uint64_t;
};
template <>
struct WordOf<16> {
  using type = uint4;
};

// Plain global loads and stores of 1, 2, 4, 8 and 16 bytes (ld.global / st.global even when the
// compiler cannot prove the pointer global, e.g. after translate()).
template <typename W>
IRIS_DEVICE_INLINE W load_word(const W* p) {
  if constexpr (sizeof(W) == 16) {
    return ld_global_v4(p);
  } else if constexpr (sizeof(W) == 8) {
    uint64_t v;
    asm volatile("ld.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return static_cast<W>(v);
  } else if constexpr (sizeof(W) == 4) {
    uint32_t v;
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return static_cast<W>(v);
  } else if constexpr (sizeof(W) == 2) {
    uint16_t v;
    asm volatile("ld.global.b16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
    return static_cast<W>(v);
  } else {
    uint32_t v;
    asm volatile("ld.global.u8 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return static_cast<W>(v);
  }
}
template <typename W>
IRIS_DEVICE_INLINE void store_word(W* p, const W& v) {
  if constexpr (sizeof(W) == 16) {
    st_global_v4(p, v);
  } else if constexpr (sizeof(W) == 8) {
    asm volatile("st.global.b64 [%0], %1;" ::"l"(p), "l"(static_cast<uint64_t>(v)) : "memory");
  } else if constexpr (sizeof(W) == 4) {
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(static_cast<uint32_t>(v)) : "memory");
  } else if constexpr (sizeof(W) == 2) {
    asm volatile("st.global.b16 [%0], %1;" ::"l"(p), "h"(static_cast<uint16_t>(v)) : "memory");
  } else {
    asm volatile("st.global.u8 [%0], %1;" ::"l"(p), "r"(static_cast<uint32_t>(v)) : "memory");
  }
}

// Words [0, count) strided over `size` threads: kUnroll loads issued before their stores.
template <typename W, typename Index>
IRIS_DEVICE_INLINE void copy_words(W* __restrict__ dst, const W* __restrict__ src, size_t count, Index index,
                                   Index size) {
  constexpr int kUnroll = 4;
  size_t i = index;
  const size_t step = size;
  for (; i + (kUnroll - 1) * step < count; i += kUnroll * step) {
    W v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_word(src + i + u * step);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store_word(dst + i + u * step, v[u]);
  }
  for (; i < count; i += step) store_word(dst + i, load_word(src + i));
}

IRIS_DEVICE_INLINE void copy_byte(char* dst, const char* src) {
  store_word(reinterpret_cast<uint8_t*>(dst), load_word(reinterpret_cast<const uint8_t*>(src)));
}

template <int kWord, typename Index>
IRIS_DEVICE_INLINE void copy_aligned(char* dst, const char* src, size_t bytes, Index index, Index size) {
  using W = typename WordOf<kWord>::type;
  // Bytes before dst (and so src, equally misaligned) reaches a kWord boundary.
  size_t head = (kWord - (reinterpret_cast<uintptr_t>(dst) & (kWord - 1))) & (kWord - 1);
  if (head > bytes) head = bytes;
  for (size_t i = index; i < head; i += size) copy_byte(dst + i, src + i);
  dst += head;
  src += head;
  bytes -= head;
  const size_t words = bytes / kWord;
  copy_words(reinterpret_cast<W*>(dst), reinterpret_cast<const W*>(src), words, index, size);
  for (size_t i = words * kWord + index; i < bytes; i += size) copy_byte(dst + i, src + i);
}

// kKnownAlign: alignment both pointers are known to have (from the element type), so narrower
// word sizes are never considered.
template <int kKnownAlign, typename Index>
IRIS_DEVICE_INLINE void copy_bytes(void* dst, const void* src, size_t bytes, Index index, Index size) {
  auto d = static_cast<char*>(dst);
  auto s = static_cast<const char*>(src);
  const uintptr_t skew = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  if (kKnownAlign >= 16 || (skew & 15) == 0) {
    copy_aligned<16>(d, s, bytes, index, size);
  } else if (kKnownAlign >= 8 || (skew & 7) == 0) {
    copy_aligned<8>(d, s, bytes, index, size);
  } else if (kKnownAlign >= 4 || (skew & 3) == 0) {
    copy_aligned<4>(d, s, bytes, index, size);
  } else if (kKnownAlign >= 2 || (skew & 1) == 0) {
    copy_aligned<2>(d, s, bytes, index, size);
  } else {
    copy_aligned<1>(d, s, bytes, index, size);
  }
}

template <typename Group, typename T>
IRIS_DEVICE_INLINE void copy_group(T* dst, const T* src, size_t count) {
  static_assert(std::is_trivially_copyable_v<T>, "bulk copies move trivially copyable elements");
  constexpr int kKnownAlign = alignof(T) < 16 ? static_cast<int>(alignof(T)) : 16;
  copy_bytes<kKnownAlign>(static_cast<void*>(dst), static_cast<const void*>(src), count * sizeof(T), Group::index(),
                          Group::size());
}

}  // namespace detail

// ---- weak (plain) loads and stores ---------------------------------------------------------------

// Plain load; a 16-byte T is one 128-bit ld.global.v4 (ptr 16-byte aligned).
template <typename T>
IRIS_DEVICE_INLINE T load(const T* ptr) {
  static_assert(std::is_trivially_copyable_v<T>);
  if constexpr (sizeof(T) == 16) {
    uint4 v = detail::ld_global_v4(ptr);
    T out;
    memcpy(&out, &v, sizeof(T));
    return out;
  } else {
    return *ptr;
  }
}

// Plain store; a 16-byte T is one 128-bit st.global.v4 (ptr 16-byte aligned).
template <typename T>
IRIS_DEVICE_INLINE void store(T* ptr, const std::type_identity_t<T>& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  if constexpr (sizeof(T) == 16) {
    uint4 v;
    memcpy(&v, &value, sizeof(T));
    detail::st_global_v4(ptr, v);
  } else {
    *ptr = value;
  }
}

// Plain load of `ptr`'s object in rank `from`'s heap.
template <typename T>
IRIS_DEVICE_INLINE T load(const DeviceContext& ctx, const T* ptr, int from) {
  return load(translate(ctx, ptr, from));
}

// Plain store into `ptr`'s object in rank `to`'s heap.
template <typename T>
IRIS_DEVICE_INLINE void store(const DeviceContext& ctx, T* ptr, const std::type_identity_t<T>& value, int to) {
  store(translate(ctx, ptr, to), value);
}

// ---- atomic loads and stores ---------------------------------------------------------------------

// Atomic load (ld.relaxed.<scope> or ld.acquire.<scope>) of a 4- or 8-byte word.
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T load(const T* ptr) {
  static_assert(detail::kIsAtomicWord<T>, "atomic loads take 4- or 8-byte integers or floats");
  static_assert(kOrder == Order::kRelaxed || kOrder == Order::kAcquire,
                "an atomic load is Order::kRelaxed or Order::kAcquire");
  cuda::atomic_ref<T, detail::kCudaScope<kScope>> ref(*const_cast<T*>(ptr));
  return ref.load(detail::kCudaOrder<kOrder>);
}

// Atomic store (st.relaxed.<scope> or st.release.<scope>) of a 4- or 8-byte word.
template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE void store(T* ptr, std::type_identity_t<T> value) {
  static_assert(detail::kIsAtomicWord<T>, "atomic stores take 4- or 8-byte integers or floats");
  static_assert(kOrder == Order::kRelaxed || kOrder == Order::kRelease,
                "an atomic store is Order::kRelaxed or Order::kRelease");
  cuda::atomic_ref<T, detail::kCudaScope<kScope>> ref(*ptr);
  ref.store(value, detail::kCudaOrder<kOrder>);
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE T load(const DeviceContext& ctx, const T* ptr, int from) {
  return load<kOrder, kScope>(translate(ctx, ptr, from));
}

template <Order kOrder, Scope kScope, typename T>
IRIS_DEVICE_INLINE void store(const DeviceContext& ctx, T* ptr, std::type_identity_t<T> value, int to) {
  store<kOrder, kScope>(translate(ctx, ptr, to), value);
}

// ld.acquire.sys: reads a flag another GPU (or the host) publishes with a system-scope release.
template <typename T>
IRIS_DEVICE_INLINE T load_acquire_sys(const T* ptr) {
  return load<Order::kAcquire, Scope::kSys>(ptr);
}
// st.release.sys: publishes everything this thread wrote (or observed) before it to any GPU and the host.
template <typename T>
IRIS_DEVICE_INLINE void store_release_sys(T* ptr, std::type_identity_t<T> value) {
  store<Order::kRelease, Scope::kSys>(ptr, value);
}

// ---- bulk copies ---------------------------------------------------------------------------------

// copy_*: `count` elements from src to dst, both used as given (local or already translated).
template <typename T>
IRIS_DEVICE_INLINE void copy_thread(T* dst, const T* src, size_t count) {
  detail::copy_group<ThisThread>(dst, src, count);
}
template <typename T>
IRIS_DEVICE_INLINE void copy_warp(T* dst, const T* src, size_t count) {
  detail::copy_group<ThisWarp>(dst, src, count);
}
template <typename T>
IRIS_DEVICE_INLINE void copy_block(T* dst, const T* src, size_t count) {
  detail::copy_group<ThisBlock>(dst, src, count);
}
template <typename T>
IRIS_DEVICE_INLINE void copy_grid(T* dst, const T* src, size_t count) {
  detail::copy_group<ThisGrid>(dst, src, count);
}

// put_*: `count` elements from src (this GPU's global memory) into `dst`'s object in rank `to`'s heap.
template <typename T>
IRIS_DEVICE_INLINE void put_thread(const DeviceContext& ctx, T* dst, const T* src, size_t count, int to) {
  copy_thread(detail::translate_range(ctx, dst, count, to), src, count);
}
template <typename T>
IRIS_DEVICE_INLINE void put_warp(const DeviceContext& ctx, T* dst, const T* src, size_t count, int to) {
  copy_warp(detail::translate_range(ctx, dst, count, to), src, count);
}
template <typename T>
IRIS_DEVICE_INLINE void put_block(const DeviceContext& ctx, T* dst, const T* src, size_t count, int to) {
  copy_block(detail::translate_range(ctx, dst, count, to), src, count);
}
template <typename T>
IRIS_DEVICE_INLINE void put_grid(const DeviceContext& ctx, T* dst, const T* src, size_t count, int to) {
  copy_grid(detail::translate_range(ctx, dst, count, to), src, count);
}

// get_*: `count` elements from `src`'s object in rank `from`'s heap into dst (this GPU's global memory).
template <typename T>
IRIS_DEVICE_INLINE void get_thread(const DeviceContext& ctx, T* dst, const T* src, size_t count, int from) {
  copy_thread(dst, detail::translate_range(ctx, src, count, from), count);
}
template <typename T>
IRIS_DEVICE_INLINE void get_warp(const DeviceContext& ctx, T* dst, const T* src, size_t count, int from) {
  copy_warp(dst, detail::translate_range(ctx, src, count, from), count);
}
template <typename T>
IRIS_DEVICE_INLINE void get_block(const DeviceContext& ctx, T* dst, const T* src, size_t count, int from) {
  copy_block(dst, detail::translate_range(ctx, src, count, from), count);
}
template <typename T>
IRIS_DEVICE_INLINE void get_grid(const DeviceContext& ctx, T* dst, const T* src, size_t count, int from) {
  copy_grid(dst, detail::translate_range(ctx, src, count, from), count);
}

// copy_* with ranks: `count` elements from `src`'s object in rank `from`'s heap into `dst`'s object
// in rank `to`'s heap (both pointers in this rank's heap; either rank may be this one or a peer).
template <typename T>
IRIS_DEVICE_INLINE void copy_thread(const DeviceContext& ctx, T* dst, int to, const T* src, int from, size_t count) {
  copy_thread(detail::translate_range(ctx, dst, count, to), detail::translate_range(ctx, src, count, from), count);
}
template <typename T>
IRIS_DEVICE_INLINE void copy_warp(const DeviceContext& ctx, T* dst, int to, const T* src, int from, size_t count) {
  copy_warp(detail::translate_range(ctx, dst, count, to), detail::translate_range(ctx, src, count, from), count);
}
template <typename T>
IRIS_DEVICE_INLINE void copy_block(const DeviceContext& ctx, T* dst, int to, const T* src, int from, size_t count) {
  copy_block(detail::translate_range(ctx, dst, count, to), detail::translate_range(ctx, src, count, from), count);
}
template <typename T>
IRIS_DEVICE_INLINE void copy_grid(const DeviceContext& ctx, T* dst, int to, const T* src, int from, size_t count) {
  copy_grid(detail::translate_range(ctx, dst, count, to), detail::translate_range(ctx, src, count, from), count);
}

}  // namespace iris::device

#if IRIS_DEVICE_CHECKS
#include "iris/device/timeout.cuh"  // translate_failed's definition (it records the error as a failed wait does)
#endif

#endif  // IRIS_DEVICE_COMPILE
