// Checks for CUDA runtime and driver calls: a failure throws iris::CudaError / iris::CuError whose
// what() carries the call text, file:line, the error name and the error string.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "iris/core/error.hpp"

#define IRIS_CUDA_CHECK(expr)                                                                       \
  do {                                                                                              \
    cudaError_t iris_err_ = (expr);                                                                 \
    if (iris_err_ != cudaSuccess) ::iris::detail::throw_cuda_error(iris_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define IRIS_CU_CHECK(expr)                                                                         \
  do {                                                                                              \
    CUresult iris_res_ = (expr);                                                                    \
    if (iris_res_ != CUDA_SUCCESS) ::iris::detail::throw_cu_error(iris_res_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: surfaces launch-configuration errors at the launch site.
#define IRIS_CUDA_CHECK_LAUNCH() IRIS_CUDA_CHECK(cudaGetLastError())

namespace iris::detail {

// True while `stream` is being captured into a CUDA graph (allocations, memsets and synchronizations,
// which a graph cannot capture, must be refused then rather than end the capture with a CUDA error).
inline bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  IRIS_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Makes `device` the calling thread's current CUDA device for a scope, and gives the caller its own back
// at the end, as NCCL's calls do. Every entry point that takes a Context holds one for the context's
// device: its kernels, events, memsets and device queries then go to that device whatever the calling
// thread had current (a thread pool's worker, a thread that never chose one: device 0, or one that a
// framework moved elsewhere), instead of failing with "invalid resource handle" or, for queries,
// answering for another GPU. No call to cudaSetDevice when the device is already current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    int current = 0;
    IRIS_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device) {
      IRIS_CUDA_CHECK(cudaSetDevice(device));
      previous_ = current;
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);  // the caller's device existed: it was current
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // the caller's device, when this guard changed it
};

}  // namespace iris::detail
