// Fused GEMM + communication ops: configs, plans (validation and workspace sizing, pure), preambles
// and the launch-time checks. The fused kernels are not written yet: each op ends in a clear error.
#include "iris/ops/fused.hpp"

#include <algorithm>
#include <string>

#include "ccl/ccl_host.hpp"
#include "iris/core/error.hpp"
#include "ops/gemm_check.hpp"

namespace iris::ops {
namespace {

using ccl::AllReduceVariant;
using ccl::OpKind;
using ccl::detail::align256;
using iris::detail::str_cat;

// Block-state words per launched block: its epoch and its arrival word.
constexpr size_t kBlockStateWords = 2;

const char* preamble_name(OpKind op) {
  switch (op) {
    case OpKind::kMatmulAllReduce:
      return "matmul_all_reduce_preamble";
    case OpKind::kMatmulReduceScatter:
      return "matmul_reduce_scatter_preamble";
    case OpKind::kAllGatherMatmul:
      return "all_gather_matmul_preamble";
    case OpKind::kMatmulAllGather:
      return "matmul_all_gather_preamble";
    default:
      return "a preamble";
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Checks common to every op, in order: the config, the device SM count, the operands (all but C's
// rows, which depend on the op).
void validate_common(const char* name, const MatmulOperands& mm, const FusedConfig& config, int world_size,
                     int device_sms) {
  config.validate(world_size);
  IRIS_CHECK_ARG(device_sms > 0, name, ": device_sms must be positive, got ", device_sms, ".");
  if (auto why = detail::check_matmul_operands(name, mm.a, mm.b, mm.b_is_nk, mm.c, mm.bias); !why.empty())
    throw InvalidArgument(why);
}

// C must have `rows` rows; `rule` says why, for the message.
void check_c_rows(const char* name, const MatmulOperands& mm, int64_t rows, const std::string& rule) {
  IRIS_CHECK_ARG(mm.c.rows == rows, name, ": C is ", mm.c.rows, "x", mm.c.cols, " but must be ", rows, "x", mm.c.cols,
                 " (", rule, ").");
}

// The SM split and the signature fields every op fills alike.
FusedPlan start_plan(OpKind op, const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  FusedPlan p;
  p.tile = config.tile();
  p.comm_sms = config.comm_sms > 0 ? config.comm_sms : default_comm_sms(device_sms);
  p.gemm_sms = config.gemm_sms > 0 ? config.gemm_sms : device_sms - p.comm_sms;
  IRIS_CHECK_ARG(p.gemm_sms >= 1 && p.gemm_sms + p.comm_sms <= device_sms, ccl::op_name(op), ": gemm_sms (", p.gemm_sms,
                 ") + comm_sms (", p.comm_sms, ") must leave at least one GEMM SM and fit the device's ", device_sms,
                 " SMs.");
  p.sig.op = op;
  p.sig.world_size = world_size;
  p.sig.block_size_m = config.block_size_m;
  p.sig.block_size_n = config.block_size_n;
  p.sig.depth = mm.a.cols;
  p.needs.block_state = kBlockStateWords * static_cast<size_t>(p.gemm_sms + p.comm_sms);
  return p;
}

// Locks over the GEMM's output tile grid (rows x cols).
void size_tiles(FusedPlan& p, int64_t rows, int64_t cols) {
  p.sig.rows = rows;
  p.sig.cols = cols;
  p.tiles = ccl::tile_count(rows, cols, p.sig.block_size_m, p.sig.block_size_n);
  p.needs.locks = static_cast<size_t>(p.tiles);
}

// The GEMM's N: B's columns (K x N) or rows (N x K).
int64_t gemm_n(const MatmulOperands& mm) { return mm.b_is_nk ? mm.b.rows : mm.b.cols; }

}  // namespace

int default_comm_sms(int device_sms) { return std::max(1, device_sms / 8); }

void FusedConfig::validate(int world_size) const {
  IRIS_CHECK_ARG(world_size >= 1, "world_size must be at least 1, got ", world_size);
  IRIS_CHECK_ARG(block_size_m > 0, "block_size_m must be positive, got ", block_size_m);
  IRIS_CHECK_ARG(block_size_n > 0, "block_size_n must be positive, got ", block_size_n);
  IRIS_CHECK_ARG(block_size_k > 0, "block_size_k must be positive, got ", block_size_k);
  IRIS_CHECK_ARG(block_size_m == 64 || block_size_m == 128 || block_size_m == 256,
                 "block_size_m must be 64, 128 or 256 (a Hopper wgmma tile), got ", block_size_m);
  IRIS_CHECK_ARG(block_size_n % 16 == 0 && block_size_n <= 256,
                 "block_size_n must be a multiple of 16 up to 256 (a Hopper wgmma tile), got ", block_size_n);
  IRIS_CHECK_ARG(block_size_k % 16 == 0 && block_size_k <= 256,
                 "block_size_k must be a multiple of 16 up to 256 (a Hopper wgmma tile), got ", block_size_k);
  IRIS_CHECK_ARG(gemm_sms >= 0, "gemm_sms must be 0 (automatic) or positive, got ", gemm_sms);
  IRIS_CHECK_ARG(comm_sms >= 0, "comm_sms must be 0 (automatic) or positive, got ", comm_sms);
  IRIS_CHECK_ARG(all_reduce_variant == AllReduceVariant::kAtomic || all_reduce_variant == AllReduceVariant::kSpinlock ||
                     all_reduce_variant == AllReduceVariant::kOneShot ||
                     all_reduce_variant == AllReduceVariant::kTwoShot,
                 "all_reduce_variant must be atomic, spinlock, one_shot or two_shot for the fused ops, got ",
                 ccl::variant_name(all_reduce_variant));
}

FusedPlan plan_matmul_all_reduce(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  const OpKind op = OpKind::kMatmulAllReduce;
  const char* name = ccl::op_name(op);
  validate_common(name, mm, config, world_size, device_sms);
  const int64_t m = mm.a.rows;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, "M x N, M = the rows of A");
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms);
  size_tiles(p, m, n);
  p.sig.dtype = mm.c.dtype;  // the partial products cross ranks in C's type
  p.sig.variant = config.all_reduce_variant;
  const size_t t = static_cast<size_t>(p.tiles);
  const size_t w = static_cast<size_t>(world_size);
  const size_t mn = static_cast<size_t>(m * n);
  const size_t esz = mm.c.element_size();
  switch (config.all_reduce_variant) {
    case AllReduceVariant::kAtomic:
    case AllReduceVariant::kSpinlock:
      p.needs.flags = 2 * t;
      p.needs.staging_bytes = align256(mn * sizeof(float));
      break;
    case AllReduceVariant::kOneShot:
      p.needs.flags = w * t;
      p.needs.staging_bytes = align256(w * mn * esz);
      break;
    case AllReduceVariant::kTwoShot:
      p.needs.flags = (w + 1) * t;
      p.needs.staging_bytes = 2 * align256(mn * esz);
      break;
    default:
      IRIS_ASSERT(false, "FusedConfig::validate admits only the fused variants");
  }
  return p;
}

FusedPlan plan_matmul_reduce_scatter(const MatmulOperands& mm, const FusedConfig& config, int world_size,
                                     int device_sms) {
  const OpKind op = OpKind::kMatmulReduceScatter;
  const char* name = ccl::op_name(op);
  validate_common(name, mm, config, world_size, device_sms);
  const int64_t m = mm.a.rows;
  const int64_t n = gemm_n(mm);
  IRIS_CHECK_ARG(m % world_size == 0, name, ": M = ", m, " (the rows of A) is not a multiple of the world size ",
                 world_size, "; each rank receives M / world_size rows.");
  const int64_t rows = m / world_size;
  check_c_rows(name, mm, rows,
               str_cat("M / world_size x N: rank r receives rows [r*", rows, ", (r+1)*", rows, ") of the ", m, "x", n,
                       " product"));
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms);
  size_tiles(p, m, n);  // each rank's GEMM computes the whole M x N partial product
  p.sig.dtype = mm.c.dtype;
  p.needs.flags = static_cast<size_t>(world_size) * static_cast<size_t>(p.tiles);
  p.needs.staging_bytes = align256(static_cast<size_t>(m * n) * mm.c.element_size());
  return p;
}

FusedPlan plan_all_gather_matmul(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  const OpKind op = OpKind::kAllGatherMatmul;
  const char* name = ccl::op_name(op);
  validate_common(name, mm, config, world_size, device_sms);
  const int64_t m_rank = mm.a.rows;
  const int64_t m = m_rank * world_size;
  const int64_t k = mm.a.cols;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, str_cat("world_size * M_rank x N: the gathered rows of every rank's ", m_rank, "-row A"));
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms);
  size_tiles(p, m, n);
  p.sig.dtype = mm.a.dtype;  // A crosses ranks
  p.needs.flags = static_cast<size_t>(world_size) * static_cast<size_t>(ceil_div(m_rank, config.block_size_m));
  p.needs.staging_bytes = align256(static_cast<size_t>(m * k) * mm.a.element_size());
  return p;
}

FusedPlan plan_matmul_all_gather(const MatmulOperands& mm, const FusedConfig& config, int world_size, int device_sms) {
  const OpKind op = OpKind::kMatmulAllGather;
  const char* name = ccl::op_name(op);
  validate_common(name, mm, config, world_size, device_sms);
  const int64_t m_rank = mm.a.rows;
  const int64_t m = m_rank * world_size;
  const int64_t n = gemm_n(mm);
  check_c_rows(name, mm, m, str_cat("world_size * M_rank x N: every rank's ", m_rank, " rows of A @ B, by rank"));
  FusedPlan p = start_plan(op, mm, config, world_size, device_sms);
  size_tiles(p, m_rank, n);  // each rank's GEMM computes its own M/W x N block
  p.sig.rows = m;            // the signature names the gathered output
  p.sig.dtype = mm.c.dtype;
  p.needs.flags = static_cast<size_t>(world_size) * static_cast<size_t>(p.tiles);
  p.needs.staging_bytes = align256(static_cast<size_t>(m * n) * mm.c.element_size());
  return p;
}

void check_fused_workspace(const FusedPlan& plan, const FusedWorkspace& ws) {
  const char* name = ccl::op_name(plan.sig.op);
  ccl::detail::require_op(name, preamble_name(plan.sig.op), ws, plan.sig.op);
  ws.check_capacity(plan.needs);  // whether or not the preamble ran: never index past an array
}

namespace {

using PlanFn = FusedPlan (*)(const MatmulOperands&, const FusedConfig&, int, int);

void preamble(PlanFn plan, Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  ccl::detail::prepare_everywhere(ctx, ws,
                                  [&] { return plan(mm, config, ctx.world_size(), ccl::detail::sm_count(ctx)); });
}

void launch(PlanFn plan, Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
            cudaStream_t stream) {
  const FusedPlan p = plan(mm, config, ctx.world_size(), ccl::detail::sm_count(ctx));
  check_fused_workspace(p, ws);
  (void)stream;
  // Nothing to compute for an empty output; otherwise the kernel that does not exist yet.
  if (mm.c.numel() == 0) return;
  throw Error(str_cat(ccl::op_name(p.sig.op), ": the fused kernel is not implemented yet"));
}

}  // namespace

void matmul_all_reduce_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  preamble(plan_matmul_all_reduce, ctx, mm, config, ws);
}
void matmul_all_reduce(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream) {
  launch(plan_matmul_all_reduce, ctx, mm, config, ws, stream);
}

void matmul_reduce_scatter_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config,
                                    FusedWorkspace& ws) {
  preamble(plan_matmul_reduce_scatter, ctx, mm, config, ws);
}
void matmul_reduce_scatter(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                           cudaStream_t stream) {
  launch(plan_matmul_reduce_scatter, ctx, mm, config, ws, stream);
}

void all_gather_matmul_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  preamble(plan_all_gather_matmul, ctx, mm, config, ws);
}
void all_gather_matmul(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream) {
  launch(plan_all_gather_matmul, ctx, mm, config, ws, stream);
}

void matmul_all_gather_preamble(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws) {
  preamble(plan_matmul_all_gather, ctx, mm, config, ws);
}
void matmul_all_gather(Context& ctx, const MatmulOperands& mm, const FusedConfig& config, FusedWorkspace& ws,
                       cudaStream_t stream) {
  launch(plan_matmul_all_gather, ctx, mm, config, ws, stream);
}

}  // namespace iris::ops
