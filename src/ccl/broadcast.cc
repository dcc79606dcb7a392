// broadcast entry points: validation, workspace needs, launch (kernel: broadcast.cu).
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

using detail::align256;

constexpr const char* kOp = "broadcast";
constexpr const char* kPreamble = "broadcast_preamble";

struct Plan {
  OpSignature sig;
  WorkspaceNeeds needs;
  detail::CopyPlan chunks;
  int64_t per_owner = 1;
  bool in_place = false;
  int blocks = 1;
  int threads = detail::kThreads;  // the LL exchange: ll_launch's; kThreads otherwise
  bool ll = false;                 // a small tensor: the LL exchange (ll_exchange.cu), no flags
  int64_t ll_words = 0;            // LL words of the tensor's lines (a staging slot adds the header line)
};

// `in` is looked at on the root only (it may be empty elsewhere); sizing ahead looks at it as the root does.
Plan make_plan(const detail::PlanScope& s, const Tensor& out, const Tensor& in, int root, const Config& config) {
  const int world = s.world;
  config.validate(world);
  IRIS_CHECK_ARG(root >= 0 && root < world, kOp, ": root ", root, " is not a rank of this world of ", world, ".");
  detail::check_view(kOp, "output", out, s);
  Plan p;
  if (s.rank == root || s.shapes_only) {
    detail::check_view(kOp, "input", in, s);
    detail::check_matching(kOp, out, in, /*same_shape=*/true);
    if (!s.shapes_only) detail::check_no_partial_overlap(kOp, out, in, /*allow_same=*/true);
    p.in_place = out.numel() > 0 && in.same_view(out);
  }
  p.sig = detail::collective_signature(OpKind::kBroadcast, out, world, config, root);
  const size_t esz = out.element_size();
  p.chunks = detail::plan_copy_chunks(out.numel(), out.dtype);
  p.needs.block_state = detail::block_state_words(world);
  if (world > 1) p.sig.ll_max_bytes = static_cast<int64_t>(detail::ll_max_bytes(OpKind::kBroadcast));
  if (out.numel() == 0) return p;  // launches nothing, stages nothing (plan_exchange_layout)
  p.ll = uses_ll_exchange(OpKind::kBroadcast, static_cast<size_t>(out.numel()) * esz, world);
  if (p.ll) {
    p.ll_words = detail::ll_words(out.numel(), out.dtype);
    p.needs.staging_bytes = detail::ll_staging_bytes(out.numel(), out.dtype, world);
    const detail::LLLaunch grid =
        detail::ll_launch(p.ll_words, world, detail::comm_block_limit(kOp, s, config), detail::ll_block_bytes());
    p.blocks = grid.blocks;
    p.threads = grid.threads;
    return p;
  }
  if (world > 1) {
    p.per_owner = (p.chunks.nchunks + world - 2) / (world - 1);
    p.needs.staging_bytes = align256(static_cast<size_t>(out.numel()) * esz);
    p.needs.flags = static_cast<size_t>(world + p.chunks.nchunks);  // done words, then chunk flags (broadcast.cu)
  } else {
    p.per_owner = p.chunks.nchunks;
  }
  p.blocks = detail::launch_blocks("broadcast", s, config, p.chunks.nchunks);
  return p;
}

}  // namespace

void broadcast_preamble(Context& ctx, const Tensor& out, const Tensor& in, int root, const Config& config,
                        Workspace& ws) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(detail::PlanScope::of(ctx), out, in, root, config); });
}

WorkspaceNeeds broadcast_needs(const Tensor& out, const Tensor& in, int root, const Config& config, int world_size) {
  return make_plan(detail::PlanScope::sizing("broadcast_needs", world_size), out, in, root, config).needs;
}

void broadcast(Context& ctx, const Tensor& out, const Tensor& in, int root, const Config& config, Workspace& ws,
               cudaStream_t stream) {
  const iris::detail::DeviceGuard device(ctx.device());
  const Plan p = detail::checked_call(
      ctx, ws,
      [&] {
        stream = ctx.op_stream(kOp, stream);
        Plan plan = make_plan(detail::PlanScope::of(ctx), out, in, root, config);
        detail::require_ready(ctx, kOp, kPreamble, ws, OpKind::kBroadcast, plan.needs);
        return plan;
      },
      [](const Plan& plan) -> const OpSignature& { return plan.sig; });
  if (out.numel() == 0) return;
  if (detail::single_rank_copy(ctx, out, in, ws, stream)) return;
  const bool is_root = ctx.rank() == root;
  if (p.ll) {
    // The LL exchange of one source (ll_exchange.cu): in is read on the root only, so the views' shape comes from
    // out elsewhere.
    detail::LLArgs a = detail::ll_args(ctx, p.sig, is_root ? in : out, out, out.rows, p.ll_words, ws, p.in_place);
    if (!is_root) a.in = nullptr;
    a.root = root;
    a.layout_key = detail::kBroadcastLLLayout;
    ws.begin_call(stream);
    detail::launch_ll(a, detail::LLMode::kBroadcast, out.dtype, ReduceOp::kSum, {p.blocks, p.threads}, stream);
    IRIS_CUDA_CHECK_LAUNCH();
    ws.end_call(stream);
    return;
  }
  detail::BroadcastArgs a{};
  a.ctx = detail::call_context(ctx, ws, p.sig);
  a.in = is_root ? in.data : nullptr;
  a.out = out.data;
  a.numel = out.numel();
  a.cols = out.cols;
  a.in_stride = is_root ? in.stride : out.stride;
  a.out_stride = out.stride;
  a.chunk = p.chunks.chunk;
  a.nchunks = p.chunks.nchunks;
  a.per_owner = p.per_owner;
  a.root = root;
  a.staging = ws.staging();
  a.flags = ws.flags();
  a.state = ws.block_state();
  a.vec = detail::vec_ok(out, 0) && (!is_root || detail::vec_ok(in, 0));
  a.in_place = p.in_place;
  a.layout_key = detail::kBroadcastChunkedLayout;
  ws.begin_call(stream);
  detail::launch_broadcast(a, out.dtype, p.blocks, stream);
  IRIS_CUDA_CHECK_LAUNCH();
  ws.end_call(stream);
}

}  // namespace iris::ccl
