// Host-side helpers shared by the collective entry points: argument validation (identical on every
// rank, so every rank raises together), launch sizing, and staging layout.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/tensor.hpp"

namespace iris::ccl::detail {

// Who a plan is made for. A call plans for its context: its rank, the world, and the device's SMs,
// which size the launch. Sizing ahead (the public *_needs functions) plans for a world size alone, from
// views whose data may be null: the checks of the data (null, alignment, overlap) are skipped, every
// other check is the call's, and no plan's workspace needs depend on the rank or the SMs.
struct PlanScope {
  int rank = 0;
  int world = 1;
  int sms = 1;
  bool shapes_only = false;
  // The context a call plans for (null when sizing ahead): its heap says whether a view lies in it whole.
  const Context* ctx = nullptr;

  static PlanScope of(const Context& ctx);
  // Throws InvalidArgument naming `op` unless world_size >= 1.
  static PlanScope sizing(const char* op, int world_size);
};

// What all_reduce's preamble compares across ranks for this call, as the scope's device would plan it
// (host tests; the preamble takes it from its plan).
OpSignature all_reduce_signature(const PlanScope& s, const Tensor& out, const Tensor& in, const Config& config,
                                 ReduceOp op = ReduceOp::kSum);

// Epoch words in block_state (ccl_common.cuh: state[0] last completed epoch, state[1] finished blocks).
inline constexpr int kCollectiveEpochWords = 2;

// The block state every op sizes (ccl and the fused ops alike), by the world size alone, so that one
// workspace's block state serves every op of its context: the epoch words, then all_reduce's layout fence
// (ccl_common.cuh, layout_fence): the last call's layout key (state[2]), one word per rank (state[3 + s])
// and two per rank (state[3 + W + 2s + parity]) for the keys the peers' calls fence with. The other
// collectives use the epoch words, the fused ops state[0]. Before 2026-12-03 each op sized its own (2, 3 + W,
// or 2 per fused block), and a workspace prepared for one op was refused by the next as "too small".
// Then the call words (DeviceContext::call_words: the epoch and key of the latest call a kernel started on
// the workspace, stored by begin_call, read by a wait that gives up), from 2026-12-05, and the stop word (the
// epoch of a call whose wait gave up, which skips the later calls), from 2026-12-06; then, per parity, the
// epoch at which the LL exchanges last cleaned that parity of the staging (ll_exchange.cu), from 2026-12-05
// too: 8 + 3W words.
inline constexpr size_t kCallWords = 3;
inline size_t call_words_offset(int world) { return static_cast<size_t>(kCollectiveEpochWords + 1 + 3 * world); }
inline size_t ll_clean_offset(int world) { return call_words_offset(world) + kCallWords; }
inline size_t block_state_words(int world) { return ll_clean_offset(world) + 2; }

// The DeviceContext of a collective's call of `sig` on `ws`: the context's, with the workspace's call words
// and the call's key (OpSignature::key), so that a wait that gives up can name a peer that is in another
// call or has not started this one (timeout.cuh).
DeviceContext call_context(const Context& ctx, const Workspace& ws, const OpSignature& sig);

// Throws InvalidArgument naming `op` and `what` ("input", "output") when the view is malformed
// (Tensor::problem: unknown dtype, negative sizes, stride < cols, a span past 2^48 bytes, and unless
// s.shapes_only null data for a non-empty view), or unless s.shapes_only its data is not aligned to
// the element, or it lies in the heap but not within one live allocation of this rank's
// (Context::heap_span_problem: a peer's memory, a freed block, or an output described larger than it
// was allocated, whose writes would land in the next heap object).
void check_view(const char* op, const char* what, const Tensor& t, const PlanScope& s);
// Throws InvalidArgument naming `op` unless `in` and `out` have one dtype and, with `same_shape` (the ops whose
// output is shaped as their input), one shape.
void check_matching(const char* op, const Tensor& out, const Tensor& in, bool same_shape);
// all_gather's input in its output, reduce_scatter's output in its input: `part` (named `part_name`) is either
// exactly this rank's rows of `whole` (named `whole_name`), in place (returns true), or apart from it; a view
// that overlaps it otherwise throws InvalidArgument naming `op`. Sizing ahead (s.shapes_only) knows no buffers.
bool rank_rows_in_place(const char* op, const PlanScope& s, const Tensor& whole, const char* whole_name,
                        const Tensor& part, const char* part_name);
// Throws when a and b partly overlap (identical views are allowed when `allow_same`).
void check_no_partial_overlap(const char* op, const Tensor& a, const Tensor& b, bool allow_same);
// True when the view is contiguous and its data 16-byte aligned.
bool vec16(const Tensor& t);
// Multiprocessors of the context's device.
int sm_count(const Context& ctx);
// The most blocks a communication launch of `op` may take: Config::comm_sms, or every SM of the device
// when it is 0. The blocks of a launch wait for blocks of the peers' launches, so all of them must get to
// run: one block per SM is resident once other kernels make room, while blocks past the device's SMs may
// wait for room that blocks spinning in their waits never give back (a TimeoutError instead of a
// result). Throws InvalidArgument naming `op` when comm_sms exceeds the device's SMs; sizing ahead
// (s.shapes_only) knows no device and checks nothing. Every rank of one kind of GPU raises alike, in
// the preamble's exchange and at the call.
int comm_block_limit(const char* op, const PlanScope& s, const Config& config);
// Rounds up to 256 bytes (heap alignment) so arrays carved from one staging buffer stay aligned.
inline size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// LL exchanges (ll_exchange.cu) serve all_gather, reduce_scatter, all_to_all and broadcast blocks of at most
// ll_max_bytes(op) bytes: the measured rule in ccl_host.cc, or IRIS_LL_MAX_BYTES for every op (read
// once; it must be the same on every rank: it is part of the exchange's OpSignature, which the preamble
// compares).
size_t ll_max_bytes(OpKind op);
// IRIS_LL_MAX_BYTES's value `env` (null or empty: unset, so the measured rule): its bytes, 0 for "0" (never
// LL); throws InvalidArgument naming the variable on anything else parse_byte_size refuses.
std::optional<size_t> ll_max_bytes_from(const char* env);
// Bytes of LL lines one block of an LL launch pushes, summed over its peers (ll_launch): 2 KiB, or
// IRIS_LL_BLOCK_BYTES (read once; a launch shape only, so ranks may differ).
size_t ll_block_bytes();
// IRIS_LL_BLOCK_BYTES's value `env` (null or empty: 2 KiB) as bytes; throws InvalidArgument naming the
// variable on what parse_byte_size refuses (0 included).
size_t ll_block_bytes_from(const char* env);
// Words from parity 0 to parity 1 of an LL staging: half the capacity, in whole 16-byte lines.
inline int64_t ll_parity_words(const Workspace& ws) { return static_cast<int64_t>(ws.staging_capacity() / 2 / 16 * 2); }
// Words from one source's LL slot to the next within a parity: the parity's words over W, in whole lines. It
// depends on the workspace alone, not on the call, so that a rank finds a peer's header line where the peer
// wrote it even when their calls differ (which the header then says). The capacity check keeps it at least
// kLLHeaderWords + ll_words of every call the workspace serves (ll_staging_bytes).
inline int64_t ll_slot_words(int64_t parity_words, int world) { return parity_words / world / 2 * 2; }

// One rank: every collective's result is its input (a sum, min, max or avg over one rank is the value itself,
// exactly, also for 16-bit types; all_gather, reduce_scatter, all_to_all and broadcast move the one
// block onto itself). With one rank this copies `in` into `out` on `stream` (nothing when they are the
// same view), counts the call and returns true, as NCCL's one-rank path does; with more ranks it returns
// false. Called after every check the multi-rank path makes, so the same calls are refused.
bool single_rank_copy(const Context& ctx, const Tensor& out, const Tensor& in, Workspace& ws, cudaStream_t stream);

// A workspace that was never prepared cannot be launched with.
void require_prepared(const char* op, const char* preamble, const Workspace& ws);

// Nor one prepared before a device timeout was raised on this rank (Context::device_timeouts()): the
// kernels that gave up left its flags, epochs and staging out of step between ranks, so a call would
// wait for what never comes or take stale words for its own. Preparing it again (on every rank) starts
// its state over (Workspace::prepare).
void require_no_timeout_since_prepare(const Context& ctx, const char* op, const char* preamble, const Workspace& ws);

// Nor one whose arrays are not on this context's heap (prepared with another Context, or with one since
// destroyed): its kernels would reach peers at offsets of another heap. Then the timeout check above.
void require_of_context(const Context& ctx, const char* op, const char* preamble, const Workspace& ws);

// A preamble allocates, zeroes and synchronizes ctx.stream(), none of which a CUDA graph can capture (and
// the failed call would end the capture): throws InvalidArgument naming the op's preamble while
// ctx.stream() is being captured.
void require_not_capturing(const Context& ctx, OpKind op);

// The op's plan, then ws.prepare. When this rank's own validation (plan) throws, or its device fails the
// wait for an earlier op's calls, it still takes part
// in prepare's exchange of signatures with a description no other rank can match, so the ranks that
// validated raise "Collective parameters differ across ranks" instead of waiting for this one; then
// it rethrows its own error.
template <typename PlanFn>
void prepare_everywhere(Context& ctx, Workspace& ws, PlanFn&& plan) {
  ContextWorkspaceHost host(ctx);
  OpSignature sig;
  WorkspaceNeeds needs;
  try {
    auto p = plan();
    sig = p.sig;
    needs = p.needs;
    require_not_capturing(ctx, sig.op);
    // A workspace that served another collective: each op's reuse argument covers calls of that op only,
    // so let every call of the old op end (on any stream of this device) before prepare's exchange, which
    // then also orders them before every rank's first call of the new op. A device that failed here is
    // this rank's error, which its peers learn from the exchange instead of waiting for it.
    if (ws.prepared() && ws.signature().op != sig.op) IRIS_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    host.allgather(std::string("invalid call on rank ") + std::to_string(ctx.rank()) + ": " + e.what());
    throw;
  }
  ws.prepare(host, sig, needs);
}

// A workspace serves the op it was last prepared for: each op's reuse argument (its kernel's comment)
// holds between calls of that op only. Its preamble on the same workspace moves it over to that op
// (Workspace::prepare starts its flags over), so one workspace may serve several ops in turn.
inline void require_op(const char* op, const char* preamble, const Workspace& ws, OpKind kind) {
  require_prepared(op, preamble, ws);
  IRIS_CHECK_ARG(ws.signature().op == kind, op, ": the workspace was last prepared for ", op_name(ws.signature().op),
                 "; call ", preamble, " with it first (on every rank), or give ", op, " a workspace of its own.");
}

// Everything a call checks of its workspace right before launch, whether or not the preamble ran: prepared
// for this op (require_op), on this context's heap with no device error since (require_of_context), and
// room for `needs` (never index past an array).
inline void require_ready(const Context& ctx, const char* op, const char* preamble, const Workspace& ws, OpKind kind,
                          const WorkspaceNeeds& needs) {
  require_op(op, preamble, ws, kind);
  require_of_context(ctx, op, preamble, ws);
  ws.check_capacity(needs);
}

// A call's own checks (its plan, then require_ready on its workspace), without its launch and without the
// comparison across ranks: for a caller that launches something the collective then reads, which must
// know first that the collective will take its arguments (the fused ops' unfused path checks it before
// its GEMM writes the collective's input). Throws what the call would throw.
void check_all_reduce_call(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                           const Workspace& ws, ReduceOp op = ReduceOp::kSum);
void check_reduce_scatter_call(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                               const Workspace& ws, ReduceOp op = ReduceOp::kSum);
void check_all_gather_call(const Context& ctx, const Tensor& out, const Tensor& in, const Config& config,
                           const Workspace& ws);

// A call's validation and, with Context::check_calls() (IRIS_CHECK_CALLS), its comparison across ranks
// before anything is launched. `validate` makes the call's plan and every check of its arguments and
// workspace, and returns the plan; `signature(plan)` is what the ranks compare (Workspace::check_call). A
// rank whose validation throws still takes part in the comparison with its reason, so that its peers raise
// too instead of launching kernels that wait for it (or, with other shapes, read and write its buffers in
// another layout); then it rethrows its own error. Without the mode this is validate() alone.
template <typename Validate, typename Signature>
auto checked_call(Context& ctx, const Workspace& ws, Validate&& validate, Signature&& signature) {
  if (!ctx.check_calls()) return validate();
  ContextWorkspaceHost host(ctx);
  std::optional<decltype(validate())> plan;
  try {
    plan.emplace(validate());
  } catch (const std::exception& e) {
    ws.check_call(host, nullptr, e.what());
    throw;
  }
  ws.check_call(host, &signature(*plan));
  return std::move(*plan);
}

}  // namespace iris::ccl::detail
