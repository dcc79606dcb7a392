#include "iris/core/error.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "core/driver_api.hpp"

namespace iris::detail {

namespace {
// What to do about the errors a CUDA graph capture raises (the runtime's and the driver's codes are the same
// numbers), or "". The one iris most often meets: a preamble, reserve_workspace, an allocation or a Context made
// while the caller captures a stream of its own in cudaStreamCaptureModeGlobal (PyTorch's default): iris's
// refusal looks only at the context's stream, which is not captured, and the first call that a capture
// forbids (cudaMalloc, a synchronization) fails with the runtime's bare text and ends the caller's capture.
std::string capture_hint(int code) {
  static_assert(int{cudaErrorStreamCaptureUnsupported} == int{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED} &&
                int{cudaErrorStreamCaptureInvalidated} == int{CUDA_ERROR_STREAM_CAPTURE_INVALIDATED} &&
                int{cudaErrorStreamCaptureImplicit} == int{CUDA_ERROR_STREAM_CAPTURE_IMPLICIT});
  constexpr const char* kSetup =
      "iris's setup calls (Context creation, allocations, reserve_workspace and the preambles: they allocate, "
      "zero and synchronize) cannot be made while a capture is open, whichever stream it captures; make them "
      "before the capture begins and capture the calls only";
  switch (code) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureImplicit:
      return str_cat(
          "\n  (a CUDA graph is being captured on this thread, or on another in "
          "cudaStreamCaptureModeGlobal, and forbids this call; ",
          kSetup, ")");
    case cudaErrorStreamCaptureInvalidated:
      return str_cat(
          "\n  (the CUDA graph capture was invalidated by an earlier error or forbidden call; end it, "
          "discard the graph and capture again; ",
          kSetup, ")");
    default:
      return "";
  }
}
}  // namespace

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  auto err = static_cast<cudaError_t>(code);
  throw CudaError(str_cat("CUDA error ", cudaGetErrorName(err), " (", code, "): ", cudaGetErrorString(err), "\n  in ",
                          call, "\n  at ", file, ":", line, capture_hint(code)),
                  code);
}

void throw_cu_error(int code, const char* call, const char* file, int line) {
  auto res = static_cast<CUresult>(code);
  const char* name = driver::error_name(res);
  const char* text = driver::error_string(res);
  throw CuError(str_cat("CUDA driver error ", name, " (", code, "): ", text, "\n  in ", call, "\n  at ", file, ":",
                        line, capture_hint(code)),
                code);
}

void throw_sys_error(int err, const char* call, const char* file, int line) {
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));
  throw SysError(str_cat("system call failed: ", text, " (errno ", err, ")\n  in ", call, "\n  at ", file, ":", line),
                 err);
}

}  // namespace iris::detail
