// tp_mlp: the MLP block of a tensor-parallel transformer layer, as LLM servers run it, on iris's fused
// ops. Sequence parallel: rank r holds T/W of the T tokens of the activations X (T x H). The block is
//
//   Y_r = all_gather_matmul(X_r, W1_r)        the tokens of every rank, gathered, times this rank's
//                                             F/W rows of W1 (F x H, stored as layers store it: N x K):
//                                             Y_r (T x F/W) is a column shard of X W1^T
//   Y_r = relu(Y_r)                           in place
//   Z_r = matmul_reduce_scatter(Y_r, W2_r)    W2_r: this rank's F/W columns of W2 (H x F); Z_r (T/W x H)
//                                             is this rank's tokens of the sum over ranks, i.e. of
//                                             relu(X W1^T) W2^T
//
// Each fused op overlaps its GEMM with its communication. The workspaces are sized ahead from the plans
// (iris::ops::heap_bytes), which sets the heap; the preambles run once (collective: they allocate on the
// heap and agree across ranks); the block is then captured into one CUDA graph and replayed. Every rank
// checks sampled tokens of its Z against an fp64 host reference built from the deterministic inputs of
// every rank.
//
// Runs one thread per local GPU, or one process per GPU when started by a launcher (RANK/WORLD_SIZE
// set, e.g. torchrun or mpirun; more processes than GPUs share them, for checking only). T and F must
// split over the ranks, F / W and H must be multiples of 8.
//
//   tp_mlp [tokens T, default 2048] [hidden H, default 4096] [ffn F, default 14336]
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "iris/ccl/workspace.hpp"
#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/ops/fused.hpp"
#include "iris/ops/gemm.hpp"

namespace {

using Bf16 = __nv_bfloat16;
constexpr iris::DType kBf16 = iris::DType::kBFloat16;
constexpr uint64_t kSeedX = 1, kSeedW1 = 2, kSeedW2 = 3;
constexpr int kReplays = 20;
constexpr int kCheckedTokens = 2;  // per rank

struct Dims {
  int64_t t, h, f;  // tokens, hidden, ffn (global)
};

// Deterministic inputs: element i of tensor `seed`, uniform in [-scale, scale). Computed alike on the
// GPU (to fill) and on the host (for the reference).
__host__ __device__ uint64_t mix64(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}
__host__ __device__ float value(uint64_t seed, uint64_t i, float scale) {
  const uint64_t r = mix64(mix64(seed) ^ i);
  return (static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f) * scale;
}

// dst (rows x cols, contiguous) = elements [row0 + i][col0 + j] of a global tensor of `ld` columns.
__global__ void fill(Bf16* dst, int64_t rows, int64_t cols, uint64_t seed, int64_t row0, int64_t col0, int64_t ld,
                     float scale) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    dst[e] = __float2bfloat16(value(seed, static_cast<uint64_t>((row0 + i) * ld + col0 + j), scale));
  }
}

__global__ void relu(Bf16* y, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x)
    y[e] = __hmax(y[e], __float2bfloat16(0.0f));
}

// Scales that keep every product near 1: inputs of unit size, weights of 1 / sqrt(K).
float scale_w1(const Dims& d) { return 1.0f / std::sqrt(static_cast<float>(d.h)); }
float scale_w2(const Dims& d) { return 1.0f / std::sqrt(static_cast<float>(d.f)); }
float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// One rank's tensors (device memory of its own) and the two ops' operands.
struct Block {
  Dims d;
  int world = 1, rank = 0;
  Bf16 *x = nullptr, *w1 = nullptr, *y = nullptr, *w2 = nullptr, *z = nullptr;
  iris::ops::MatmulOperands up, down;  // all_gather_matmul, matmul_reduce_scatter

  int64_t tokens() const { return d.t / world; }
  int64_t shard() const { return d.f / world; }

  void make_operands() {
    up.a = iris::Tensor::matrix(x, kBf16, tokens(), d.h);
    up.b = iris::Tensor::matrix(w1, kBf16, shard(), d.h);  // N x K: this rank's F/W rows of W1
    up.b_is_nk = true;
    up.c = iris::Tensor::matrix(y, kBf16, d.t, shard());
    down.a = iris::Tensor::matrix(y, kBf16, d.t, shard());
    down.b = iris::Tensor::matrix(w2, kBf16, d.h, shard());  // N x K: this rank's F/W columns of W2
    down.b_is_nk = true;
    down.c = iris::Tensor::matrix(z, kBf16, tokens(), d.h);
  }
  size_t bytes_x() const { return static_cast<size_t>(tokens() * d.h) * sizeof(Bf16); }
  size_t bytes_w1() const { return static_cast<size_t>(shard() * d.h) * sizeof(Bf16); }
  size_t bytes_y() const { return static_cast<size_t>(d.t * shard()) * sizeof(Bf16); }
  size_t bytes_w2() const { return static_cast<size_t>(d.h * shard()) * sizeof(Bf16); }
  size_t bytes_z() const { return static_cast<size_t>(tokens() * d.h) * sizeof(Bf16); }
};

// Heap bytes for both ops' workspaces, from their plans over stand-in addresses (the plans read shapes,
// types and alignment only).
size_t heap_for(const Dims& d, int world, int sms) {
  Block b;
  b.d = d;
  b.world = world;
  char* base = reinterpret_cast<char*>(uintptr_t{1} << 40);
  b.x = reinterpret_cast<Bf16*>(base);
  b.w1 = reinterpret_cast<Bf16*>(base + (size_t{1} << 34));
  b.y = reinterpret_cast<Bf16*>(base + (size_t{2} << 34));
  b.w2 = reinterpret_cast<Bf16*>(base + (size_t{3} << 34));
  b.z = reinterpret_cast<Bf16*>(base + (size_t{4} << 34));
  b.make_operands();
  const size_t up =
      iris::ops::heap_bytes(iris::ops::plan_all_gather_matmul(b.up, iris::ops::FusedConfig{}, world, sms));
  const size_t down =
      iris::ops::heap_bytes(iris::ops::plan_matmul_reduce_scatter(b.down, iris::ops::FusedConfig{}, world, sms));
  return up + down + (size_t{64} << 20);  // and room for the VMM granularity
}

std::mutex print_mutex;

int run_block(iris::Context& ctx, const Dims& d) {
  Block b;
  b.d = d;
  b.world = ctx.world_size();
  b.rank = ctx.rank();
  const int me = b.rank;
  cudaStream_t s = ctx.stream();
  IRIS_CUDA_CHECK(cudaMalloc(&b.x, b.bytes_x()));
  IRIS_CUDA_CHECK(cudaMalloc(&b.w1, b.bytes_w1()));
  IRIS_CUDA_CHECK(cudaMalloc(&b.y, b.bytes_y()));
  IRIS_CUDA_CHECK(cudaMalloc(&b.w2, b.bytes_w2()));
  IRIS_CUDA_CHECK(cudaMalloc(&b.z, b.bytes_z()));
  fill<<<264, 256, 0, s>>>(b.x, b.tokens(), d.h, kSeedX, me * b.tokens(), 0, d.h, 1.0f);
  fill<<<264, 256, 0, s>>>(b.w1, b.shard(), d.h, kSeedW1, me * b.shard(), 0, d.h, scale_w1(d));
  fill<<<264, 256, 0, s>>>(b.w2, d.h, b.shard(), kSeedW2, 0, me * b.shard(), d.f, scale_w2(d));
  IRIS_CUDA_CHECK_LAUNCH();
  IRIS_CUDA_CHECK(cudaMemsetAsync(b.z, 0xFF, b.bytes_z(), s));  // NaN until written
  b.make_operands();
  // The default config: each op runs the tile the GEMM core advises for its rank's GEMM.
  const iris::ops::FusedConfig up_config, down_config;

  // Once: the workspaces (collective).
  iris::ops::FusedWorkspace up_ws, down_ws;
  iris::ops::all_gather_matmul_preamble(ctx, b.up, up_config, up_ws);
  iris::ops::matmul_reduce_scatter_preamble(ctx, b.down, down_config, down_ws);

  // The block, captured once on a stream of our own and replayed.
  cudaStream_t g;
  IRIS_CUDA_CHECK(cudaStreamCreateWithFlags(&g, cudaStreamNonBlocking));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(s));
  auto block = [&](cudaStream_t st) {
    iris::ops::all_gather_matmul(ctx, b.up, up_config, up_ws, st);
    relu<<<264, 256, 0, st>>>(b.y, d.t * b.shard());
    IRIS_CUDA_CHECK_LAUNCH();
    iris::ops::matmul_reduce_scatter(ctx, b.down, down_config, down_ws, st);
  };
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  IRIS_CUDA_CHECK(cudaStreamBeginCapture(g, cudaStreamCaptureModeThreadLocal));
  block(g);
  IRIS_CUDA_CHECK(cudaStreamEndCapture(g, &graph));
  IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  IRIS_CUDA_CHECK(cudaGraphLaunch(exec, g));  // warm-up, and the result checked below
  IRIS_CUDA_CHECK(cudaStreamSynchronize(g));
  ctx.check_device_error();
  ctx.barrier();
  cudaEvent_t start, stop;
  IRIS_CUDA_CHECK(cudaEventCreate(&start));
  IRIS_CUDA_CHECK(cudaEventCreate(&stop));
  IRIS_CUDA_CHECK(cudaEventRecord(start, g));
  for (int i = 0; i < kReplays; ++i) IRIS_CUDA_CHECK(cudaGraphLaunch(exec, g));
  IRIS_CUDA_CHECK(cudaEventRecord(stop, g));
  IRIS_CUDA_CHECK(cudaStreamSynchronize(g));
  ctx.check_device_error();
  float ms = 0;
  IRIS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double us = 1000.0 * ms / kReplays;

  // Sampled tokens of this rank against fp64, from every rank's inputs (the replays recomputed the same).
  std::vector<Bf16> z(static_cast<size_t>(b.tokens() * d.h));
  IRIS_CUDA_CHECK(cudaMemcpy(z.data(), b.z, b.bytes_z(), cudaMemcpyDeviceToHost));
  int64_t wrong = 0, checked = 0;
  double worst = 0;
  std::vector<double> x(d.h), a(d.f);
  for (int k = 0; k < kCheckedTokens; ++k) {
    const int64_t i = (b.tokens() - 1) * k / std::max(1, kCheckedTokens - 1);  // first and last token
    const int64_t t = me * b.tokens() + i;
    for (int64_t h = 0; h < d.h; ++h) x[h] = bf16_round(value(kSeedX, t * d.h + h, 1.0f));
    for (int64_t f = 0; f < d.f; ++f) {
      double acc = 0;
      for (int64_t h = 0; h < d.h; ++h) acc += x[h] * bf16_round(value(kSeedW1, f * d.h + h, scale_w1(d)));
      a[f] = std::max(0.0f, bf16_round(static_cast<float>(acc)));  // Y is bf16 on the GPU
    }
    for (int64_t h = 0; h < d.h; ++h) {
      double acc = 0, mag = 0;
      for (int64_t f = 0; f < d.f; ++f) {
        const double p = a[f] * bf16_round(value(kSeedW2, h * d.f + f, scale_w2(d)));
        acc += p;
        mag += std::fabs(p);
      }
      const double got = __bfloat162float(z[i * d.h + h]);
      // Partial products cross ranks in bf16 and the sum is rounded once more: a few units of 2^-9.
      const double err = std::fabs(got - acc);
      wrong += !(err <= 4 * 0x1.0p-9 * mag + 1e-6);
      worst = std::max(worst, err / std::max(mag, 1e-30));
      ++checked;
    }
  }
  {
    std::lock_guard<std::mutex> lock(print_mutex);
    const double flops =
        2.0 * 2.0 * static_cast<double>(d.t) * static_cast<double>(d.h) * static_cast<double>(b.shard());
    std::printf(
        "rank %d/%d (GPU %d): block %.1f us per replay (%.0f TFLOP/s per GPU); %lld sampled outputs %s "
        "(worst error %.2e of the terms' magnitude)\n",
        me, b.world, ctx.device(), us, flops / (us * 1e6), static_cast<long long>(checked),
        wrong == 0 ? "match fp64" : "WRONG", worst);
    if (wrong)
      std::printf("rank %d: %lld of %lld sampled outputs beyond the tolerance\n", me, static_cast<long long>(wrong),
                  static_cast<long long>(checked));
  }
  IRIS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  IRIS_CUDA_CHECK(cudaGraphDestroy(graph));
  IRIS_CUDA_CHECK(cudaEventDestroy(start));
  IRIS_CUDA_CHECK(cudaEventDestroy(stop));
  IRIS_CUDA_CHECK(cudaStreamDestroy(g));
  ctx.barrier();  // no peer still reads or writes this rank's workspaces
  iris::ccl::ContextWorkspaceHost host(ctx);
  down_ws.release(host);
  up_ws.release(host);
  for (Bf16* p : {b.x, b.w1, b.y, b.w2, b.z}) IRIS_CUDA_CHECK(cudaFree(p));
  return wrong == 0 ? 0 : 1;
}

int64_t arg(int argc, char** argv, int i, int64_t fallback) {
  return argc > i ? std::strtoll(argv[i], nullptr, 10) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const Dims d{arg(argc, argv, 1, 2048), arg(argc, argv, 2, 4096), arg(argc, argv, 3, 14336)};
  const int gpus = iris::local_device_count();
  if (gpus == 0) {
    std::fprintf(stderr,
                 "tp_mlp: no CUDA GPU on this machine (cudaGetDeviceCount found none). Run it on a machine "
                 "with NVIDIA GPUs.\n");
    return 2;
  }
  if (!iris::ops::gemm_available()) {
    std::fprintf(stderr,
                 "tp_mlp: this build has no GEMM core (no CUTLASS headers): run `bash scripts/setup.sh`, "
                 "then rebuild.\n");
    return 3;  // this build cannot run it: scripts/main.sh goes on to iris-bench's collectives
  }
  const bool launched = std::getenv("WORLD_SIZE") != nullptr || std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  const int world =
      launched ? std::atoi(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : std::getenv("OMPI_COMM_WORLD_SIZE"))
               : gpus;
  if (d.t <= 0 || d.h <= 0 || d.f <= 0 || world <= 0 || d.t % world != 0 || d.f % world != 0 ||
      (d.f / world) % 8 != 0 || d.h % 8 != 0) {
    std::fprintf(stderr,
                 "tp_mlp: T = %lld, H = %lld, F = %lld do not split over %d ranks: T and F must be multiples of the "
                 "world size, F / W and H multiples of 8.\n",
                 static_cast<long long>(d.t), static_cast<long long>(d.h), static_cast<long long>(d.f), world);
    return 2;
  }
  try {
    int sms = 0;
    IRIS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    iris::ContextOptions options;
    options.heap_size = heap_for(d, world, sms);
    if (launched) {
      // One rank per GPU; more local ranks than GPUs share them (rank on GPU local_rank % GPUs): the results
      // are checked as usual, the times mean nothing (the GPU time-slices between the processes).
      const char* local =
          std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      const int local_rank = local != nullptr ? std::atoi(local) : 0;
      options.device = local_rank % gpus;
      if (local_rank == 0 && world > gpus)
        std::printf("tp_mlp: %d ranks share %d GPU(s): results are checked, times mean nothing\n", world, gpus);
      auto ctx = iris::Context::create_from_env(options);
      return run_block(*ctx, d);
    }
    std::printf("tp_mlp: %d GPU(s), one thread per GPU; T = %lld tokens, H = %lld, F = %lld; heap %.0f MiB per rank\n",
                gpus, static_cast<long long>(d.t), static_cast<long long>(d.h), static_cast<long long>(d.f),
                options.heap_size / 1048576.0);
    std::atomic<int> failures{0};
    iris::run_threads(
        gpus, [&](iris::Context& ctx) { failures += run_block(ctx, d); }, options);
    std::printf("tp_mlp: %s\n", failures == 0 ? "verified on every rank" : "FAILED");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_mlp failed: %s\n", e.what());
    return 1;
  }
}
