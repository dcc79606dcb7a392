// run_local_processes: torchrun's environment for `world` processes of this host, started with
// posix_spawn and reaped with waitpid.
#include "iris/runtime/local_launch.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "iris/core/error.hpp"
#include "runtime/bootstrap_detail.hpp"

extern char** environ;

namespace iris {
namespace {

using Clock = std::chrono::steady_clock;

// How long a killed process gets to end before it is left behind (reap_by). A GPU process's teardown after
// SIGKILL (its device memory released) takes seconds at most.
constexpr std::chrono::milliseconds kReapLimit{30000};

// Prefixes of the variables a launcher sets; inherited ones would name another job.
// torchelastic's (TORCHELASTIC_*) would have the ranks look for its agent's store, and IRIS_MASTER_PORT would
// take them past the launcher's socket.
constexpr const char* kLauncherPrefixes[] = {
    "RANK=",         "WORLD_SIZE=",           "LOCAL_RANK=",       "LOCAL_WORLD_SIZE=",
    "MASTER_ADDR=",  "MASTER_PORT=",          "OMPI_COMM_WORLD_",  "SLURM_",
    "TORCHELASTIC_", "IRIS_STORE_LISTEN_FD=", "IRIS_MASTER_PORT=", "PMI_RANK=",
    "PMI_SIZE=",     "MPI_LOCALRANKID=",      "MPI_LOCALNRANKS="};

std::string env_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// The ranks' store socket: listening on a loopback port the kernel picks, for rank 0's store to adopt
// (IRIS_STORE_LISTEN_FD), so the port is never free between the pick and the store's start. Ranks that
// connect before rank 0's store runs wait in the backlog. Throws when no socket can be had.
detail::UniqueFd store_listener(int world, int& port) {
  detail::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd.get(), std::max(world, 16)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw Error(detail::str_cat("run_local_processes: cannot open a loopback TCP socket for the ranks' store: ",
                                std::strerror(errno)));
  port = ntohs(addr.sin_port);
  return fd;
}

// The processes whose parent is `parent`, from /proc (Linux; none where /proc cannot be read).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // ended meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
  return out;
}

// Kills `pid` and every process descended from it. A rank that is a wrapper (a shell, a script that runs the
// program without exec) would otherwise leave its program running, holding its GPU and its peers' store,
// and the caller's pipe open. Each process is stopped before its children are listed, so none forks a
// child that the walk misses; then all are killed.
void kill_tree(pid_t pid) {
  std::vector<pid_t> stopped{pid};
  kill(pid, SIGSTOP);
  for (size_t i = 0; i < stopped.size() && stopped.size() < 100000; ++i) {
    for (pid_t child : children_of(stopped[i])) {
      if (std::find(stopped.begin(), stopped.end(), child) != stopped.end()) continue;
      kill(child, SIGSTOP);
      stopped.push_back(child);
    }
  }
  for (pid_t p : stopped) kill(p, SIGKILL);
}

// Reaps the killed `pid`, waiting until `until` at most; false if it has not ended by then. SIGKILL ends a
// process at once unless it sleeps uninterruptibly in the kernel, as one does inside a GPU driver that
// stopped answering; waiting for that one without a bound would hang the launcher with it. `status`, where
// given, gets the wait status when this call reaped the process.
bool reap_by(pid_t pid, Clock::time_point until, std::optional<int>* status = nullptr) {
  for (;;) {
    int wstatus = 0;
    const pid_t got = waitpid(pid, &wstatus, WNOHANG);
    if (got == pid && status != nullptr) *status = wstatus;
    if (got == pid || (got < 0 && errno != EINTR)) return true;  // reaped (or reaped elsewhere: ECHILD)
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::string ProcessExit::describe() const {
  const std::string who = detail::str_cat("rank ", rank, " (process)");
  const std::string left =
      left_unreaped ? detail::str_cat(", but had not ended ", detail::format_seconds(reap_limit),
                                      " s later (asleep in the kernel, e.g. in a GPU driver that stopped answering) "
                                      "and was left behind")
                    : "";
  if (timed_out)
    return detail::str_cat(who, " did not finish within ", detail::format_seconds(timeout), " s and was killed", left);
  if (failed_rank >= 0)
    return detail::str_cat(who, " was still running ", detail::format_seconds(grace), " s after rank ", failed_rank,
                           " failed and was killed", left);
  if (status_lost)
    return who +
           " ended, but its exit status was lost (this process ignores SIGCHLD, or another thread reaped the child)";
  if (signal != 0) return detail::str_cat(who, " died from signal ", signal, " (", strsignal(signal), ")");
  if (exit_code != 0) return detail::str_cat(who, " failed, exit status ", exit_code);
  return who + " succeeded";
}

std::vector<ProcessExit> run_local_processes(int world, const std::vector<std::string>& argv,
                                             const LocalLaunchOptions& options) {
  IRIS_CHECK_ARG(world >= 1, "run_local_processes: world must be at least 1, got ", world, ".");
  IRIS_CHECK_ARG(!argv.empty() && !argv[0].empty(),
                 "run_local_processes: argv is empty; argv[0] must name the program.");
  for (const std::string& e : options.extra_env)
    IRIS_CHECK_ARG(e.find('=') != std::string::npos && e.find('=') > 0, "run_local_processes: extra_env entry \"", e,
                   "\" is not NAME=value.");
  int port = 0;
  detail::UniqueFd listener = store_listener(world, port);
  // Rank 0 gets the socket at a descriptor number that is free here (reserved by a close-on-exec
  // duplicate), so dup2 onto it in rank 0 replaces nothing rank 0 inherits.
  detail::UniqueFd reserved(fcntl(listener.get(), F_DUPFD_CLOEXEC, 3));
  if (!reserved.valid())
    throw Error(detail::str_cat("run_local_processes: cannot duplicate the store socket: ", std::strerror(errno)));

  // The environment every rank shares: ours without a launcher's variables or those extra_env replaces.
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool drop = false;
    for (const char* prefix : kLauncherPrefixes) drop = drop || entry.rfind(prefix, 0) == 0;
    for (const std::string& extra : options.extra_env) drop = drop || env_name(entry) == env_name(extra);
    if (!drop) base.push_back(entry);
  }
  base.push_back("WORLD_SIZE=" + std::to_string(world));
  base.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
  base.push_back("MASTER_ADDR=127.0.0.1");
  base.push_back("MASTER_PORT=" + std::to_string(port));
  base.insert(base.end(), options.extra_env.begin(), options.extra_env.end());

  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  std::vector<pid_t> pids(world, -1);
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = base;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    if (r == 0) env.push_back("IRIS_STORE_LISTEN_FD=" + std::to_string(reserved.get()));
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // dup2 onto another number clears close-on-exec on the copy: rank 0 alone keeps the socket.
    if (r == 0) posix_spawn_file_actions_adddup2(&actions, listener.get(), reserved.get());
    const int rc = posix_spawn(&pids[r], argp[0], &actions, nullptr, argp.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      for (int s = 0; s < r; ++s) kill_tree(pids[s]);
      const Clock::time_point until = Clock::now() + kReapLimit;
      for (int s = 0; s < r; ++s) reap_by(pids[s], until);  // one left behind changes nothing of the error
      throw Error(
          detail::str_cat("run_local_processes: cannot start rank ", r, " (", argv[0], "): ", std::strerror(rc)));
    }
  }

  // Rank 0 holds the store socket now. Closed here, it dies with rank 0, so if rank 0 never starts its
  // store the others' connections are refused rather than left waiting in a backlog nobody reads.
  listener.reset();
  reserved.reset();

  std::vector<ProcessExit> exits(world);
  for (int r = 0; r < world; ++r) exits[r].rank = r;
  int running = world;
  int first_failed = -1;
  Clock::time_point failed_at{};
  // The exit code or signal of a reaped process.
  auto record = [](ProcessExit& e, int status) {
    if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  };
  // Kills every process still running, reaps them within one kReapLimit, and marks how (mark(exit)). One that
  // ended by itself between the last poll and the kill (a zombie ignores signals) keeps its own status: an exit
  // code, or a signal other than the SIGKILL sent here.
  auto kill_rest = [&](auto mark) {
    for (int r = 0; r < world; ++r)
      if (pids[r] >= 0) kill_tree(pids[r]);
    const Clock::time_point until = Clock::now() + kReapLimit;
    for (int r = 0; r < world; ++r) {
      if (pids[r] < 0) continue;
      std::optional<int> status;
      if (!reap_by(pids[r], until, &status)) {
        exits[r].left_unreaped = true;
        exits[r].reap_limit = kReapLimit;
      }
      pids[r] = -1;
      if (status && (WIFEXITED(*status) || (WIFSIGNALED(*status) && WTERMSIG(*status) != SIGKILL))) {
        record(exits[r], *status);
        continue;
      }
      mark(exits[r]);
    }
  };
  while (running > 0) {
    for (int r = 0; r < world; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      const pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got < 0 && errno == ECHILD) {
        exits[r].status_lost = true;  // reaped by the kernel (SIGCHLD ignored) or by another thread
      } else if (got == pids[r]) {
        record(exits[r], status);
        if (first_failed < 0 && !exits[r].ok()) {
          first_failed = r;
          failed_at = Clock::now();
        }
      } else {
        continue;  // still running
      }
      pids[r] = -1;
      --running;
    }
    if (running == 0) break;
    const Clock::time_point now = Clock::now();
    if (options.timeout.count() > 0 && now - start > options.timeout) {
      kill_rest([&](ProcessExit& e) {
        e.timed_out = true;
        e.timeout = options.timeout;
      });
      break;
    }
    if (first_failed >= 0 && options.failure_grace.count() > 0 && now - failed_at > options.failure_grace) {
      kill_rest([&](ProcessExit& e) {
        e.failed_rank = first_failed;
        e.grace = options.failure_grace;
      });
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exits;
}

}  // namespace iris
