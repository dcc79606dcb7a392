#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include <cuda_fp8.h>

#include "iris/core/cuda_check.hpp"
#include "iris/core/element.hpp"
#include "iris_bench_data.hpp"

namespace iris_bench {

namespace {

template <typename Word>
__global__ void fill_input_kernel(Word* dst, iris::DType t, size_t count, uint64_t seed, int rank) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = static_cast<Word>(encode_int(t, input_value(seed, rank, i)));
  }
}

// Calls f(Word{}) with the unsigned integer as wide as one element of t.
template <typename F>
void with_word(iris::DType t, F&& f) {
  switch (iris::dtype_size(t)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

}  // namespace

double decode_value(iris::DType t, uint64_t bits) {
  // The element is the low dtype_size(t) bytes of `bits` (little-endian, as the GPU and x86 store it).
  static_assert(std::endian::native == std::endian::little);
  return iris::decode_element(t, &bits);
}

void fill_input(void* dst, iris::DType t, size_t count, uint64_t seed, int rank, cudaStream_t stream) {
  if (count == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<size_t>((count + 255) / 256, 4096));
  with_word(t, [&](auto word) {
    using Word = decltype(word);
    fill_input_kernel<Word><<<blocks, 256, 0, stream>>>(static_cast<Word*>(dst), t, count, seed, rank);
  });
  IRIS_CUDA_CHECK_LAUNCH();
}

// The reduction over ranks of input element i, in the element type's arithmetic, as NCCL computes it. The
// float types hold every sum and product of input_value's small integers exactly; integer sums and
// products wrap modulo 2^bits (uint8 inputs are the bytes of -2..2, so 254 and 255 wrap at once); avg is
// the sum divided by W (integer types: the wrapped sum, truncated toward zero).
double reduced_at(const Expectation& e, size_t i) {
  const Problem& p = e.problem;
  const bool integer = p.dtype == iris::DType::kInt32 || p.dtype == iris::DType::kInt64 ||
                       p.dtype == iris::DType::kInt8 || p.dtype == iris::DType::kUInt8;
  const auto wrap = [&](uint64_t x) -> int64_t {
    switch (p.dtype) {
      case iris::DType::kInt32:
        return static_cast<int32_t>(static_cast<uint32_t>(x));
      case iris::DType::kInt8:
        return static_cast<int8_t>(static_cast<uint8_t>(x));
      case iris::DType::kUInt8:
        return static_cast<uint8_t>(x);
      default:
        return static_cast<int64_t>(x);  // int64, and the floats (whose values never come near 2^63)
    }
  };
  const auto value = [&](int r) {
    return wrap(static_cast<uint64_t>(static_cast<int64_t>(input_value(e.seed, r, i))));
  };
  int64_t acc = value(0);
  for (int r = 1; r < p.world; ++r) {
    const int64_t v = value(r);
    switch (p.redop) {
      case iris::ccl::ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case iris::ccl::ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case iris::ccl::ReduceOp::kProd:
        acc = wrap(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
        break;
      case iris::ccl::ReduceOp::kSum:
      case iris::ccl::ReduceOp::kAvg:
        acc = wrap(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
        break;
    }
  }
  if (p.redop != iris::ccl::ReduceOp::kAvg) return static_cast<double>(acc);
  return integer ? static_cast<double>(acc / p.world) : static_cast<double>(acc) / p.world;
}

namespace {

// Expected integer at output index k of a data movement op.
int expected_at(const Expectation& e, size_t k) {
  const Problem& p = e.problem;
  switch (p.op) {
    case Op::kAllReduce:
    case Op::kReduceScatter:
      break;  // reduced_at
    case Op::kAllGather:
      return input_value(e.seed, static_cast<int>(k / p.count), k % p.count);
    case Op::kAllToAll: {
      const size_t m = p.block_count();
      return input_value(e.seed, static_cast<int>(k / m), static_cast<size_t>(e.rank) * m + k % m);
    }
    case Op::kBroadcast:
      return input_value(e.seed, p.root, k);
  }
  return 0;
}

// Relative spacing of the dtype's values (2^-mantissa bits): avg of a float type is accepted within one unit
// in the last place, so both iris's rounding (the float sum divided by W) and NCCL's (each value multiplied by
// 1/W before the sum) pass; every other reduction is exact.
double avg_tolerance(iris::DType t) {
  switch (t) {
    case iris::DType::kBFloat16:
      return 0x1.0p-7;
    case iris::DType::kFloat16:
      return 0x1.0p-10;
    case iris::DType::kFloat32:
      return 0x1.0p-23;
    case iris::DType::kFloat64:
      return 0x1.0p-52;
    case iris::DType::kFloat8E4M3:
      return 0x1.0p-3;
    case iris::DType::kFloat8E5M2:
      return 0x1.0p-2;
    default:
      break;
  }
  return 0;
}

// The reduction as float8 stores it: rounded to nearest even, saturating at the largest finite value (the
// kernels round their float accumulator once, with CUDA's conversion). Sums of 9 or more ranks' -2..2
// are not all e5m2 values; the other types hold every result exactly.
double as_stored(iris::DType t, double v) {
  return t == iris::DType::kFloat8E4M3 || t == iris::DType::kFloat8E5M2 ? iris::stored_value(t, v) : v;
}

template <typename Word>
size_t count_wrong_chunk(const Word* host, size_t first, size_t n, const Expectation& e) {
  size_t wrong = 0;
  const Problem& p = e.problem;
  if (is_reduction(p.op)) {
    const double rel = p.redop == iris::ccl::ReduceOp::kAvg ? avg_tolerance(p.dtype) : 0;
    const size_t offset = p.op == Op::kReduceScatter ? static_cast<size_t>(e.rank) * p.block_count() : 0;
    for (size_t i = 0; i < n; ++i) {
      const double want = as_stored(p.dtype, reduced_at(e, offset + first + i));
      if (!(std::fabs(decode_value(p.dtype, host[i]) - want) <= rel * std::fabs(want))) ++wrong;  // NaN fails
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<uint64_t>(host[i]) != encode_int(e.problem.dtype, expected_at(e, first + i))) ++wrong;
    }
  }
  return wrong;
}

}  // namespace

size_t count_wrong(const void* out, const Expectation& e, cudaStream_t stream) {
  const size_t es = iris::dtype_size(e.problem.dtype);
  const size_t total = e.problem.out_count();
  const size_t chunk = std::max<size_t>(1, (size_t{64} << 20) / es);
  std::vector<unsigned char> host(std::min(total, chunk) * es);
  size_t wrong = 0;
  for (size_t first = 0; first < total; first += chunk) {
    const size_t n = std::min(chunk, total - first);
    IRIS_CUDA_CHECK(cudaMemcpyAsync(host.data(), static_cast<const unsigned char*>(out) + first * es, n * es,
                                    cudaMemcpyDeviceToHost, stream));
    IRIS_CUDA_CHECK(cudaStreamSynchronize(stream));
    with_word(e.problem.dtype, [&](auto word) {
      wrong += count_wrong_chunk(reinterpret_cast<const decltype(word)*>(host.data()), first, n, e);
    });
  }
  return wrong;
}

}  // namespace iris_bench
