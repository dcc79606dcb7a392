// iris::CallOrder (include/iris/core/call_order.hpp): one event per object, recorded after each call made
// outside capture (within a capture: on the last call's stream at a switch), waited on by a call on another
// stream.
#include "iris/core/call_order.hpp"

#include <utility>

#include "iris/core/cuda_check.hpp"

namespace iris {

CallOrder::CallOrder(CallOrder&& other) noexcept { *this = std::move(other); }

CallOrder& CallOrder::operator=(CallOrder&& other) noexcept {
  if (this != &other) {
    destroy();
    event_ = std::exchange(other.event_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    capture_ = std::exchange(other.capture_, 0);
    called_ = std::exchange(other.called_, false);
  }
  return *this;
}

CallOrder::~CallOrder() { destroy(); }

void CallOrder::destroy() noexcept {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);  // a device reset since leaves nothing to free
  event_ = nullptr;
  called_ = false;
}

namespace {
// The id of the capture sequence `stream` is being captured into, or 0 when it is not being captured.
unsigned long long capture_of(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  IRIS_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
  return status == cudaStreamCaptureStatusActive ? id : 0;
}
}  // namespace

void CallOrder::before(cudaStream_t stream) {
  if (!called_ || stream == stream_) return;  // one stream orders its calls itself
  const unsigned long long capture = capture_of(stream);
  if (capture != capture_) return;  // across a capture's edge (see the class)
  if (capture != 0) {
    // Both calls in one capture sequence, which is still active, so the last call's stream still takes part
    // in it: what it has captured so far ends with the last call (and whatever the caller captured on it
    // since, which only adds an edge). Recorded now rather than after every captured call, so that a graph
    // whose calls keep to one stream is the same graph as without the order.
    create_event();
    IRIS_CUDA_CHECK(cudaEventRecord(event_, stream_));
  }
  IRIS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void CallOrder::after(cudaStream_t stream) {
  const unsigned long long capture = capture_of(stream);
  // Outside capture the record must be made now: by the next call on another stream this one may be gone.
  if (capture == 0) {
    create_event();
    IRIS_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  stream_ = stream;
  capture_ = capture;
  called_ = true;
}

void CallOrder::create_event() {
  if (event_ == nullptr) IRIS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

}  // namespace iris
