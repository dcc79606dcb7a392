// iris-bench: inputs whose collectives have exactly predictable results, and the check against them.
//
// Rank r's input element i is a small integer v(seed, r, i) in {-2, ..., 2}, stored in the tensor's
// dtype (exact in every one: the float8 types too; uint8 stores v's int8 bits). Every partial sum of W such
// values is an integer of magnitude <= 2W, exact in bfloat16 (W <= 128), in e4m3 (W <= 8) and in every wider
// type, whatever the reduction order, so the host reference is exact (float8: rounded once, as the kernels
// store it): reductions are compared by value (avg of a float type, sum / W, within one unit in the last
// place of the dtype), data movement (all_gather, all_to_all, broadcast) by bit pattern.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "iris/core/tensor.hpp"
#include "iris_bench_options.hpp"

#ifdef __CUDACC__
#define IRIS_BENCH_HD __host__ __device__
#else
#define IRIS_BENCH_HD
#endif

namespace iris_bench {

IRIS_BENCH_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank `rank`'s input element `i` for `seed`: an integer in {-2, ..., 2}.
IRIS_BENCH_HD inline int input_value(uint64_t seed, int rank, uint64_t i) {
  uint64_t h = mix64(mix64(seed ^ (static_cast<uint64_t>(rank) << 48)) ^ i);
  return static_cast<int>(h % 5) - 2;
}

// Bit pattern of the integer v in dtype t, in the low bits: |v| <= 256 for the 16- and 32-bit types, int64
// and float64; |v| <= 2 for the 8-bit ones (all that input_value gives).
IRIS_BENCH_HD inline uint64_t encode_int(iris::DType t, int v) {
  switch (t) {
    case iris::DType::kInt32:
      return static_cast<uint32_t>(v);
    case iris::DType::kInt64:
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    case iris::DType::kUInt8:
    case iris::DType::kInt8:
      return static_cast<uint8_t>(static_cast<int8_t>(v));
    case iris::DType::kFloat64: {
      const double d = static_cast<double>(v);
      uint64_t bits;
#ifdef __CUDA_ARCH__
      bits = static_cast<uint64_t>(__double_as_longlong(d));
#else
      std::memcpy(&bits, &d, sizeof bits);
#endif
      return bits;
    }
    default:
      break;
  }
  float f = static_cast<float>(v);
  uint32_t bits;
#ifdef __CUDA_ARCH__
  bits = __float_as_uint(f);
#else
  std::memcpy(&bits, &f, sizeof bits);
#endif
  if (t == iris::DType::kFloat32) return bits;
  if (t == iris::DType::kBFloat16) return bits >> 16;  // small integers have no bits below the top 8 of the mantissa
  // float16 and float8: re-bias the exponent, keep the top mantissa bits; v == 0 -> +0.
  if (v == 0) return 0;
  const uint32_t sign = (bits >> 31) & 1u;
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
  const uint32_t mantissa = bits & 0x7fffffu;
  switch (t) {
    case iris::DType::kFloat8E4M3:  // bias 7, 3 mantissa bits
      return (sign << 7) | (static_cast<uint32_t>(exponent + 7) << 3) | (mantissa >> 20);
    case iris::DType::kFloat8E5M2:  // bias 15, 2 mantissa bits
      return (sign << 7) | (static_cast<uint32_t>(exponent + 15) << 2) | (mantissa >> 21);
    default:  // float16: bias 15, 10 mantissa bits
      return (sign << 15) | (static_cast<uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
  }
}

// The byte every output is filled with before a checked call, so an element the call never writes is
// counted wrong: it must be no value a check accepts. 0x7F for the wider types (bf16/fp32 ~3.4e38, fp16
// NaN, int32 2139062143, int64 and fp64 as large); for the 1-byte types 0x5B, because uint8 avg of two
// ranks can be 127 (the bytes 255 + 255 wrap to 254): 91 is odd (no product of -2..2), above every
// int8 result and every sum's wrap for fewer than 46 ranks, and no uint8 average; in float8 it is 22
// (e4m3) and 224 (e5m2), far from every result at up to 8 ranks (tested).
inline int poison_byte(iris::DType t) { return iris::dtype_size(t) == 1 ? 0x5B : 0x7F; }

// Value of a stored element (bits in the low 8, 16, 32 or 64 bits) as a double (NaN for NaN patterns).
double decode_value(iris::DType t, uint64_t bits);

// Fills `count` elements of rank `rank`'s input with input_value(seed, rank, i), on `stream` (asynchronous).
void fill_input(void* dst, iris::DType t, size_t count, uint64_t seed, int rank, cudaStream_t stream);

// What rank `rank`'s output of `problem` must hold (sizes in elements, n = problem.count, m = n / world):
//   all_reduce      out[i]         = op_r v(r, i)          (op: problem.redop)
//   all_gather      out[r*n + i]   = v(r, i)
//   reduce_scatter  out[i]         = op_r v(r, rank*m + i)
//   all_to_all      out[j*m + i]   = v(j, rank*m + i)
//   broadcast       out[i]         = v(root, i)
struct Expectation {
  Problem problem;
  uint64_t seed = 0;
  int rank = 0;
};

// The reduction over ranks of input element i (all_reduce's element i; reduce_scatter's input element i), as
// NCCL computes it in the element type: integer sums and products wrap modulo 2^bits, avg divides the
// (wrapped) sum by the world size, truncating integers toward zero.
double reduced_at(const Expectation& e, size_t i);

// Copies the `e.problem.out_count()` elements at device pointer `out` to the host in chunks (synchronizing `stream`)
// and returns how many differ from the expectation.
size_t count_wrong(const void* out, const Expectation& e, cudaStream_t stream);

}  // namespace iris_bench
