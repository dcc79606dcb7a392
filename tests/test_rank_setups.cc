// The test harness's rule for which rank setups run on this machine (tests/support/ranks.*): one rank
// per GPU, or, with IRIS_TEST_RANKS_PER_GPU, several process ranks on one GPU, never several threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/ranks.hpp"
#include "support/scoped_env.hpp"

namespace iris::test {
namespace {

const RankSetup kThreads2{Mode::kThreads, 2};
const RankSetup kProcesses2{Mode::kProcesses, 2};
const RankSetup kProcesses4{Mode::kProcesses, 4};

TEST(RankSetups, OneRankPerGpuRunsInBothModes) {
  EXPECT_EQ(skip_reason(kThreads2, 2, 1), "");
  EXPECT_EQ(skip_reason(kProcesses2, 2, 1), "");
  EXPECT_EQ(skip_reason(RankSetup{Mode::kThreads, 1}, 1, 1), "");
  EXPECT_EQ(skip_reason(kProcesses4, 8, 1), "");
}

TEST(RankSetups, TooFewGpusSkipWithTheCounts) {
  EXPECT_EQ(skip_reason(kThreads2, 1, 1), "needs 2 CUDA GPU(s), 1 visible");
  EXPECT_EQ(skip_reason(kProcesses2, 1, 1), "needs 2 CUDA GPU(s), 1 visible");
  EXPECT_EQ(skip_reason(RankSetup{Mode::kThreads, 1}, 0, 1), "needs 1 CUDA GPU(s), 0 visible");
}

TEST(RankSetups, ProcessesShareGpusUpToTheLimit) {
  EXPECT_EQ(skip_reason(kProcesses2, 1, 2), "");
  EXPECT_EQ(skip_reason(kProcesses4, 2, 2), "");
  EXPECT_EQ(skip_reason(kProcesses4, 1, 2),
            "needs 4 CUDA GPU(s), 1 visible (IRIS_TEST_RANKS_PER_GPU=2 fits 2 process ranks)");
}

TEST(RankSetups, ThreadsNeverShareAGpu) {
  EXPECT_EQ(skip_reason(kThreads2, 1, 2),
            "needs 2 CUDA GPU(s), 1 visible (threads never share a GPU; IRIS_TEST_RANKS_PER_GPU applies to processes)");
}

TEST(RankSetups, NoGpuIsNoGpuWhateverTheSharing) {
  EXPECT_EQ(skip_reason(kProcesses2, 0, 4), "needs 2 CUDA GPU(s), 0 visible");
}

std::vector<int> worlds_of(const std::vector<RankSetup>& setups) {
  std::vector<int> worlds;  // each world twice: threads, then processes
  for (size_t i = 0; i < setups.size(); ++i) {
    EXPECT_EQ(setups[i].mode, i % 2 == 0 ? Mode::kThreads : Mode::kProcesses) << i;
    if (i % 2 == 0)
      worlds.push_back(setups[i].world);
    else
      EXPECT_EQ(setups[i].world, worlds.back()) << i;
  }
  return worlds;
}

// Every suite runs worlds 1, 2, 4 and 8 up to IRIS_TEST_MAX_RANKS, threads then processes; the suites
// that take any world add 3.
TEST(RankSetups, WorldsUpToTheMaximum) {
  {
    ScopedEnv max("IRIS_TEST_MAX_RANKS", "8");
    EXPECT_EQ(worlds_of(all_rank_setups()), (std::vector<int>{1, 2, 4, 8}));
    EXPECT_EQ(worlds_of(any_world_rank_setups()), (std::vector<int>{1, 2, 3, 4, 8}));
  }
  {
    ScopedEnv max("IRIS_TEST_MAX_RANKS", "3");
    EXPECT_EQ(worlds_of(all_rank_setups()), (std::vector<int>{1, 2}));
    EXPECT_EQ(worlds_of(any_world_rank_setups()), (std::vector<int>{1, 2, 3}));
  }
  ScopedEnv unset("IRIS_TEST_MAX_RANKS", nullptr);  // the default: 2
  EXPECT_EQ(worlds_of(any_world_rank_setups()), (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace iris::test
