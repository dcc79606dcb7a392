// iris-bench: keeping ranks in step (every fallible step is followed by an agreement, so a step that fails
// on one rank is skipped on all of them and no rank is left waiting in a collective), hang detection, and
// CUDA-graph timing.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/device_barrier.hpp"
#include "iris_bench_clocks.hpp"

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
// Collective: the sum, and the largest (-infinity where every value is NaN), of every rank's value.
double sum_over_ranks(iris::Context& ctx, double value);
double max_over_ranks(iris::Context& ctx, double value);

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

// One entry of time_in_turns: launch() enqueues `calls` calls on the stream.
struct Turn {
  std::function<void()> launch;
  int calls = 1;
};

// Times several things in turns, so that none of them gains from its place in the run: a GPU held at its
// power limit runs whatever follows an idle gap faster (seen as 20% on an H200 GEMM). `warmup` untimed
// rounds, then `repeats` rounds, each launching every turn once, back to back with an event between each
// launch; waits (bounded, see wait_stream) and returns, per turn, the time of each timed round divided by
// its `calls`, in us. The host stays ahead of the GPU, so each interval between a turn's two events is its
// launch. With `align` (several ranks), it is enqueued, untimed, before each timed turn: a device barrier,
// so that no turn's time holds the wait for a peer that the previous turn left behind (a GEMM alone, a
// broadcast's root, a GPU slower than its peer), which would be charged to whatever ran next.
// With `clocks` (available), also samples the SM clock meanwhile and fills clock_out, per turn, with the
// median over the samples that fall inside its timed rounds (iris_bench_clocks.hpp; NaN for turns too
// short to hold kMinClockSamples).
std::vector<std::vector<double>> time_in_turns(cudaStream_t stream, const std::vector<Turn>& turns, int warmup,
                                               int repeats, double timeout_s, int rank, const std::string& what,
                                               ClockSampler* clocks = nullptr,
                                               std::vector<ClockStats>* clock_out = nullptr,
                                               const std::function<void()>& align = {});

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
  bool captured() const { return exec_ != nullptr; }
  // One replay on `stream`, as a turn of time_in_turns.
  Turn turn(cudaStream_t stream) const;

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int iters_ = 0;
};

// The fallback for calls that cannot be captured: `iters` direct calls as one turn. Timed, it includes the
// host's launch cost wherever the GPU outruns the host, which graph replays do not.
Turn direct_turn(int iters, const std::function<void()>& call);

// One path to time against others: `iters` calls of `call` captured into a CUDA graph, or, where the capture
// failed and the caller allowed it, `iters` direct calls.
struct Timed {
  std::string what;                   // for messages: "sequential matmul_all_reduce 8192x8192x8192"
  std::function<void()> call;         // enqueues one call on the context's stream
  std::function<void()> after_drain;  // surfaces asynchronous errors once the stream drained; may be empty
  Graph graph;
  bool direct = false;        // timed as direct launches: the capture failed (capture_error says why)
  std::string capture_error;  //
  std::string error;          // why it cannot be timed ("" when ready)

  bool ready() const { return error.empty() && (direct || graph.captured()); }
  Turn turn(cudaStream_t stream, int iters) const;
};

// Collective. Readies t for time_together: one eager call first when eager_first (lazy set-up, such as
// cuBLAS's first-call work or NCCL's connections, stays out of the capture), then the capture of `iters`
// calls, or with `eager` (--eager) no capture: direct launches to time. A failure sets t.error on every
// rank, except a failed capture with direct_fallback, which leaves direct launches to time
// (t.capture_error says why).
void prepare_timed(iris::Context& ctx, Timed& t, int iters, double timeout_s, bool eager, bool eager_first,
                   bool direct_fallback);

// What time_together measured of one path.
struct TurnTime {
  double us = 0;      // median per call over the timed rounds on each rank, then the maximum over ranks
  std::string error;  // why not measured ("" when measured)
  // The SM clock meanwhile: median MHz on each rank, then the minimum over ranks; and the largest share
  // over ranks of samples limited by the power cap. NaN where not sampled (iris_bench_clocks.hpp).
  double sm_mhz = std::nan("");
  double power_capped = std::nan("");
};

// The device barrier time_together crosses before each timed turn (time_in_turns' align), one per run. A
// crossing that gave up leaves a DeviceBarrier unusable (it refuses after a device error), so ready()
// makes a new one on every rank once any rank's context has had a device error since the last was made.
class Aligner {
 public:
  explicit Aligner(iris::Context& ctx) : ctx_(ctx) {}
  // Collective: the crossing to enqueue before each turn on `stream`; empty with one rank, or when no
  // barrier could be made (every rank then times without, and `unaligned` says why).
  std::function<void()> ready(cudaStream_t stream);
  const std::string& unaligned() const { return unaligned_; }

 private:
  iris::Context& ctx_;
  std::unique_ptr<iris::DeviceBarrier> barrier_;
  uint64_t made_at_timeouts_ = 0;
  std::string unaligned_;
};

// Collective. After a barrier, times the ready entries of `paths` in turns (time_in_turns) on every rank,
// each turn after a crossing of `align` (untimed; may be null), then runs their after_drain. An entry that
// is not ready gets its own error; a failure while timing is every entry's error.
std::vector<TurnTime> time_together(iris::Context& ctx, const std::vector<const Timed*>& paths, int iters, int warmup,
                                    int repeats, double timeout_s, Aligner* align);

// Which checks found wrong elements, from their counts over the ranks: "eager call", "replay after the
// timing", both, or "" when neither did.
std::string wrong_where(double wrong_eager, double wrong_replay);

double median(std::vector<double> v);

}  // namespace iris_bench
