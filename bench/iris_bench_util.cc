#include "iris_bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
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

double sum_over_ranks(iris::Context& ctx, double value) {
  double sum = 0;
  for (double x : allgather_double(ctx, value)) sum += x;
  return sum;
}

double max_over_ranks(iris::Context& ctx, double value) {
  double most = -std::numeric_limits<double>::infinity();
  for (double x : allgather_double(ctx, value)) most = std::max(most, x);
  return most;
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

Turn Graph::turn(cudaStream_t stream) const {
  IRIS_ASSERT(exec_ != nullptr, "a graph launched before its capture");
  cudaGraphExec_t exec = exec_;
  return Turn{[exec, stream] { IRIS_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, iters_};
}

Turn direct_turn(int iters, const std::function<void()>& call) {
  return Turn{[iters, call] {
                for (int i = 0; i < iters; ++i) call();
              },
              iters};
}

std::vector<std::vector<double>> time_in_turns(cudaStream_t stream, const std::vector<Turn>& turns, int warmup,
                                               int repeats, double timeout_s, int rank, const std::string& what,
                                               ClockSampler* clocks, std::vector<ClockStats>* clock_out,
                                               const std::function<void()>& align) {
  const size_t n = turns.size();
  const size_t timed = static_cast<size_t>(repeats) * n;
  const bool sampling = clocks != nullptr && clocks->available();
  if (sampling) clocks->start();
  for (int i = 0; i < warmup; ++i)
    for (const Turn& t : turns) t.launch();
  // Launch k (turn k % n) runs between events 2k and 2k + 1; without align, the end of one is the start of
  // the next (an empty interval).
  Events ev(2 * timed);
  for (size_t k = 0; k < timed; ++k) {
    if (align) align();
    IRIS_CUDA_CHECK(cudaEventRecord(ev.events[2 * k], stream));
    turns[k % n].launch();
    IRIS_CUDA_CHECK(cudaEventRecord(ev.events[2 * k + 1], stream));
  }
  // The host time at which the last event completed, to within the poll (see iris_bench_clocks.hpp); a
  // wait that does not end here is wait_stream's to report.
  double t_end = std::nan("");
  if (sampling) {
    const double give_up = ClockSampler::now_s() + timeout_s;
    while (ClockSampler::now_s() < give_up) {
      const cudaError_t q = cudaEventQuery(ev.events.back());
      if (q == cudaSuccess) {
        t_end = ClockSampler::now_s();
        break;
      }
      if (q != cudaErrorNotReady) break;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  wait_stream(stream, what, timeout_s, rank);
  const std::vector<ClockSampler::Sample> samples = sampling ? clocks->stop() : std::vector<ClockSampler::Sample>{};
  std::vector<std::vector<double>> us(n, std::vector<double>(static_cast<size_t>(repeats)));
  std::vector<std::vector<std::pair<double, double>>> intervals(n);
  for (size_t k = 0; k < timed; ++k) {
    float ms = 0, begin_to_last = 0, end_to_last = 0;
    const cudaEvent_t begin = ev.events[2 * k], end = ev.events[2 * k + 1];
    IRIS_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    const size_t t = k % n;
    us[t][k / n] = 1000.0 * ms / turns[t].calls;
    if (std::isfinite(t_end)) {
      IRIS_CUDA_CHECK(cudaEventElapsedTime(&begin_to_last, begin, ev.events.back()));
      IRIS_CUDA_CHECK(cudaEventElapsedTime(&end_to_last, end, ev.events.back()));
      intervals[t].emplace_back(t_end - 1e-3 * begin_to_last, t_end - 1e-3 * end_to_last);
    }
  }
  if (clock_out != nullptr) {
    clock_out->assign(n, ClockStats{std::nan(""), std::nan("")});
    for (size_t t = 0; t < n; ++t)
      if (!intervals[t].empty()) (*clock_out)[t] = clock_stats(samples, intervals[t]);
  }
  return us;
}

Turn Timed::turn(cudaStream_t stream, int iters) const {
  return direct ? direct_turn(iters, call) : graph.turn(stream);
}

void prepare_timed(iris::Context& ctx, Timed& t, int iters, double timeout_s, bool eager, bool eager_first,
                   bool direct_fallback) {
  cudaStream_t stream = ctx.stream();
  const int rank = ctx.rank();
  if (eager_first) {
    t.error = agree(ctx, try_step([&] {
                      t.call();
                      wait_stream(stream, t.what + " (eager call)", timeout_s, rank);
                      if (t.after_drain) t.after_drain();
                    }));
    if (!t.error.empty()) return;
  }
  if (eager) {
    t.direct = true;
    return;
  }
  const std::string err = agree(ctx, try_step([&] { t.graph.capture(stream, iters, t.call); }));
  if (err.empty()) return;
  if (direct_fallback) {
    t.direct = true;
    t.capture_error = err;
  } else {
    t.error = "CUDA graph capture: " + err;
  }
}

std::function<void()> Aligner::ready(cudaStream_t stream) {
  if (ctx_.world_size() == 1) return {};
  // Every rank renews when any rank must (its barrier's crossings may have given up): the same collective
  // frees and allocations on every rank.
  const bool stale = barrier_ == nullptr || ctx_.device_timeouts() != made_at_timeouts_;
  const bool renew = sum_over_ranks(ctx_, stale ? 1.0 : 0.0) > 0;
  if (renew) {
    barrier_.reset();
    unaligned_ = agree(ctx_, try_step([&] { barrier_ = std::make_unique<iris::DeviceBarrier>(ctx_); }));
    if (!unaligned_.empty()) (void)barrier_.release();  // made on some ranks only: not freed (a collective free)
    made_at_timeouts_ = ctx_.device_timeouts();
  }
  if (barrier_ == nullptr) return {};
  iris::DeviceBarrier* b = barrier_.get();
  return [b, stream] { b->arrive_and_wait(stream); };
}

std::vector<TurnTime> time_together(iris::Context& ctx, const std::vector<const Timed*>& paths, int iters, int warmup,
                                    int repeats, double timeout_s, Aligner* align) {
  cudaStream_t stream = ctx.stream();
  std::vector<TurnTime> out(paths.size());
  std::vector<Turn> turns;
  std::vector<size_t> index;  // paths[index[i]] is turns[i]
  std::string what;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!paths[i]->ready()) {
      out[i].error = paths[i]->error;
      continue;
    }
    turns.push_back(paths[i]->turn(stream, iters));
    index.push_back(i);
    what +=
        (what.empty() ? "" : ", ") + paths[i]->what + (paths[i]->direct ? " (direct launches)" : " (graph replays)");
  }
  if (turns.empty()) return out;
  int device = 0;
  IRIS_CUDA_CHECK(cudaGetDevice(&device));
  ClockSampler clocks(device);
  std::vector<ClockStats> clock;
  const std::function<void()> crossing = align != nullptr ? align->ready(stream) : std::function<void()>();
  ctx.barrier();  // every rank starts together (collective; throws on every rank)
  std::vector<std::vector<double>> times;
  const std::string err = agree(ctx, try_step([&] {
                                  times = time_in_turns(stream, turns, warmup, repeats, timeout_s, ctx.rank(),
                                                        "the timed turns of " + what, &clocks, &clock, crossing);
                                  for (size_t i : index)
                                    if (paths[i]->after_drain) paths[i]->after_drain();
                                }));
  for (size_t t = 0; t < turns.size(); ++t) {
    TurnTime& r = out[index[t]];
    if (!err.empty()) {
      r.error = (paths[index[t]]->direct ? "direct launches: " : "graph replay: ") + err;
      continue;
    }
    // The same number of collective calls on every rank: err was agreed.
    r.us = std::max(r.us, max_over_ranks(ctx, median(times[t])));
    // The slowest clock over the ranks, and the largest share of power-capped samples (NaN: a rank
    // without samples; every rank makes the same calls).
    const ClockStats mine = t < clock.size() ? clock[t] : ClockStats{std::nan(""), std::nan("")};
    for (double x : allgather_double(ctx, mine.sm_mhz))
      if (std::isfinite(x)) r.sm_mhz = std::isfinite(r.sm_mhz) ? std::min(r.sm_mhz, x) : x;
    for (double x : allgather_double(ctx, mine.power_capped))
      if (std::isfinite(x)) r.power_capped = std::isfinite(r.power_capped) ? std::max(r.power_capped, x) : x;
  }
  return out;
}

std::string wrong_where(double wrong_eager, double wrong_replay) {
  if (wrong_eager > 0 && wrong_replay > 0) return "eager call and calls after the timing";
  if (wrong_eager > 0) return "eager call";
  if (wrong_replay > 0) return "calls after the timing";
  return "";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace iris_bench
