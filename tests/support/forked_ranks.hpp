// Ranks as fork()ed child processes of a host test, meeting over a loopback TCP store: the bootstrap's tests
// and the symmetric heap's (with a fake driver). No CUDA is initialized in these tests, so fork is safe.
//
// Children report through their exit code (0 = every check passed) and print what went wrong to stderr;
// the parent asserts on the codes.
#pragma once

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "iris/runtime/bootstrap.hpp"

namespace iris::test::forked {

using namespace std::chrono_literals;

inline constexpr int kCheckFailed = 1;
inline constexpr int kUnexpectedException = 90;
inline constexpr int kKilled = -1;
inline constexpr int kNotStarted = -2;

// A loopback TCP socket listening on a port the kernel picks (what run_local_processes hands rank 0);
// -1 on failure.
inline int listening_socket(int* port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(s, 16) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(s);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return s;
}

// Open descriptors of this process, to show that a bootstrap leaves none behind.
inline int open_fd_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

inline iris::LaunchInfo tcp_info(int rank, int world, int port) {
  iris::LaunchInfo info;
  info.rank = rank;
  info.world_size = world;
  info.local_rank = rank;
  info.local_world_size = world;
  info.master_addr = "127.0.0.1";
  info.master_port = port;
  info.launcher = "test";
  return info;
}

// Where the ranks of one test meet: a loopback socket listening on a port the kernel picked, held by the
// test from the pick to its end and handed to rank 0's store as a launcher hands it (store_listen_fd).
// No other program can take the port in between, as it could when tests picked a port, released it and
// let rank 0 bind it again (a rare failure of CI, never of iris). The children inherit the descriptor;
// the test closes it when the ranks are done.
struct Rendezvous {
  int port = 0;
  int fd = -1;
  Rendezvous() : fd(listening_socket(&port)) {}
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  ~Rendezvous() {
    if (fd >= 0) ::close(fd);
  }
  iris::LaunchInfo info(int rank, int world) const {
    iris::LaunchInfo i = tcp_info(rank, world, port);
    if (rank == 0) i.store_listen_fd = fd;
    return i;
  }
};

// Runs body(rank) in one child process per entry of `ranks`; returns the exit codes in that order
// (kKilled for a child still running after `limit`, which is then killed; kNotStarted for every rank when
// one could not be forked, the others then killed).
inline std::vector<int> run_processes(const std::vector<int>& ranks, const std::function<int(int)>& body,
                                      std::chrono::milliseconds limit = 15s) {
  std::vector<pid_t> pids;
  for (int rank : ranks) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = kUnexpectedException;
      try {
        code = body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] unexpected exception: %s\n", rank, e.what());
      } catch (...) {
        std::fprintf(stderr, "[rank %d] unexpected non-standard exception\n", rank);
      }
      // _exit: no atexit handlers, no flushing of the parent's (inherited) gtest output buffers.
      ::_exit(code);
    }
    if (pid < 0) {
      // No -1 among the pids: waitpid(-1) would reap any child of the test, and kill(-1, SIGKILL) every
      // process this user may signal (all of the host's, as root). The ranks started wait for one that
      // never comes, so they are ended too.
      const int error = errno;
      std::fprintf(stderr, "[rank %d] not started: fork failed: %s\n", rank, std::strerror(error));
      for (pid_t started : pids) {
        ::kill(started, SIGKILL);
        ::waitpid(started, nullptr, 0);
      }
      return std::vector<int>(ranks.size(), kNotStarted);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), kKilled);
  std::vector<bool> done(pids.size(), false);
  auto deadline = std::chrono::steady_clock::now() + limit;
  size_t remaining = pids.size();
  while (remaining > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --remaining;
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        std::fprintf(stderr, "[rank %d] still running after the limit: killed\n", ranks[i]);
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
      }
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  return codes;
}

inline std::vector<int> run_ranks(int world, const std::function<int(int)>& body,
                                  std::chrono::milliseconds limit = 15s) {
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  return run_processes(ranks, body, limit);
}

inline void expect_all_zero(const std::vector<int>& codes, const std::vector<int>& ranks = {}) {
  for (size_t i = 0; i < codes.size(); ++i)
    EXPECT_EQ(codes[i], 0) << "rank " << (ranks.empty() ? int(i) : ranks[i]) << " failed (see its stderr)";
}

// The what() of the E that f throws, or a description of what happened instead.
template <typename E, typename F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<another exception type> ") + e.what();
  } catch (...) {
    return "<non-standard exception>";
  }
  return "<no exception>";
}

// For children: 0 when `got` is `want`, else prints both and returns kCheckFailed.
inline int same_text(int rank, const std::string& got, const std::string& want) {
  if (got == want) return 0;
  std::fprintf(stderr, "[rank %d] wrong error text\n   got: %s\n  want: %s\n", rank, got.c_str(), want.c_str());
  return kCheckFailed;
}

#define CHILD_CHECK(rank, cond)                                                                 \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "[rank %d] check failed at line %d: %s\n", (rank), __LINE__, #cond); \
      return kCheckFailed;                                                                      \
    }                                                                                           \
  } while (0)

}  // namespace iris::test::forked
