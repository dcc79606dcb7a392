// Host conversions of one element (include/iris/core/tensor.hpp), with CUDA's own conversions, so that a host
// reference rounds as the kernels do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>
#include <limits>

#include "iris/core/element.hpp"

namespace iris {
namespace {

template <typename T>
void store(const T& x, void* dst) {
  std::memcpy(dst, &x, sizeof x);
}

template <typename T>
T load(const void* src) {
  T x;
  std::memcpy(&x, src, sizeof x);
  return x;
}

}  // namespace

void encode_element(DType t, double v, void* dst) {
  const auto f = static_cast<float>(v);
  switch (t) {
    case DType::kFloat32:
      return store(f, dst);
    case DType::kFloat16:
      return store(__float2half_rn(f), dst);
    case DType::kBFloat16:
      return store(__float2bfloat16_rn(f), dst);
    case DType::kInt32:
      return store(static_cast<int32_t>(v), dst);
    case DType::kInt64:
      return store(static_cast<int64_t>(v), dst);
    case DType::kFloat64:
      return store(v, dst);
    case DType::kUInt8:
      return store(static_cast<uint8_t>(v), dst);
    case DType::kInt8:
      return store(static_cast<int8_t>(v), dst);
    case DType::kFloat8E4M3:  // the float constructors saturate (__NV_SATFINITE)
      return store(__nv_fp8_e4m3(f), dst);
    case DType::kFloat8E5M2:
      return store(__nv_fp8_e5m2(f), dst);
  }
}

double decode_element(DType t, const void* src) {
  switch (t) {
    case DType::kFloat32:
      return load<float>(src);
    case DType::kFloat16:
      return __half2float(load<__half>(src));
    case DType::kBFloat16:
      return __bfloat162float(load<__nv_bfloat16>(src));
    case DType::kInt32:
      return load<int32_t>(src);
    case DType::kInt64:
      return static_cast<double>(load<int64_t>(src));
    case DType::kFloat64:
      return load<double>(src);
    case DType::kUInt8:
      return load<uint8_t>(src);
    case DType::kInt8:
      return load<int8_t>(src);
    case DType::kFloat8E4M3:
      return static_cast<float>(load<__nv_fp8_e4m3>(src));
    case DType::kFloat8E5M2:
      return static_cast<float>(load<__nv_fp8_e5m2>(src));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double stored_value(DType t, double v) {
  unsigned char bytes[8] = {};
  encode_element(t, v, bytes);
  return decode_element(t, bytes);
}

}  // namespace iris
