#include "ccl/ccl_host.hpp"

#include "iris/core/cuda_check.hpp"

namespace iris::ccl::detail {

void check_view(const char* op, const char* what, const Tensor& t) {
  IRIS_CHECK_ARG(t.rows >= 0 && t.cols >= 0, op, ": ", what, " has negative shape ", t.rows, "x", t.cols, ".");
  IRIS_CHECK_ARG(t.stride >= t.cols || t.rows <= 1, op, ": ", what, " row stride ", t.stride,
                 " is smaller than its ", t.cols, " columns.");
  IRIS_CHECK_ARG(t.numel() == 0 || t.data != nullptr, op, ": ", what, " is null but has ", t.numel(), " elements.");
  IRIS_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data) % t.element_size() == 0, op, ": ", what, " pointer ", t.data,
                 " is not aligned to its ", t.element_size(), "-byte ", dtype_name(t.dtype), " elements.");
}

void check_no_partial_overlap(const char* op, const Tensor& a, const Tensor& b, bool allow_same) {
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  const auto* a1 = a0 + a.span_bytes();
  const auto* b1 = b0 + b.span_bytes();
  if (a.numel() == 0 || b.numel() == 0 || a1 <= b0 || b1 <= a0) return;
  const bool same = a0 == b0 && a.rows == b.rows && a.cols == b.cols && a.stride == b.stride && a.dtype == b.dtype;
  IRIS_CHECK_ARG(allow_same && same, op, ": output and input overlap", allow_same ? " without being the same view" : "",
                 "; pass separate buffers", allow_same ? " or the same view for in-place" : "", ".");
}

bool vec16(const Tensor& t) { return t.contiguous() && reinterpret_cast<uintptr_t>(t.data) % 16 == 0; }

int sm_count(const Context& ctx) {
  int n = 0;
  IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, ctx.device()));
  return n;
}

void require_prepared(const char* op, const char* preamble, const Workspace& ws) {
  IRIS_CHECK_ARG(ws.prepared(), op, ": the workspace was never prepared; call ", preamble,
                 " with the same arguments and this workspace first (on every rank).");
}

}  // namespace iris::ccl::detail
