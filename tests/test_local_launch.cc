// run_local_processes: the environment each rank gets (checked by children that join a TCP bootstrap
// from it, as Context::create_from_env would), how exits, signals and timeouts are reported, and the
// refusals. Host only: no CUDA.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "iris/core/error.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "iris/runtime/local_launch.hpp"
#include "support/scoped_env.hpp"

namespace {

using namespace std::chrono_literals;

using iris::test::ScopedEnv;

std::vector<std::string> shell(const std::string& script) { return {"/bin/sh", "-c", script}; }

// The child's half of LocalLaunch.RanksJoinOneTcpBootstrap: what a rank started by run_local_processes
// sees, and that a TCP bootstrap forms from it.
void join_as_child() {
  const iris::LaunchInfo info = iris::detect_launch_info();
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.local_world_size, 3);
  EXPECT_EQ(info.local_rank, info.rank);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  const char* foo = std::getenv("IRIS_LAUNCH_TEST_FOO");
  EXPECT_STREQ(foo ? foo : "(unset)", "child");
  EXPECT_EQ(std::getenv("SLURM_JOB_ID"), nullptr) << "a launcher's variable was inherited";
  // Rank 0 alone holds the store's socket, already listening on MASTER_PORT.
  if (info.rank == 0) {
    ASSERT_GE(info.store_listen_fd, 0);
    int listening = 0;
    socklen_t len = sizeof(listening);
    sockaddr_in addr{};
    socklen_t addr_len = sizeof(addr);
    ASSERT_EQ(::getsockopt(info.store_listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len), 0);
    EXPECT_NE(listening, 0);
    ASSERT_EQ(::getsockname(info.store_listen_fd, reinterpret_cast<sockaddr*>(&addr), &addr_len), 0);
    EXPECT_EQ(ntohs(addr.sin_port), info.master_port);
  } else {
    EXPECT_EQ(info.store_listen_fd, -1);
    EXPECT_EQ(std::getenv("IRIS_STORE_LISTEN_FD"), nullptr) << "only rank 0 is handed the store's socket";
  }
  auto boot = iris::make_tcp_bootstrap(info, 30s);
  const std::vector<std::string> all = boot->allgather("rank " + std::to_string(info.rank));
  ASSERT_EQ(all.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(all[r], "rank " + std::to_string(r));
  boot->barrier();
}

// The parent starts this binary three times, filtered to this test, with IRIS_LAUNCH_TEST_FOO=child:
// each child runs join_as_child() instead (as run_ranks does for the process-mode GPU tests).
TEST(LocalLaunch, RanksJoinOneTcpBootstrap) {
  if (const char* foo = std::getenv("IRIS_LAUNCH_TEST_FOO"); foo != nullptr && std::string(foo) == "child") {
    join_as_child();
    return;
  }
  // Stale variables of another job and of another launcher must not reach the children.
  ScopedEnv rank("RANK", "7"), world("WORLD_SIZE", "9"), slurm("SLURM_JOB_ID", "12"),
      store_fd("IRIS_STORE_LISTEN_FD", "999"), foo("IRIS_LAUNCH_TEST_FOO", "parent");
  iris::LocalLaunchOptions options;
  // No sharding in the children: one inheriting this run's shard would run no test (and fail for it).
  options.extra_env = {"IRIS_LAUNCH_TEST_FOO=child", "GTEST_TOTAL_SHARDS=1", "GTEST_SHARD_INDEX=0"};
  options.timeout = 60s;
  const std::vector<iris::ProcessExit> exits = iris::run_local_processes(
      3, {"/proc/self/exe", "--gtest_filter=LocalLaunch.RanksJoinOneTcpBootstrap", "--gtest_brief=1"}, options);
  ASSERT_EQ(exits.size(), 3u);
  for (const iris::ProcessExit& e : exits) EXPECT_TRUE(e.ok()) << e.describe() << " (its output is above)";
}

TEST(LocalLaunch, ReportsExitStatusesAndSignals) {
  const auto exits =
      iris::run_local_processes(3, shell("if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; exit $((RANK * 3))"));
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok());
  EXPECT_EQ(exits[0].describe(), "rank 0 (process) succeeded");
  EXPECT_FALSE(exits[1].ok());
  EXPECT_EQ(exits[1].signal, 9);
  EXPECT_EQ(exits[1].describe(), "rank 1 (process) died from signal 9 (Killed)");
  EXPECT_EQ(exits[2].exit_code, 6);
  EXPECT_EQ(exits[2].describe(), "rank 2 (process) failed, exit status 6");
}

TEST(LocalLaunch, KillsWhatRunsPastTheTimeout) {
  iris::LocalLaunchOptions options;
  options.timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  const auto exits = iris::run_local_processes(2, shell("[ \"$RANK\" = 0 ] && exit 0; exec sleep 60"), options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].ok()) << exits[0].describe();
  EXPECT_TRUE(exits[1].timed_out);
  EXPECT_FALSE(exits[1].left_unreaped);  // SIGKILL ended it, and it was reaped
  EXPECT_EQ(exits[1].describe(), "rank 1 (process) did not finish within 0.3 s and was killed");
}

// A killed process that does not end (asleep in the kernel: a hung GPU driver) is left behind after 30 s,
// never waited for without a bound, and the report says so. No test can make a process SIGKILL does not
// end, so only the report is checked here.
TEST(LocalLaunch, AKilledProcessLeftBehindSaysSo) {
  iris::ProcessExit e;
  e.rank = 3;
  e.timed_out = true;
  e.timeout = 120s;
  e.left_unreaped = true;
  e.reap_limit = 30s;
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.describe(),
            "rank 3 (process) did not finish within 120.0 s and was killed, but had not ended 30.0 s later (asleep in "
            "the kernel, e.g. in a GPU driver that stopped answering) and was left behind");
  e.timed_out = false;
  e.failed_rank = 0;
  e.grace = 30s;
  EXPECT_EQ(e.describe(),
            "rank 3 (process) was still running 30.0 s after rank 0 failed and was killed, but had not ended 30.0 s "
            "later (asleep in the kernel, e.g. in a GPU driver that stopped answering) and was left behind");
}

// How many processes run `sleep <seconds>` (from /proc/*/cmdline): the grandchildren a test's ranks started.
int sleeping(const std::string& seconds) {
  const std::string want = std::string("sleep") + '\0' + seconds + '\0';
  int n = 0;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return -1;
  while (const dirent* e = ::readdir(dir)) {
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    n += cmdline == want ? 1 : 0;
  }
  ::closedir(dir);
  return n;
}

// A rank that is a wrapper (a shell that runs its program without exec) is killed with everything it
// started. Before 2026-12-05 only the wrapper was: its `sleep` ran on, re-parented to init, as a rank's
// program would, holding its GPU and its peers' store, and the caller's pipe open.
TEST(LocalLaunch, KillsWhatAKilledRankStarted) {
  const std::string seconds = "3600." + std::to_string(::getpid());  // this run's own
  iris::LocalLaunchOptions options;
  options.timeout = 500ms;
  const auto exits = iris::run_local_processes(2, shell("sleep " + seconds + "; true"), options);
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) EXPECT_TRUE(e.timed_out) << e.describe();
  int left = -1;
  for (int i = 0; i < 200 && left != 0; ++i) {  // SIGKILL is delivered, not waited for
    left = sleeping(seconds);
    if (left != 0) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(left, 0) << "processes the ranks started outlived them";
  // The grace's kill too, and a grandchild of a grandchild.
  options.timeout = 60s;
  options.failure_grace = 200ms;
  const auto graced = iris::run_local_processes(
      2, shell("[ \"$RANK\" = 1 ] && exit 3; sh -c 'sleep " + seconds + "; true'; true"), options);
  EXPECT_EQ(graced[0].failed_rank, 1) << graced[0].describe();
  left = -1;
  for (int i = 0; i < 200 && left != 0; ++i) {
    left = sleeping(seconds);
    if (left != 0) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(left, 0) << "processes the ranks started outlived them";
}

// A rank that fails stops the job after the grace (as torchrun stops it): its peers, which could wait for it
// until their bootstrap's timeout, are killed and say why.
TEST(LocalLaunch, KillsThePeersOfAFailedRankAfterTheGrace) {
  iris::LocalLaunchOptions options;
  options.failure_grace = 300ms;
  options.timeout = 60s;
  const auto start = std::chrono::steady_clock::now();
  const auto exits = iris::run_local_processes(3, shell("[ \"$RANK\" = 1 ] && exit 4; exec sleep 60"), options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_EQ(exits[1].describe(), "rank 1 (process) failed, exit status 4");
  for (int r : {0, 2}) {
    EXPECT_FALSE(exits[r].ok());
    EXPECT_FALSE(exits[r].timed_out);
    EXPECT_EQ(exits[r].describe(),
              "rank " + std::to_string(r) + " (process) was still running 0.3 s after rank 1 failed and was killed");
  }
  // Without a grace the peers run on, until the timeout.
  options.failure_grace = 0ms;
  options.timeout = 500ms;
  const auto waited = iris::run_local_processes(2, shell("[ \"$RANK\" = 1 ] && exit 4; exec sleep 60"), options);
  EXPECT_TRUE(waited[0].timed_out) << waited[0].describe();
}

// With SIGCHLD ignored the kernel reaps the children itself, and their status is gone: each is reported as
// lost, not as a success, and the wait ends (it used to spin until the timeout, or forever).
TEST(LocalLaunch, AChildWhoseStatusIsLostIsNeitherASuccessNorWaitedFor) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // SIGCHLD's disposition is the process's: changed in a child of the test, not in it
    ::signal(SIGCHLD, SIG_IGN);
    iris::LocalLaunchOptions options;
    options.timeout = 20s;
    const auto exits = iris::run_local_processes(2, shell("exit 0"), options);
    bool right = exits.size() == 2;
    for (const auto& e : exits)
      right = right && !e.ok() && !e.timed_out &&
              e.describe() == "rank " + std::to_string(e.rank) +
                                  " (process) ended, but its exit status was lost (this process ignores SIGCHLD, or "
                                  "another thread reaped the child)";
    ::_exit(right ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's run_local_processes reported the lost statuses wrongly";
}

template <typename E>
std::string message_of(int world, const std::vector<std::string>& argv, const iris::LocalLaunchOptions& o = {}) {
  try {
    iris::run_local_processes(world, argv, o);
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception of the expected type)";
}

TEST(LocalLaunch, RefusesWhatCannotRun) {
  EXPECT_EQ(message_of<iris::InvalidArgument>(0, shell("exit 0")),
            "run_local_processes: world must be at least 1, got 0.");
  EXPECT_EQ(message_of<iris::InvalidArgument>(2, {}),
            "run_local_processes: argv is empty; argv[0] must name the program.");
  iris::LocalLaunchOptions bad_env;
  bad_env.extra_env = {"NO_VALUE"};
  EXPECT_EQ(message_of<iris::InvalidArgument>(1, shell("exit 0"), bad_env),
            "run_local_processes: extra_env entry \"NO_VALUE\" is not NAME=value.");
  EXPECT_EQ(message_of<iris::Error>(2, {"/nonexistent/iris-no-such-program"}),
            "run_local_processes: cannot start rank 0 (/nonexistent/iris-no-such-program): No such file or directory");
}

}  // namespace
