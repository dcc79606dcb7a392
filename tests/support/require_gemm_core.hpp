// Skipping GPU tests that need the GEMM core (iris::ops::gemm and the fused ops built on it).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "iris/core/cuda_check.hpp"
#include "iris/ops/gemm.hpp"
#include "support/ranks.hpp"

// Skips the current test, with the reason in the output, unless `gpus` GPUs are visible and device 0
// can run the GEMM core (this build has the CUTLASS headers and the device is sm_90).
#define IRIS_TEST_REQUIRE_GEMM_CORE(gpus)                                                                            \
  do {                                                                                                               \
    IRIS_TEST_REQUIRE_GPUS(gpus);                                                                                    \
    if (!::iris::ops::gemm_available()) GTEST_SKIP() << "built without the CUTLASS headers (bash scripts/setup.sh)"; \
    int major_ = 0, minor_ = 0;                                                                                      \
    IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, 0));                          \
    IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&minor_, cudaDevAttrComputeCapabilityMinor, 0));                          \
    if (major_ != 9 || minor_ != 0) GTEST_SKIP() << "the GEMM core needs sm_90 (H100/H200)";                         \
  } while (0)

namespace iris::test {
// The SMs of the current CUDA device, or 0 when none is visible.
inline int visible_device_sms() {
  int count = 0, device = 0, sms = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError();  // no device: not this test's error
    return 0;
  }
  return sms;
}
}  // namespace iris::test

// Skips the rest of the current test, with the reason in the output, when a visible CUDA device has fewer
// than `sms` SMs. The GEMM core's automatic choice clamps GemmArguments::sm_count to the device's SMs (a
// smaller Hopper, or a share of one under MPS: 66 at 50%), so tiles and splits expected for `sms` SMs do
// not hold there. Without a device (CI) the choice takes sm_count as given, and the test goes on.
#define IRIS_TEST_REQUIRE_DEVICE_SMS(sms)                                                                    \
  do {                                                                                                       \
    const int iris_have_ = ::iris::test::visible_device_sms();                                               \
    if (iris_have_ > 0 && iris_have_ < (sms))                                                                \
      GTEST_SKIP() << "the expected tiles and splits are those of " << (sms) << " SMs, and this device has " \
                   << iris_have_ << " (the automatic choice clamps GemmArguments::sm_count to the device)";  \
  } while (0)
