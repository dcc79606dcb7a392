// A CUDA graph capture of one stream that ends whatever happens. A check that throws between
// cudaStreamBeginCapture and cudaStreamEndCapture would otherwise leave the capture open, and a capture left
// open in cudaStreamCaptureModeGlobal forbids the setup calls of every thread of the process: with ranks as
// threads, the peers' teardown and every later test would fail with capture errors that hide the first failure.
#pragma once

#include <cuda_runtime_api.h>

#include "iris/core/cuda_check.hpp"

namespace iris::test {

class ScopedCapture {
 public:
  ScopedCapture(cudaStream_t stream, cudaStreamCaptureMode mode) : stream_(stream) {
    IRIS_CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
  }
  ~ScopedCapture() {
    if (!open_) return;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // an invalidated capture's error is the throwing check's business
  }
  ScopedCapture(const ScopedCapture&) = delete;
  ScopedCapture& operator=(const ScopedCapture&) = delete;

  // Ends the capture and returns its graph (the caller destroys it); throws if the capture was invalidated.
  cudaGraph_t end() {
    cudaGraph_t graph = nullptr;
    IRIS_CUDA_CHECK(end(&graph));
    return graph;
  }
  // Ends the capture: its status, and the graph in *graph (nullptr when there is none). A failed end's error
  // is returned and not also left as the thread's last error, where the next check of a launch would find it
  // and report it as that launch's (with heap guards, the next preamble's guard fill did so).
  cudaError_t end(cudaGraph_t* graph) {
    open_ = false;
    *graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, graph);
    if (ended != cudaSuccess) (void)cudaGetLastError();
    return ended;
  }

 private:
  cudaStream_t stream_;
  bool open_ = true;
};

}  // namespace iris::test
