// Bootstrap for ranks that are threads of one process: one shared group, one mutex, one condition
// variable. Each collective is a generation: the last rank to arrive publishes the result and bumps
// the generation counter, which is what the waiters wait for. A generation counter (not an arrival
// count reset to zero) means a fast rank entering collective N+1 can never be confused with a slow
// one still leaving collective N.
//
// Failures are sticky: after an abort, a timeout or a mismatch every rank blocked in (or later
// entering) a collective throws, so no thread is left waiting for a peer that gave up.
#include <condition_variable>
#include <memory>
#include <mutex>

#include "iris/core/error.hpp"
#include "iris/core/log.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "runtime/bootstrap_detail.hpp"

namespace iris {
namespace {

using detail::Clock;
using detail::str_cat;

enum class Kind { kAllgather, kBroadcast, kBarrier };

std::string describe(Kind kind, int root) {
  switch (kind) {
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return str_cat("broadcast from rank ", root);
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

enum class Failure { kNone, kAbort, kTimeout, kMismatch };

struct ThreadGroup {
  ThreadGroup(int world, std::chrono::milliseconds timeout)
      : world(world), timeout(timeout), present(world, 0), slots(world) {}

  const int world;
  const std::chrono::milliseconds timeout;

  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  uint64_t completed = 0;  // collectives finished; the one in progress is number completed + 1
  int arrived = 0;
  std::vector<char> present;       // which ranks have contributed to the collective in progress
  std::vector<std::string> slots;  // their contributions
  Kind kind = Kind::kAllgather;    // what the first arrival called, to catch mismatched calls
  int root = 0;
  int first_rank = 0;
  // The last finished collective's contributions. Shared so that a fast rank starting the next
  // collective (which refills `slots`) cannot disturb a slow one still copying this result out.
  std::shared_ptr<const std::vector<std::string>> result;
  Failure failure = Failure::kNone;
  std::string failure_message;
};

class ThreadBootstrap final : public Bootstrap {
 public:
  ThreadBootstrap(std::shared_ptr<ThreadGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world; }
  std::chrono::milliseconds timeout() const override { return group_->timeout; }

  std::vector<std::string> allgather(std::string_view mine) override { return collective(Kind::kAllgather, 0, mine); }

  std::string broadcast(std::string_view value, int root) override {
    IRIS_CHECK_ARG(root >= 0 && root < world_size(), "iris bootstrap: broadcast root ", root, " is outside [0, ",
                   world_size(), ")");
    auto all = collective(Kind::kBroadcast, root, rank_ == root ? value : std::string_view{});
    return std::move(all[root]);
  }

  void barrier() override { collective(Kind::kBarrier, 0, {}); }

  std::vector<int> exchange_fds(int /*fd*/) override {
    throw Error("exchange_fds is for separate processes; threads share one descriptor table");
  }

  void abort(const std::string& reason) noexcept override {
    try {
      ThreadGroup& g = *group_;
      std::lock_guard lock(g.mu);
      // The first failure wins: it is the cause, later ones are consequences.
      if (g.failure == Failure::kNone) {
        g.failure = Failure::kAbort;
        g.failure_message = str_cat("rank ", rank_, " failed: ", reason);
      }
      g.cv.notify_all();
    } catch (...) {
      // Only allocation can fail here; abort() promises not to throw.
    }
  }

 private:
  [[noreturn]] static void throw_failure(const ThreadGroup& g) {
    switch (g.failure) {
      case Failure::kAbort:
        throw RemoteError(g.failure_message);
      case Failure::kTimeout:
        throw TimeoutError(g.failure_message);
      default:
        throw Error(g.failure_message);
    }
  }

  std::vector<std::string> collective(Kind kind, int root, std::string_view mine) {
    ThreadGroup& g = *group_;
    std::unique_lock lock(g.mu);
    if (g.failure != Failure::kNone) throw_failure(g);

    const uint64_t number = g.completed + 1;  // 1-based, as printed in messages
    if (g.arrived > 0 && (g.kind != kind || g.root != root)) {
      int a = std::min(g.first_rank, rank_), b = std::max(g.first_rank, rank_);
      std::string what_a = a == rank_ ? describe(kind, root) : describe(g.kind, g.root);
      std::string what_b = b == rank_ ? describe(kind, root) : describe(g.kind, g.root);
      g.failure = Failure::kMismatch;
      g.failure_message = str_cat("iris bootstrap: ranks disagree on collective #", number, ": rank ", a, " called ",
                                  what_a, ", rank ", b, " called ", what_b);
      g.cv.notify_all();
      throw_failure(g);
    }
    if (g.present[rank_]) {
      // A second arrival of this rank (before 2026-12-07 counted as another rank's: the collective completed
      // without one rank, and the later ones paired up out of step without a word).
      g.failure = Failure::kMismatch;
      g.failure_message = str_cat("iris bootstrap: rank ", rank_, " entered collective #", number,
                                  " twice: two threads use its bootstrap at once (one Context, or one bootstrap "
                                  "given to two Contexts); a rank's Context belongs to one thread at a time");
      g.cv.notify_all();
      throw_failure(g);
    }
    if (g.arrived == 0) {
      g.kind = kind;
      g.root = root;
      g.first_rank = rank_;
    }
    g.slots[rank_].assign(mine);
    g.present[rank_] = 1;
    ++g.arrived;

    if (g.arrived == g.world) {
      // Last to arrive: publish, reset the arrival state for the next collective, wake everyone.
      auto result = std::make_shared<const std::vector<std::string>>(std::exchange(g.slots, {}));
      g.slots.resize(g.world);
      g.present.assign(g.world, 0);
      g.arrived = 0;
      g.result = result;
      ++g.completed;
      g.cv.notify_all();
      return *result;
    }

    const uint64_t generation = number - 1;
    const auto deadline = Clock::now() + g.timeout;
    bool done =
        g.cv.wait_until(lock, deadline, [&] { return g.completed != generation || g.failure != Failure::kNone; });
    // The generation cannot advance twice without this rank, so g.result is this collective's.
    if (g.completed != generation) return *g.result;
    if (done) throw_failure(g);

    std::vector<int> missing;
    for (int r = 0; r < g.world; ++r)
      if (!g.present[r]) missing.push_back(r);
    g.failure = Failure::kTimeout;
    g.failure_message =
        str_cat("iris bootstrap: timed out after ", detail::format_seconds(g.timeout), " s in ", kind_name(kind), " #",
                number, " waiting for ", detail::format_ranks(missing), " (of ", g.world, ")");
    IRIS_LOG_DEBUG(g.failure_message);
    g.cv.notify_all();
    throw_failure(g);
  }

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Bootstrap>> make_thread_bootstraps(int world, std::chrono::milliseconds timeout) {
  IRIS_CHECK_ARG(world >= 1, "iris bootstrap: world size ", world, " must be at least 1");
  IRIS_CHECK_ARG(timeout.count() > 0, "iris bootstrap: timeout ", timeout.count(), " ms must be positive");
  IRIS_CHECK_ARG(timeout <= detail::kMaxBootstrapTimeout, "iris bootstrap: timeout ", timeout.count(),
                 " ms is beyond the ", detail::kMaxBootstrapTimeout.count(),
                 " ms (10^9 s) that deadlines can count to; pass at most that");
  auto group = std::make_shared<ThreadGroup>(world, timeout);
  std::vector<std::shared_ptr<Bootstrap>> out;
  out.reserve(world);
  for (int r = 0; r < world; ++r) out.push_back(std::make_shared<ThreadBootstrap>(group, r));
  return out;
}

}  // namespace iris
