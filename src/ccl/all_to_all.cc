// all_to_all entry points: validation, workspace needs, launch (kernel: all_to_all.cu).
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

using detail::align256;

constexpr const char* kOp = "all_to_all";
constexpr const char* kPreamble = "all_to_all_preamble";

struct Plan {
  OpSignature sig;
  WorkspaceNeeds needs;
  detail::CopyPlan chunks;
  int64_t block_rows = 0;
  int64_t slot = 0;  // elements
  int blocks = 1;
};

Plan make_plan(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config) {
  const int world = ctx.world_size();
  config.validate(world);
  detail::check_view(kOp, "input", in);
  detail::check_view(kOp, "output", out);
  IRIS_CHECK_ARG(in.dtype == out.dtype, kOp, ": input is ", dtype_name(in.dtype), " but output is ",
                 dtype_name(out.dtype), ".");
  IRIS_CHECK_ARG(in.rows == out.rows && in.cols == out.cols, kOp, ": input is ", in.rows, "x", in.cols,
                 " but output is ", out.rows, "x", out.cols, "; they must have the same shape.");
  IRIS_CHECK_ARG(in.rows % world == 0, kOp, ": ", in.rows, " rows do not split into ", world,
                 " equal blocks (one per rank).");
  IRIS_CHECK_ARG(!detail::overlaps(in, out), kOp, ": output and input overlap; pass separate buffers.");
  Plan p;
  p.sig = detail::collective_signature(OpKind::kAllToAll, in, world, config);
  const size_t esz = in.element_size();
  p.block_rows = in.rows / world;
  const int64_t numel = p.block_rows * in.cols;
  p.chunks = detail::plan_copy_chunks(numel, in.dtype);
  p.slot = static_cast<int64_t>(align256(static_cast<size_t>(numel) * esz) / esz);
  p.needs.block_state = detail::kCollectiveEpochWords;
  if (world > 1) {
    p.needs.staging_bytes = 2 * static_cast<size_t>(world - 1) * static_cast<size_t>(p.slot) * esz;
    p.needs.flags = 2 * static_cast<size_t>(world - 1) * static_cast<size_t>(p.chunks.nchunks);
  }
  p.blocks = detail::launch_blocks(ctx, config, p.chunks.nchunks);
  return p;
}

}  // namespace

void all_to_all_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(ctx, out, in, config); });
}

void all_to_all(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream) {
  const Plan p = make_plan(ctx, out, in, config);
  detail::require_op(kOp, kPreamble, ws, OpKind::kAllToAll);
  ws.check_capacity(p.needs);  // again, whether or not the preamble ran: never index past an array
  if (in.numel() == 0) return;
  detail::ExchangeArgs a{};
  a.ctx = ctx.device_context();
  a.in = in.data;
  a.out = out.data;
  a.cols = in.cols;
  a.in_stride = in.stride;
  a.out_stride = out.stride;
  a.block_rows = p.block_rows;
  a.numel = p.block_rows * in.cols;
  a.chunk = p.chunks.chunk;
  a.nchunks = p.chunks.nchunks;
  a.slot = p.slot;
  a.staging = ws.staging();
  a.flags = ws.flags();
  a.state = ws.block_state();
  a.vec = detail::vec_ok(in, p.block_rows) && detail::vec_ok(out, p.block_rows);
  detail::launch_all_to_all(a, in.dtype, p.blocks, detail::pick_stream(ctx, stream));
  IRIS_CUDA_CHECK_LAUNCH();
  ws.count_call();
}

}  // namespace iris::ccl
