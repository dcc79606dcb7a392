// Host side of iris::DeviceBarrier: the epoch words and the one-block kernel behind arrive_and_wait.
#include "iris/device_barrier.hpp"

#include <utility>

#include "core/kernel_modules.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/log.hpp"
#include "iris/device/barrier.cuh"

namespace iris {
namespace {

__global__ void device_barrier_kernel(const __grid_constant__ DeviceContext ctx, DeviceBarrierHandle barrier) {
  // A timeout is recorded in ctx.error for the host; nothing else to do here either way.
  (void)device::barrier_block(ctx, barrier, 0);
}

}  // namespace

// Loaded with every kernel of this file when a Context is created (core/kernel_modules.hpp).
IRIS_KERNEL_MODULE(device_barrier_kernel)

DeviceBarrier::DeviceBarrier(Context& ctx, int num_slots)
    : ctx_(&ctx), num_slots_(num_slots), timeouts_(ctx.device_timeouts()) {
  IRIS_CHECK_ARG(num_slots >= 1, "DeviceBarrier needs at least one slot, got ", num_slots, ".");
  epochs_ = ctx.zeros<uint64_t>(static_cast<size_t>(num_slots) * static_cast<size_t>(ctx.world_size()));
  // A peer's first arrival writes into this rank's words; it must not land before they are zeroed.
  try {
    ctx.barrier();
  } catch (...) {
    // A barrier that raises (a pending device error, damaged heap guards, an allocation out of step) raises on
    // every rank, and no destructor runs: the words freed here, on every rank alike (before 2026-12-07 they
    // stayed allocated for the context's life).
    try {
      ctx.free(std::exchange(epochs_, nullptr));
    } catch (const std::exception& e) {  // a sticky device error, say: the barrier's error goes on, not this one
      IRIS_LOG_ERROR("DeviceBarrier: freeing its epoch words failed: ", e.what());
    }
    throw;
  }
}

DeviceBarrier::DeviceBarrier(DeviceBarrier&& other) noexcept
    : ctx_(other.ctx_),
      epochs_(std::exchange(other.epochs_, nullptr)),
      num_slots_(other.num_slots_),
      timeouts_(other.timeouts_),
      order_(std::move(other.order_)) {}

DeviceBarrier::~DeviceBarrier() {
  if (epochs_ == nullptr) return;
  try {
    ctx_->free(epochs_);
  } catch (const std::exception& e) {
    IRIS_LOG_ERROR("DeviceBarrier: freeing its epoch words failed: ", e.what());
  }
}

void DeviceBarrier::arrive_and_wait(cudaStream_t stream) {
  IRIS_CHECK_ARG(ctx_->device_timeouts() == timeouts_,
                 "DeviceBarrier::arrive_and_wait: a device error (an iris::TimeoutError, a kernel's misuse, or calls "
                 "that differed across ranks) was "
                 "raised on this rank since this barrier was created, so its epochs may be out of step between ranks; "
                 "create a new DeviceBarrier on every rank.");
  // One thread per rank (rounded up to whole warps), so every peer's word is written and polled in
  // parallel; ranks beyond 1024 are handled by the strided loops in barrier_block.
  const detail::DeviceGuard device(ctx_->device());  // the calling thread may have another device current
  stream = ctx_->op_stream("DeviceBarrier::arrive_and_wait", stream);
  int world = ctx_->world_size();
  int threads = ((world + 31) / 32) * 32;
  if (threads > 1024) threads = 1024;
  order_.before(stream);
  device_barrier_kernel<<<1, threads, 0, stream>>>(ctx_->device_context(), handle());
  IRIS_CUDA_CHECK_LAUNCH();
  order_.after(stream);
}

}  // namespace iris
