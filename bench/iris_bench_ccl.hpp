// iris-bench: a Problem (iris_bench_options.hpp) as iris::ccl tensors, and the iris::ccl preamble and call
// for it. The collective tables time these; without NCCL the fused tables' reference runs them too.
#pragma once

#include <cuda_runtime_api.h>

#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/tensor.hpp"
#include "iris_bench_options.hpp"

namespace iris_bench {

// The input and output as the sizes of Problem say: one row per rank block where there are blocks
// (reduce_scatter's and all_to_all's input, all_gather's and all_to_all's output), one row otherwise.
iris::Tensor input_tensor(const Problem& p, void* data);
iris::Tensor output_tensor(const Problem& p, void* data);

// The op's iris::ccl preamble (collective) and call.
void iris_preamble(iris::Context& ctx, const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
                   const iris::ccl::Config& cfg, iris::ccl::Workspace& ws);
void iris_call(iris::Context& ctx, const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
               const iris::ccl::Config& cfg, iris::ccl::Workspace& ws, cudaStream_t stream);
// What the preamble allocates for it (iris::ccl's *_needs on p.world ranks; the views' data may be null).
iris::ccl::WorkspaceNeeds iris_needs(const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
                                     const iris::ccl::Config& cfg);

}  // namespace iris_bench
