// GEMM core instantiations with a source operand (C = A @ B + source) for the 128-row tiles' 16-bit
// output, beside their source-free kernels (gemm_sm90_kernel.hpp, kernel_reads_source, says why):
// bfloat16 inputs, B stored N x K (row-major).
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileLarge, true>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileSmall, true>;

}  // namespace iris::ops::detail
