#include "iris/core/error.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "core/driver_api.hpp"

namespace iris::detail {

namespace {
// What to do about the errors a CUDA graph capture raises (the runtime's and the driver's codes are the same
// numbers), or "". The one iris most often meets: a setup call (a preamble, reserve_workspace, release(), an
// allocation, a Context made or destroyed) while the caller captures a stream of its own: iris's refusal looks
// only at the context's stream, which is not captured, and the first call that the capture forbids (a device
// synchronization, cudaMalloc) fails with the runtime's bare text and ends the caller's capture.
std::string capture_hint(int code) {
  static_assert(int{cudaErrorStreamCaptureUnsupported} == int{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED} &&
                int{cudaErrorStreamCaptureInvalidated} == int{CUDA_ERROR_STREAM_CAPTURE_INVALIDATED} &&
                int{cudaErrorStreamCaptureImplicit} == int{CUDA_ERROR_STREAM_CAPTURE_IMPLICIT});
  const std::string setup =
      "iris's setup calls (a Context's creation and destruction, allocations, reserve_workspace, the preambles "
      "and release(): they allocate, zero and synchronize) cannot be made while a capture is open, whichever "
      "stream it captures; make them before the capture begins or after it ends, and capture the calls only)";
  switch (code) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureImplicit:
      return "\n  (a CUDA graph is being captured, on a stream of this device or by a thread in "
             "cudaStreamCaptureModeGlobal, and the capture forbids this call; " +
             setup;
    case cudaErrorStreamCaptureInvalidated:
      return "\n  (the CUDA graph capture was invalidated by an earlier error or forbidden call; end it, discard "
             "the graph and capture again; " +
             setup;
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
