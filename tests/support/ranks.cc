#include "support/ranks.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

extern char** environ;

namespace iris::test {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

void run_as_processes(int world) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  ASSERT_NE(info, nullptr);
  std::string filter = std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  int port = free_loopback_port();
  ASSERT_NE(port, 0) << "no free loopback port";

  // The children's environment: ours, minus any launcher variables, plus torchrun's.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    for (const char* drop : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                             "MASTER_PORT=", "OMPI_COMM_WORLD_", "SLURM_", "IRIS_TEST_CHILD="})
      if (kv.rfind(drop, 0) == 0) kv.clear();
    if (!kv.empty()) env_strings.push_back(kv);
  }
  if (world > gpu_count())
    std::printf(
        "[ iris     ] %d ranks as processes on %d GPU(s) (IRIS_TEST_RANKS_PER_GPU=%d): the GPU time-slices "
        "between them\n",
        world, gpu_count(), ranks_per_gpu());
  std::vector<pid_t> pids(world, -1);
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = env_strings;
    env.push_back("IRIS_TEST_CHILD=1");
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(world));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string quiet = "--gtest_brief=1";
    std::vector<char*> argv = {exe.data(), filter.data(), quiet.data(), nullptr};
    int rc = posix_spawn(&pids[r], "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
    ASSERT_EQ(rc, 0) << "posix_spawn failed for rank " << r;
  }
  const auto limit = std::chrono::seconds(env_int("IRIS_TEST_CHILD_TIMEOUT", 120));
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> status(world, -1);
  int remaining = world;
  while (remaining > 0) {
    for (int r = 0; r < world; ++r) {
      if (pids[r] < 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        pids[r] = -1;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() - start > limit) {
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          ADD_FAILURE() << "rank " << r << " (process) did not finish within " << limit.count()
                        << " s and was killed";
          pids[r] = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < world; ++r) {
    if (status[r] == -1) continue;
    if (WIFSIGNALED(status[r]))
      ADD_FAILURE() << "rank " << r << " (process) died from signal " << WTERMSIG(status[r]);
    else if (WEXITSTATUS(status[r]) != 0)
      ADD_FAILURE() << "rank " << r << " (process) failed, exit status " << WEXITSTATUS(status[r])
                    << " (its output is above)";
  }
}

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
}  // namespace

std::string skip_reason(int gpus) {
  int have = gpu_count();
  if (have >= gpus) return {};
  return needs_gpus(gpus, have);
}

std::string skip_reason(const RankSetup& setup) { return skip_reason(setup, gpu_count(), ranks_per_gpu()); }

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

std::vector<RankSetup> all_rank_setups() {
  int max_ranks = env_int("IRIS_TEST_MAX_RANKS", 2);
  std::vector<RankSetup> setups;
  for (int world : {1, 2, 4, 8})
    if (world <= max_ranks)
      for (Mode mode : {Mode::kThreads, Mode::kProcesses}) setups.push_back({mode, world});
  return setups;
}

std::string rank_setup_name(const ::testing::TestParamInfo<RankSetup>& info) {
  return std::string(info.param.mode == Mode::kThreads ? "threads_" : "processes_") + std::to_string(info.param.world);
}

void run_ranks(const RankSetup& setup, const std::function<void(Context&)>& body, const ContextOptions& options) {
  if (setup.mode == Mode::kThreads) {
    iris::run_threads(setup.world, body, options);
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
}

}  // namespace iris::test
