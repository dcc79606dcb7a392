// iris::detail::prepare_first_launches (core/first_launch.hpp).
#include "core/first_launch.hpp"

#include <cstdio>

#include "core/kernel_modules.hpp"
#include "iris/core/error.hpp"

namespace iris::detail {
namespace {

// Never prints: `print` is 0. Naming printf is enough for the driver to set up the printf buffer at this
// kernel's launch, once per device context.
__global__ void printf_setup_kernel(int print) {
  if (print != 0) printf("iris: printf setup\n");
}

std::string runtime_failure(const char* call, cudaError_t err) {
  cudaGetLastError();  // not sticky: clear it so the caller's next check does not see it
  return str_cat(call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

}  // namespace

IRIS_KERNEL_MODULE(printf_setup_kernel)

FirstLaunchReport prepare_first_launches(cudaStream_t stream, size_t stack_bytes) noexcept {
  FirstLaunchReport report;
  if (const cudaError_t err = cudaDeviceGetLimit(&report.stack_before, cudaLimitStackSize); err != cudaSuccess) {
    report.failure = runtime_failure("cudaDeviceGetLimit(cudaLimitStackSize)", err);
    return report;
  }
  report.stack_after = report.stack_before;
  if (stack_bytes > report.stack_before) {
    if (const cudaError_t err = cudaDeviceSetLimit(cudaLimitStackSize, stack_bytes); err != cudaSuccess) {
      report.failure = runtime_failure("cudaDeviceSetLimit(cudaLimitStackSize)", err);
      return report;
    }
    if (const cudaError_t err = cudaDeviceGetLimit(&report.stack_after, cudaLimitStackSize); err != cudaSuccess) {
      report.failure = runtime_failure("cudaDeviceGetLimit(cudaLimitStackSize)", err);
      return report;
    }
  }
  printf_setup_kernel<<<1, 1, 0, stream>>>(0);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    report.failure = runtime_failure("launching the printf setup kernel", err);
    return report;
  }
  if (const cudaError_t err = cudaStreamSynchronize(stream); err != cudaSuccess)
    report.failure = runtime_failure("cudaStreamSynchronize after the printf setup kernel", err);
  return report;
}

}  // namespace iris::detail
