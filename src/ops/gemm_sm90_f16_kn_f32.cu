// GEMM core instantiations, float32 outputs of the 128x128 and 64-row tiles:
// float16 inputs, B stored K x N (row-major).
// (A file of their own so that a parallel build compiles them beside the others.)
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kFloat16, DType::kFloat32, false, kTileSmall>;
template struct Sm90Gemm<DType::kFloat16, DType::kFloat32, false, kTileSkinny>;
template struct Sm90Gemm<DType::kFloat16, DType::kFloat32, false, kTileTiny>;

}  // namespace iris::ops::detail
