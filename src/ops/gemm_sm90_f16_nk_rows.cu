// GEMM core instantiations, the tiles of outputs of 16 and 32 rows (A and B swapped): float16 inputs, B stored
// N x K (row-major), 16-bit and float32 outputs.
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kFloat16, DType::kFloat16, true, kTileRows16>;
template struct Sm90Gemm<DType::kFloat16, DType::kFloat32, true, kTileRows16>;
template struct Sm90Gemm<DType::kFloat16, DType::kFloat16, true, kTileRows32>;
template struct Sm90Gemm<DType::kFloat16, DType::kFloat32, true, kTileRows32>;

}  // namespace iris::ops::detail
