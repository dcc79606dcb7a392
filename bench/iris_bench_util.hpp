// iris-bench: keeping ranks in step (every fallible step is followed by an agreement, so a step that fails
// on one rank is skipped on all of them and no rank is left waiting in a collective), hang detection, and
// CUDA-graph timing.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "iris/context.hpp"

namespace iris_bench {

// Runs f and returns "" or the text of what it threw.
template <typename F>
std::string try_step(F&& f) {
  try {
    f();
    return {};
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.empty() ? std::string("unknown error") : what;
  } catch (...) {
    return "unknown exception";
  }
}

// Thrown when the CUDA context is unusable (a sticky error such as an illegal address): the run stops.
class FatalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collective. Every rank passes "" when its step succeeded, or the reason it failed. Returns "" on every
// rank when all succeeded, else the first failing rank's reason prefixed with "rank r: ". Throws FatalError
// on every rank when any rank's CUDA context is broken (a sticky error) so the run stops cleanly.
std::string agree(iris::Context& ctx, const std::string& mine);

// Collective: every rank's value, indexed by rank.
std::vector<double> allgather_double(iris::Context& ctx, double value);

// True when the current device's context has a sticky error (every later CUDA call would fail).
bool cuda_context_broken(cudaStream_t stream);

// A symmetric-heap allocation freed when it goes out of scope (every rank frees in the same order).
class HeapBuffer {
 public:
  HeapBuffer() = default;
  ~HeapBuffer();
  HeapBuffer(const HeapBuffer&) = delete;
  HeapBuffer& operator=(const HeapBuffer&) = delete;
  // Collective, like Context::alloc (0 bytes still takes a minimal block, so every rank's sequence matches).
  void alloc(iris::Context& ctx, size_t bytes);
  void* get() const { return ptr_; }

 private:
  iris::Context* ctx_ = nullptr;
  void* ptr_ = nullptr;
};

// Waits until `stream` has drained. A stream still busy after timeout_s seconds means a collective is hung
// (a peer never arrived): the message names the rank and the step, and the process exits with status 3,
// since a hung kernel cannot be taken back. Throws iris::CudaError on a CUDA error.
void wait_stream(cudaStream_t stream, const std::string& what, double timeout_s, int rank);

// `iters` calls captured into one executable CUDA graph (instantiated with flags 0).
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Captures call() `iters` times on `stream` (thread-local capture mode, so the other ranks' threads may
  // keep using CUDA meanwhile). On failure the stream is left out of capture and the error rethrown.
  void capture(cudaStream_t stream, int iters, const std::function<void()>& call);
  // Launches `warmup` untimed replays, then `repeats` replays back to back with an event between each, waits
  // (bounded, see wait_stream) and returns the time of each timed replay divided by `iters`, in us.
  std::vector<double> time_replays(cudaStream_t stream, int warmup, int repeats, double timeout_s, int rank,
                                   const std::string& what);

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int iters_ = 0;
};

// The fallback for calls that cannot be captured: `warmup` untimed rounds of `iters` direct calls, then
// `repeats` timed rounds with an event between each; waits (bounded, see wait_stream) and returns the
// time of each timed round divided by `iters`, in us. Includes the host's launch cost wherever the GPU
// outruns the host, which graph replays do not.
std::vector<double> time_launches(cudaStream_t stream, int iters, int warmup, int repeats,
                                  const std::function<void()>& call, double timeout_s, int rank,
                                  const std::string& what);

double median(std::vector<double> v);

}  // namespace iris_bench
