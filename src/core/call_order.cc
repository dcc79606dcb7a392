// iris::CallOrder (include/iris/core/call_order.hpp): an event per object, recorded after each call and
// waited on by a call on another stream.
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
    recorded_ = std::exchange(other.recorded_, false);
  }
  return *this;
}

CallOrder::~CallOrder() { destroy(); }

void CallOrder::destroy() noexcept {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);  // a device reset since leaves nothing to free
  event_ = nullptr;
  recorded_ = false;
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
  if (!recorded_ || stream == stream_) return;  // one stream orders its calls itself
  if (capture_of(stream) != capture_) return;   // across a capture's edge (see the class)
  IRIS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void CallOrder::after(cudaStream_t stream) {
  if (event_ == nullptr) IRIS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  const unsigned long long capture = capture_of(stream);
  IRIS_CUDA_CHECK(cudaEventRecord(event_, stream));
  stream_ = stream;
  capture_ = capture;
  recorded_ = true;
}

}  // namespace iris
