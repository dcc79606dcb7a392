// Running one test body on several ranks, as threads of this process or as processes.
//
//   TEST_P(MyGpuTest, Works) {
//     IRIS_TEST_REQUIRE_GPUS(GetParam().world);
//     iris::test::run_ranks(GetParam(), [](iris::Context& ctx) { ... EXPECT_...; });
//   }
//   INSTANTIATE_TEST_SUITE_P(Ranks, MyGpuTest, iris::test::all_rank_setups(), iris::test::rank_setup_name);
//
// Threads: iris::run_threads. Processes: the parent re-executes this test binary once per rank,
// filtered to the current test, with RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/
// MASTER_PORT set (as torchrun would); each child runs the body on a Context::create_from_env(),
// and the parent fails the test if any child fails, crashes or runs past the time limit
// (IRIS_TEST_CHILD_TIMEOUT seconds, default 120). Child output goes to the parent's stdout/stderr.
//
// GoogleTest assertions inside the body work in both modes (failures in threads are recorded by
// GoogleTest's thread-safe reporter; in children they make the child's exit status non-zero).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "iris/context.hpp"

namespace iris::test {

enum class Mode { kThreads, kProcesses };

struct RankSetup {
  Mode mode;
  int world;
};

// {threads, processes} x {1, 2} ranks, plus 4 and 8 when IRIS_TEST_MAX_RANKS allows (default 2).
std::vector<RankSetup> all_rank_setups();
std::string rank_setup_name(const ::testing::TestParamInfo<RankSetup>& info);

// Runs body on setup.world ranks as setup.mode says. Options are forwarded to every Context.
void run_ranks(const RankSetup& setup, const std::function<void(Context&)>& body, const ContextOptions& options = {});

// True when this process is a child started by run_ranks (Mode::kProcesses).
bool is_rank_child();

int gpu_count();

}  // namespace iris::test

// Skips the current test, with the reason in the output, when fewer than n GPUs are visible.
#define IRIS_TEST_REQUIRE_GPUS(n)                                                                      \
  do {                                                                                                 \
    int iris_have_ = ::iris::test::gpu_count();                                                        \
    if (iris_have_ < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s), " << iris_have_ << " visible"; \
  } while (0)

namespace iris::test {
// Readable test names in ctest output (instead of a byte dump).
inline void PrintTo(const RankSetup& s, std::ostream* os) {
  *os << (s.mode == Mode::kThreads ? "threads" : "processes") << " x" << s.world;
}
}  // namespace iris::test
