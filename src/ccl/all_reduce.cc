// all_reduce entry points: validation, variant choice, workspace needs, launch.
#include <algorithm>

#include "ccl/all_reduce_kernels.hpp"
#include "ccl/ccl_host.hpp"
#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris::ccl {
namespace {

using detail::align256;

// Chunk plans do not depend on the launch's block count, so a workspace serves any comm_sms.
constexpr int kPlanBlocks = 128;

// The measured rule behind `auto`: one_shot up to this size, two_shot above. Measured with iris-bench
// on 2 x H200 (bf16, CUDA-graph replay of 50 calls, 2026-11-29, LL lines and PDL): one_shot / two_shot
// = 3.85 / ~7 us at 8 KiB, 7.6 / 11.1 us at 512 KiB, 10.7 / 12.2 us at 1 MiB, 18.5 / 14.8 us at
// 2 MiB, 31.1 / 22.9 us at 4 MiB. One_shot's LL words carry 4 data bytes in 8, so past about 1 MiB
// the doubled traffic costs more than two_shot's second flag round trip. Not yet re-measured for more
// than 2 ranks.
constexpr size_t kOneShotMaxBytes = size_t{1} << 20;
// one_shot's protocol under `auto`: LL up to this size, simple above. LL was the only protocol when the
// sizes above were measured, and `auto` picks one_shot only up to kOneShotMaxBytes, so this keeps what
// `auto` does; a one_shot asked for above 1 MiB gets simple, which moves half the bytes (at 4 MiB on
// 2 x H200, LL took 31.1 us against 22.9 for two_shot). Where simple overtakes LL, and whether `auto`
// should pick one_shot simple over two_shot at mid sizes, is for a 2-GPU measurement to say.
constexpr size_t kLLMaxBytes = kOneShotMaxBytes;
// Bytes of one accumulator (Elem<T>::Acc in ccl_common.cuh: float for the 16-bit types, the element
// type itself for the others) in atomic/spinlock accumulators and ring slots.
size_t acc_bytes(DType dtype) { return std::max<size_t>(4, dtype_size(dtype)); }

// The tile of the tile variants (atomic, spinlock, ring): the config's block_size_m x block_size_n, except
// for a tensor of fewer rows than block_size_m (a 1-D buffer is one row), whose tile is all its rows high
// and block_size_n x floor(block_size_m / rows) wide, so that it still holds about block_size_m x
// block_size_n elements. Every tile has its flags (and spinlock its lock), a flag round trip between ranks
// and a staging slot of tile_m x tile_n accumulators; with block-sized tiles a 1-D buffer of n elements
// took n / 64 tiles of 64 elements (default blocks), so a 4 MiB bfloat16 ring all_reduce needed 512 MiB of
// staging (128 times the tensor; atomic and spinlock 48 times) and spent its time in flag waits. Tensors
// of block_size_m rows or more tile as the config says (DESIGN.md's tile counts).
struct TileShape {
  int m, n;
};
TileShape tile_of(int64_t rows, const Config& config) {
  if (rows <= 0 || rows >= config.block_size_m) return {config.block_size_m, config.block_size_n};
  const int h = static_cast<int>(rows);
  return {h, config.block_size_n * (config.block_size_m / h)};
}

struct Plan {
  AllReduceVariant variant;
  OneShotProtocol protocol = OneShotProtocol::kAuto;  // one_shot: LL or simple
  OpSignature sig;
  WorkspaceNeeds needs;
  int blocks = 1;
  int threads = detail::kThreads;  // one_shot LL: ll_launch's; kThreads otherwise
  detail::ChunkPlan chunks;  // two_shot
  int64_t words = 0;         // one_shot LL
  detail::SegmentPlan segs;  // one_shot simple
  int64_t tiles = 0, tiles_per_rank = 0;
  TileShape tile{0, 0};  // atomic, spinlock, ring: tile_of
  int slices = 1;
  int batch = 1;  // ring: ring_batch
};

void validate(const char* op, const detail::PlanScope& s, const Tensor& out, const Tensor& in, const Config& config,
              ReduceOp rop) {
  config.validate(s.world);
  detail::check_view(op, "input", in, s);
  detail::check_view(op, "output", out, s);
  detail::check_matching(op, out, in, /*same_shape=*/true);
  if (!s.shapes_only) detail::check_no_partial_overlap(op, out, in, /*allow_same=*/true);
  IRIS_CHECK_ARG(valid_reduce_op(rop), op, ": unknown reduce op ", static_cast<int>(rop), ".");
}

Plan make_plan(const detail::PlanScope& s, const Tensor& out, const Tensor& in, const Config& config, ReduceOp rop) {
  validate("all_reduce", s, out, in, config, rop);
  const int world = s.world;
  const size_t bytes = static_cast<size_t>(in.numel()) * in.element_size();
  Plan p;
  p.variant = resolve_all_reduce_variant(config, world, bytes, in.dtype, in.rows);
  IRIS_CHECK_ARG(p.variant != AllReduceVariant::kAtomic || rop == ReduceOp::kSum || rop == ReduceOp::kAvg,
                 "all_reduce variant 'atomic' supports only sum and avg; use one_shot, two_shot, ring or spinlock for ",
                 reduce_op_name(rop), ".");
  if (p.variant == AllReduceVariant::kOneShot) p.protocol = resolve_one_shot_protocol(config, bytes);
  p.sig.op = OpKind::kAllReduce;
  p.sig.rows = in.rows;
  p.sig.cols = in.cols;
  p.sig.dtype = in.dtype;
  p.sig.world_size = world;
  p.sig.variant = p.variant;
  p.sig.protocol = p.protocol;
  p.sig.block_size_m = config.block_size_m;
  p.sig.block_size_n = config.block_size_n;
  p.sig.reduce_op = rop;
  p.needs.block_state = detail::block_state_words(world);
  const int limit = detail::comm_block_limit("all_reduce", s, config);
  const size_t esz = in.element_size();
  switch (p.variant) {
    case AllReduceVariant::kOneShot: {
      if (p.protocol == OneShotProtocol::kLL) {
        p.words = detail::ll_words(in.numel(), in.dtype);
        p.needs.staging_bytes = detail::ll_staging_bytes(in.numel(), in.dtype, world);
        const detail::LLLaunch grid = detail::ll_launch(p.words, world, limit, detail::ll_block_bytes());
        p.blocks = grid.blocks;
        p.threads = grid.threads;
      } else {
        // Two parities of one slot per source (all_reduce_one_shot.cu), one flag per source and segment.
        p.segs = detail::plan_segments(in.numel(), in.dtype);
        p.needs.staging_bytes = align256(2 * static_cast<size_t>(world) * p.segs.slot * esz);
        p.needs.flags = static_cast<size_t>(world) * p.segs.nsegs;
        p.blocks = detail::segment_blocks(p.segs, limit);
      }
      break;
    }
    case AllReduceVariant::kTwoShot: {
      p.chunks = detail::plan_chunks(in.numel(), in.dtype, world, config.all_reduce_distribution, kPlanBlocks);
      p.sig.distribution = config.all_reduce_distribution;
      const size_t rs = align256(p.chunks.per_rank * world * p.chunks.chunk * esz);
      const size_t ag = align256(p.chunks.per_rank * p.chunks.chunk * esz);
      p.needs.staging_bytes = rs + ag;
      p.needs.flags = static_cast<size_t>(p.chunks.per_rank * world + p.chunks.nchunks);
      // One block per column (all_reduce_two_shot.cu): more would have nothing to do.
      const int64_t want = std::max<int64_t>(1, p.chunks.per_rank);
      p.blocks = static_cast<int>(std::min<int64_t>(want, limit));
      break;
    }
    case AllReduceVariant::kAtomic:
    case AllReduceVariant::kSpinlock:
    case AllReduceVariant::kRing: {
      p.tile = tile_of(in.rows, config);
      p.tiles = tile_count(in.rows, in.cols, p.tile.m, p.tile.n);
      p.tiles_per_rank = (p.tiles + world - 1) / world;
      const size_t tile_elems = static_cast<size_t>(p.tile.m) * p.tile.n;
      // Tiles pad the tensor (a column vector in tiles 65536 wide stages 65536 times its bytes): the staging
      // is bounded before it is computed in size_t, where it could wrap to a small number.
      const unsigned __int128 staged =
          p.variant == AllReduceVariant::kRing
              ? static_cast<unsigned __int128>(2) * static_cast<uint64_t>(p.tiles) * tile_elems * acc_bytes(in.dtype)
              : static_cast<unsigned __int128>(static_cast<uint64_t>(p.tiles_per_rank)) * tile_elems *
                    (acc_bytes(in.dtype) + esz);
      IRIS_CHECK_ARG(staged <= Tensor::kMaxSpanBytes, "all_reduce: ", variant_name(p.variant),
                     " would stage more than 2^48 bytes, more than a GPU can address, for a ", in.describe(),
                     " tensor in ", p.tile.m, "x", p.tile.n,
                     " tiles; pick block sizes that fit the tensor's shape, or another variant.");
      if (p.variant == AllReduceVariant::kRing) {
        // As many slices as the config's block has; a widened tile widens each of them alike.
        p.slices = config.block_size_n / config.ring_slice_n();
        p.needs.flags = static_cast<size_t>(p.tiles) * 2 * p.slices;
        // Slots hold RS partials as accumulators.
        p.needs.staging_bytes = align256(2 * static_cast<size_t>(p.tiles) * tile_elems * acc_bytes(in.dtype));
      } else {
        // Arrivals by (tile, source), done by tile, and one more word per tile (all_reduce_tiles.cu).
        p.needs.flags = static_cast<size_t>(p.tiles) * (static_cast<size_t>(world) + 2);
        p.needs.staging_bytes = align256(p.tiles_per_rank * tile_elems * acc_bytes(in.dtype)) +
                                align256(p.tiles_per_rank * tile_elems * esz);
        if (p.variant == AllReduceVariant::kSpinlock) p.needs.locks = static_cast<size_t>(p.tiles);
      }
      p.sig.swizzle = config.swizzle_size;
      if (p.variant == AllReduceVariant::kRing) {
        p.blocks = detail::ring_blocks(p.tiles, world, config.all_reduce_num_rings, limit);
        p.batch = detail::ring_batch(p.tiles, p.blocks, world, config.all_reduce_num_rings);
        p.sig.rings = config.all_reduce_num_rings;
        p.sig.slice_n = config.ring_slice_n();
        p.sig.grid = p.blocks;
      } else {
        p.blocks = static_cast<int>(std::clamp<int64_t>(p.tiles, 1, limit));
      }
      break;
    }
    case AllReduceVariant::kAuto:
      IRIS_ASSERT(false, "auto must have been resolved");
  }
  // One rank copies (single_rank_copy) and stages nothing; the staging would grow with the tensor (two_shot
  // 1.5 times it). Locks and flags, a few words per tile, are still sized, so that a workspace refuses the
  // same calls with the same messages at any world size (the founding tests run at one rank too).
  if (world == 1) p.needs.staging_bytes = 0;
  if (in.numel() == 0) {
    // Launches nothing, stages nothing (plan_exchange_layout): one_shot LL's 256 bytes fixed the workspace's
    // staging before 2026-12-07.
    p.needs.staging_bytes = 0;
    p.needs.flags = 0;
    p.needs.locks = 0;
  }
  return p;
}

// What places data in the staging and flags, and how it is read: calls with equal keys have the same
// layout, and a call whose key differs from the previous call's on the workspace fences first
// (layout_fence), where the ranks compare their keys. The dtype and the reduction are part of it: two
// ranks whose calls lay out the same bytes but read them as fp16 on one and bf16 on the other, or sum on one
// and max on the other, finished without an error before 2026-12-06, each with another result. Now such
// calls raise on every rank when they are the first after a preamble (or both change), or time out naming
// the peer when one rank alone changes; a program that alternates reductions or dtypes of one shape on a
// workspace fences at each change (one NVLink round trip). one_shot LL finds its parity at half the
// staging's capacity whatever the shape, so its key is the variant and protocol alone (its header lines
// carry the dtype, the reduction and the size: ll_exchange.cu). The tile variants' swizzle_size is part of it
// too: with another swizzle, tile t names another rectangle, and the ranks added each other's blocks into the
// wrong partials without an error (before 2026-12-06; a read-only audit's finding). So is the shape: two_shot's
// and one_shot simple's flags carry epochs alone, so ranks whose element counts differ within one chunk plan (1M
// and 1M - 8 elements: the same chunks) passed every wait, and the rank with more read stale staging past its
// peer's data (before 2026-12-06; the same audit). A shape that changes the plan fenced already; one that does
// not now fences too (one round trip, on a change of shape only).
uint64_t layout_key(const Plan& p, size_t esz) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over 64-bit fields
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(p.variant) + 1);
  mix(static_cast<uint64_t>(p.protocol));
  if (p.protocol != OneShotProtocol::kLL) {
    for (int64_t v :
         {p.segs.seg, p.segs.nsegs, p.chunks.chunk, p.chunks.nchunks, p.chunks.per_rank, int64_t{p.chunks.distribution},
          p.tiles, p.tiles_per_rank, int64_t{p.tile.m}, int64_t{p.tile.n}, int64_t{p.slices},
          int64_t{p.sig.block_size_m}, int64_t{p.sig.block_size_n}, int64_t{p.sig.swizzle}, p.sig.rows, p.sig.cols,
          static_cast<int64_t>(esz), static_cast<int64_t>(p.sig.dtype), static_cast<int64_t>(p.sig.reduce_op)})
      mix(static_cast<uint64_t>(v));
  }
  return h | 1;  // 0 means "no fence"
}

// The call's plan after every check of its arguments and workspace (all_reduce, check_all_reduce_call).
Plan ready_plan(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config, const Workspace& ws,
                ReduceOp op) {
  Plan plan = make_plan(detail::PlanScope::of(ctx), out, in, config, op);
  detail::require_ready(ctx, "all_reduce", "all_reduce_preamble", ws, OpKind::kAllReduce, plan.needs);
  return plan;
}

}  // namespace

AllReduceVariant resolve_all_reduce_variant(const Config& config, int world_size, size_t bytes, DType dtype,
                                            int64_t rows) {
  (void)dtype;
  (void)rows;
  if (config.all_reduce_variant != AllReduceVariant::kAuto) return config.all_reduce_variant;
  // One rank: the call is a copy (single_rank_copy); the plan and workspace stay two_shot's.
  if (world_size == 1) return AllReduceVariant::kTwoShot;
  return bytes <= kOneShotMaxBytes ? AllReduceVariant::kOneShot : AllReduceVariant::kTwoShot;
}

OneShotProtocol resolve_one_shot_protocol(const Config& config, size_t bytes) {
  if (config.all_reduce_one_shot_protocol != OneShotProtocol::kAuto) return config.all_reduce_one_shot_protocol;
  return bytes <= kLLMaxBytes ? OneShotProtocol::kLL : OneShotProtocol::kSimple;
}

void all_reduce_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                         ReduceOp op) {
  detail::prepare_everywhere(ctx, ws, [&] { return make_plan(detail::PlanScope::of(ctx), out, in, config, op); });
}

OpSignature detail::all_reduce_signature(const detail::PlanScope& s, const Tensor& out, const Tensor& in,
                                         const Config& config, ReduceOp op) {
  return make_plan(s, out, in, config, op).sig;
}

void detail::check_all_reduce_call(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                                   const Workspace& ws, ReduceOp op) {
  ready_plan(ctx, out, in, config, ws, op);
}

WorkspaceNeeds all_reduce_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size,
                                ReduceOp op) {
  return make_plan(detail::PlanScope::sizing("all_reduce_needs", world_size), out, in, config, op).needs;
}

void all_reduce(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream, ReduceOp op) {
  const iris::detail::DeviceGuard device(ctx.device());
  const Plan p = detail::checked_call(
      ctx, ws,
      [&] {
        stream = ctx.op_stream("all_reduce", stream);
        return ready_plan(ctx, out, in, config, ws, op);
      },
      [](const Plan& plan) -> const OpSignature& { return plan.sig; });
  if (in.numel() == 0) return;
  if (detail::single_rank_copy(ctx, out, in, ws, stream)) return;
  const DeviceContext dctx = detail::call_context(ctx, ws, p.sig);
  const uint64_t key = layout_key(p, in.element_size());
  ws.begin_call(stream);
  switch (p.variant) {
    case AllReduceVariant::kOneShot: {
      if (p.protocol == OneShotProtocol::kLL) {
        detail::LLArgs a = detail::ll_args(ctx, p.sig, in, out, in.rows, p.words, ws);
        a.layout_key = key;
        detail::launch_ll(a, detail::LLMode::kAllReduce, in.dtype, op, {p.blocks, p.threads}, stream);
      } else {
        detail::OneShotArgs a{};
        a.ctx = dctx;
        a.io = detail::flat_io(out, in);
        a.plan = p.segs;
        a.staging = ws.staging();
        a.flags = ws.flags();
        a.state = ws.block_state();
        a.vec = detail::vec16(in) && detail::vec16(out);
        a.layout_key = key;
        detail::launch_one_shot_simple(a, in.dtype, op, p.blocks, stream);
      }
      break;
    }
    case AllReduceVariant::kTwoShot: {
      const size_t esz = in.element_size();
      char* staging = static_cast<char*>(ws.staging());
      detail::TwoShotArgs a{};
      a.ctx = dctx;
      a.io = detail::flat_io(out, in);
      a.plan = p.chunks;
      a.rs_stage = staging;
      a.ag_stage = staging + align256(p.chunks.per_rank * ctx.world_size() * p.chunks.chunk * esz);
      a.rs_flags = ws.flags();
      a.ag_flags = ws.flags() + p.chunks.per_rank * ctx.world_size();
      a.state = ws.block_state();
      a.vec = detail::vec16(in) && detail::vec16(out);
      a.layout_key = key;
      detail::launch_two_shot(a, in.dtype, op, p.blocks, stream);
      break;
    }
    case AllReduceVariant::kAtomic:
    case AllReduceVariant::kSpinlock:
    case AllReduceVariant::kRing: {
      detail::TileArgs a{};
      a.ctx = dctx;
      a.in = in.data;
      a.out = out.data;
      a.rows = in.rows;
      a.cols = in.cols;
      a.in_stride = in.stride;
      a.out_stride = out.stride;
      a.tile_m = p.tile.m;
      a.tile_n = p.tile.n;
      a.swizzle = config.swizzle_size;
      a.tiles = p.tiles;
      a.tiles_per_rank = p.tiles_per_rank;
      a.locks = ws.locks();
      a.flags = ws.flags();
      a.stage = ws.staging();
      a.state = ws.block_state();
      a.slices = p.slices;
      a.rings = config.all_reduce_num_rings;
      a.batch = p.batch;
      a.layout_key = key;
      if (p.variant == AllReduceVariant::kAtomic)
        detail::launch_atomic(a, in.dtype, op, p.blocks, stream);
      else if (p.variant == AllReduceVariant::kSpinlock)
        detail::launch_spinlock(a, in.dtype, op, p.blocks, stream);
      else
        detail::launch_ring(a, in.dtype, op, p.blocks, stream);
      break;
    }
    case AllReduceVariant::kAuto:
      IRIS_ASSERT(false, "auto must have been resolved");
  }
  IRIS_CUDA_CHECK_LAUNCH();
  ws.end_call(stream);
}

}  // namespace iris::ccl
