// GPU tests of the bounded-wait path (iris/device/timeout.cuh): a wait that can never complete ends
// the kernel after the context's device timeout (200 ms here) and ctx.synchronize() throws
// iris::TimeoutError naming the op, the rank and the word's owner; every other spinning thread gives
// up too; the record is cleared and the context keeps working; device barriers time out and report
// misuse the same way; a long op name is cut to the record, a word off the heap has no owner, a handle
// without an error record still gives up at its bound, and one without a timeout waits the 10 s default. 1 and 2 ranks
// (more with IRIS_TEST_MAX_RANKS), threads and processes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "iris/context.hpp"
#include "iris/core/cuda_check.hpp"
#include "iris/core/error.hpp"
#include "iris/device.cuh"
#include "iris/device_barrier.hpp"
#include "support/error_text.hpp"
#include "support/ranks.hpp"
#include "test_device_util.cuh"

namespace iris {
namespace {

namespace dev = iris::device;
using dev::Cmp;
using dev::Order;
using dev::Scope;
using test::RankSetup;
using Clock = std::chrono::steady_clock;

constexpr auto kBound = std::chrono::milliseconds(200);

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

class DeviceTimeoutTest : public ::testing::TestWithParam<RankSetup> {};

// Every thread waits for `*word == expected`; results[thread] = 1 if the wait succeeded, 0 if it gave up.
__global__ void wait_kernel(DeviceContext ctx, const uint64_t* word, uint64_t expected, int* results) {
  const bool ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, word, Cmp::kEq, expected, "test_never_signalled");
  results[blockIdx.x * blockDim.x + threadIdx.x] = ok ? 1 : 0;
}

__global__ void wait_named_kernel(DeviceContext ctx, const uint64_t* word, int* results, int first) {
  const char* op = first ? "test_first_timeout" : "test_after_error";
  const bool ok = dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, word, Cmp::kEq, 1, op);
  results[blockIdx.x * blockDim.x + threadIdx.x] = ok ? 1 : 0;
}

// Waits 256 threads for a word nobody writes; checks the exception, its timing and message, that every
// thread gave up, that the record was cleared, and that the same kernel then succeeds once the word is set.
void check_never_signalled(Context& ctx, uint64_t* local_word, int owner) {
  const int me = ctx.rank();
  const uint64_t* word = ctx.translate(local_word, owner);
  test::DeviceBuffer<int> results(256);
  test::fill_bytes(ctx.stream(), results.get(), 0x7f, 256);
  const auto t0 = Clock::now();
  wait_kernel<<<4, 64, 0, ctx.stream()>>>(ctx.device_context(), word, 1, results.get());
  IRIS_CUDA_CHECK_LAUNCH();
  std::string message;
  try {
    ctx.synchronize();
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  const double elapsed = ms_since(t0);
  ASSERT_FALSE(message.empty()) << "rank " << me << ": ctx.synchronize() did not throw iris::TimeoutError";
  EXPECT_GE(elapsed, 190.0) << "gave up before the 200 ms bound";
  EXPECT_LT(elapsed, 3000.0) << "took far longer than the 200 ms bound";
  EXPECT_NE(message.find("test_never_signalled"), std::string::npos) << message;
  EXPECT_NE(message.find("on rank " + std::to_string(me)), std::string::npos) << message;
  EXPECT_NE(message.find("owned by rank " + std::to_string(owner)), std::string::npos) << message;
  EXPECT_NE(message.find("last value 0, waiting for 1"), std::string::npos) << message;
  EXPECT_NE(message.find("IRIS_CHECK_CALLS=1"), std::string::npos) << message;
  for (int r : test::copy_to_host(ctx.stream(), results.get(), 256)) EXPECT_EQ(r, 0) << "a thread did not give up";
  EXPECT_NO_THROW(ctx.check_device_error()) << "the record is cleared after it was reported";
}

TEST_P(DeviceTimeoutTest, WaitThatNeverCompletesThrowsTimeoutErrorNamingOpRankAndOwner) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int me = ctx.rank(), right = (me + 1) % ctx.world_size();
        // [0]: waited on locally, [1]: waited on by the left neighbour. Nobody writes either until below.
        auto* words = ctx.zeros<uint64_t>(2);
        ctx.barrier();
        check_never_signalled(ctx, words, me);
        check_never_signalled(ctx, words + 1, right);
        ctx.barrier();  // no peer waits on words[1] any more

        // The context still works: the same wait succeeds once the word holds the value.
        test::copy_to_device(ctx.stream(), words, std::vector<uint64_t>{1});
        test::DeviceBuffer<int> results(256);
        wait_kernel<<<4, 64, 0, ctx.stream()>>>(ctx.device_context(), words, 1, results.get());
        IRIS_CUDA_CHECK_LAUNCH();
        EXPECT_NO_THROW(ctx.synchronize());
        for (int r : test::copy_to_host(ctx.stream(), results.get(), 256)) EXPECT_EQ(r, 1);
        ctx.barrier();
        ctx.free(words);
      },
      test::device_test_options(kBound));
}

TEST_P(DeviceTimeoutTest, RecordedErrorMakesLaterWaitsGiveUpQuicklyAndKeepsTheFirstReport) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        auto* word = ctx.zeros<uint64_t>(1);
        test::DeviceBuffer<int> results(128);
        wait_named_kernel<<<1, 1, 0, ctx.stream()>>>(ctx.device_context(), word, results.get(), 1);
        IRIS_CUDA_CHECK_LAUNCH();
        IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));  // times out and records; not reported yet
        // A later kernel's waits see the unreported record and give up at their first error poll (about
        // 100 us), long before their own 200 ms bound. Its results start poisoned (0x7f7f7f7f), so that each
        // thread's 0 is its own report of giving up.
        test::fill_bytes(ctx.stream(), results.get(), 0x7f, 128);
        const auto t0 = Clock::now();
        wait_named_kernel<<<2, 64, 0, ctx.stream()>>>(ctx.device_context(), word, results.get(), 0);
        IRIS_CUDA_CHECK_LAUNCH();
        IRIS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
        EXPECT_LT(ms_since(t0), 120.0) << "waits did not notice the recorded error";
        for (int r : test::copy_to_host(ctx.stream(), results.get(), 128)) EXPECT_EQ(r, 0);
        std::string message;
        try {
          ctx.check_device_error();
        } catch (const TimeoutError& e) {
          message = e.what();
        }
        EXPECT_NE(message.find("test_first_timeout"), std::string::npos)
            << "the first failure is the one reported: " << message;
        EXPECT_NO_THROW(ctx.check_device_error());
        ctx.barrier();
        ctx.free(word);
      },
      test::device_test_options(kBound));
}

// One thread per case, each waiting for a comparison that does not hold: all give up.
struct UnsatisfiedCase {
  uint64_t observed;
  Cmp cmp;
  uint64_t value;
};

// elapsed_ms[i]: how long case i waited. Every wait has the same bound and starts at once, so each gives up
// at its bound (the first to record, at its own; the others at their next poll of the record, at about the
// same time): a comparison that gave up at once, without waiting, shows as a short wait.
__global__ void unsatisfied_kernel(DeviceContext ctx, uint64_t* words, const UnsatisfiedCase* cases, int count,
                                   int* results, double* elapsed_ms) {
  const int i = threadIdx.x;
  if (i >= count) return;
  words[i] = cases[i].observed;
  const uint64_t t0 = test::global_timer_ns();
  results[i] =
      dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, words + i, cases[i].cmp, cases[i].value, "test_unsatisfied")
          ? 1
          : 0;
  elapsed_ms[i] = static_cast<double>(test::global_timer_ns() - t0) * 1e-6;
}

TEST_P(DeviceTimeoutTest, UnsatisfiedComparisonsWaitUntilTheBound) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const std::vector<UnsatisfiedCase> cases = {
            {7, Cmp::kEq, 8},
            {7, Cmp::kNe, 7},
            {6, Cmp::kGe, 7},
            {7, Cmp::kGt, 7},
            {8, Cmp::kLe, 7},
            {7, Cmp::kLt, 7},
            {6, Cmp::kReached, 7},
            {~uint64_t{0} - 2, Cmp::kReached, 5},  // 2^64 - 3 is before 5 (wrapped)
            {~uint64_t{0}, Cmp::kLt, 0},           // unsigned: 2^64 - 1 is not below 0
        };
        const int count = static_cast<int>(cases.size());
        auto* words = ctx.zeros<uint64_t>(count);
        test::DeviceBuffer<UnsatisfiedCase> dev_cases(count);
        test::copy_to_device(ctx.stream(), dev_cases.get(), cases);
        test::DeviceBuffer<int> results(count);
        test::fill_bytes(ctx.stream(), results.get(), 0x7f, count);
        test::DeviceBuffer<double> elapsed(count);
        test::fill_bytes(ctx.stream(), elapsed.get(), 0x00, count);
        unsatisfied_kernel<<<1, 32, 0, ctx.stream()>>>(ctx.device_context(), words, dev_cases.get(), count,
                                                       results.get(), elapsed.get());
        IRIS_CUDA_CHECK_LAUNCH();
        EXPECT_THROW(ctx.synchronize(), TimeoutError);
        auto got = test::copy_to_host(ctx.stream(), results.get(), count);
        auto waited = test::copy_to_host(ctx.stream(), elapsed.get(), count);
        for (int i = 0; i < count; ++i) {
          EXPECT_EQ(got[i], 0) << "case " << i << " was satisfied";
          EXPECT_GE(waited[i], 150.0) << "case " << i << " gave up without waiting for the 200 ms bound";
        }
        ctx.barrier();
        ctx.free(words);
      },
      test::device_test_options(kBound));
}

// One thread waits for `*word cmp value` on a signed flag word.
template <typename T>
__global__ void wait_signed_kernel(DeviceContext ctx, const T* word, Cmp cmp, T value) {
  (void)dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, word, cmp, value, "test_signed_flag");
}

// A signed flag's values are named signed: before 2026-12-07 the record held them zero-extended, and a wait of
// an int32 flag for -1 read "waiting for 4294967295".
TEST_P(DeviceTimeoutTest, ASignedFlagsTimeoutNamesItsValuesSigned) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        auto* narrow = ctx.zeros<int32_t>(1);
        auto* wide = ctx.zeros<int64_t>(1);
        test::copy_to_device(ctx.stream(), wide, std::vector<int64_t>{-5});
        wait_signed_kernel<int32_t><<<1, 1, 0, ctx.stream()>>>(ctx.device_context(), narrow, Cmp::kEq, -1);
        IRIS_CUDA_CHECK_LAUNCH();
        std::string message = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
        EXPECT_NE(message.find("test_signed_flag"), std::string::npos) << message;
        EXPECT_NE(message.find("; last value 0, waiting for -1. "), std::string::npos) << message;
        wait_signed_kernel<int64_t><<<1, 1, 0, ctx.stream()>>>(ctx.device_context(), wide, Cmp::kGe, 3);
        IRIS_CUDA_CHECK_LAUNCH();
        message = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
        EXPECT_NE(message.find("; last value -5, waiting for 3. "), std::string::npos) << message;
        ctx.barrier();
        ctx.free(wide);
        ctx.free(narrow);
      },
      test::device_test_options(kBound));
}

// barrier() agrees on device errors: the last rank's kernel times out and nobody asks for its record
// before the barrier, so the barrier raises the TimeoutError there and RemoteError naming it on every
// other rank (before 2026-12-05 only the rank with the record raised; its peers passed the barrier and
// went on to calls that would wait for it). The record is then cleared and the next barrier passes.
TEST_P(DeviceTimeoutTest, BarrierRaisesARanksDeviceErrorOnEveryRank) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int me = ctx.rank(), culprit = ctx.world_size() - 1;
        auto* word = ctx.zeros<uint64_t>(1);
        test::DeviceBuffer<int> results(64);
        ctx.barrier();
        if (me == culprit) {
          wait_kernel<<<1, 64, 0, ctx.stream()>>>(ctx.device_context(), word, 1, results.get());
          IRIS_CUDA_CHECK_LAUNCH();
        }
        std::string message;
        if (me == culprit) {
          message = test::error_text<TimeoutError>([&] { ctx.barrier(); });
          EXPECT_EQ(message.rfind("iris device timeout in test_never_signalled on rank " + std::to_string(me), 0), 0u)
              << message;
          EXPECT_EQ(ctx.device_timeouts(), 1u);
        } else {
          message = test::error_text<RemoteError>([&] { ctx.barrier(); });
          EXPECT_EQ(message.rfind("rank " + std::to_string(culprit) +
                                      " failed to finish its stream in barrier(): iris device timeout in "
                                      "test_never_signalled on rank " +
                                      std::to_string(culprit),
                                  0),
                    0u)
              << message;
          EXPECT_EQ(ctx.device_timeouts(), 0u);
        }
        EXPECT_NE(message.find("last value 0, waiting for 1"), std::string::npos) << message;
        EXPECT_NO_THROW(ctx.barrier()) << "the record is cleared once reported";
        ctx.free(word);
        ctx.barrier();
      },
      test::device_test_options(kBound));
}

TEST_P(DeviceTimeoutTest, DeviceBarrierTimesOutWhenAPeerNeverArrives) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 2) GTEST_SKIP() << "needs a peer that stays away: 2 ranks or more";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        DeviceBarrier barrier(ctx);
        if (ctx.rank() == 0) {
          const auto t0 = Clock::now();
          barrier.arrive_and_wait();
          std::string message;
          try {
            ctx.synchronize();
          } catch (const TimeoutError& e) {
            message = e.what();
          }
          EXPECT_GE(ms_since(t0), 190.0);
          EXPECT_NE(message.find("barrier_block"), std::string::npos) << message;
          EXPECT_NE(message.find("on rank 0"), std::string::npos) << message;
          EXPECT_NE(message.find("owned by rank 0"), std::string::npos) << "rank 0 waits on its own words: " << message;
          // Rank 0 is one crossing ahead now: its next crossing is refused (before 2026-12-03 a peer's next
          // crossing passed on rank 0's abandoned arrival, and rank 0 then timed out again).
          EXPECT_EQ(test::error_text<std::invalid_argument>([&] { barrier.arrive_and_wait(); }),
                    "DeviceBarrier::arrive_and_wait: a device error (an iris::TimeoutError, a kernel's misuse, or "
                    "calls that differed across ranks) was "
                    "raised on this rank since this barrier was created, so its epochs may be out of step between "
                    "ranks; create a new "
                    "DeviceBarrier on every rank.");
        }
        ctx.barrier();
        DeviceBarrier fresh(ctx);  // created after the timeout: in step on every rank
        for (int i = 0; i < 3; ++i) fresh.arrive_and_wait();
        EXPECT_NO_THROW(ctx.synchronize());
        ctx.barrier();
      },
      test::device_test_options(kBound));
}

__global__ void barrier_slot_kernel(DeviceContext ctx, DeviceBarrierHandle barrier, int slot, int* result) {
  const bool ok = dev::barrier_block(ctx, barrier, slot);
  if (threadIdx.x == 0) *result = ok ? 1 : 0;
}

// results[thread] = what barrier_block returned to that thread (1 true, 0 false).
__global__ void barrier_results_kernel(DeviceContext ctx, DeviceBarrierHandle barrier, int* results) {
  const bool ok = dev::barrier_block(ctx, barrier, 0);
  results[dev::thread_index_in_block()] = ok ? 1 : 0;
}

// From 3 ranks: the last rank stays away while the others cross, so on each of them some waits succeed (for
// the ranks that arrived) and one gives up (for the last). Every thread of the block must learn false, with a
// thread per rank (each waits for one) and with one thread (it waits for the ranks in turn, and the one that
// arrived before the absent one does not make it true).
TEST_P(DeviceTimeoutTest, DeviceBarrierIsFalseForTheWholeBlockWhenOnlySomeWaitsGiveUp) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world < 3) GTEST_SKIP() << "needs a rank that arrives and one that stays away: 3 ranks or more";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const int world = ctx.world_size(), me = ctx.rank();
        for (int threads : {64, 1}) {
          DeviceBarrier barrier(ctx);
          if (me != world - 1) {
            test::DeviceBuffer<int> results(threads);
            test::fill_bytes(ctx.stream(), results.get(), 0x7f, threads);
            barrier_results_kernel<<<1, threads, 0, ctx.stream()>>>(ctx.device_context(), barrier.handle(),
                                                                    results.get());
            IRIS_CUDA_CHECK_LAUNCH();
            const std::string message = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
            EXPECT_NE(message.find("iris device timeout in barrier_block on rank " + std::to_string(me)),
                      std::string::npos)
                << threads << " threads: " << message;
            // The word waited for is this rank's own copy of the absent rank's epoch.
            EXPECT_NE(message.find("owned by rank " + std::to_string(me)), std::string::npos) << message;
            const auto got = test::copy_to_host(ctx.stream(), results.get(), threads);
            for (int t = 0; t < threads; ++t)
              EXPECT_EQ(got[t], 0) << threads << " threads, rank " << me << ": thread " << t << " got "
                                   << (got[t] == 1 ? "true" : "nothing") << " from a crossing rank " << world - 1
                                   << " never made";
          }
          ctx.barrier();  // every crossing rank has given up before the barrier's words are freed
        }
      },
      test::device_test_options(kBound));
}

TEST_P(DeviceTimeoutTest, DeviceBarrierSlotOutOfRangeIsReported) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        DeviceBarrier barrier(ctx, 3);
        test::DeviceBuffer<int> result(1);
        // A misuse, not a timeout: InvalidArgument naming the value and its range (before 2026-12-03 a
        // TimeoutError saying it had waited 0 ms for a peer that never signalled).
        for (int slot : {3, -1}) {
          test::fill_bytes(ctx.stream(), result.get(), 0x7f, 1);
          barrier_slot_kernel<<<1, 64, 0, ctx.stream()>>>(ctx.device_context(), barrier.handle(), slot, result.get());
          IRIS_CUDA_CHECK_LAUNCH();
          EXPECT_EQ(test::error_text<std::invalid_argument>([&] { ctx.synchronize(); }),
                    "iris device error in barrier_block: slot out of range on rank " + std::to_string(ctx.rank()) +
                        " (block 0): got " + std::to_string(slot) +
                        ", which must be in [0, 3). The kernel gave up there, and so did every bounded wait of this "
                        "rank's kernels running at the time.");
          EXPECT_EQ(test::copy_to_host(ctx.stream(), result.get(), 1)[0], 0);
        }
        // Valid slots still work on every rank (nothing was advanced by the rejected calls).
        for (int slot : {0, 1, 2}) {
          barrier_slot_kernel<<<1, 64, 0, ctx.stream()>>>(ctx.device_context(), barrier.handle(), slot, result.get());
          IRIS_CUDA_CHECK_LAUNCH();
          EXPECT_NO_THROW(ctx.synchronize());
          EXPECT_EQ(test::copy_to_host(ctx.stream(), result.get(), 1)[0], 1);
        }
        ctx.barrier();
      },
      test::device_test_options(kBound));
}

// An op name longer than the record holds is cut to its first kOpNameSize - 1 characters (never written past
// the record), and a word off the symmetric heap (cudaMalloc'd) is named without an owner.
__global__ void wait_long_name_kernel(DeviceContext ctx, const uint64_t* word, const char* op) {
  (void)dev::wait_until<Order::kAcquire, Scope::kSys>(ctx, word, Cmp::kEq, 1, op);
}

TEST_P(DeviceTimeoutTest, ALongOpNameIsCutToTheRecordAndAWordOffTheHeapNamesNoOwner) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        const std::string op = "test_an_op_name_far_longer_than_the_forty_seven_characters_a_record_holds";
        ASSERT_GT(op.size(), static_cast<size_t>(DeviceErrorRecord::kOpNameSize));
        test::DeviceBuffer<char> dev_op(op.size() + 1);
        test::copy_to_device(ctx.stream(), dev_op.get(), std::vector<char>(op.c_str(), op.c_str() + op.size() + 1));
        test::DeviceBuffer<uint64_t> off_heap(1);
        test::fill_bytes(ctx.stream(), off_heap.get(), 0, 1);
        wait_long_name_kernel<<<1, 1, 0, ctx.stream()>>>(ctx.device_context(), off_heap.get(), dev_op.get());
        IRIS_CUDA_CHECK_LAUNCH();
        const std::string message = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
        ASSERT_NE(message, "(no exception of the expected type thrown)")
            << "ctx.synchronize() did not throw iris::TimeoutError";
        const std::string kept = op.substr(0, DeviceErrorRecord::kOpNameSize - 1);
        EXPECT_NE(message.find("iris device timeout in " + kept + " on rank"), std::string::npos) << message;
        EXPECT_EQ(message.find(op.substr(0, DeviceErrorRecord::kOpNameSize)), std::string::npos) << message;
        EXPECT_EQ(message.find("owned by rank"), std::string::npos) << message;
        EXPECT_NE(message.find("last value 0, waiting for 1"), std::string::npos) << message;
        ctx.barrier();
      },
      test::device_test_options(kBound));
}

// A handle without an error record (DeviceContext::error null, as a hand-made one may be): a wait that never
// completes still gives up at its bound and returns false, with nothing recorded and no fault.
TEST_P(DeviceTimeoutTest, AHandleWithoutAnErrorRecordGivesUpAtItsBoundWithoutFaulting) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        auto* word = ctx.zeros<uint64_t>(1);
        DeviceContext handle = ctx.device_context();
        handle.error = nullptr;
        handle.timeout_ns = 100'000'000;  // 100 ms
        test::DeviceBuffer<int> results(64);
        test::fill_bytes(ctx.stream(), results.get(), 0x7f, 64);
        const auto t0 = Clock::now();
        wait_kernel<<<1, 64, 0, ctx.stream()>>>(handle, word, 1, results.get());
        IRIS_CUDA_CHECK_LAUNCH();
        EXPECT_NO_THROW(ctx.synchronize()) << "nothing was recorded, so nothing is raised";
        EXPECT_GE(ms_since(t0), 95.0) << "gave up before its 100 ms bound";
        for (int r : test::copy_to_host(ctx.stream(), results.get(), 64)) EXPECT_EQ(r, 0) << "a wait did not give up";
        ctx.barrier();
        ctx.free(word);
      },
      test::device_test_options(kBound));
}

// A handle whose timeout_ns is 0 (a default-constructed one, or a hand-made one that left it unset) waits the
// default bound of 10 s (kDefaultTimeoutNs), not zero and not forever. The bound is each rank's own, so one
// rank in one process shows it, in 10 s of waiting.
TEST_P(DeviceTimeoutTest, AHandleWithoutATimeoutWaitsTheTenSecondDefault) {
  IRIS_TEST_REQUIRE_GPUS(GetParam());
  if (GetParam().world != 1 || GetParam().mode != test::Mode::kThreads)
    GTEST_SKIP() << "the bound is each rank's own: the one-rank threads case shows it, in 10 s of waiting";
  test::run_ranks(
      GetParam(),
      [](Context& ctx) {
        auto* word = ctx.zeros<uint64_t>(1);
        DeviceContext handle = ctx.device_context();
        handle.timeout_ns = 0;
        test::DeviceBuffer<int> results(32);
        test::fill_bytes(ctx.stream(), results.get(), 0x7f, 32);
        const auto t0 = Clock::now();
        wait_kernel<<<1, 32, 0, ctx.stream()>>>(handle, word, 1, results.get());
        IRIS_CUDA_CHECK_LAUNCH();
        const std::string message = test::error_text<TimeoutError>([&] { ctx.synchronize(); });
        const double elapsed = ms_since(t0);
        EXPECT_GE(elapsed, 9990.0) << "gave up before the 10 s default";
        EXPECT_LT(elapsed, 13000.0) << "took far longer than the 10 s default";
        EXPECT_NE(message.find("iris device timeout in test_never_signalled on rank 0 (block 0): waited 10"),
                  std::string::npos)
            << message;
        for (int r : test::copy_to_host(ctx.stream(), results.get(), 32)) EXPECT_EQ(r, 0) << "a wait did not give up";
        ctx.barrier();
        ctx.free(word);
      },
      test::device_test_options(kBound));
}

INSTANTIATE_TEST_SUITE_P(DeviceRanks, DeviceTimeoutTest, ::testing::ValuesIn(test::any_world_rank_setups()),
                         test::rank_setup_name);

}  // namespace
}  // namespace iris
