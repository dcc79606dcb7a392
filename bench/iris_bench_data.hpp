// iris-bench: inputs whose collectives have exactly predictable results, and the check against them.
//
// Rank r's input element i is a small integer v(seed, r, i) in {-2, ..., 2}, stored in the tensor's
// dtype. Every partial sum of W such values is an integer of magnitude <= 2W, exact in bfloat16 (W <= 128),
// float16, float32 and int32 whatever the reduction order, so the host reference is exact: reductions are
// compared by value (avg of a float type, sum / W, within one unit in the last place of the dtype), data
// movement (all_gather, all_to_all, broadcast) by bit pattern.
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

// Bit pattern of the integer v (|v| <= 256, exact in every dtype) in dtype t, in the low bits.
IRIS_BENCH_HD inline uint32_t encode_int(iris::DType t, int v) {
  if (t == iris::DType::kInt32) return static_cast<uint32_t>(v);
  float f = static_cast<float>(v);
  uint32_t bits;
#ifdef __CUDA_ARCH__
  bits = __float_as_uint(f);
#else
  std::memcpy(&bits, &f, sizeof bits);
#endif
  if (t == iris::DType::kFloat32) return bits;
  if (t == iris::DType::kBFloat16) return bits >> 16;  // small integers have no bits below the top 8 of the mantissa
  // float16: re-bias the exponent (15 instead of 127), keep the top 10 mantissa bits; v == 0 -> +0.
  if (v == 0) return 0;
  uint32_t sign = (bits >> 31) & 1u;
  int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = (bits >> 13) & 0x3ffu;
  return (sign << 15) | (static_cast<uint32_t>(exponent) << 10) | mantissa;
}

// Value of a stored element (bits in the low 16 or 32 bits) as a double (NaN for NaN patterns).
double decode_value(iris::DType t, uint32_t bits);

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

// Copies the `e.problem.out_count()` elements at device pointer `out` to the host in chunks (synchronizing `stream`)
// and returns how many differ from the expectation.
size_t count_wrong(const void* out, const Expectation& e, cudaStream_t stream);

}  // namespace iris_bench
