#include "iris_bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "iris/core/cuda_check.hpp"

namespace iris_bench {

bool cuda_context_broken(cudaStream_t stream) {
  cudaError_t e = cudaStreamQuery(stream);
  if (e == cudaSuccess || e == cudaErrorNotReady) return false;
  cudaGetLastError();  // clears a non-sticky error; a sticky one comes back on the next call
  e = cudaStreamQuery(stream);
  return e != cudaSuccess && e != cudaErrorNotReady;
}

std::string agree(iris::Context& ctx, const std::string& mine) {
  const bool broken = cuda_context_broken(ctx.stream());
  // One flag byte ('F' broken, 'E' failed, 'K' fine) then the reason.
  std::string message = std::string(1, broken ? 'F' : (mine.empty() ? 'K' : 'E')) + mine;
  std::vector<std::string> all = ctx.bootstrap().allgather(message);
  std::string first;
  bool fatal = false;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || all[r][0] == 'K') continue;
    if (all[r][0] == 'F') fatal = true;
    if (first.empty()) {
      std::string reason = all[r].substr(1);
      if (reason.empty()) reason = "CUDA context broken";
      first = "rank " + std::to_string(r) + ": " + reason;
    }
  }
  if (fatal) throw FatalError("the CUDA context is broken (sticky error), stopping: " + first);
  return first;
}

std::vector<double> allgather_double(iris::Context& ctx, double value) {
  std::string mine(sizeof(double), '\0');
  std::memcpy(mine.data(), &value, sizeof(double));
  std::vector<std::string> all = ctx.bootstrap().allgather(mine);
  std::vector<double> out(all.size(), 0.0);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() == sizeof(double)) std::memcpy(&out[r], all[r].data(), sizeof(double));
  }
  return out;
}

HeapBuffer::~HeapBuffer() {
  if (!ptr_) return;
  try {
    ctx_->free(ptr_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "iris-bench: rank %d: freeing a heap buffer failed: %s\n", ctx_->rank(), e.what());
  }
}

void HeapBuffer::alloc(iris::Context& ctx, size_t bytes) {
  ctx_ = &ctx;
  ptr_ = ctx.alloc(bytes > 0 ? bytes : 256);
}

void wait_stream(cudaStream_t stream, const std::string& what, double timeout_s, int rank) {
  const auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(5);
  while (true) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) IRIS_CUDA_CHECK(e);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s) {
      std::fprintf(stderr,
                   "iris-bench: rank %d: GPU work of %s did not finish within %.0f s; a collective is hung (a peer "
                   "never arrived). Stopping the whole run (exit 3). Raise the bound with --gpu-timeout.\n",
                   rank, what.c_str(), timeout_s);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
  }
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void Graph::capture(cudaStream_t stream, int iters, const std::function<void()>& call) {
  IRIS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < iters; ++i) call();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  IRIS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  IRIS_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  // Upload now so the first replay does not pay for it.
  IRIS_CUDA_CHECK(cudaGraphUpload(exec_, stream));
  iters_ = iters;
}

namespace {

struct Events {
  std::vector<cudaEvent_t> events;
  explicit Events(size_t n) {
    events.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      cudaEvent_t e = nullptr;
      IRIS_CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
    }
  }
  ~Events() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
};

}  // namespace

std::vector<double> Graph::time_replays(cudaStream_t stream, int warmup, int repeats, double timeout_s, int rank,
                                        const std::string& what) {
  IRIS_ASSERT(exec_ != nullptr, "time_replays before capture");
  for (int i = 0; i < warmup; ++i) IRIS_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  // Back to back: the host stays ahead of the GPU, so each interval between two events is one replay
  // (the ranks' start skew lands in the warm-up, or at worst in the first interval).
  Events ev(static_cast<size_t>(repeats) + 1);
  IRIS_CUDA_CHECK(cudaEventRecord(ev.events[0], stream));
  for (int i = 0; i < repeats; ++i) {
    IRIS_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
    IRIS_CUDA_CHECK(cudaEventRecord(ev.events[i + 1], stream));
  }
  wait_stream(stream, what, timeout_s, rank);
  std::vector<double> us(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    float ms = 0;
    IRIS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.events[i], ev.events[i + 1]));
    us[i] = 1000.0 * ms / iters_;
  }
  return us;
}

std::vector<double> time_launches(cudaStream_t stream, int iters, int warmup, int repeats,
                                  const std::function<void()>& call, double timeout_s, int rank,
                                  const std::string& what) {
  for (int i = 0; i < warmup * iters; ++i) call();
  Events ev(static_cast<size_t>(repeats) + 1);
  IRIS_CUDA_CHECK(cudaEventRecord(ev.events[0], stream));
  for (int r = 0; r < repeats; ++r) {
    for (int i = 0; i < iters; ++i) call();
    IRIS_CUDA_CHECK(cudaEventRecord(ev.events[r + 1], stream));
  }
  wait_stream(stream, what, timeout_s, rank);
  std::vector<double> us(static_cast<size_t>(repeats));
  for (int r = 0; r < repeats; ++r) {
    float ms = 0;
    IRIS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.events[r], ev.events[r + 1]));
    us[r] = 1000.0 * ms / iters;
  }
  return us;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace iris_bench
