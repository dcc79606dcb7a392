// reduce_scatter entry points: validation, workspace needs, launch (kernel: reduce_scatter.cu).
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

constexpr const char* kOp = "reduce_scatter";
constexpr const char* kPreamble = "reduce_scatter_preamble";

detail::ExchangePlan make_plan(const detail::PlanScope& s, const Tensor& out, const Tensor& in, const Config& config,
                               ReduceOp rop) {
  const int world = s.world;
  config.validate(world);
  detail::check_view(kOp, "input", in, s);
  detail::check_view(kOp, "output", out, s);
  detail::check_matching(kOp, out, in, /*same_shape=*/false);
  IRIS_CHECK_ARG(in.rows == world * out.rows && in.cols == out.cols, kOp, ": output is ", out.rows, "x", out.cols,
                 " on each of ", world, " ranks, so the input must be ", world * out.rows, "x", out.cols, ", got ",
                 in.rows, "x", in.cols, ".");
  IRIS_CHECK_ARG(valid_reduce_op(rop), kOp, ": unknown reduce op ", static_cast<int>(rop), ".");
  detail::rank_rows_in_place(kOp, s, in, "input", out, "output");
  return detail::plan_exchange(s, detail::collective_signature(OpKind::kReduceScatter, in, world, config, -1, rop),
                               out.rows, out.cols, in.dtype, config);
}

// The call's plan after every check of its arguments and workspace (reduce_scatter,
// check_reduce_scatter_call).
detail::ExchangePlan ready_plan(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                                const Workspace& ws, ReduceOp op) {
  detail::ExchangePlan plan = make_plan(detail::PlanScope::of(ctx), out, in, config, op);
  detail::require_ready(ctx, kOp, kPreamble, ws, OpKind::kReduceScatter, plan.needs);
  return plan;
}

}  // namespace

void reduce_scatter_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                             ReduceOp op) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(detail::PlanScope::of(ctx), out, in, config, op); });
}

WorkspaceNeeds reduce_scatter_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size,
                                    ReduceOp op) {
  return make_plan(detail::PlanScope::sizing("reduce_scatter_needs", world_size), out, in, config, op).needs;
}

void detail::check_reduce_scatter_call(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                                       const Workspace& ws, ReduceOp op) {
  ready_plan(ctx, out, in, config, ws, op);
}

void reduce_scatter(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                    cudaStream_t stream, ReduceOp op) {
  const iris::detail::DeviceGuard device(ctx.device());
  const detail::ExchangePlan p = detail::checked_call(
      ctx, ws,
      [&] {
        stream = ctx.op_stream(kOp, stream);
        return ready_plan(ctx, out, in, config, ws, op);
      },
      [](const detail::ExchangePlan& plan) -> const OpSignature& { return plan.sig; });
  if (out.numel() == 0) return;
  if (detail::single_rank_copy(ctx, out, in, ws, stream)) return;
  ws.begin_call(stream);
  if (p.ll) {
    detail::launch_ll(detail::ll_args(ctx, p.sig, in, out, p.block_rows, p.ll_words, ws),
                      detail::LLMode::kReduceScatter, in.dtype, op, {p.blocks, p.threads}, stream);
    IRIS_CUDA_CHECK_LAUNCH();
    ws.end_call(stream);
    return;
  }
  detail::ExchangeArgs a = detail::exchange_args(ctx, p, in, out, ws);
  a.vec = detail::vec_ok(in, out.rows) && detail::vec_ok(out, 0);
  detail::launch_reduce_scatter(a, in.dtype, op, p.blocks, stream);
  IRIS_CUDA_CHECK_LAUNCH();
  ws.end_call(stream);
}

}  // namespace iris::ccl
