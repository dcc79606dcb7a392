// iris::ccl — collectives over the symmetric heap.
//
//   iris::ccl::Workspace ws;
//   iris::ccl::all_reduce_preamble(ctx, out, in, config, ws);   // collective, once (allocates)
//   for (...) iris::ccl::all_reduce(ctx, out, in, config, ws);  // stream-ordered, graph-capturable
//
// Tensors are 2-D row-major views (iris::Tensor: pointer, dtype, rows, cols, row stride); a 1-D
// buffer is one row. They may live anywhere in device memory (symmetric heap or cudaMalloc): data
// crosses NVLink through the workspace's staging buffers on the heap (pushed into a peer's staging,
// or pulled from it), so the ops never write into a peer's output buffer. Staging takes about the
// size of the tensor per rank (two_shot, reduce_scatter), twice the output for all_gather and
// all_to_all (two parities), and W x 16 bytes per 4 data bytes for one_shot (small sizes).
//
// Every call is asynchronous on `stream` (nullptr, the default: ctx.stream(), which does not wait for
// CUDA's legacy default stream; pass cudaStreamLegacy for that; a stream of another device than ctx.device()
// is refused), allocates nothing, talks to no host peer, and is capturable in a CUDA graph: flags carry generations
// kept in device memory, so repeated calls and graph replays need no barrier and no re-zeroing. Every rank must make
// the same calls with the same workspace in the same order. One all_reduce workspace serves every variant and shape it
// has the capacity for, in any order (a call whose layout differs from the last one's first waits until every rank has
// finished that one); a workspace prepared again for another op serves it.
//
// Preambles are collective: they compare the call's parameters across ranks (all raise together on
// a mismatch), allocate what the workspace is missing, keep larger arrays and reject smaller ones
// (see workspace.hpp). The ops check capacity again right before launch and throw the same
// messages; a workspace that was never prepared is rejected.
//
// Reductions: sum, prod, max, min and avg (the sum divided by the world size once, at the end: see
// ReduceOp), of every DType, in every variant; atomic takes sum and avg only. 16-bit and 8-bit floats
// accumulate in float32 and round once (float8 saturating at its largest finite value), int8 and uint8
// in 32 bits, the others in their own type (integer sums and products wrap in the element type, as in
// NCCL). Every rank receives bitwise-identical results: each element is reduced once (in a fixed rank
// order for one_shot, two_shot and reduce_scatter; in tile order for ring; in arrival order for atomic
// and spinlock, whose single result is then copied to every rank). atomic adds with the GPU's float32
// atomics, which flush subnormal float32 operands and sums (magnitudes below 2^-126) to zero of the same
// sign; every other variant keeps them. all_gather, all_to_all and broadcast move any DType bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/tensor.hpp"

namespace iris::ccl {

// ---- all_reduce: out = reduce over ranks of in (same shape). out == in (in place) is allowed. ----
void all_reduce_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                         ReduceOp op = ReduceOp::kSum);
void all_reduce(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream = nullptr, ReduceOp op = ReduceOp::kSum);
// The variant `auto` resolves to for this size, world and dtype (the measured rule).
AllReduceVariant resolve_all_reduce_variant(const Config& config, int world_size, size_t bytes, DType dtype,
                                            int64_t rows);
// The protocol one_shot uses for a tensor of `bytes` bytes: the config's, or for `auto` LL up to
// 1 MiB (where `auto` picks one_shot at all) and simple above.
OneShotProtocol resolve_one_shot_protocol(const Config& config, size_t bytes);
// Whether all_gather, reduce_scatter, all_to_all or broadcast (`op`) moves a call whose block is `block_bytes`
// bytes as LL lines (data and flag in one word, one hop) rather than in chunks with flags, at `world_size` ranks:
// the measured rule, or IRIS_LL_MAX_BYTES. The block: all_gather's input, reduce_scatter's output, one rank's rows
// of all_to_all's input, broadcast's tensor. The calls decide by this function. Throws InvalidArgument for any
// other op and for world_size < 1.
bool uses_ll_exchange(OpKind op, size_t block_bytes, int world_size);

// ---- all_gather: out (W*m x n) = rows of every rank's in (m x n), rank r's block at rows [r*m, (r+1)*m). ----
void all_gather_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws);
void all_gather(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream = nullptr);

// ---- reduce_scatter: out (m x n) = rank r's block [r*m, (r+1)*m) of the reduction of in (W*m x n). ----
void reduce_scatter_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                             ReduceOp op = ReduceOp::kSum);
void reduce_scatter(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                    cudaStream_t stream = nullptr, ReduceOp op = ReduceOp::kSum);

// ---- all_to_all: in and out are (W*m x n); in's block j goes to rank j, out's block i came from rank i. ----
void all_to_all_preamble(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws);
void all_to_all(Context& ctx, const Tensor& out, const Tensor& in, const Config& config, Workspace& ws,
                cudaStream_t stream = nullptr);

// ---- broadcast: out = root's in on every rank (in is read on the root only; out == in allowed). ----
void broadcast_preamble(Context& ctx, const Tensor& out, const Tensor& in, int root, const Config& config,
                        Workspace& ws);
void broadcast(Context& ctx, const Tensor& out, const Tensor& in, int root, const Config& config, Workspace& ws,
               cudaStream_t stream = nullptr);

// ---- sizing ahead: a call's workspace from its arguments alone (no GPU, no Context) ----
// What the preamble of this call on `world_size` ranks allocates into a fresh workspace (the variant auto
// picks, the arrays it needs), after the call's own checks of the config and the views, with the same
// exceptions. Only shapes and types count: the views' data may be null. With heap_bytes (workspace.hpp)
// this sizes the heap (ContextOptions::heap_size, IRIS_HEAP_SIZE) before the Context exists:
//
//   auto t = iris::Tensor::vector(nullptr, iris::DType::kBFloat16, 4 << 20);
//   size_t ws_bytes = iris::ccl::heap_bytes(iris::ccl::all_reduce_needs(t, t, cfg, world_size));
//
// A workspace kept across calls holds the largest array each of them needed (see workspace.hpp).
WorkspaceNeeds all_reduce_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size,
                                ReduceOp op = ReduceOp::kSum);
WorkspaceNeeds all_gather_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size);
WorkspaceNeeds reduce_scatter_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size,
                                    ReduceOp op = ReduceOp::kSum);
WorkspaceNeeds all_to_all_needs(const Tensor& out, const Tensor& in, const Config& config, int world_size);
WorkspaceNeeds broadcast_needs(const Tensor& out, const Tensor& in, int root, const Config& config, int world_size);

// ---- one workspace for a set of calls ----
// Collective: gives a workspace that holds no arrays yet the arrays every call of a set needs, so that
// their preambles, in any order, allocate nothing and refuse nothing. A workspace otherwise sizes each
// array by the first preamble that needs it, and no one call need size all of them: the tile variants
// (atomic, spinlock, ring) take more locks and flags with smaller blocks, and more staging with larger
// blocks wherever the tiles do not divide the tensor or its tiles do not divide among the ranks (at 3
// ranks a 512 x 512 float32 tensor stages 22 tiles of 64 x 64 per rank, or 6 of 128 x 128: more bytes).
//
//   iris::ccl::WorkspaceNeeds most;
//   for (const iris::ccl::Config& cfg : configs) most.include(iris::ccl::all_reduce_needs(t, t, cfg, world));
//   iris::ccl::reserve_workspace(ctx, ws, most);
//   for (const iris::ccl::Config& cfg : configs) iris::ccl::all_reduce_preamble(ctx, t, t, cfg, ws);
//
// Every rank must pass the same needs; a workspace that holds arrays is refused (Workspace::reserve).
// The calls still need their own preambles.
void reserve_workspace(Context& ctx, Workspace& ws, const WorkspaceNeeds& needs);

}  // namespace iris::ccl
