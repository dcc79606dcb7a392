// Non-owning 2-D tensor views passed at the op boundary: pointer, dtype tag, rows, cols, row stride
// (in elements). A 1-D buffer is one row. Type-erased here, typed inside kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "iris/core/error.hpp"

namespace iris {

// Element types. Every one moves through all_gather, all_to_all and broadcast, which copy bits: int64
// token ids and indices, uint8/int8 bytes, masks and quantized values, float8 (e4m3 and e5m2, PyTorch's
// float8_e4m3fn and float8_e5m2) FP8 weights and activations. Reductions (all_reduce, reduce_scatter)
// take every type too; the GEMM and the fused ops take float16 and bfloat16 inputs (float32 output too).
enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat64 = 5,
  kUInt8 = 6,
  kInt8 = 7,
  kFloat8E4M3 = 8,
  kFloat8E5M2 = 9,
};
inline constexpr DType kAllDTypes[] = {DType::kFloat32,    DType::kFloat16,   DType::kBFloat16, DType::kInt32,
                                       DType::kInt64,      DType::kFloat64,   DType::kUInt8,    DType::kInt8,
                                       DType::kFloat8E4M3, DType::kFloat8E5M2};

// Bytes per element; 0 for a value that is no DType.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kFloat64:
      return 8;
    case DType::kUInt8:
      return 1;
    case DType::kInt8:
      return 1;
    case DType::kFloat8E4M3:
      return 1;
    case DType::kFloat8E5M2:
      return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat64:
      return "float64";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kFloat8E4M3:
      return "float8_e4m3";
    case DType::kFloat8E5M2:
      return "float8_e5m2";
  }
  return "unknown";
}

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between the starts of consecutive rows (>= cols)

  // stride -1 (the default): contiguous rows. Any other stride is kept as given, a negative one too, so
  // that the op refuses it (problem()) rather than reading the rows as if they were contiguous.
  static Tensor matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t stride = -1) {
    return Tensor{data, dtype, rows, cols, stride == -1 ? cols : stride};
  }
  static Tensor vector(void* data, DType dtype, int64_t count) { return Tensor{data, dtype, 1, count, count}; }

  int64_t numel() const { return rows * cols; }
  size_t element_size() const { return dtype_size(dtype); }
  bool contiguous() const { return stride == cols || rows <= 1; }
  // Bytes from the first element to one past the last (what the view touches).
  size_t span_bytes() const {
    return rows <= 0 || cols <= 0 ? 0 : static_cast<size_t>((rows - 1) * stride + cols) * element_size();
  }
  // True when the spans of this view and `other` (span_bytes from data) share a byte; an empty view shares
  // none. Spans, not elements: the rows of two strided views that interleave without sharing an element
  // overlap here, and the ops that refuse overlapping buffers refuse them too.
  bool overlaps(const Tensor& other) const {
    if (numel() <= 0 || other.numel() <= 0) return false;
    const auto* a = static_cast<const char*>(data);
    const auto* b = static_cast<const char*>(other.data);
    return a < b + other.span_bytes() && b < a + span_bytes();
  }
  // True when both views are the same elements at the same addresses (a one-row view's stride is unused, so
  // it may differ).
  bool same_view(const Tensor& other) const {
    return data == other.data && dtype == other.dtype && rows == other.rows && cols == other.cols &&
           (stride == other.stride || rows <= 1);
  }
  // Why the view is malformed, as the rest of a sentence that starts with its name ("input has negative
  // shape -1x8."), or "" when it is well formed: an unknown dtype, a negative size, a row stride smaller
  // than its columns (with two rows or more), a span of more than kMaxSpanBytes (a wrong shape or stride:
  // no GPU addresses that much, and larger sizes would overflow the byte arithmetic of every op), and,
  // when `check_data`, null data with elements. Every op checks its views with it before anything else.
  std::string problem(bool check_data = true) const;
  static constexpr uint64_t kMaxSpanBytes = uint64_t{1} << 48;

  std::string describe() const {
    return detail::str_cat(rows, "x", cols, " ", dtype_name(dtype), (contiguous() ? "" : " (row stride "),
                           (contiguous() ? std::string() : std::to_string(stride) + ")"));
  }
};

}  // namespace iris
