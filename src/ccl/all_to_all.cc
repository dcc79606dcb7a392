// all_to_all entry points: validation, workspace needs, launch (kernel: all_to_all.cu).
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

constexpr const char* kOp = "all_to_all";
constexpr const char* kPreamble = "all_to_all_preamble";

detail::ExchangePlan make_plan(const detail::PlanScope& s, const Tensor& out, const Tensor& in, const Config& config) {
  const int world = s.world;
  config.validate(world);
  detail::check_view(kOp, "input", in, s);
  detail::check_view(kOp, "output", out, s);
  detail::check_matching(kOp, out, in, /*same_shape=*/true);
  IRIS_CHECK_ARG(in.rows % world == 0, kOp, ": ", in.rows, " rows do not split into ", world,
                 " equal blocks (one per rank).");
  IRIS_CHECK_ARG(s.shapes_only || !in.overlaps(out), kOp, ": output and input overlap; pass separate buffers.");
  return detail::plan_exchange(s, detail::collective_signature(OpKind::kAllToAll, in, world, config), in.rows / world,
                               in.cols, in.dtype, config);
}

}  // namespace

void all_to_all_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(detail::PlanScope::of(ctx), out, in, config); });
}

WorkspaceNeeds all_to_all_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size) {
  return make_plan(detail::PlanScope::sizing("all_to_all_needs", world_size), out, in, config).needs;
}

void all_to_all(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream) {
  const iris::detail::DeviceGuard device(ctx.device());
  const detail::ExchangePlan p = detail::checked_call(
      ctx, ws,
      [&] {
        stream = ctx.op_stream(kOp, stream);
        detail::ExchangePlan plan = make_plan(detail::PlanScope::of(ctx), out, in, config);
        detail::require_ready(ctx, kOp, kPreamble, ws, OpKind::kAllToAll, plan.needs);
        return plan;
      },
      [](const detail::ExchangePlan& plan) -> const OpSignature& { return plan.sig; });
  if (in.numel() == 0) return;
  if (detail::single_rank_copy(ctx, out, in, ws, stream)) return;
  ws.begin_call(stream);
  if (p.ll) {
    detail::launch_ll(detail::ll_args(ctx, p.sig, in, out, p.block_rows, p.ll_words, ws), detail::LLMode::kAllToAll,
                      in.dtype, ReduceOp::kSum, {p.blocks, p.threads}, stream);
    IRIS_CUDA_CHECK_LAUNCH();
    ws.end_call(stream);
    return;
  }
  detail::ExchangeArgs a = detail::exchange_args(ctx, p, in, out, ws);
  a.vec = detail::vec_ok(in, p.block_rows) && detail::vec_ok(out, p.block_rows);
  detail::launch_all_to_all(a, in.dtype, p.blocks, stream);
  IRIS_CUDA_CHECK_LAUNCH();
  ws.end_call(stream);
}

}  // namespace iris::ccl
