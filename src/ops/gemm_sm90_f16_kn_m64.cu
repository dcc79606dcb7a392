// GEMM core instantiations, the 64-row tiles: float16 inputs, B stored K x N (row-major).
// (A file of their own so that a parallel build compiles them beside the 128-row tiles.)
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kFloat16, DType::kFloat16, false, kTileSkinny>;
template struct Sm90Gemm<DType::kFloat16, DType::kFloat16, false, kTileTiny>;

}  // namespace iris::ops::detail
