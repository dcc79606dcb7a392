#include "ccl/ccl_host.hpp"

#include <cstdlib>
#include <cstring>

#include "ccl/collective_kernels.hpp"
#include "iris/ccl/collectives.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"

namespace iris::ccl::detail {

PlanScope PlanScope::of(const Context& ctx) {
  return PlanScope{ctx.rank(), ctx.world_size(), sm_count(ctx), false, &ctx};
}

PlanScope PlanScope::sizing(const char* op, int world_size) {
  IRIS_CHECK_ARG(world_size >= 1, op, ": world_size must be at least 1, got ", world_size, ".");
  return PlanScope{0, world_size, 1, true};
}

void check_view(const char* op, const char* what, const Tensor& t, const PlanScope& s) {
  const std::string why = t.problem(!s.shapes_only);
  IRIS_CHECK_ARG(why.empty(), op, ": ", what, " ", why);
  if (s.shapes_only) return;
  IRIS_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data) % t.element_size() == 0, op, ": ", what, " pointer ", t.data,
                 " is not aligned to its ", t.element_size(), "-byte ", dtype_name(t.dtype), " elements.");
  if (s.ctx == nullptr) return;
  const std::string where = s.ctx->heap_span_problem(t.data, t.span_bytes());
  IRIS_CHECK_ARG(where.empty(), op, ": ", what, " ", t.describe(), " ", where);
  if (t.span_bytes() == 0) return;
  const std::string reach = s.ctx->reach_problem(t.data);
  IRIS_CHECK_ARG(reach.empty(), op, ": ", what, " ", t.describe(), " ", reach);
}

void check_matching(const char* op, const Tensor& out, const Tensor& in, bool same_shape) {
  IRIS_CHECK_ARG(in.dtype == out.dtype, op, ": input is ", dtype_name(in.dtype), " but output is ",
                 dtype_name(out.dtype), ".");
  IRIS_CHECK_ARG(!same_shape || (in.rows == out.rows && in.cols == out.cols), op, ": input is ", in.rows, "x",
                 in.cols, " but output is ", out.rows, "x", out.cols, "; they must have the same shape.");
}

bool rank_rows_in_place(const char* op, const PlanScope& s, const Tensor& whole, const char* whole_name,
                        const Tensor& part, const char* part_name) {
  const int64_t r0 = s.rank * part.rows;
  const bool in_place = part.numel() > 0 && part.same_view(row_block(whole, r0, part.rows));
  IRIS_CHECK_ARG(s.shapes_only || in_place || !part.overlaps(whole), op, ": ", part_name, " overlaps the ",
                 whole_name, " without being the ", whole_name, "'s rows of this rank (", r0, " to ", r0 + part.rows,
                 "); pass separate buffers, or exactly those rows for in-place.");
  return in_place;
}

void check_no_partial_overlap(const char* op, const Tensor& a, const Tensor& b, bool allow_same) {
  if (!a.overlaps(b)) return;
  IRIS_CHECK_ARG(allow_same && a.same_view(b), op, ": output and input overlap",
                 allow_same ? " without being the same view" : "", "; pass separate buffers",
                 allow_same ? " or the same view for in-place" : "", ".");
}

DeviceContext call_context(const Context& ctx, const Workspace& ws, const OpSignature& sig) {
  DeviceContext d = ctx.device_context();
  d.call_words = ws.block_state() + call_words_offset(ctx.world_size());
  d.call_key = sig.key();
  return d;
}

bool vec16(const Tensor& t) { return t.contiguous() && reinterpret_cast<uintptr_t>(t.data) % 16 == 0; }

int sm_count(const Context& ctx) {
  int n = 0;
  IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, ctx.device()));
  return n;
}

int comm_block_limit(const char* op, const PlanScope& s, const Config& config) {
  if (config.comm_sms == 0) return s.sms;
  IRIS_CHECK_ARG(s.shapes_only || config.comm_sms <= s.sms, op, ": comm_sms (", config.comm_sms,
                 ") must be at most the device's ", s.sms,
                 " SMs: the communication kernel's blocks wait for its peers' blocks, so all of them must be "
                 "resident at once.");
  return config.comm_sms;
}

bool single_rank_copy(const Context& ctx, const Tensor& out, const Tensor& in, Workspace& ws, cudaStream_t stream) {
  if (ctx.world_size() != 1) return false;
  // The same view (a one-row view's stride is no part of it): no copy, which onto itself CUDA leaves undefined.
  const bool same = out.same_view(in);
  if (!same && out.numel() > 0) {
    const size_t esz = in.element_size();
    if (in.contiguous() && out.contiguous()) {
      IRIS_CUDA_CHECK(
          cudaMemcpyAsync(out.data, in.data, static_cast<size_t>(in.numel()) * esz, cudaMemcpyDefault, stream));
    } else {
      const size_t width = static_cast<size_t>(in.cols) * esz;
      // A one-row view may carry any stride (it has no second row): its pitch is its width.
      auto pitch = [&](const Tensor& t) { return t.rows <= 1 ? width : static_cast<size_t>(t.stride) * esz; };
      IRIS_CUDA_CHECK(cudaMemcpy2DAsync(out.data, pitch(out), in.data, pitch(in), width, static_cast<size_t>(in.rows),
                                        cudaMemcpyDefault, stream));
    }
  }
  ws.count_call();
  return true;
}

void require_prepared(const char* op, const char* preamble, const Workspace& ws) {
  IRIS_CHECK_ARG(ws.prepared(), op, ": the workspace was never prepared; call ", preamble,
                 " with the same arguments and this workspace first (on every rank).");
}

void require_no_timeout_since_prepare(const Context& ctx, const char* op, const char* preamble, const Workspace& ws) {
  IRIS_CHECK_ARG(ws.device_timeouts_at_prepare() == ctx.device_timeouts(), op,
                 ": a device error (an iris::TimeoutError, a kernel's misuse, or calls that differed across ranks) was "
                 "raised on this rank since this "
                 "workspace was prepared, so its flags and epochs may be out of step between ranks; call ",
                 preamble, " again on every rank (it starts the workspace over) before using it.");
}

void require_not_capturing(const Context& ctx, OpKind op) {
  IRIS_CHECK_ARG(!iris::detail::capturing(ctx.stream()), op_name(op),
                 "_preamble: the context's stream is being captured into a CUDA graph; call the preamble "
                 "(collective: it allocates, zeroes and synchronizes) before the capture begins, and capture the "
                 "calls only.");
}

void require_of_context(const Context& ctx, const char* op, const char* preamble, const Workspace& ws) {
  const void* held = ws.any_array();
  IRIS_CHECK_ARG(held == nullptr || (ws.heap_id() == ctx.heap_id() && ctx.is_symmetric(held)), op,
                 ": the workspace's arrays are not on this context's heap (it was prepared with another Context, "
                 "or with one since destroyed); call ",
                 preamble, " with a workspace of this context (on every rank).");
  require_no_timeout_since_prepare(ctx, op, preamble, ws);
}

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("IRIS_PDL");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}

// Per-block bytes up to which the exchanges use LL. Measured on 2 x H200 (iris-bench, bf16, CUDA-graph
// replay of 50 calls, 2026-11-29), us per call, LL / chunked with release-acquire flags, by block size:
//   all_gather      1K 2.95 / 3.50   4K 3.40 / 3.64   8K 4.03 / 3.60   64K 5.12 / 4.13
//   all_to_all      1K 2.95 / 3.69   4K 3.37 / 3.68   8K 4.22 / 3.73   64K 4.75 / 4.31
//   reduce_scatter  1K 2.74 / 3.98   4K 3.23 / 4.03   8K 3.95 / 4.04   64K 4.44 / 4.56  128K 5.08 / 4.82
// LL sends twice the bytes from few SMs, so it loses once a block passes a few KiB; reduce_scatter's
// chunked path pays a second local pass (the reduction), so LL stays ahead of it longer.
constexpr size_t kLLMaxBytesCopy = size_t{4} << 10;
constexpr size_t kLLMaxBytesReduce = size_t{64} << 10;
// broadcast's chunked path takes two hops at two ranks (the root's chunk and flag to the owner, whose copy then
// waits for them) and before 2026-12-06 a remote poll of the peers' epochs first: 5.76 / 5.76 / 6.04 / 6.21 us
// at 1K / 4K / 8K / 64K (2 x H200, bf16, 2026-11-29), where all_gather's LL exchange, which pushes the same
// lines per peer, took 2.95 / 3.40 / 4.03 / 5.12 (the table above). So broadcast takes LL up to 64 KiB. Not yet
// measured for broadcast itself (no two-GPU machine since): IRIS_LL_MAX_BYTES moves it.
constexpr size_t kLLMaxBytesBroadcast = size_t{64} << 10;

std::optional<size_t> ll_max_bytes_from(const char* env) {
  if (env == nullptr || *env == '\0') return std::nullopt;
  if (std::strcmp(env, "0") == 0) return size_t{0};  // never LL
  try {
    return parse_byte_size(env);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("IRIS_LL_MAX_BYTES: ") + e.what() + " (or 0: never use LL)");
  }
}

size_t ll_max_bytes(OpKind op) {
  // Read (and a bad value raised) at the first plan, which every rank makes together.
  static const std::optional<size_t> bytes = ll_max_bytes_from(std::getenv("IRIS_LL_MAX_BYTES"));
  if (bytes) return *bytes;
  if (op == OpKind::kBroadcast) return kLLMaxBytesBroadcast;
  return op == OpKind::kReduceScatter ? kLLMaxBytesReduce : kLLMaxBytesCopy;
}

// The reasoning and the measurements behind 2 KiB are in ll_exchange.cu (the grid).
constexpr size_t kLLBlockBytes = size_t{2} << 10;

size_t ll_block_bytes_from(const char* env) {
  if (env == nullptr || *env == '\0') return kLLBlockBytes;
  try {
    return parse_byte_size(env);  // refuses 0 too
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("IRIS_LL_BLOCK_BYTES: ") + e.what() + " (bytes of LL lines per block, e.g. 2K)");
  }
}

size_t ll_block_bytes() {
  static const size_t bytes = ll_block_bytes_from(std::getenv("IRIS_LL_BLOCK_BYTES"));
  return bytes;
}

}  // namespace iris::ccl::detail

namespace iris::ccl {

bool uses_ll_exchange(OpKind op, size_t block_bytes, int world_size) {
  IRIS_CHECK_ARG(
      op == OpKind::kAllGather || op == OpKind::kReduceScatter || op == OpKind::kAllToAll || op == OpKind::kBroadcast,
      "uses_ll_exchange: ", op_name(op),
      " has no LL exchange of its own here (all_gather, reduce_scatter, all_to_all and broadcast have; "
      "all_reduce's one_shot protocol: resolve_one_shot_protocol).");
  IRIS_CHECK_ARG(world_size >= 1, "uses_ll_exchange: world_size must be at least 1, got ", world_size, ".");
  return world_size > 1 && block_bytes <= detail::ll_max_bytes(op);
}

}  // namespace iris::ccl
