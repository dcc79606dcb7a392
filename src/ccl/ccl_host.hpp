// Host-side helpers shared by the collective entry points: argument validation (identical on every
// rank, so every rank raises together), launch sizing, and staging layout.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "iris/ccl/config.hpp"
#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/tensor.hpp"

namespace iris::ccl::detail {

// Throws InvalidArgument naming `op` and `what` ("input", "output") when the view is malformed:
// negative sizes, stride < cols, null data for a non-empty view, data not aligned to the element.
void check_view(const char* op, const char* what, const Tensor& t);
// Throws when a and b partly overlap (identical views are allowed when `allow_same`).
void check_no_partial_overlap(const char* op, const Tensor& a, const Tensor& b, bool allow_same);
// True when the view is contiguous and its data 16-byte aligned.
bool vec16(const Tensor& t);
// Multiprocessors of the context's device.
int sm_count(const Context& ctx);
// The stream to launch on.
inline cudaStream_t pick_stream(const Context& ctx, cudaStream_t s) { return s != nullptr ? s : ctx.stream(); }
// Rounds up to 256 bytes (heap alignment) so arrays carved from one staging buffer stay aligned.
inline size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// A workspace that was never prepared cannot be launched with.
void require_prepared(const char* op, const char* preamble, const Workspace& ws);

}  // namespace iris::ccl::detail
