// Operand rules shared by the GEMM core and the fused ops (whose GEMMs run on it), with the op's name
// in every message. Pure: no CUDA calls, so host tests pin the messages.
#pragma once

#include <string>

#include "iris/core/tensor.hpp"
#include "iris/ops/gemm.hpp"

namespace iris::ops::detail {

// Empty when a (M x K) and b (K x N, or N x K when b_is_nk) can be multiplied by the GEMM core into c:
// types (A and B both bfloat16 or both float16, C of A's type or float32), views (shape, stride, null
// data), B's K against A's, c's N columns, K and N multiples of 8, 16-byte aligned data, row strides
// and bias, and c overlapping neither input. c's rows are the caller's to check (they depend on the op).
// Otherwise the reason, starting with "<op>: ".
// k_shards > 1: a is this rank's block of columns of an A sharded on K over k_shards ranks (the GEMM
// multiplies the gathered M x k_shards*K), so B's K must be k_shards times a's columns.
std::string check_matmul_operands(const char* op, const Tensor& a, const Tensor& b, bool b_is_nk, const Tensor& c,
                                  const void* bias, int64_t k_shards = 1);

// Empty when a workspace of `have` bytes at `workspace` (null or not) holds the `need` bytes a GEMM's plan
// needs; otherwise gemm()'s refusal (the text of its iris::WorkspaceTooSmall).
std::string check_gemm_workspace(size_t need, const void* workspace, size_t have);

// Empty when the `need` bytes at `workspace` that g's plan uses (split-K's float32 partials, stream-K's
// fixup) share no byte with A, B, C, the bias or the source; otherwise gemm()'s refusal. The GEMM writes
// the workspace while it reads its operands, so an overlap would be a wrong result without an error.
std::string check_gemm_workspace_apart(const GemmArguments& g, const void* workspace, size_t need);

}  // namespace iris::ops::detail
