// CUDA queries that read state only (a stream's id or device, a pointer's attributes) yet count as
// "potentially unsafe" under stream capture: while this thread captures a graph in global or thread-local
// mode, or another thread in global mode, the runtime refuses them with cudaErrorStreamCaptureUnsupported and
// invalidates the capture. An op captured into a graph makes them at every call, so they run in relaxed mode,
// this thread's mode restored after.
#pragma once

#include <cuda_runtime_api.h>

#include "iris/core/cuda_check.hpp"

namespace iris::detail {

// Runs `query` (returning a cudaError_t) in relaxed capture mode and returns its result; this thread's
// mode is restored on every path (a thread left relaxed would let unsafe calls through later captures).
template <typename Query>
cudaError_t relaxed_query(Query&& query) {
  struct Restore {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    ~Restore() { (void)cudaThreadExchangeStreamCaptureMode(&mode); }
  };
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  IRIS_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  Restore restore{mode};
  return query();
}

}  // namespace iris::detail
