#include "iris_bench_ccl.hpp"

#include "iris/ccl/collectives.hpp"

namespace iris_bench {

iris::Tensor input_tensor(const Problem& p, void* data) {
  if (p.op == Op::kReduceScatter || p.op == Op::kAllToAll) {
    return iris::Tensor::matrix(data, p.dtype, p.world, static_cast<int64_t>(p.block_count()));
  }
  return iris::Tensor::vector(data, p.dtype, static_cast<int64_t>(p.count));
}

iris::Tensor output_tensor(const Problem& p, void* data) {
  switch (p.op) {
    case Op::kAllGather:
      return iris::Tensor::matrix(data, p.dtype, p.world, static_cast<int64_t>(p.count));
    case Op::kReduceScatter:
      return iris::Tensor::vector(data, p.dtype, static_cast<int64_t>(p.block_count()));
    case Op::kAllToAll:
      return iris::Tensor::matrix(data, p.dtype, p.world, static_cast<int64_t>(p.block_count()));
    default:
      return iris::Tensor::vector(data, p.dtype, static_cast<int64_t>(p.count));
  }
}

void iris_preamble(iris::Context& ctx, const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
                   const iris::ccl::Config& cfg, iris::ccl::Workspace& ws) {
  switch (p.op) {
    case Op::kAllReduce:
      iris::ccl::all_reduce_preamble(ctx, out, in, cfg, ws, p.redop);
      break;
    case Op::kAllGather:
      iris::ccl::all_gather_preamble(ctx, out, in, cfg, ws);
      break;
    case Op::kReduceScatter:
      iris::ccl::reduce_scatter_preamble(ctx, out, in, cfg, ws, p.redop);
      break;
    case Op::kAllToAll:
      iris::ccl::all_to_all_preamble(ctx, out, in, cfg, ws);
      break;
    case Op::kBroadcast:
      iris::ccl::broadcast_preamble(ctx, out, in, p.root, cfg, ws);
      break;
  }
}

void iris_call(iris::Context& ctx, const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
               const iris::ccl::Config& cfg, iris::ccl::Workspace& ws, cudaStream_t stream) {
  switch (p.op) {
    case Op::kAllReduce:
      iris::ccl::all_reduce(ctx, out, in, cfg, ws, stream, p.redop);
      break;
    case Op::kAllGather:
      iris::ccl::all_gather(ctx, out, in, cfg, ws, stream);
      break;
    case Op::kReduceScatter:
      iris::ccl::reduce_scatter(ctx, out, in, cfg, ws, stream, p.redop);
      break;
    case Op::kAllToAll:
      iris::ccl::all_to_all(ctx, out, in, cfg, ws, stream);
      break;
    case Op::kBroadcast:
      iris::ccl::broadcast(ctx, out, in, p.root, cfg, ws, stream);
      break;
  }
}

iris::ccl::WorkspaceNeeds iris_needs(const Problem& p, const iris::Tensor& out, const iris::Tensor& in,
                                     const iris::ccl::Config& cfg) {
  switch (p.op) {
    case Op::kAllReduce:
      return iris::ccl::all_reduce_needs(out, in, cfg, p.world, p.redop);
    case Op::kAllGather:
      return iris::ccl::all_gather_needs(out, in, cfg, p.world);
    case Op::kReduceScatter:
      return iris::ccl::reduce_scatter_needs(out, in, cfg, p.world, p.redop);
    case Op::kAllToAll:
      return iris::ccl::all_to_all_needs(out, in, cfg, p.world);
    case Op::kBroadcast:
      break;
  }
  return iris::ccl::broadcast_needs(out, in, p.root, cfg, p.world);
}

}  // namespace iris_bench
