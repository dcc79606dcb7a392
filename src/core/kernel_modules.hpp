// Loading iris's kernels ahead of their first launch.
//
// CUDA loads a kernel at its first launch by default (CUDA_MODULE_LOADING=LAZY since CUDA 12.2), and that
// launch waits until the kernels the process has running on the device have ended. A first call of an op
// then overlaps nothing, and a kernel that waits on the GPU for an iris call made after it (a caller's
// persistent kernel, or two of a test's streams) keeps that call's launch from returning. So every
// translation unit that defines kernels registers one of them (IRIS_KERNEL_MODULE), and Context creation
// loads every kernel of each registered unit's library into the device's context, as NCCL loads its kernels
// when a communicator is created.
#pragma once

#include <cstddef>
#include <string>

namespace iris::detail {

// Registers the library (translation unit) holding `kernel`, a __global__ function's address. Called
// during static initialization (IRIS_KERNEL_MODULE): records the address only.
bool register_kernel_module(const void* kernel) noexcept;

// How many kernels were registered (each translation unit's IRIS_KERNEL_MODULE, and each GEMM instantiation).
size_t registered_kernel_modules() noexcept;

struct KernelLoadReport {
  int libraries = 0;           // distinct libraries of the registered kernels
  int kernels = 0;             // kernels in them, each now loaded in the context
  size_t max_local_bytes = 0;  // the largest local memory (stack) per thread of any of them
  std::string failure;         // empty, or why loading stopped (the rest then loads at first launch)
};

// Loads every kernel of every registered library into the calling thread's current context (the device's
// primary context, for a thread the runtime has made current on it). Does not throw: a driver without
// the loading functions (before CUDA 12.5), or a failing call, is reported in `failure`.
KernelLoadReport load_kernel_modules() noexcept;

// Loads every kernel of the library holding `kernel` (a __global__ function's address) into the current
// context, as load_kernel_modules does for each registered one; for kernels outside iris (tests).
KernelLoadReport load_kernel_library(const void* kernel) noexcept;

}  // namespace iris::detail

// At namespace scope of a .cu file, once, naming any kernel the file defines (a template's instantiation
// that the file launches); every kernel of the file's library loads with it.
#define IRIS_KERNEL_MODULE(...)                                                              \
  namespace {                                                                                \
  [[maybe_unused]] const bool iris_kernel_module_registered_ =                               \
      ::iris::detail::register_kernel_module(reinterpret_cast<const void*>(&(__VA_ARGS__))); \
  }
