// all_gather entry points: validation, workspace needs, launch (kernel: all_gather.cu).
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

constexpr const char* kOp = "all_gather";
constexpr const char* kPreamble = "all_gather_preamble";

struct Plan {
  detail::ExchangePlan x;
  bool in_place = false;
};

Plan make_plan(const detail::PlanScope& s, const Tensor& out, const Tensor& in, const Config& config) {
  const int world = s.world;
  config.validate(world);
  detail::check_view(kOp, "input", in, s);
  detail::check_view(kOp, "output", out, s);
  detail::check_matching(kOp, out, in, /*same_shape=*/false);
  IRIS_CHECK_ARG(out.rows == world * in.rows && out.cols == in.cols, kOp, ": input is ", in.rows, "x", in.cols,
                 " on each of ", world, " ranks, so the output must be ", world * in.rows, "x", in.cols, ", got ",
                 out.rows, "x", out.cols, ".");
  Plan p;
  p.in_place = detail::rank_rows_in_place(kOp, s, out, "output", in, "input");
  p.x = detail::plan_exchange(s, detail::collective_signature(OpKind::kAllGather, in, world, config), in.rows, in.cols,
                              in.dtype, config);
  return p;
}

// The call's plan after every check of its arguments and workspace (all_gather, check_all_gather_call).
Plan ready_plan(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config, const Workspace& ws) {
  Plan plan = make_plan(detail::PlanScope::of(ctx), out, in, config);
  detail::require_ready(ctx, kOp, kPreamble, ws, OpKind::kAllGather, plan.x.needs);
  return plan;
}

}  // namespace

void all_gather_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(detail::PlanScope::of(ctx), out, in, config).x; });
}

WorkspaceNeeds all_gather_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size) {
  return make_plan(detail::PlanScope::sizing("all_gather_needs", world_size), out, in, config).x.needs;
}

void detail::check_all_gather_call(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                                   const Workspace& ws) {
  ready_plan(ctx, out, in, config, ws);
}

void all_gather(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream) {
  const iris::detail::DeviceGuard device(ctx.device());
  const Plan p = detail::checked_call(
      ctx, ws,
      [&] {
        stream = ctx.op_stream(kOp, stream);
        return ready_plan(ctx, out, in, config, ws);
      },
      [](const Plan& plan) -> const OpSignature& { return plan.x.sig; });
  if (in.numel() == 0) return;
  if (detail::single_rank_copy(ctx, out, in, ws, stream)) return;
  ws.begin_call(stream);
  if (p.x.ll) {
    detail::launch_ll(detail::ll_args(ctx, p.x.sig, in, out, p.x.block_rows, p.x.ll_words, ws, p.in_place),
                      detail::LLMode::kAllGather, in.dtype, ReduceOp::kSum, {p.x.blocks, p.x.threads}, stream);
    IRIS_CUDA_CHECK_LAUNCH();
    ws.end_call(stream);
    return;
  }
  detail::ExchangeArgs a = detail::exchange_args(ctx, p.x, in, out, ws);
  a.vec = detail::vec_ok(in, 0) && detail::vec_ok(out, in.rows);
  a.in_place = p.in_place;
  detail::launch_all_gather(a, in.dtype, p.x.blocks, stream);
  IRIS_CUDA_CHECK_LAUNCH();
  ws.end_call(stream);
}

}  // namespace iris::ccl
