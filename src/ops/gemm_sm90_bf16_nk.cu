// GEMM core instantiations: bfloat16 inputs, B stored N x K (column-major K x N).
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileLarge>;
template struct Sm90Gemm<DType::kBFloat16, DType::kFloat32, true, kTileLarge>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileSmall>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileSmallStreamK>;

}  // namespace iris::ops::detail
