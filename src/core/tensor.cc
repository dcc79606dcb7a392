#include "iris/core/tensor.hpp"

namespace iris {

std::string Tensor::problem(bool check_data) const {
  using detail::str_cat;
  if (dtype_size(dtype) == 0) return str_cat("has an unknown dtype (", static_cast<int>(dtype), ").");
  if (rows < 0 || cols < 0) return str_cat("has negative shape ", rows, "x", cols, ".");
  // An empty view too (its span is 0): its dimensions enter products (W x its rows, its tile count), which
  // stay in range below 2^48 each.
  if (static_cast<uint64_t>(rows) > kMaxSpanBytes || static_cast<uint64_t>(cols) > kMaxSpanBytes)
    return str_cat("has shape ", rows, "x", cols, ", a dimension past 2^48, more than a GPU can address.");
  if (rows > 1 && stride < cols) return str_cat("row stride ", stride, " is smaller than its ", cols, " columns.");
  if (rows > 0 && cols > 0) {
    // (rows - 1) * stride + cols elements, in bytes, without overflowing: each factor is below 2^63.
    const unsigned __int128 elements =
        static_cast<unsigned __int128>(rows - 1) * static_cast<uint64_t>(rows > 1 ? stride : 0) +
        static_cast<uint64_t>(cols);
    if (elements * dtype_size(dtype) > kMaxSpanBytes)
      return str_cat(describe(),
                     " spans more than 2^48 bytes, more than a GPU can address; its shape or row "
                     "stride is wrong.");
  }
  if (check_data && rows > 0 && cols > 0 && data == nullptr) return str_cat("is null but has ", numel(), " elements.");
  return "";
}

}  // namespace iris
