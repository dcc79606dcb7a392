// Helpers for the collective GPU tests: deterministic random inputs reproducible on the host, fp64
// references and the float reductions' bounds, poisoning, and cross-rank comparison of results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "iris/ccl/collectives.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/element.hpp"
#include "test_device_util.cuh"

namespace iris::test {

__host__ __device__ inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of rank `rank`'s input in call or replay k of the graph and back-to-back tests: an integer in
// [-5, 5], from a hash of all three, so that no element, rank or call repeats another's values in a pattern
// a stale or misplaced read could match (before 2026-12-05 the tests' values were periodic in i, k and
// rank, and some elements were 0 in every call). Exact in bf16, and so are its sums over up to 8 ranks.
__host__ __device__ inline int small_value(int rank, int k, int64_t i) {
  const uint64_t h = splitmix(splitmix(static_cast<uint64_t>(k) * 0x100000001b3ull + static_cast<uint64_t>(rank)) ^
                              static_cast<uint64_t>(i));
  return static_cast<int>(h % 11) - 5;
}

// Element i of rank r's input for draw `seed`, already rounded to the dtype, as a double.
// Floats: uniform in [-1, 1) (float8: in [-448, 448) and [-57344, 57344), most of each type's range, so
// every exponent bit moves); int32: integers in [-1000, 1000] but -1; int64: 53-bit integers of either sign, so
// all eight bytes move; uint8 and int8: any byte but 0xFF. No input is the poison, 0xFF bytes (int32's -1 was
// until 2026-12-06), so every element a call that moves data leaves unwritten is caught; float8 inputs are
// finite, and 0xFF is NaN in both float8 types.
inline double input_value(DType dt, uint64_t seed, int rank, int64_t i) {
  const uint64_t h = splitmix(splitmix(seed * 1315423911ull + static_cast<uint64_t>(rank)) ^ static_cast<uint64_t>(i));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  switch (dt) {
    case DType::kInt32: {
      const int64_t v = static_cast<int64_t>(h % 2000) - 1000;  // [-1000, 999]
      return static_cast<double>(v >= -1 ? v + 1 : v);          // [-1000, -2] and [0, 1000]
    }
    case DType::kInt64:
      return static_cast<double>(static_cast<int64_t>(h) >> 11);
    case DType::kFloat64:
      return 2 * u - 1;
    case DType::kUInt8:
      return static_cast<double>((h >> 8) % 255);
    case DType::kInt8:
      return static_cast<double>(static_cast<int8_t>(static_cast<uint8_t>((h >> 8) % 255)));
    case DType::kFloat8E4M3:
      return stored_value(dt, 448 * (2 * u - 1));
    case DType::kFloat8E5M2:
      return stored_value(dt, 57344 * (2 * u - 1));
    default:  // float32, float16, bfloat16
      return stored_value(dt, 2 * u - 1);
  }
}

// The float references' combine: sum and avg add (avg divides once, after), prod multiplies.
template <typename A>
A combine_ref(ccl::ReduceOp op, A a, A b) {
  switch (op) {
    case ccl::ReduceOp::kMax:
      return a > b ? a : b;
    case ccl::ReduceOp::kMin:
      return a < b ? a : b;
    case ccl::ReduceOp::kProd:
      return a * b;
    default:
      return a + b;
  }
}

// Element i of a float reduction over `world` ranks as a kernel that adds in rank order 0..W-1 computes it:
// accumulated in float32 (float64 for float64), avg divided once at the end (one IEEE division), rounded
// once to the dtype (to nearest even; float8 saturating, as the kernels' Elem<T>::from_acc). Every kernel
// accumulates so (src/ccl/ccl_common.cuh); only the order of the terms differs by variant.
inline double reduce_float_in_rank_order(DType dt, ccl::ReduceOp op, uint64_t seed, int world, int64_t i) {
  if (dt == DType::kFloat64) {
    double acc = input_value(dt, seed, 0, i);
    for (int r = 1; r < world; ++r) acc = combine_ref(op, acc, input_value(dt, seed, r, i));
    return op == ccl::ReduceOp::kAvg ? acc / world : acc;
  }
  float acc = static_cast<float>(input_value(dt, seed, 0, i));
  for (int r = 1; r < world; ++r) acc = combine_ref(op, acc, static_cast<float>(input_value(dt, seed, r, i)));
  if (op == ccl::ReduceOp::kAvg) acc /= static_cast<float>(world);
  return stored_value(dt, acc);
}

// Whether `got` is element i of a float all_reduce over `world` ranks; *want gets the value it is checked
// against. Where the order of the terms cannot change the float32 (float64) accumulator, with one or two
// ranks (a + b == b + a) or for min and max, got must be reduce_float_in_rank_order's value exactly: one
// rounding of the exact result, to nearest (the bounds before 2026-12-06, 8e-3 + 8e-3 |ref| for bfloat16 and
// one unit in the last place for float8, admitted a truncating conversion or a sum rounded twice, and
// bfloat16 elements below 8e-3 were not checked at all). With more ranks the order varies (the atomic
// variant adds in arrival order; ring and spinlock multiply in chain or arrival order): |got - x| <= u |x| +
// (W - 1) u_acc S (1 + u) + [avg] u_acc |x| + W 2^-53 S + floor, where x is the result computed in fp64 in rank
// order and clamped to the dtype's finite range (float8 saturates), u the dtype's unit roundoff, u_acc the
// accumulator's, S the sum of the terms' magnitudes (for prod, |x|; for avg, divided by W), the avg term the
// accumulator's division, the 2^-53 term x's own rounding in fp64 (a float64 product of three ranks is as
// far from exact as the kernel's; a reviewer's finding) and floor half the dtype's smallest subnormal for
// each rounding.
inline bool float_reduction_ok(DType dt, ccl::ReduceOp op, uint64_t seed, int world, int64_t i, double got,
                               double* want) {
  const bool order_free = world <= 2 || op == ccl::ReduceOp::kMin || op == ccl::ReduceOp::kMax;
  if (order_free) {
    *want = reduce_float_in_rank_order(dt, op, seed, world, i);
    return got == *want;  // NaN fails
  }
  double x = input_value(dt, seed, 0, i), sum_abs = std::fabs(x);
  for (int r = 1; r < world; ++r) {
    const double v = input_value(dt, seed, r, i);
    x = combine_ref(op, x, v);
    sum_abs += std::fabs(v);
  }
  if (op == ccl::ReduceOp::kAvg) x /= world, sum_abs /= world;
  if (op == ccl::ReduceOp::kProd) sum_abs = std::fabs(x);
  double u = 0x1.0p-24, floor = 0x1.0p-150, max = 0x1.fffffep127;
  switch (dt) {
    case DType::kFloat16:
      u = 0x1.0p-11, floor = 0x1.0p-25, max = 65504;
      break;
    case DType::kBFloat16:
      u = 0x1.0p-8, floor = 0x1.0p-134;
      break;
    case DType::kFloat8E4M3:
      u = 0x1.0p-4, floor = 0x1.0p-10, max = 448;
      break;
    case DType::kFloat8E5M2:
      u = 0x1.0p-3, floor = 0x1.0p-17, max = 57344;
      break;
    case DType::kFloat64:
      u = 0x1.0p-53, floor = 0x1.0p-1075, max = std::numeric_limits<double>::max();
      break;
    default:
      break;
  }
  const double u_acc = dt == DType::kFloat64 ? 0x1.0p-53 : 0x1.0p-24;
  *want = std::clamp(x, -max, max);
  const double bound = u * std::fabs(*want) + (world - 1) * u_acc * sum_abs * (1 + u) +
                       (op == ccl::ReduceOp::kAvg ? u_acc * std::fabs(x) : 0) + world * 0x1.0p-53 * sum_abs +
                       (world + 1) * floor;
  return std::fabs(got - *want) <= bound;  // NaN fails
}

inline bool is_integer(DType dt) {
  return dt == DType::kInt32 || dt == DType::kInt64 || dt == DType::kInt8 || dt == DType::kUInt8;
}

// x modulo 2^bits of the integer dtype, as that dtype's value (two's complement for the signed ones).
inline int64_t wrap_int(DType dt, uint64_t x) {
  switch (dt) {
    case DType::kInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(x));
    case DType::kInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(x));
    case DType::kUInt8:
      return static_cast<uint8_t>(x);
    default:
      return static_cast<int64_t>(x);
  }
}

// Element i of an integer reduction over `world` ranks, exactly, in the element type's arithmetic (as
// NCCL computes it): sums and products wrap modulo 2^bits, avg is the wrapped sum divided by the world
// size with truncation toward zero. (int64 inputs are 53-bit: a double would not hold their sums.)
inline int64_t reduce_int_ref(DType dt, ccl::ReduceOp op, uint64_t seed, int world, int64_t i) {
  auto value = [&](int r) { return static_cast<int64_t>(input_value(dt, seed, r, i)); };
  int64_t acc = value(0);
  for (int r = 1; r < world; ++r) {
    const int64_t v = value(r);
    switch (op) {
      case ccl::ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ccl::ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ccl::ReduceOp::kProd:
        acc = wrap_int(dt, static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
        break;
      default:
        acc = wrap_int(dt, static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
    }
  }
  return op == ccl::ReduceOp::kAvg ? acc / world : acc;
}

// The value of one element of an integer dtype.
inline int64_t decode_int(DType dt, const void* src) {
  uint64_t bits = 0;
  std::memcpy(&bits, src, dtype_size(dt));
  return wrap_int(dt, bits);
}

// A 2-D device tensor with a row stride, in the heap or in plain device memory.
struct TestTensor {
  Tensor view;
  size_t bytes = 0;
  bool on_heap = false;
  Context* ctx = nullptr;
  void* raw = nullptr;

  static TestTensor make(Context& ctx, DType dt, int64_t rows, int64_t cols, int64_t stride, bool on_heap) {
    TestTensor t;
    t.ctx = &ctx;
    t.on_heap = on_heap;
    t.bytes = static_cast<size_t>(std::max<int64_t>(1, rows * stride)) * dtype_size(dt);
    if (on_heap)
      t.raw = ctx.alloc(t.bytes);
    else
      IRIS_CUDA_CHECK(cudaMalloc(&t.raw, t.bytes));
    t.view = Tensor::matrix(t.raw, dt, rows, cols, stride);
    return t;
  }
  void release() {
    if (raw == nullptr) return;
    if (on_heap)
      ctx->free(raw);
    else
      cudaFree(raw);
    raw = nullptr;
  }
  // Fills every byte (padding between rows too) with `byte`, by default 0xFF: NaN for floats, -1 for the
  // signed integers (a value a sum can take: check_once poisons again with 0x00 for those).
  void poison(cudaStream_t s, unsigned char byte = 0xFF) {
    IRIS_CUDA_CHECK(cudaMemsetAsync(raw, byte, bytes, s));
    IRIS_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  void upload(cudaStream_t s, const std::vector<char>& host) {
    IRIS_CUDA_CHECK(cudaMemcpyAsync(raw, host.data(), host.size(), cudaMemcpyHostToDevice, s));
    IRIS_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::vector<char> download(cudaStream_t s) const {
    std::vector<char> host(bytes);
    IRIS_CUDA_CHECK(cudaMemcpyAsync(host.data(), raw, bytes, cudaMemcpyDeviceToHost, s));
    IRIS_CUDA_CHECK(cudaStreamSynchronize(s));
    return host;
  }
  // True when every byte still holds poison()'s default 0xFF: nothing was written since.
  bool still_poisoned(cudaStream_t s) const {
    const std::vector<char> host = download(s);
    return std::all_of(host.begin(), host.end(), [](char b) { return static_cast<unsigned char>(b) == 0xFF; });
  }
};

// Host image (rows x stride elements, padding poisoned) of rank r's input.
inline std::vector<char> make_input(DType dt, int64_t rows, int64_t cols, int64_t stride, uint64_t seed, int rank,
                                    int64_t row_offset = 0) {
  const size_t esz = dtype_size(dt);
  std::vector<char> host(static_cast<size_t>(std::max<int64_t>(1, rows * stride)) * esz, static_cast<char>(0xFF));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      encode_element(dt, input_value(dt, seed, rank, (r + row_offset) * cols + c),
                     host.data() + (r * stride + c) * esz);
  return host;
}

// Hash of the elements of a host image (padding excluded), to compare results across ranks bitwise.
inline uint64_t hash_elements(const std::vector<char>& host, DType dt, int64_t rows, int64_t cols, int64_t stride) {
  const size_t esz = dtype_size(dt);
  uint64_t h = 0x1234;
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t word = 0;
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&word, host.data() + (r * stride + c) * esz, esz);
      h = splitmix(h ^ word);
    }
  }
  return h;
}

inline const char* short_name(DType dt) {
  switch (dt) {
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat64:
      return "fp64";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kFloat8E4M3:
      return "fp8e4m3";
    case DType::kFloat8E5M2:
      return "fp8e5m2";
  }
  return "?";
}

}  // namespace iris::test
