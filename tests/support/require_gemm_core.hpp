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
