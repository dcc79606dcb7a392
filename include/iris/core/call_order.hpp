// iris::CallOrder: calls that share device state (a workspace's arrays, a device barrier's epochs) run on
// the GPU one after another in the order they were made on the host, whatever streams they are made on.
//
//   order.before(stream);   // before the call's first launch on `stream`
//   kernel<<<..., stream>>>(...);
//   order.after(stream);    // after its last
//
// Without it two calls on two streams may run at once, or in the other order on one rank only, where
// their peers run them in turn: a rank then pairs its second call with its peers' first. NCCL leaves
// ordering calls on different streams to the caller (NCCL_LAUNCH_ORDER_IMPLICIT asks for it); here it
// costs an event record per call, so the objects that hold state between calls always keep it.
//
// A call made outside any CUDA graph capture waits for the last call made outside capture when their streams
// differ (an event recorded after every such call: by the next call its stream may be gone), whatever calls were
// captured between them; a call made within a capture waits for the last call when both were made within that
// capture on different streams (an event recorded on the last call's stream at the switch, which that capture
// keeps alive: the wait is then an edge of the graph, so the graph's replays keep the order, and a graph
// whose calls keep to one stream gets nothing added). Across the edge of a capture there is nothing to wait
// for at the time of the call: a call made eagerly after calls captured into a graph is ordered after that
// graph's replays only where it is made on the stream the graph is launched on, and the first captured call
// after eager ones only by the stream the capture began on, as for any kernel. A graph replayed on one stream
// and an eager call on another are not ordered: the caller must launch them on one stream or order them
// (an event). Closing this would take an external event record in the graph after each captured call and
// an external wait before the first, so that replays and eager calls wait on each other's latest record;
// not done (it adds two nodes per captured call, unmeasured, and needs a GPU to test).
//
// Eager calls' streams are told apart by their ids (cudaStreamGetId), not their handles: a stream destroyed
// while its call runs may hand its handle to the next stream created, whose calls must still wait for that
// call (within one capture the handles compare exactly: a stream taking part in it is not destroyed).
//
// Cost outside capture: a capture-status query, a stream-id query (between two capture-mode exchanges) and an
// event record per call. The record sits between
// a call's kernel and the next kernel of its stream, so a next collective launched with programmatic dependent launch
// (src/ccl/ccl_common.cuh) can no longer be scheduled before this one ends: eager calls back to back may lose that
// launch-latency overlap (not measured yet); captured calls keep it.
#pragma once

#include <cuda_runtime_api.h>

namespace iris {

class CallOrder {
 public:
  CallOrder() = default;
  CallOrder(const CallOrder&) = delete;
  CallOrder& operator=(const CallOrder&) = delete;
  CallOrder(CallOrder&& other) noexcept;
  CallOrder& operator=(CallOrder&& other) noexcept;
  ~CallOrder();

  // Before a call's first launch on `stream`: makes the stream wait for the last call (see above).
  void before(cudaStream_t stream);
  // After a call's last launch on `stream`: records where the call ends (outside capture: creating the
  // event, on the current device, at the first call).
  void after(cudaStream_t stream);

 private:
  static void create_event(cudaEvent_t& event);
  void destroy() noexcept;
  cudaEvent_t event_ = nullptr;          // recorded after the last call made outside capture
  cudaEvent_t capture_event_ = nullptr;  // recorded within a capture, at a switch of streams
  cudaStream_t stream_ = nullptr;        // the last call's stream (compared and used only within its capture)
  unsigned long long eager_stream_id_ = 0;  // the last eager call's stream's id (cudaStreamGetId: a handle may be
                                            // reused by a stream created later, an id is not)
  unsigned long long capture_ = 0;       // the capture sequence the last call was made in; 0: none
  bool called_ = false;                  // a call was made (stream_ and capture_ say where)
  bool eager_called_ = false;            // a call was made outside capture (eager_stream_id_ says where)
  // The id before() asked of this call's stream, asked_stream_, for after() (one query per eager call); 0: none.
  unsigned long long asked_id_ = 0;
  cudaStream_t asked_stream_ = nullptr;
};

}  // namespace iris
