// GEMM core instantiations, the 64-row tiles: bfloat16 inputs, B stored N x K (column-major K x N).
// (A file of their own so that a parallel build compiles them beside the 128-row tiles.)
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileSkinny>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, true, kTileTiny>;

}  // namespace iris::ops::detail
