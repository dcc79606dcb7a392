// all_gather entry points: validation, workspace needs, launch (kernel: all_gather.cu).
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

using detail::align256;

constexpr const char* kOp = "all_gather";
constexpr const char* kPreamble = "all_gather_preamble";

struct Plan {
  OpSignature sig;
  WorkspaceNeeds needs;
  detail::CopyPlan chunks;
  int64_t slot = 0;  // elements
  bool in_place = false;
  int blocks = 1;
};

Plan make_plan(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config) {
  const int world = ctx.world_size();
  config.validate(world);
  detail::check_view(kOp, "input", in);
  detail::check_view(kOp, "output", out);
  IRIS_CHECK_ARG(in.dtype == out.dtype, kOp, ": input is ", dtype_name(in.dtype), " but output is ",
                 dtype_name(out.dtype), ".");
  IRIS_CHECK_ARG(out.rows == world * in.rows && out.cols == in.cols, kOp, ": input is ", in.rows, "x", in.cols,
                 " on each of ", world, " ranks, so the output must be ", world * in.rows, "x", in.cols, ", got ",
                 out.rows, "x", out.cols, ".");
  Plan p;
  p.in_place = in.numel() > 0 && detail::same_view(in, detail::row_block(out, ctx.rank() * in.rows, in.rows));
  IRIS_CHECK_ARG(p.in_place || !detail::overlaps(in, out), kOp,
                 ": input overlaps the output without being the output's rows of this rank (", ctx.rank() * in.rows,
                 " to ", (ctx.rank() + 1) * in.rows, "); pass separate buffers, or exactly those rows for in-place.");
  p.sig = detail::collective_signature(OpKind::kAllGather, in, world, config);
  const size_t esz = in.element_size();
  p.chunks = detail::plan_copy_chunks(in.numel(), in.dtype);
  p.slot = static_cast<int64_t>(align256(static_cast<size_t>(in.numel()) * esz) / esz);
  p.needs.block_state = detail::kCollectiveEpochWords;
  if (world > 1) {
    p.needs.staging_bytes = 2 * static_cast<size_t>(world - 1) * static_cast<size_t>(p.slot) * esz;
    p.needs.flags = 2 * static_cast<size_t>(world - 1) * static_cast<size_t>(p.chunks.nchunks);
  }
  p.blocks = detail::launch_blocks(ctx, config, p.chunks.nchunks);
  return p;
}

}  // namespace

void all_gather_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(ctx, out, in, config); });
}

void all_gather(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream) {
  const Plan p = make_plan(ctx, out, in, config);
  detail::require_op(kOp, kPreamble, ws, OpKind::kAllGather);
  ws.check_capacity(p.needs);  // again, whether or not the preamble ran: never index past an array
  if (in.numel() == 0) return;
  detail::ExchangeArgs a{};
  a.ctx = ctx.device_context();
  a.in = in.data;
  a.out = out.data;
  a.cols = in.cols;
  a.in_stride = in.stride;
  a.out_stride = out.stride;
  a.block_rows = in.rows;
  a.numel = in.numel();
  a.chunk = p.chunks.chunk;
  a.nchunks = p.chunks.nchunks;
  a.slot = p.slot;
  a.staging = ws.staging();
  a.flags = ws.flags();
  a.state = ws.block_state();
  a.vec = detail::vec_ok(in, 0) && detail::vec_ok(out, in.rows);
  a.in_place = p.in_place;
  detail::launch_all_gather(a, in.dtype, p.blocks, detail::pick_stream(ctx, stream));
  IRIS_CUDA_CHECK_LAUNCH();
  ws.count_call();
}

}  // namespace iris::ccl
