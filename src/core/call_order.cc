// iris::CallOrder (include/iris/core/call_order.hpp): an event recorded after each call made outside capture,
// waited on by the next eager call on another stream, and one recorded within a capture on the last call's
// stream at a switch, waited on by the call on the other stream.
#include "iris/core/call_order.hpp"

#include <utility>

#include "core/relaxed_query.hpp"
#include "iris/core/cuda_check.hpp"

namespace iris {

CallOrder::CallOrder(CallOrder&& other) noexcept { *this = std::move(other); }

CallOrder& CallOrder::operator=(CallOrder&& other) noexcept {
  if (this != &other) {
    destroy();
    event_ = std::exchange(other.event_, nullptr);
    capture_event_ = std::exchange(other.capture_event_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    eager_stream_id_ = std::exchange(other.eager_stream_id_, 0);
    asked_id_ = std::exchange(other.asked_id_, 0);
    asked_stream_ = std::exchange(other.asked_stream_, nullptr);
    capture_ = std::exchange(other.capture_, 0);
    called_ = std::exchange(other.called_, false);
    eager_called_ = std::exchange(other.eager_called_, false);
  }
  return *this;
}

CallOrder::~CallOrder() { destroy(); }

void CallOrder::destroy() noexcept {
  // A device reset since leaves nothing to free.
  for (cudaEvent_t* e : {&event_, &capture_event_}) {
    if (*e != nullptr) (void)cudaEventDestroy(*e);
    *e = nullptr;
  }
  called_ = false;
  eager_called_ = false;
}

namespace {
// The id of the capture sequence `stream` is being captured into, or 0 when it is not being captured.
unsigned long long capture_of(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  IRIS_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
  return status == cudaStreamCaptureStatusActive ? id : 0;
}
// The stream's id, which no other stream of the process has had: a stream destroyed while its call still
// runs can hand its handle to the next stream created, which a handle compared by value would take for the
// same stream, ordered by itself, and the next call there would skip its wait. A query a capturing thread
// may not make but in relaxed mode (relaxed_query).
unsigned long long id_of(cudaStream_t stream) {
  unsigned long long id = 0;
  const cudaError_t queried = detail::relaxed_query([&] { return cudaStreamGetId(stream, &id); });
  IRIS_CUDA_CHECK(queried);
  return id;
}
}  // namespace

void CallOrder::before(cudaStream_t stream) {
  asked_id_ = 0;  // an earlier call that threw between before() and after() leaves no id for this one
  if (!called_) return;
  const unsigned long long capture = capture_of(stream);
  if (capture == 0) {
    // An eager call waits for the last eager call, on whichever stream it was made, whatever calls were captured
    // since (their graphs' replays are another matter: see the class). Before 2026-12-06 a call captured in
    // between made this wait be skipped: eager calls on streams A, then B, with a capture on A between them,
    // could run at once on one workspace. Streams are told apart by id (id_of), asked once per call.
    if (!eager_called_) return;
    asked_id_ = id_of(stream);
    asked_stream_ = stream;
    if (asked_id_ != eager_stream_id_) IRIS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
    return;
  }
  // Within one capture sequence the handles compare exactly: the last call's stream still takes part in it, so
  // it was not destroyed, and no other stream has its handle.
  if (capture != capture_ || stream == stream_) return;  // across a capture's edge (see the class)
  // Both calls in one capture sequence, which is still active, so the last call's stream still takes part in
  // it: what it has captured so far ends with the last call (and whatever the caller captured on it since,
  // which only adds an edge). Recorded now rather than after every captured call, so that a graph whose calls
  // keep to one stream is the same graph as without the order; into an event of its own, so that the last
  // eager call's record stays for the eager calls after the capture.
  create_event(capture_event_);
  IRIS_CUDA_CHECK(cudaEventRecord(capture_event_, stream_));
  IRIS_CUDA_CHECK(cudaStreamWaitEvent(stream, capture_event_, 0));
}

void CallOrder::after(cudaStream_t stream) {
  const unsigned long long capture = capture_of(stream);
  // Outside capture the record must be made now: by the next call on another stream this one may be gone.
  if (capture == 0) {
    create_event(event_);
    IRIS_CUDA_CHECK(cudaEventRecord(event_, stream));
    // The call's stream lives until the call returns, so the id before() asked of it is still its own.
    eager_stream_id_ = asked_id_ != 0 && asked_stream_ == stream ? asked_id_ : id_of(stream);
    eager_called_ = true;
  }
  stream_ = stream;
  capture_ = capture;
  called_ = true;
  asked_id_ = 0;
}

void CallOrder::create_event(cudaEvent_t& event) {
  if (event == nullptr) IRIS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

}  // namespace iris
