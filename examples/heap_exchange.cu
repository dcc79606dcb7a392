// heap_exchange: every rank writes a rank-specific pattern into every peer's symmetric heap from a
// kernel, through translated pointers, then checks what it received. Runs one thread per local GPU,
// or one process per GPU when started by a launcher (RANK/WORLD_SIZE set, e.g. torchrun or mpirun).
//
//   heap_exchange [MiB per rank, default 64]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"

namespace {

__host__ __device__ uint32_t pattern(int writer, int reader, size_t i) {
  return (static_cast<uint32_t>(writer + 1) * 0x9E3779B1u) ^ (static_cast<uint32_t>(reader) << 24) ^
         static_cast<uint32_t>(i * 0x85EBCA77u);
}

// Rank r writes its block into slot r of every rank's buffer with 16-byte stores.
__global__ void scatter(iris::DeviceContext ctx, uint4* buf, size_t n_vec) {
  for (int k = 0; k < ctx.world_size; ++k) {
    int to = (ctx.rank + k) % ctx.world_size;  // stagger peers so ranks do not all hit one link first
    char* local = reinterpret_cast<char*>(buf + ctx.rank * n_vec);
    uint4* remote = reinterpret_cast<uint4*>(local + static_cast<int64_t>(to - ctx.rank) * int64_t(ctx.heap_size));
    for (size_t v = blockIdx.x * size_t{blockDim.x} + threadIdx.x; v < n_vec; v += size_t{gridDim.x} * blockDim.x) {
      size_t i = v * 4;
      remote[v] = make_uint4(pattern(ctx.rank, to, i), pattern(ctx.rank, to, i + 1), pattern(ctx.rank, to, i + 2),
                             pattern(ctx.rank, to, i + 3));
    }
  }
}

std::mutex print_mutex;

int exchange(iris::Context& ctx, size_t mib, double setup_ms) {
  const int world = ctx.world_size(), me = ctx.rank();
  const size_t n_vec = mib * (size_t{1} << 20) / sizeof(uint4);
  auto* buf = ctx.full<uint32_t>(n_vec * 4 * world, 0xDEADBEEFu);  // poison
  ctx.barrier();
  cudaEvent_t start, stop;
  IRIS_CUDA_CHECK(cudaEventCreate(&start));
  IRIS_CUDA_CHECK(cudaEventCreate(&stop));
  IRIS_CUDA_CHECK(cudaEventRecord(start, ctx.stream()));
  scatter<<<132, 512, 0, ctx.stream()>>>(ctx.device_context(), reinterpret_cast<uint4*>(buf), n_vec);
  IRIS_CUDA_CHECK_LAUNCH();
  IRIS_CUDA_CHECK(cudaEventRecord(stop, ctx.stream()));
  ctx.barrier();
  float ms = 0;
  IRIS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::vector<uint32_t> host(n_vec * 4 * world);
  IRIS_CUDA_CHECK(cudaMemcpy(host.data(), buf, host.size() * 4, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (int from = 0; from < world; ++from)
    for (size_t i = 0; i < n_vec * 4; ++i) wrong += host[from * n_vec * 4 + i] != pattern(from, me, i);
  {
    std::lock_guard<std::mutex> lock(print_mutex);
    std::printf("rank %d/%d (GPU %d): received %zu MiB from each of %d rank(s): %s; its writes took %.3f ms "
                "(%.1f GB/s pushed to peers)\n",
                me, world, ctx.device(), mib, world, wrong == 0 ? "all correct" : "WRONG", ms,
                world > 1 ? (world - 1) * mib * 1048576.0 / (ms * 1e6) : 0.0);
    if (wrong) std::printf("rank %d: %zu of %zu words wrong\n", me, wrong, host.size());
    if (me == 0) std::printf("context setup for %d rank(s): %.1f ms\n", world, setup_ms);
  }
  ctx.barrier();
  ctx.free(buf);
  IRIS_CUDA_CHECK(cudaEventDestroy(start));
  IRIS_CUDA_CHECK(cudaEventDestroy(stop));
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  if (mib == 0) mib = 64;
  int gpus = iris::local_device_count();
  if (gpus == 0) {
    std::fprintf(stderr,
                 "heap_exchange: no CUDA GPU on this machine (cudaGetDeviceCount found none), so there is nothing "
                 "to exchange. Run it on a machine with NVIDIA GPUs.\n");
    return 2;
  }
  iris::ContextOptions options;
  options.heap_size = std::max<size_t>(size_t{1} << 30, (mib * gpus + 64) << 20);  // the buffer holds every rank's block
  try {
    if (std::getenv("WORLD_SIZE") != nullptr || std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
      auto t0 = std::chrono::steady_clock::now();
      auto ctx = iris::Context::create_from_env(options);
      ctx->barrier();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return exchange(*ctx, mib, ms);
    }
    std::printf("heap_exchange: %d GPU(s), one thread per GPU, %zu MiB per rank\n", gpus, mib);
    std::atomic<int> failures{0};
    auto t0 = std::chrono::steady_clock::now();
    iris::run_threads(gpus, [&](iris::Context& ctx) {
      ctx.barrier();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      failures += exchange(ctx, mib, ms);
    }, options);
    std::printf("heap_exchange: %s\n", failures == 0 ? "verified on every rank" : "FAILED");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "heap_exchange failed: %s\n", e.what());
    return 1;
  }
}
