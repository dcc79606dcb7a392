// Setting up ahead what a first launch would otherwise set up while waiting for the device to idle.
//
// Loading a kernel ahead (core/kernel_modules.hpp) is not all a first launch waits for. Measured on an H100
// and an H200 (CUDA 13 driver 580), beside a kernel spinning 3 s on another stream of the process:
//   - the process's first launch of any kernel that contains a printf, even one never reached, ran only
//     after the spinning kernel had ended (the driver sets up the device's printf buffer then). Every iris
//     kernel with a bounded wait names printf on its error path (device/timeout.cuh), so this was the first
//     iris call of a process, whichever op it was;
//   - a kernel whose local memory (stack) per thread exceeds the device's stack limit (cudaLimitStackSize,
//     1 KiB by default) blocked the host in its launch until the device had idled: the driver grows the
//     stack then, and keeps it grown.
// Context creation therefore raises the stack limit to the deepest iris kernel's and launches one
// printf-bearing kernel, while it is waiting for its peers anyway, as NCCL raises the stack limit to its
// deepest kernel's when a communicator is created (NCCL_SET_STACK_SIZE).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace iris::detail {

struct FirstLaunchReport {
  size_t stack_before = 0;  // the device's stack limit (bytes per thread) found
  size_t stack_after = 0;   // and left: at least the stack asked for, unless `failure` says why not
  std::string failure;      // empty, or what could not be set up (those first launches then wait)
};

// On the calling thread's current device: raises cudaLimitStackSize to `stack_bytes` where it is lower
// (which waits for the device to idle, and reserves that stack for every thread the device can hold), then
// runs a kernel with a printf on `stream` and synchronizes it. Does not throw.
FirstLaunchReport prepare_first_launches(cudaStream_t stream, size_t stack_bytes) noexcept;

}  // namespace iris::detail
