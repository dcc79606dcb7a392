#include "support/ranks.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "iris/core/cuda_check.hpp"
#include "iris/runtime/local_launch.hpp"

namespace iris::test {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

void run_as_processes(int world) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  ASSERT_NE(info, nullptr);
  if (world > gpu_count())
    std::printf(
        "[ iris     ] %d ranks as processes on %d GPU(s) (IRIS_TEST_RANKS_PER_GPU=%d): they take turns on a "
        "GPU, or split its SMs under MPS\n",
        world, gpu_count(), ranks_per_gpu());
  // This binary again, filtered to the current test, with torchrun's environment (run_local_processes),
  // and no sharding (a child inheriting this run's shard would be left no test; 2026-12-05).
  LocalLaunchOptions options;
  options.extra_env = {"IRIS_TEST_CHILD=1", "GTEST_TOTAL_SHARDS=1", "GTEST_SHARD_INDEX=0"};
  options.timeout = std::chrono::seconds(env_int("IRIS_TEST_CHILD_TIMEOUT", 120));
  // Each child writes its test's result here when the test ends ("passed", "skipped" or "failed": the
  // listener below), whatever the body did: a child exits 0 when its test passed, skipped, or never ran.
  char result_dir[] = "/tmp/iris-test-results.XXXXXX";
  ASSERT_NE(::mkdtemp(result_dir), nullptr);
  options.extra_env.push_back(std::string("IRIS_TEST_RESULT_DIR=") + result_dir);
  const std::vector<std::string> argv = {"/proc/self/exe",
                                         std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name(),
                                         "--gtest_brief=1"};
  bool all_ok = true;
  for (const ProcessExit& e : run_local_processes(world, argv, options))
    if (!e.ok()) {
      all_ok = false;
      ADD_FAILURE() << e.describe() << (e.exit_code > 0 ? " (its output is above)" : "");
    }
  std::string skipped, silent;
  int skips = 0;
  for (int r = 0; r < world; ++r) {
    const std::string file = std::string(result_dir) + "/rank" + std::to_string(r);
    std::string result;
    if (std::FILE* f = std::fopen(file.c_str(), "r")) {
      char buf[16] = {0};
      result = std::fgets(buf, sizeof buf, f) != nullptr ? buf : "";
      std::fclose(f);
    }
    ::unlink(file.c_str());
    if (result.empty()) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    if (result == "skipped") {
      ++skips;
      skipped += (skipped.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  ::rmdir(result_dir);
  if (!all_ok) return;  // the failures above say why
  // Before 2026-12-05 a child that skipped before its test's body reached run_ranks, or ran no test at all,
  // counted as a rank that passed, and a test some ranks skipped passed (a reviewer's finding).
  if (!silent.empty())
    ADD_FAILURE() << "rank(s) " << silent << " exited 0 without a result for this test: the process ran no test "
                  << "(its filter or sharding selected none), which is not a pass";
  else if (skips == world)
    GTEST_SKIP() << "every rank skipped (each child's reason is above)";
  else if (skips > 0)
    ADD_FAILURE() << "rank(s) " << skipped << " of " << world << " skipped while the others ran the test (each "
                  << "child's reason is above): a test runs on every rank or on none";
}

// In a child of run_as_processes: writes the result of each test that ends to IRIS_TEST_RESULT_DIR/rank<RANK>.
class ChildResult : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const char* dir = std::getenv("IRIS_TEST_RESULT_DIR");
    if (dir == nullptr) return;
    const ::testing::TestResult& r = *info.result();
    const std::string file = std::string(dir) + "/rank" + std::to_string(env_int("RANK", -1));
    if (std::FILE* f = std::fopen(file.c_str(), "w")) {
      std::fputs(r.Failed() ? "failed" : r.Skipped() ? "skipped" : "passed", f);
      std::fclose(f);
    }
  }
};

const bool child_result_registered = [] {
  if (is_rank_child()) ::testing::UnitTest::GetInstance()->listeners().Append(new ChildResult);
  return true;
}();

}  // namespace

int gpu_count() {
  static int n = iris::local_device_count();
  return n;
}

int ranks_per_gpu() { return std::max(1, env_int("IRIS_TEST_RANKS_PER_GPU", 1)); }

namespace {
std::string needs_gpus(int need, int have) {
  return "needs " + std::to_string(need) + " CUDA GPU(s), " + std::to_string(have) + " visible";
}

// Why no GPU is visible, when CUDA says (a driver older than the runtime reads as "no GPU" otherwise):
// " (cudaGetDeviceCount: <error>)", or "" when it succeeded.
const std::string& no_gpu_detail() {
  static const std::string detail = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return std::string();
    (void)cudaGetLastError();
    return std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  }();
  return detail;
}
}  // namespace

std::string skip_reason(int gpus) {
  int have = gpu_count();
  if (have >= gpus) return {};
  return needs_gpus(gpus, have) + (have == 0 ? no_gpu_detail() : "");
}

std::string skip_reason(const RankSetup& setup) {
  const std::string why = skip_reason(setup, gpu_count(), ranks_per_gpu());
  return why.empty() || gpu_count() > 0 ? why : why + no_gpu_detail();
}

std::string skip_reason(const RankSetup& setup, int gpus, int ranks_per_gpu) {
  if (setup.world <= gpus) return {};
  const std::string need = needs_gpus(setup.world, gpus);
  if (gpus == 0 || ranks_per_gpu <= 1) return need;
  if (setup.mode == Mode::kThreads)
    return need + " (threads never share a GPU; IRIS_TEST_RANKS_PER_GPU applies to processes)";
  int fit = gpus * ranks_per_gpu;
  if (setup.world <= fit) return {};
  return need + " (IRIS_TEST_RANKS_PER_GPU=" + std::to_string(ranks_per_gpu) + " fits " + std::to_string(fit) +
         " process ranks)";
}

bool is_rank_child() {
  const char* v = std::getenv("IRIS_TEST_CHILD");
  return v != nullptr && std::string(v) == "1";
}

namespace {
std::vector<RankSetup> setups_of(std::initializer_list<int> worlds) {
  const int max_ranks = env_int("IRIS_TEST_MAX_RANKS", 2);
  std::vector<RankSetup> setups;
  for (int world : worlds)
    if (world <= max_ranks)
      for (Mode mode : {Mode::kThreads, Mode::kProcesses}) setups.push_back({mode, world});
  return setups;
}
}  // namespace

std::vector<RankSetup> all_rank_setups() { return setups_of({1, 2, 4, 8}); }

std::vector<RankSetup> any_world_rank_setups() { return setups_of({1, 2, 3, 4, 8}); }

std::string rank_setup_name(const ::testing::TestParamInfo<RankSetup>& info) {
  return std::string(info.param.mode == Mode::kThreads ? "threads_" : "processes_") + std::to_string(info.param.world);
}

namespace {

// Set by context_ended_on_purpose, for this thread's body.
thread_local bool context_ended = false;

// After a body returns, what it queued and did not check is checked: a kernel's device error (a wait
// that gave up, a misuse) or a CUDA error raised by nothing the body called would otherwise vanish when
// the Context is destroyed, and the test would pass. A body that failed fatally is left as it is.
void drain_and_check(Context& ctx) {
  const bool ended = std::exchange(context_ended, false);
  if (::testing::Test::HasFatalFailure()) return;
  // The context's device, which a thread of run_threads need not have current after the body.
  const iris::detail::DeviceGuard device(ctx.device());
  const cudaError_t err = cudaDeviceSynchronize();  // every stream: the context's and the body's own
  if (ended) {
    if (err == cudaSuccess)
      ADD_FAILURE() << "rank " << ctx.rank() << ": the body said its CUDA context ended, but the device synchronizes";
    return;
  }
  if (err != cudaSuccess) {
    ADD_FAILURE() << "rank " << ctx.rank() << ": the work the test left queued failed after its body returned: "
                  << cudaGetErrorName(err) << ": " << cudaGetErrorString(err);
    return;
  }
  try {
    ctx.check_device_error();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << ctx.rank() << ": the work the test left queued raised after its body returned "
                  << "(no call in the body checked it): " << e.what();
  }
}

}  // namespace

void context_ended_on_purpose() { context_ended = true; }

void run_ranks(const RankSetup& setup, const std::function<void(Context&)>& body, const ContextOptions& options) {
  if (setup.mode == Mode::kThreads) {
    iris::run_threads(
        setup.world,
        [&body](Context& ctx) {
          body(ctx);
          drain_and_check(ctx);
        },
        options);
    return;
  }
  if (!is_rank_child()) {
    run_as_processes(setup.world);
    return;
  }
  ASSERT_EQ(env_int("WORLD_SIZE", -1), setup.world) << "child started for a different world size";
  ContextOptions opts = options;
  // More ranks than GPUs: skip_reason let this setup through because ranks share GPUs.
  if (opts.device < 0 && setup.world > gpu_count() && gpu_count() > 0)
    opts.device = env_int("LOCAL_RANK", 0) % gpu_count();
  auto ctx = Context::create_from_env(opts);
  body(*ctx);
  drain_and_check(*ctx);
}

}  // namespace iris::test
