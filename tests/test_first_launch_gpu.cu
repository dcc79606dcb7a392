// GPU tests of what Context creation sets up so that first launches need not wait for the device to idle
// (core/first_launch.hpp): the stack limit covers the deepest iris kernel, and a kernel naming printf, first
// launched beside a kernel that spins until it has run, runs at once. 1 and 2 ranks (more with
// IRIS_TEST_MAX_RANKS), threads and processes; the processes_N instances are the strict ones, each rank a
// fresh process in which nothing but the Context has launched a printf kernel.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "core/kernel_modules.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

using test::RankSetup;

class FirstLaunchGpu : public ::testing::TestWithParam<RankSetup> {};

// Names printf, never prints (`print` is 0): like every iris kernel with a bounded wait.
__global__ void names_printf(uint32_t* out, int print) {
  if (print != 0) printf("names_printf %d\n", print);
  *out = 7u;
}

TEST_P(FirstLaunchGpu, StackLimitCoversTheDeepestIrisKernel) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const detail::DeviceGuard device(ctx.device());
        const detail::KernelLoadReport loaded = detail::load_kernel_modules();
        ASSERT_TRUE(loaded.failure.empty()) << loaded.failure;
        // The barrier kernel alone has a 64-byte frame (its error path's call): 0 would mean nothing was read.
        EXPECT_GT(loaded.max_local_bytes, size_t{0});
        // Within CUDA's default stack (1 KiB per thread) the check below holds whatever the context did (a
        // test audit's finding): nothing to show then.
        if (loaded.max_local_bytes <= 1024)
          GTEST_SKIP() << "the deepest iris kernel's frame (" << loaded.max_local_bytes
                       << " bytes) fits CUDA's default 1 KiB stack: no growth to check";
        size_t stack = 0;
        IRIS_CUDA_CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
        EXPECT_GE(stack, loaded.max_local_bytes)
            << "rank " << ctx.rank() << ": the first launch of the deepest iris kernel grows the stack, and waits "
            << "for the device to idle";
      },
      test::device_test_options());
}

TEST_P(FirstLaunchGpu, AKernelNamingPrintfRunsBesideARunningKernel) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        test::DeviceBuffer<uint32_t> out(1);
        IRIS_CUDA_CHECK(cudaMemsetAsync(out.get(), 0, sizeof(uint32_t), ctx.stream()));
        test::load_kernels(names_printf);
        const auto ran = test::run_beside_a_spinning_kernel(ctx, [&](cudaStream_t s) {
                           names_printf<<<1, 1, 0, s>>>(out.get(), 0);
                           IRIS_CUDA_CHECK(cudaGetLastError());
                         }).ran;
        uint32_t value = 0;
        IRIS_CUDA_CHECK(cudaMemcpy(&value, out.get(), sizeof(value), cudaMemcpyDeviceToHost));
        EXPECT_EQ(value, 7u);
        EXPECT_LT(ran, std::chrono::seconds(1))
            << "rank " << ctx.rank() << ": the kernel naming printf ran only after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(ran).count()
            << " ms, when the kernel spinning on another stream had given up: the printf buffer was not set up "
               "when the Context was created";
      },
      test::device_test_options());
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, FirstLaunchGpu, ::testing::ValuesIn(test::any_world_rank_setups()),
                         test::rank_setup_name);

}  // namespace
}  // namespace iris
