// Host tests of one element's conversions (encode_element, decode_element, stored_value in
// include/iris/core/tensor.hpp), which every GPU test's reference and iris-bench's checks round with: each bit
// pattern of the narrow floats, rounding to nearest even through float32 as the kernels round, float8's
// saturation, and the integer types. No GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "iris/core/element.hpp"

namespace iris {
namespace {

template <typename Bits>
Bits encoded(DType t, double v) {
  Bits b{};
  encode_element(t, v, &b);
  return b;
}

// Every pattern of a 1- or 2-byte float type decodes to CUDA's value of it, and each that is not NaN (and,
// for float8, not an infinity, which the saturating conversion stores as the largest finite value) encodes
// back to the same bits.
template <typename Bits, typename Cuda>
void every_pattern_round_trips(DType t) {
  SCOPED_TRACE(dtype_name(t));
  int checked = 0;
  for (uint32_t i = 0; i <= std::numeric_limits<Bits>::max(); ++i) {
    const auto bits = static_cast<Bits>(i);
    Cuda x;
    std::memcpy(&x, &bits, sizeof bits);
    const double cuda = static_cast<float>(x);
    const double ours = decode_element(t, &bits);
    if (std::isnan(cuda)) {
      EXPECT_TRUE(std::isnan(ours)) << "pattern " << i;
      continue;
    }
    EXPECT_EQ(ours, cuda) << "pattern " << i;
    if (sizeof(Bits) == 1 && std::isinf(cuda)) continue;
    EXPECT_EQ(encoded<Bits>(t, ours), bits) << "pattern " << i;
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

TEST(Element, EveryNarrowFloatPatternDecodesAsCudaDoesAndEncodesBack) {
  every_pattern_round_trips<uint16_t, __half>(DType::kFloat16);
  every_pattern_round_trips<uint16_t, __nv_bfloat16>(DType::kBFloat16);
  every_pattern_round_trips<uint8_t, __nv_fp8_e4m3>(DType::kFloat8E4M3);
  every_pattern_round_trips<uint8_t, __nv_fp8_e5m2>(DType::kFloat8E5M2);
}

TEST(Element, FloatsRoundToNearestEvenThroughFloat32AsTheKernelsDo) {
  // bfloat16 keeps 7 mantissa bits: halfway cases go to the even neighbour.
  EXPECT_EQ(stored_value(DType::kBFloat16, 1 + 0x1.0p-8), 1.0);
  EXPECT_EQ(stored_value(DType::kBFloat16, 1 + 3 * 0x1.0p-8), 1 + 0x1.0p-6);
  // float16 keeps 10.
  EXPECT_EQ(stored_value(DType::kFloat16, 1 + 0x1.0p-11), 1.0);
  EXPECT_EQ(stored_value(DType::kFloat16, 1 + 3 * 0x1.0p-11), 1 + 0x1.0p-9);
  // Just above halfway, but within float32's rounding: float32 first takes it to the halfway point (as a
  // kernel's float32 accumulator would hold it), which then goes to even. Rounded once from the double it
  // would go up.
  EXPECT_EQ(stored_value(DType::kBFloat16, 1 + 0x1.0p-8 + 0x1.0p-40), 1.0);
  EXPECT_EQ(stored_value(DType::kFloat32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(stored_value(DType::kFloat64, 0.1), 0.1);
  EXPECT_EQ(encoded<uint64_t>(DType::kFloat64, -2.5), 0xC004000000000000ull);
  EXPECT_EQ(encoded<uint16_t>(DType::kBFloat16, -2.5), 0xC020);
  EXPECT_EQ(encoded<uint16_t>(DType::kFloat16, 65504), 0x7BFF);
  EXPECT_TRUE(std::isinf(stored_value(DType::kFloat16, 1e6))) << "float16 overflows to infinity, as CUDA's does";
}

TEST(Element, Float8SaturatesAtItsLargestFiniteValue) {
  EXPECT_EQ(stored_value(DType::kFloat8E4M3, 1000), 448.0);
  EXPECT_EQ(stored_value(DType::kFloat8E4M3, -1000), -448.0);
  EXPECT_EQ(stored_value(DType::kFloat8E4M3, 300 + 300), 448.0) << "a sum of 300 and 300 is stored as 448";
  EXPECT_EQ(stored_value(DType::kFloat8E5M2, 1e6), 57344.0);
  EXPECT_EQ(stored_value(DType::kFloat8E5M2, -1e6), -57344.0);
  EXPECT_EQ(encoded<uint8_t>(DType::kFloat8E4M3, 448), 0x7E);
  EXPECT_EQ(encoded<uint8_t>(DType::kFloat8E5M2, 57344), 0x7B);
  EXPECT_EQ(stored_value(DType::kFloat8E4M3, 0x1.0p-9), 0x1.0p-9) << "the smallest subnormal";
}

TEST(Element, IntegersConvertAsStaticCastDoes) {
  EXPECT_EQ(encoded<uint32_t>(DType::kInt32, -1), 0xFFFFFFFFu);
  EXPECT_EQ(stored_value(DType::kInt32, -7), -7.0);
  EXPECT_EQ(stored_value(DType::kInt32, 2.9), 2.0) << "toward zero";
  EXPECT_EQ(stored_value(DType::kInt64, 0x1.0p53), 0x1.0p53);
  EXPECT_EQ(encoded<uint64_t>(DType::kInt64, -2), 0xFFFFFFFFFFFFFFFEull);
  EXPECT_EQ(stored_value(DType::kUInt8, 255), 255.0);
  EXPECT_EQ(stored_value(DType::kInt8, -128), -128.0);
  EXPECT_EQ(encoded<uint8_t>(DType::kInt8, -2), 0xFE);
}

TEST(Element, AnUnknownDtypeStoresNothingAndReadsAsNaN) {
  const auto unknown = static_cast<DType>(200);
  uint64_t bytes = 0x0123456789ABCDEFull;
  encode_element(unknown, 1.0, &bytes);
  EXPECT_EQ(bytes, 0x0123456789ABCDEFull);
  EXPECT_TRUE(std::isnan(decode_element(unknown, &bytes)));
  EXPECT_TRUE(std::isnan(stored_value(unknown, 1.0)));
}

}  // namespace
}  // namespace iris
