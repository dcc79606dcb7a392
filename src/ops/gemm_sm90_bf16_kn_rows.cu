// GEMM core instantiations, the tiles of outputs of 16 and 32 rows (A and B swapped): bfloat16 inputs, B stored
// K x N (row-major), 16-bit and float32 outputs.
#include "ops/gemm_sm90_impl.hpp"

namespace iris::ops::detail {

template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, false, kTileRows16>;
template struct Sm90Gemm<DType::kBFloat16, DType::kFloat32, false, kTileRows16>;
template struct Sm90Gemm<DType::kBFloat16, DType::kBFloat16, false, kTileRows32>;
template struct Sm90Gemm<DType::kBFloat16, DType::kFloat32, false, kTileRows32>;

}  // namespace iris::ops::detail
