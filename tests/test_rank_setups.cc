// The test harness's rule for which rank setups run on this machine (tests/support/ranks.*): one rank
// per GPU, or, with IRIS_TEST_RANKS_PER_GPU, several process ranks on one GPU, never several threads.
#include <gtest/gtest.h>

#include <string>

#include "support/ranks.hpp"

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

}  // namespace
}  // namespace iris::test
