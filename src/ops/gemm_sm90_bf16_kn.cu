// GEMM core instantiations: bfloat16 inputs, B stored K x N (row-major).
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, false, kTileLarge>;
template struct Sm90Gemm<DType::kBFloat16, DType::kFloat32, false, kTileLarge>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, false, kTileSmall>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, false, kTileSmallStreamK>;

}  // namespace iris::ops::detail
