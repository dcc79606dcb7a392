// device_bench: what the iris device API reaches between two GPUs, next to the figures in
// BASELINES.md (measured on the lent 2 x H200 machine).
//
//   * bulk put (remote 16-byte stores, put_grid) and get (remote 16-byte loads, get_grid) of 1 GiB,
//     one way with 64, 132 and 264 blocks of 512 threads, and both directions at once;
//   * one-way flag latency: a ping-pong of st.release.sys / ld.acquire.sys flags (signal + wait_until)
//     between one thread on each GPU, round trips / 2.
//
// Two ranks as threads of this process (iris::run_threads). Each figure is the median of --repeats
// timed runs (CUDA events on each rank's stream) after --warmup runs; both ranks start every run
// together behind a DeviceBarrier. One GPU or none: says so and exits 0. Not a test.
//
//   device_bench [--bytes N] [--repeats N] [--warmup N] [--pingpongs N] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/device.cuh"
#include "iris/device_barrier.hpp"

namespace {

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;

constexpr int kThreads = 512;

struct Options {
  size_t bytes = size_t{1} << 30;
  int repeats = 10;
  int warmup = 2;
  int pingpongs = 10000;
  std::string json;
};

// BASELINES.md, "Physical limits", GB/s per direction (0: no baseline).
double baseline_gbps(const std::string& path, int blocks) {
  if (path == "get, one way") return blocks == 64 ? 364 : blocks == 132 ? 371 : blocks == 264 ? 374 : 0;
  if (path == "put, one way") return blocks == 64 ? 351 : blocks == 132 ? 368 : blocks == 264 ? 369 : 0;
  if (path == "put, both ways") return blocks == 132 ? 363 : blocks == 264 ? 365 : 0;
  return 0;
}
// BASELINES.md, latency calibration: about 3.5 us per system-scope release/acquire flag round trip.
constexpr double kBaselineRoundTripUs = 3.5;

__global__ void fill_kernel(uint4* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    p[i] = make_uint4(x, x ^ 0x9e3779b9u, x + 0x7f4a7c15u, ~x);
  }
}

__global__ void put_kernel(iris::DeviceContext ctx, uint4* dst, const uint4* src, size_t n, int to) {
  dev::put_grid(ctx, dst, src, n, to);
}

__global__ void get_kernel(iris::DeviceContext ctx, uint4* dst, const uint4* src, size_t n, int from) {
  dev::get_grid(ctx, dst, src, n, from);
}

// Counts words of `a` (local) that differ from `b` in rank `peer`'s heap.
__global__ void compare_kernel(iris::DeviceContext ctx, const uint4* a, const uint4* b, size_t n, int peer,
                               unsigned long long* wrong) {
  const uint4* remote = dev::translate(ctx, b, peer);
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint4 x = a[i], y = dev::load(remote + i);
    bad += (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) ? 1 : 0;
  }
  if (bad != 0) atomicAdd(wrong, bad);
}

// flags[0]: ping, written by rank 0 into rank 1's heap; flags[1]: pong, written by rank 1 into rank 0's.
// Generations continue from `base` across runs, so the flags are never reset.
__global__ void pingpong_kernel(iris::DeviceContext ctx, uint64_t* flags, uint64_t base, int rounds) {
  const int peer = 1 - ctx.rank;
  for (int k = 1; k <= rounds; ++k) {
    const uint64_t g = base + k;
    if (ctx.rank == 0) {
      dev::signal<Order::kRelease, Scope::kSys>(ctx, flags + 0, g, peer);
      if (!dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, flags + 1, Cmp::kReached, g, "bench_pong")) return;
    } else {
      if (!dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, flags + 0, Cmp::kReached, g, "bench_ping")) return;
      dev::signal<Order::kRelease, Scope::kSys>(ctx, flags + 1, g, peer);
    }
  }
}

struct Row {
  std::string path;
  int blocks;        // 0 for the latency rows
  double ms;         // median time of one run (slowest rank for both-ways rows)
  double value;      // GB/s per direction, or microseconds
  double baseline;   // 0: none
  std::string unit;  // "GB/s" or "us"
};

template <typename Launch>
double median_ms(iris::Context& ctx, iris::DeviceBarrier& barrier, const Options& opt, Launch&& launch) {
  cudaStream_t s = ctx.stream();
  cudaEvent_t start, stop;
  IRIS_CUDA_CHECK(cudaEventCreate(&start));
  IRIS_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < opt.warmup + opt.repeats; ++i) {
    barrier.arrive_and_wait(s);  // both ranks start together
    IRIS_CUDA_CHECK(cudaEventRecord(start, s));
    launch(s, i);
    IRIS_CUDA_CHECK(cudaEventRecord(stop, s));
    ctx.synchronize();
    float ms = 0;
    IRIS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= opt.warmup) times.push_back(ms);
  }
  IRIS_CUDA_CHECK(cudaEventDestroy(start));
  IRIS_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

// Median time of every rank, indexed by rank.
std::vector<double> gather(iris::Context& ctx, double mine) {
  auto all = ctx.bootstrap().allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  std::vector<double> out;
  for (const auto& s : all) {
    double v = 0;
    std::memcpy(&v, s.data(), sizeof(v));
    out.push_back(v);
  }
  return out;
}

void check_copy(iris::Context& ctx, const uint4* local, const uint4* remote_sym, size_t n, int peer, const char* what,
                unsigned long long* wrong) {
  IRIS_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(unsigned long long), ctx.stream()));
  compare_kernel<<<264, kThreads, 0, ctx.stream()>>>(ctx.device_context(), local, remote_sym, n, peer, wrong);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.synchronize();
  unsigned long long host = 0;
  IRIS_CUDA_CHECK(cudaMemcpy(&host, wrong, sizeof(host), cudaMemcpyDeviceToHost));
  if (host != 0)
    throw iris::Error(std::string("device_bench: ") + what + " copied wrong data (" + std::to_string(host) + " of " +
                      std::to_string(n) + " 16-byte words differ); the figures would be meaningless");
}

std::vector<Row> run(iris::Context& ctx, const Options& opt) {
  const int me = ctx.rank(), peer = 1 - me;
  const size_t n = opt.bytes / sizeof(uint4);
  const double gb = static_cast<double>(n * sizeof(uint4)) / 1e9;
  uint4* src = ctx.empty<uint4>(n);
  uint4* dst = ctx.empty<uint4>(n);
  uint64_t* flags = ctx.zeros<uint64_t>(2);
  unsigned long long* wrong = nullptr;
  IRIS_CUDA_CHECK(cudaMalloc(&wrong, sizeof(unsigned long long)));
  fill_kernel<<<1024, 256, 0, ctx.stream()>>>(src, n, 0x1234u + me);
  IRIS_CUDA_CHECK_LAUNCH();
  iris::DeviceBarrier barrier(ctx);  // collective; also waits for every rank's fill
  const iris::DeviceContext dctx = ctx.device_context();
  std::vector<Row> rows;

  // Correctness first: rank 0 puts into rank 1 and gets from rank 1; rank 1 checks / rank 0 checks.
  if (me == 0) put_kernel<<<132, kThreads, 0, ctx.stream()>>>(dctx, dst, src, n, peer);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.barrier();
  if (me == 1) check_copy(ctx, dst, src, n, peer, "put_grid", wrong);  // my dst == rank 0's src
  ctx.barrier();
  if (me == 0) get_kernel<<<132, kThreads, 0, ctx.stream()>>>(dctx, dst, src, n, peer);
  IRIS_CUDA_CHECK_LAUNCH();
  ctx.barrier();
  if (me == 0) check_copy(ctx, dst, src, n, peer, "get_grid", wrong);  // my dst == rank 1's src
  ctx.barrier();

  auto one_way = [&](const std::string& path, int blocks, bool put) {
    double mine = median_ms(ctx, barrier, opt, [&](cudaStream_t s, int) {
      if (me != 0) return;  // rank 1 only takes part in the barrier
      if (put)
        put_kernel<<<blocks, kThreads, 0, s>>>(dctx, dst, src, n, peer);
      else
        get_kernel<<<blocks, kThreads, 0, s>>>(dctx, dst, src, n, peer);
      IRIS_CUDA_CHECK_LAUNCH();
    });
    double ms = gather(ctx, mine)[0];
    rows.push_back(Row{path, blocks, ms, gb / (ms * 1e-3), baseline_gbps(path, blocks), "GB/s"});
  };
  auto both_ways = [&](const std::string& path, int blocks, bool put) {
    double mine = median_ms(ctx, barrier, opt, [&](cudaStream_t s, int) {
      if (put)
        put_kernel<<<blocks, kThreads, 0, s>>>(dctx, dst, src, n, peer);
      else
        get_kernel<<<blocks, kThreads, 0, s>>>(dctx, dst, src, n, peer);
      IRIS_CUDA_CHECK_LAUNCH();
    });
    auto all = gather(ctx, mine);
    double ms = std::max(all[0], all[1]);  // the slower direction
    rows.push_back(Row{path, blocks, ms, gb / (ms * 1e-3), baseline_gbps(path, blocks), "GB/s"});
  };
  for (int blocks : {64, 132, 264}) one_way("put, one way", blocks, true);
  for (int blocks : {64, 132, 264}) one_way("get, one way", blocks, false);
  for (int blocks : {132, 264}) both_ways("put, both ways", blocks, true);
  for (int blocks : {132, 264}) both_ways("get, both ways", blocks, false);

  uint64_t base = 0;
  double mine = median_ms(ctx, barrier, opt, [&](cudaStream_t s, int) {
    pingpong_kernel<<<1, 1, 0, s>>>(dctx, flags, base, opt.pingpongs);
    IRIS_CUDA_CHECK_LAUNCH();
    base += static_cast<uint64_t>(opt.pingpongs);
  });
  double ms = gather(ctx, mine)[0];
  double one_way_us = ms * 1e3 / (2.0 * opt.pingpongs);
  rows.push_back(Row{"flag latency, one way", 0, ms, one_way_us, kBaselineRoundTripUs / 2, "us"});
  rows.push_back(Row{"flag latency, round trip", 0, ms, 2 * one_way_us, kBaselineRoundTripUs, "us"});

  ctx.barrier();
  IRIS_CUDA_CHECK(cudaFree(wrong));
  ctx.free(flags);
  ctx.free(dst);
  ctx.free(src);
  return rows;
}

bool parse(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--bytes" && (v = next()))
      opt.bytes = iris::parse_byte_size(v);
    else if (a == "--repeats" && (v = next()))
      opt.repeats = std::atoi(v);
    else if (a == "--warmup" && (v = next()))
      opt.warmup = std::atoi(v);
    else if (a == "--pingpongs" && (v = next()))
      opt.pingpongs = std::atoi(v);
    else if (a == "--json" && (v = next()))
      opt.json = v;
    else {
      std::fprintf(stderr,
                   "usage: device_bench [--bytes N[K|M|G]] [--repeats N] [--warmup N] [--pingpongs N] [--json FILE]\n");
      return false;
    }
  }
  if (opt.repeats < 1 || opt.warmup < 0 || opt.pingpongs < 1 || opt.bytes < sizeof(uint4)) {
    std::fprintf(stderr, "device_bench: --repeats and --pingpongs must be >= 1, --warmup >= 0, --bytes >= 16\n");
    return false;
  }
  return true;
}

void print(const std::vector<Row>& rows, const Options& opt, const std::string& gpu) {
  std::printf(
      "device_bench: 2 x %s, %zu bytes per transfer, %d threads per block, median of %d runs after %d "
      "warm-up run(s)\n",
      gpu.c_str(), opt.bytes, kThreads, opt.repeats, opt.warmup);
  std::printf("baselines: BASELINES.md (2 x H200, NV18); ratio = iris / baseline for GB/s, baseline / iris for us\n\n");
  std::printf("| %-26s | %6s | %10s | %12s | %10s | %6s |\n", "path", "blocks", "time (ms)", "iris", "baseline",
              "ratio");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(8, '-').c_str(),
              std::string(12, '-').c_str(), std::string(14, '-').c_str(), std::string(12, '-').c_str(),
              std::string(8, '-').c_str());
  for (const Row& r : rows) {
    char blocks[16], value[32], base[32], ratio[16];
    std::snprintf(blocks, sizeof(blocks), "%s", r.blocks > 0 ? std::to_string(r.blocks).c_str() : "1 thr");
    std::snprintf(value, sizeof(value), r.unit == "us" ? "%.2f us" : "%.1f GB/s", r.value);
    if (r.baseline > 0) {
      std::snprintf(base, sizeof(base), r.unit == "us" ? "%.2f us" : "%.0f GB/s", r.baseline);
      std::snprintf(ratio, sizeof(ratio), "%.2f", r.unit == "us" ? r.baseline / r.value : r.value / r.baseline);
    } else {
      std::snprintf(base, sizeof(base), "-");
      std::snprintf(ratio, sizeof(ratio), "-");
    }
    std::printf("| %-26s | %6s | %10.3f | %12s | %10s | %6s |\n", r.path.c_str(), blocks, r.ms, value, base, ratio);
  }
  std::printf(
      "\nput/get rows: GB/s per direction (1 GB = 1e9 bytes); both-ways rows report the slower direction.\n"
      "latency baseline: ~3.5 us per system-scope flag round trip inside a one-shot all-reduce "
      "(BASELINES.md, latency calibration).\n");
  if (!opt.json.empty()) {
    FILE* f = std::fopen(opt.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "device_bench: cannot write %s\n", opt.json.c_str());
      return;
    }
    std::fprintf(f, "{\"gpu\": \"%s\", \"bytes\": %zu, \"threads_per_block\": %d, \"repeats\": %d, \"rows\": [\n",
                 gpu.c_str(), opt.bytes, kThreads, opt.repeats);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"path\": \"%s\", \"blocks\": %d, \"ms\": %.6f, \"value\": %.4f, \"unit\": \"%s\", "
                   "\"baseline\": %.4f}%s\n",
                   r.path.c_str(), r.blocks, r.ms, r.value, r.unit.c_str(), r.baseline, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, opt)) return 2;
  const int gpus = iris::local_device_count();
  if (gpus < 2) {
    std::printf("device_bench: needs 2 GPUs, found %d; nothing measured.\n", gpus);
    return 0;
  }
  opt.bytes = opt.bytes / sizeof(uint4) * sizeof(uint4);
  cudaDeviceProp prop{};
  IRIS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  iris::ContextOptions options;
  options.heap_size = 2 * opt.bytes + (size_t{64} << 20);  // src + dst + flags and barrier words
  std::vector<Row> rows;
  try {
    iris::run_threads(
        2,
        [&](iris::Context& ctx) {
          auto mine = run(ctx, opt);
          if (ctx.rank() == 0) rows = std::move(mine);
        },
        options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_bench failed: %s\n", e.what());
    return 1;
  }
  print(rows, opt, prop.name);
  return 0;
}
