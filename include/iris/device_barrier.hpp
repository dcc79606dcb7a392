// iris::DeviceBarrier: a barrier across ranks that runs on the GPU, as a stream operation or inside a
// kernel, and survives CUDA-graph capture and replay.
//
//   iris::DeviceBarrier barrier(ctx);          // collective, once, up front
//   produce<<<..., stream>>>(ctx.device_context(), ...);
//   barrier.arrive_and_wait(stream);           // every rank's earlier work on its stream is visible
//   consume<<<..., stream>>>(ctx.device_context(), ...);
//
//   // inside a kernel (iris/device/barrier.cuh), every thread of the block:
//   if (!iris::device::barrier_block(ctx, handle, blockIdx.x)) return;
//
// The epochs live in device memory (the symmetric heap) and only the kernels advance them, so a graph
// that captured arrive_and_wait stays correct when replayed any number of times, on every rank the
// same number of times. See iris/device/barrier.cuh for the protocol and the guarantee.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "iris/context.hpp"
#include "iris/core/call_order.hpp"
#include "iris/device/barrier.cuh"

namespace iris {

class DeviceBarrier {
 public:
  using DeviceHandle = DeviceBarrierHandle;

  // Collective (every rank, same order as its other heap allocations): allocates num_slots *
  // world_size epoch words on the heap, zeroes them, and waits for every rank (ctx.barrier()) so that
  // no rank can arrive before a peer has zeroed its words. Throws InvalidArgument when num_slots < 1.
  explicit DeviceBarrier(Context& ctx, int num_slots = 1);
  // Collective free of the words. Destroy it only when no kernel using it is still running or queued
  // (e.g. after ctx.barrier()), on every rank, in the same order as other frees.
  ~DeviceBarrier();
  DeviceBarrier(const DeviceBarrier&) = delete;
  DeviceBarrier& operator=(const DeviceBarrier&) = delete;
  DeviceBarrier(DeviceBarrier&& other) noexcept;
  DeviceBarrier& operator=(DeviceBarrier&&) = delete;

  // Enqueues one crossing of slot 0 on `stream` (a one-block kernel; nullptr: ctx.stream(), and a stream of
  // another device is refused, as the ops do: Context::op_stream): work queued on `stream` after it
  // starts once every rank has reached its own arrive_and_wait, and sees everything every rank's
  // stream did before its arrival. Capturable in a CUDA graph. Does not block the host. A crossing that
  // times out is reported by ctx.synchronize()/check_device_error() as iris::TimeoutError naming
  // "barrier_block". Crossings of one slot must not overlap in time on a rank: arrive_and_wait orders its
  // own crossings, on any streams, as they were made (iris::CallOrder; since 2026-12-05, before which two
  // streams' crossings could overlap); in-kernel barrier_block calls on slot 0 are the caller's to order
  // against them.
  // A crossing that gave up leaves the epochs out of step between ranks (the rank that arrived alone is
  // one ahead, and a peer's next crossing would pass on its abandoned arrival), so after a device error
  // on this rank (a TimeoutError, or a misuse: Context::device_timeouts()) it throws InvalidArgument
  // saying to create a new DeviceBarrier on every rank. Kernels that cross with handle() must check that
  // themselves.
  void arrive_and_wait(cudaStream_t stream);
  // On ctx.stream().
  void arrive_and_wait() { arrive_and_wait(ctx_->stream()); }

  // POD handle for kernels (barrier_block); valid while this object lives.
  DeviceHandle handle() const { return DeviceHandle{epochs_, num_slots_}; }
  int num_slots() const { return num_slots_; }

 private:
  Context* ctx_;
  uint64_t* epochs_ = nullptr;
  int num_slots_ = 0;
  uint64_t timeouts_ = 0;  // ctx_->device_timeouts() when created
  CallOrder order_;
};

}  // namespace iris
