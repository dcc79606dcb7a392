// Running one test body on several ranks, as threads of this process or as processes.
//
//   TEST_P(MyGpuTest, Works) {
//     IRIS_TEST_REQUIRE_GPUS(GetParam());
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
//
// Ranks sharing a GPU: with IRIS_TEST_RANKS_PER_GPU=n (default 1), process-mode setups of up to n
// ranks per visible GPU run too, rank r on device r % gpus, so the logic of 2 ranks can be tested
// where one GPU is lent. It checks indexing, protocols and results, not NVLink: the GPU time-slices
// between the processes (timings mean nothing), a peer's memory is the same HBM, and the ranks'
// kernels never run at the same instant, so races between ranks rarely show. Under MPS they do run at
// once (scripts/gpu_prebuilt.sh, IRIS_MPS). Threads never share a GPU: kernels of one process that
// spin on each other need not all be resident at once.
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
// The same and 3 ranks, for suites whose cases take any world size (none divides a size by W): an odd
// world is where a ring's two directions differ and W does not divide a power-of-two grid (the ring's
// schedule chained tile to tile at 3 ranks, found by iris-bench's check, 2026-12-03).
std::vector<RankSetup> any_world_rank_setups();
std::string rank_setup_name(const ::testing::TestParamInfo<RankSetup>& info);

// Runs body on setup.world ranks as setup.mode says. Options are forwarded to every Context.
void run_ranks(const RankSetup& setup, const std::function<void(Context&)>& body, const ContextOptions& options = {});

// Said by a body that ended its process's CUDA context on purpose (a kernel's trap, which it checked): after the
// body, run_ranks then expects the device to fail instead of failing the test for it. Processes only: the ranks
// of Mode::kThreads share the test binary's context.
void context_ended_on_purpose();

// True when this process is a child started by run_ranks (Mode::kProcesses).
bool is_rank_child();

int gpu_count();

// IRIS_TEST_RANKS_PER_GPU, at least 1.
int ranks_per_gpu();

// Why a test cannot run here (the skip message), or "" when it can: `gpus` GPUs of its own, or the
// ranks of `setup` on this machine's GPUs (shared by processes up to ranks_per_gpu() each).
std::string skip_reason(int gpus);
std::string skip_reason(const RankSetup& setup);
// The rule itself, for host tests.
std::string skip_reason(const RankSetup& setup, int gpus, int ranks_per_gpu);

}  // namespace iris::test

// Skips the current test, with the reason in the output, unless it can run here: IRIS_TEST_REQUIRE_GPUS(2)
// for two GPUs, IRIS_TEST_REQUIRE_GPUS(GetParam()) for the ranks of a RankSetup.
#define IRIS_TEST_REQUIRE_GPUS(need)                         \
  do {                                                       \
    std::string iris_why_ = ::iris::test::skip_reason(need); \
    if (!iris_why_.empty()) GTEST_SKIP() << iris_why_;       \
  } while (0)

namespace iris::test {
// Readable test names in ctest output (instead of a byte dump).
inline void PrintTo(const RankSetup& s, std::ostream* os) {
  *os << (s.mode == Mode::kThreads ? "threads" : "processes") << " x" << s.world;
}
}  // namespace iris::test
