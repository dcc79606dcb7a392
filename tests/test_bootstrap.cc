// Bootstrap tests: the TCP store with real processes over loopback (one fork()ed child per rank;
// no CUDA is initialized here, so fork is safe) and the in-process thread group.
//
// Children report through their exit code (0 = every check passed) and print what went wrong to
// stderr; the parent asserts on the codes. Each child checks exact error texts, so a message that
// names the wrong rank fails the test.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "iris/core/error.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "runtime/fd_passing.hpp"
#include "support/forked_ranks.hpp"

namespace {

using namespace std::chrono_literals;
using iris::Bootstrap;
using namespace iris::test::forked;

// ---- helpers ---------------------------------------------------------------------------------------

constexpr uid_t kNobody = 65534;

bool is_listening(int fd) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0;
}

// A loopback port that refuses connections for as long as the object lives: bound, so that no other
// program takes it, but not listening (a store that is not running).
struct ClosedPort {
  int port = 0;
  int fd = -1;
  ClosedPort() : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
  }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  ~ClosedPort() {
    if (fd >= 0) ::close(fd);
  }
};

// Turns this (forked) process into one of user nobody (65534); false if it cannot.
bool become_nobody() { return ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0; }

// Why this test process cannot start a process of another user, or "" if it can.
std::string why_no_process_of_nobody() {
  if (::geteuid() != 0) return "needs root, to start a process of another user (nobody, 65534)";
  // Root without CAP_SETUID (a rootless container) cannot become another user either.
  const pid_t probe = ::fork();
  if (probe == 0) ::_exit(become_nobody() ? 0 : 1);
  if (probe < 0) return std::string("fork failed, to probe for setuid: ") + std::strerror(errno);
  int status = -1;
  if (::waitpid(probe, &status, 0) != probe || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "this process cannot start one of another user (setuid to nobody, 65534, failed)";
  return "";
}

// The tasks (threads) of every process whose real user is `uid`: what RLIMIT_NPROC counts against that user.
rlim_t tasks_of_user(uid_t uid) {
  rlim_t tasks = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (const dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::FILE* f = std::fopen(("/proc/" + std::string(e->d_name) + "/status").c_str(), "r");
    if (f == nullptr) continue;  // ended meanwhile
    char line[256];
    long real_uid = -1;
    long threads = 0;
    while (std::fgets(line, sizeof(line), f)) {
      std::sscanf(line, "Uid: %ld", &real_uid);
      std::sscanf(line, "Threads: %ld", &threads);
    }
    std::fclose(f);
    if (real_uid == static_cast<long>(uid)) tasks += static_cast<rlim_t>(threads);
  }
  ::closedir(proc);
  return tasks;
}

// The inodes of the sockets that process `pid` holds open ("socket:[<inode>]" in /proc/<pid>/fd), as
// /proc/net/unix prints them.
std::vector<std::string> socket_inodes(pid_t pid) {
  std::vector<std::string> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return inodes;
  while (const dirent* e = ::readdir(d)) {
    char target[64] = {};
    const std::string link = dir + "/" + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    const std::string t(target, n > 0 ? static_cast<size_t>(n) : 0);
    if (t.starts_with("socket:[") && t.ends_with("]")) inodes.push_back(t.substr(8, t.size() - 9));
  }
  ::closedir(d);
  return inodes;
}

// Distinct, position-dependent content so a misplaced or truncated contribution is caught.
std::string pattern(int rank, int round, size_t length) {
  std::string s(length, '\0');
  for (size_t i = 0; i < length; ++i) s[i] = static_cast<char>((rank * 31 + round * 7 + i) % 251);
  return s;
}

size_t contribution_length(int rank, int round) {
  // Rank 0 sends nothing, rank 1 a megabyte (many partial reads and writes), the others a little.
  return rank == 0 ? 0 : rank == 1 ? (size_t{1} << 20) + 7 + round : static_cast<size_t>(rank * 13 + round);
}

// ---- TCP store, one process per rank ------------------------------------------------------------------

TEST(BootstrapTcp, AllgatherVariableLengths) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    const Rendezvous rv;
    auto codes = run_ranks(world, [&](int rank) {
      auto bs = iris::make_tcp_bootstrap(rv.info(rank, world), 10s);
      CHILD_CHECK(rank, bs->rank() == rank && bs->world_size() == world && bs->timeout() == 10s);
      for (int round = 0; round < 3; ++round) {
        auto all = bs->allgather(pattern(rank, round, contribution_length(rank, round)));
        CHILD_CHECK(rank, static_cast<int>(all.size()) == world);
        for (int q = 0; q < world; ++q) CHILD_CHECK(rank, all[q] == pattern(q, round, contribution_length(q, round)));
      }
      return 0;
    });
    expect_all_zero(codes);
  }
}

TEST(BootstrapTcp, BroadcastFromNonZeroRoot) {
  constexpr int kWorld = 3;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    std::string big = pattern(2, 0, 100'000);
    std::string got = bs->broadcast(rank == 2 ? big : std::string("ignored"), 2);
    CHILD_CHECK(rank, got == big);
    got = bs->broadcast(rank == 1 ? "from rank 1" : "not me", 1);
    CHILD_CHECK(rank, got == "from rank 1");
    got = bs->broadcast(rank == 2 ? "" : "not me", 2);  // an empty value is a value too
    CHILD_CHECK(rank, got.empty());
    CHILD_CHECK(rank, what_of<iris::InvalidArgument>([&] { bs->broadcast("x", kWorld); }) ==
                          "iris bootstrap: broadcast root 3 is outside [0, 3)");
    return 0;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, BarrierWaitsForEveryRank) {
  constexpr int kWorld = 4;
  constexpr int kRounds = 3;
  // A counter in memory shared by the children: each rank bumps it before the barrier, so after
  // barrier k every rank must see at least world * (k + 1).
  void* mem = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* counter = new (mem) std::atomic<int>(0);
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    for (int round = 0; round < kRounds; ++round) {
      // Stagger the arrivals so a barrier that does not wait is caught.
      std::this_thread::sleep_for(std::chrono::milliseconds(((rank + round) % kWorld) * 40));
      counter->fetch_add(1);
      bs->barrier();
      CHILD_CHECK(rank, counter->load() >= kWorld * (round + 1));
    }
    return 0;
  });
  expect_all_zero(codes);
  EXPECT_EQ(counter->load(), kWorld * kRounds);
  ::munmap(mem, sizeof(std::atomic<int>));
}

TEST(BootstrapTcp, ManySequentialCollectives) {
  constexpr int kWorld = 4;
  constexpr int kIterations = 200;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    for (int i = 0; i < kIterations; ++i) {
      switch (i % 3) {
        case 0: {
          auto all = bs->allgather(std::to_string(i) + "/" + std::to_string(rank));
          for (int q = 0; q < kWorld; ++q) CHILD_CHECK(rank, all[q] == std::to_string(i) + "/" + std::to_string(q));
          break;
        }
        case 1: {
          int root = i % kWorld;
          std::string got = bs->broadcast(rank == root ? "b" + std::to_string(i) : "", root);
          CHILD_CHECK(rank, got == "b" + std::to_string(i));
          break;
        }
        default:
          bs->barrier();
      }
    }
    return 0;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, SingleRank) {
  const Rendezvous rv;
  auto codes = run_ranks(1, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(0, 1), 5s);
    CHILD_CHECK(rank, bs->allgather("alone") == std::vector<std::string>{"alone"});
    CHILD_CHECK(rank, bs->broadcast("me", 0) == "me");
    bs->barrier();
    int fd = ::memfd_create("iris-test", MFD_CLOEXEC);
    CHILD_CHECK(rank, bs->exchange_fds(fd) == std::vector<int>{-1});
    ::close(fd);
    return 0;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, ExchangeFdsSharesTheSameFiles) {
  constexpr int kWorld = 3;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    const int fds_before = open_fd_count();
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);

    // memfd: read what the owner wrote through the received descriptor, then write into the
    // owner's file through it; the owner sees every peer's mark in its own file.
    int mine = ::memfd_create("iris-test", MFD_CLOEXEC);
    CHILD_CHECK(rank, mine >= 0 && ::ftruncate(mine, 4096) == 0);
    std::string owner = "owner " + std::to_string(rank);
    CHILD_CHECK(rank, ::pwrite(mine, owner.data(), owner.size(), 0) == ssize_t(owner.size()));
    std::vector<int> fds = bs->exchange_fds(mine);
    CHILD_CHECK(rank, static_cast<int>(fds.size()) == kWorld && fds[rank] == -1);
    for (int q = 0; q < kWorld; ++q) {
      if (q == rank) continue;
      CHILD_CHECK(rank, fds[q] >= 0 && fds[q] != mine);
      CHILD_CHECK(rank, (::fcntl(fds[q], F_GETFD) & FD_CLOEXEC) != 0);
      char buf[16] = {};
      std::string want = "owner " + std::to_string(q);
      CHILD_CHECK(rank, ::pread(fds[q], buf, want.size(), 0) == ssize_t(want.size()) && want == buf);
      char mark = static_cast<char>('A' + rank);
      CHILD_CHECK(rank, ::pwrite(fds[q], &mark, 1, 100 + rank) == 1);
    }
    bs->barrier();
    for (int q = 0; q < kWorld; ++q) {
      if (q == rank) continue;
      char mark = 0;
      CHILD_CHECK(rank, ::pread(mine, &mark, 1, 100 + q) == 1 && mark == 'A' + q);
      ::close(fds[q]);
    }
    ::close(mine);

    // Second exchange, pipes: each rank hands out its pipe's write end; peers write one byte into
    // it and close; the owner reads every peer's byte and then end-of-file.
    int p[2];
    CHILD_CHECK(rank, ::pipe2(p, O_CLOEXEC) == 0);
    fds = bs->exchange_fds(p[1]);
    ::close(p[1]);
    for (int q = 0; q < kWorld; ++q) {
      if (q == rank) continue;
      char byte = static_cast<char>('a' + rank);
      CHILD_CHECK(rank, ::write(fds[q], &byte, 1) == 1);
      ::close(fds[q]);
    }
    std::string got;
    for (;;) {
      pollfd pfd{p[0], POLLIN, 0};
      CHILD_CHECK(rank, ::poll(&pfd, 1, 5000) == 1);
      char buf[8];
      ssize_t n = ::read(p[0], buf, sizeof(buf));
      CHILD_CHECK(rank, n >= 0);
      if (n == 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    std::sort(got.begin(), got.end());
    std::string want;
    for (int q = 0; q < kWorld; ++q)
      if (q != rank) want += static_cast<char>('a' + q);
    CHILD_CHECK(rank, got == want);
    ::close(p[0]);
    bs.reset();  // rank 0 also stops its store thread here
    CHILD_CHECK(rank, open_fd_count() == fds_before);
    return 0;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, ExchangeFdsWithBadDescriptorReleasesOthers) {
  constexpr int kWorld = 2;
  const Rendezvous rv;
  const std::string bad = "iris bootstrap: exchange_fds: -1 is not an open file descriptor";
  auto codes = run_ranks(kWorld, [&](int rank) {
    const int fds_before = open_fd_count();
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    int code = 0;
    if (rank == 1) {
      code = same_text(rank, what_of<iris::InvalidArgument>([&] { bs->exchange_fds(-1); }), bad);
    } else {
      int fd = ::memfd_create("iris-test", MFD_CLOEXEC);
      code = same_text(rank, what_of<iris::RemoteError>([&] { bs->exchange_fds(fd); }),
                       "rank 1 failed: exchange_fds failed: " + bad);
      ::close(fd);
    }
    bs.reset();
    CHILD_CHECK(rank, open_fd_count() == fds_before);  // the failed exchange left nothing open
    return code;
  });
  expect_all_zero(codes);
}

// A peer that fails or dies after exchange_fds' opening barrier never connects or sends: the others learn it
// from the store at once (its abort, or its lost connection), not at the timeout.
TEST(BootstrapTcp, APeerThatFailsInsideExchangeFdsReleasesOthers) {
  constexpr int kWorld = 3;
  for (bool dies : {false, true}) {
    SCOPED_TRACE(dies ? "rank 1 dies" : "rank 1 aborts");
    const Rendezvous rv;
    auto codes = run_ranks(kWorld, [&](int rank) {
      auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 30s);
      bs->barrier();
      if (rank == 1) {
        bs->barrier();  // the exchange's opening barrier, which every rank passes
        if (dies) ::_exit(0);
        bs->abort("rank 1 gave up");
        return 0;
      }
      const int fd = ::memfd_create("iris-test", MFD_CLOEXEC);
      const auto start = std::chrono::steady_clock::now();
      const int code = same_text(
          rank, what_of<iris::RemoteError>([&] { bs->exchange_fds(fd); }),
          dies ? "rank 1 disconnected from the bootstrap store (process exited?)" : "rank 1 failed: rank 1 gave up");
      ::close(fd);
      CHILD_CHECK(rank, std::chrono::steady_clock::now() - start < 10s);  // released, not timed out
      return code;
    });
    expect_all_zero(codes);
  }
}

// exchange_fds listens on an abstract Unix socket, which has no permissions: any process of the host can
// connect. One of another user that sends a descriptor labelled with a peer's rank before that peer does
// must not have it taken as the peer's (mapped as its heap): rank 0 closes it and takes rank 1's. Rank 1
// plays its part by hand, to put the stranger first: it finds rank 0's socket in /proc/net/unix, among those
// rank 0's process holds.
TEST(BootstrapTcp, ExchangeFdsTakesNoDescriptorFromAnotherUser) {
  if (const std::string why = why_no_process_of_nobody(); !why.empty()) GTEST_SKIP() << why;
  if (::access("/proc/net/unix", R_OK) != 0) GTEST_SKIP() << "needs /proc/net/unix, to find rank 0's socket";
  const Rendezvous rv;
  auto codes = run_ranks(2, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, 2), 10s);
    const std::vector<std::string> pids = bs->allgather(std::to_string(::getpid()));
    if (rank == 0) {
      const int mine = ::memfd_create("iris-test", MFD_CLOEXEC);
      CHILD_CHECK(rank, mine >= 0);
      std::vector<int> fds = bs->exchange_fds(mine);
      char buf[16] = {};
      CHILD_CHECK(rank, fds.size() == 2 && fds[1] >= 0 && ::pread(fds[1], buf, 7, 0) == 7);
      CHILD_CHECK(rank, std::string(buf) == "owner 1");
      ::close(fds[1]);
      ::close(mine);
      bs->barrier();
      return 0;
    }
    bs->barrier();  // rank 0's exchange listens from here on
    // Rank 0's socket of the job's first exchange: "@iris-<job id>-1-0", held open by rank 0's process. The
    // name alone is not enough: another job of this host (an earlier test's rank still exiting, a test run
    // beside this one) may have a socket of its own first exchange listed too.
    const std::vector<std::string> inodes = socket_inodes(std::stoi(pids[0]));
    CHILD_CHECK(rank, !inodes.empty());
    std::string name;
    {
      std::FILE* f = std::fopen("/proc/net/unix", "r");
      CHILD_CHECK(rank, f != nullptr);
      char line[512];
      while (name.empty() && std::fgets(line, sizeof(line), f)) {
        // Num RefCount Protocol Flags Type St Inode Path
        std::istringstream fields(line);
        std::string field[8];
        for (std::string& x : field) fields >> x;
        if (field[7].starts_with("@iris-") && field[7].ends_with("-1-0") &&
            std::find(inodes.begin(), inodes.end(), field[6]) != inodes.end())
          name = field[7].substr(1);
      }
      std::fclose(f);
    }
    CHILD_CHECK(rank, !name.empty());
    auto address = [](const std::string& n) {
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::memcpy(a.sun_path + 1, n.data(), n.size());
      return std::make_pair(a, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n.size()));
    };
    // Connects to rank 0's socket and sends a memfd holding `text`, labelled rank 1.
    auto send_as_rank_1 = [&](const char* text) {
      const int file = ::memfd_create("iris-test", MFD_CLOEXEC);
      const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      auto [a, len] = address(name);
      const bool sent = file >= 0 && s >= 0 && ::pwrite(file, text, std::strlen(text), 0) > 0 &&
                        ::connect(s, reinterpret_cast<const sockaddr*>(&a), len) == 0 &&
                        iris::detail::send_fd(s, file, 1, iris::detail::Clock::now() + 5s);
      if (s >= 0) ::close(s);
      if (file >= 0) ::close(file);
      return sent;
    };
    // Rank 1's own socket, where rank 0 sends its descriptor (left in the backlog).
    const std::string my_name = name.substr(0, name.size() - 1) + "1";
    const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto [my_addr, my_len] = address(my_name);
    CHILD_CHECK(rank, listener >= 0 && ::bind(listener, reinterpret_cast<const sockaddr*>(&my_addr), my_len) == 0 &&
                          ::listen(listener, 2) == 0);
    const pid_t stranger = ::fork();
    if (stranger == 0) {
      if (!become_nobody()) ::_exit(3);
      ::_exit(send_as_rank_1("strange") ? 0 : 4);
    }
    int status = -1;
    CHILD_CHECK(rank, stranger > 0 && ::waitpid(stranger, &status, 0) == stranger);
    CHILD_CHECK(rank, WIFEXITED(status) && WEXITSTATUS(status) == 0);  // its descriptor reached rank 0's backlog
    CHILD_CHECK(rank, send_as_rank_1("owner 1"));
    bs->barrier();
    ::close(listener);
    return 0;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, MissingPeerTimesOutNamingIt) {
  constexpr int kWorld = 4;
  const Rendezvous rv;
  const std::string want = "iris bootstrap: timed out after 1.0 s: rank 3 never connected to the store at 127.0.0.1:" +
                           std::to_string(rv.port);
  auto start = std::chrono::steady_clock::now();
  auto codes = run_processes({0, 1, 2}, [&](int rank) {
    return same_text(rank, what_of<iris::TimeoutError>([&] { iris::make_tcp_bootstrap(rv.info(rank, kWorld), 1s); }),
                     want);
  });
  expect_all_zero(codes, {0, 1, 2});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// A rank that starts well before rank 0 (by more than the grace, min(timeout, 5 s), and less than the
// timeout) waits for the welcome from its connection on, so the store's own wait ends first and every rank
// names the rank that never came. Before 2026-12-05 rank 1's wait counted from its start: at a 6 s timeout,
// rank 0 started 5.5 s later, rank 1 timed out first (11 s), and rank 0 then read its leaving as a death
// ("rank 1 disconnected ... (process exited?)"); nobody named rank 2. No socket is handed to rank 0 here, as
// under a launcher: rank 1 retries its connection until rank 0's store listens.
TEST(BootstrapTcp, ARankStartedLongBeforeRankZeroStillHearsWhoIsMissing) {
  int port = 0;
  {
    const ClosedPort free;  // a port the kernel picked, released for rank 0's store to bind
    port = free.port;
  }
  const std::string want =
      "iris bootstrap: timed out after 6.0 s: rank 2 never connected to the store at 127.0.0.1:" + std::to_string(port);
  auto codes = run_processes(
      {0, 1},
      [&](int rank) {
        if (rank == 0) std::this_thread::sleep_for(5500ms);
        return same_text(
            rank, what_of<iris::TimeoutError>([&] { iris::make_tcp_bootstrap(tcp_info(rank, 3, port), 6s); }), want);
      },
      40s);
  expect_all_zero(codes, {0, 1});
}

TEST(BootstrapTcp, MissingStoreTimesOutNamingAddress) {
  const ClosedPort closed;
  const std::string want =
      "iris bootstrap: rank 1 could not connect to the bootstrap store at 127.0.0.1:" + std::to_string(closed.port) +
      " within 0.5 s (Connection refused); rank 0 hosts the store: is it running, and do all "
      "ranks use the same MASTER_ADDR and port (this rank's: " +
      std::to_string(closed.port) +
      " from the default)? The store also closes when its job fails or ends before this rank connects: then rank "
      "0's error says why.";
  auto codes = run_processes({1}, [&](int rank) {
    return same_text(
        rank, what_of<iris::TimeoutError>([&] { iris::make_tcp_bootstrap(tcp_info(rank, 2, closed.port), 500ms); }),
        want);
  });
  expect_all_zero(codes, {1});
}

TEST(BootstrapTcp, RankMissingFromCollectiveTimesOut) {
  constexpr int kWorld = 3;
  const Rendezvous rv;
  const std::string want = "iris bootstrap: timed out after 1.0 s in barrier #2 waiting for rank 2 (of 3)";
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 1s);
    bs->barrier();
    if (rank == 2) {
      // Late: the others gave up. The failure is sticky, so this rank gets the same answer.
      std::this_thread::sleep_for(1500ms);
    }
    return same_text(rank, what_of<iris::TimeoutError>([&] { bs->barrier(); }), want);
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, ExitedRankReleasesOthers) {
  constexpr int kWorld = 4;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    bs->barrier();
    if (rank == 3) ::_exit(0);  // dies without closing its bootstrap
    int first = same_text(rank, what_of<iris::RemoteError>([&] { bs->barrier(); }),
                          "rank 3 disconnected from the bootstrap store (process exited?)");
    // Sticky: the next call fails the same way at once.
    int again = same_text(rank, what_of<iris::RemoteError>([&] { bs->allgather("x"); }),
                          "rank 3 disconnected from the bootstrap store (process exited?)");
    return first | again;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, ExitedStoreHostReleasesOthers) {
  constexpr int kWorld = 3;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    bs->barrier();
    if (rank == 0) ::_exit(0);  // takes the store down with it
    return same_text(rank, what_of<iris::RemoteError>([&] { bs->barrier(); }),
                     "rank 0 (host of the bootstrap store at 127.0.0.1:" + std::to_string(rv.port) +
                         ") disconnected (process exited?)");
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, ClosedRankIsNotReportedAsDead) {
  constexpr int kWorld = 3;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    bs->barrier();
    if (rank == 1) {
      bs.reset();  // a normal close: says goodbye
      return 0;
    }
    std::this_thread::sleep_for(100ms);
    return same_text(rank, what_of<iris::RemoteError>([&] { bs->barrier(); }),
                     "rank 1 closed its bootstrap before barrier #2");
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, AbortReleasesOthers) {
  constexpr int kWorld = 3;
  const Rendezvous rv;
  auto codes = run_ranks(kWorld, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, kWorld), 10s);
    bs->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);  // the others are blocked in the barrier by now
      bs->abort("out of memory on GPU 1");
    }
    auto start = std::chrono::steady_clock::now();
    int code =
        same_text(rank, what_of<iris::RemoteError>([&] { bs->barrier(); }), "rank 1 failed: out of memory on GPU 1");
    CHILD_CHECK(rank, std::chrono::steady_clock::now() - start < 5s);  // released, not timed out
    return code;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, WorldSizeMismatchFailsEveryRank) {
  const Rendezvous rv;
  const std::string want = "iris bootstrap: rank 1 was started with world size 3 but rank 0 with world size 2";
  auto codes = run_ranks(2, [&](int rank) {
    int world = rank == 0 ? 2 : 3;
    return same_text(rank, what_of<iris::Error>([&] { iris::make_tcp_bootstrap(rv.info(rank, world), 10s); }), want);
  });
  expect_all_zero(codes);
}

// Once every rank of a job has connected, a newcomer is a stray (a late duplicate, or a rank of another job
// whose launcher picked the same port): it is refused, and the running job goes on.
TEST(BootstrapTcp, AStrayProcessIsRefusedAndTheRunningJobGoesOn) {
  const Rendezvous rv;
  const std::string store = "127.0.0.1:" + std::to_string(rv.port);
  auto codes = run_ranks(4, [&](int process) {
    if (process >= 2) {
      std::this_thread::sleep_for(300ms);  // the job's two ranks have connected by now
      const int world = process == 2 ? 3 : 2;
      return same_text(process, what_of<iris::Error>([&] { iris::make_tcp_bootstrap(rv.info(1, world), 5s); }),
                       "iris bootstrap: the store at " + store +
                           " serves a running job whose 2 ranks have all connected; this process (rank 1 of world "
                           "size " +
                           std::to_string(world) +
                           ") is not one of them. Is another job using the same port? Give each job its own "
                           "MASTER_PORT (or IRIS_MASTER_PORT).");
    }
    auto bs = iris::make_tcp_bootstrap(rv.info(process, 2), 10s);
    bs->barrier();
    std::this_thread::sleep_for(800ms);  // the strays come and are refused meanwhile
    const auto all = bs->allgather(std::to_string(process));
    CHILD_CHECK(process, all == (std::vector<std::string>{"0", "1"}));
    bs->barrier();
    return 0;
  });
  expect_all_zero(codes);
}

// One bootstrap after another in the same processes (a Context made again): rank 1's next bootstrap reaches
// rank 0's previous store while it is still up (rank 0 lingers in it) and is told it is busy; having joined a
// store at that address before, rank 1 connects again until rank 0's next store takes it. Before 2026-12-07 it
// was refused as a stray ("serves a running job ... is not one of them"), the test's first round failing.
TEST(BootstrapTcp, TheNextBootstrapOfTheSameProcessesWaitsForThePreviousStoreToClose) {
  const Rendezvous rv;
  auto codes = run_ranks(2, [&](int rank) {
    for (int round = 0; round < 3; ++round) {
      auto bs = iris::make_tcp_bootstrap(rv.info(rank, 2), 10s);
      const auto all = bs->allgather(std::to_string(rank) + "@" + std::to_string(round));
      CHILD_CHECK(rank, all == (std::vector<std::string>{"0@" + std::to_string(round), "1@" + std::to_string(round)}));
      if (rank == 0) std::this_thread::sleep_for(300ms);  // its store stays up while rank 1 comes again
    }
    return 0;
  });
  expect_all_zero(codes);
}

// A rank of another job (LaunchInfo::job) is refused alone even before every rank of the store's job has
// connected: two jobs on one host that share a port (both on the default 29500, one's rank 0 unable to bind
// it) would otherwise form one job of the ranks that connected first, whose heaps they then map. Ranks that
// name no job (no launcher names one) are not told apart.
TEST(BootstrapTcp, ARankOfAnotherJobIsRefusedAloneBeforeTheJobForms) {
  const Rendezvous rv;
  const std::string store = "127.0.0.1:" + std::to_string(rv.port);
  auto codes = run_ranks(3, [&](int process) {
    iris::LaunchInfo info = rv.info(process == 2 ? 1 : process, 2);
    info.job = process == 2 ? "slurm job 8 step 0" : "slurm job 7 step 0";
    if (process == 2) {  // first to take rank 1's place
      return same_text(process, what_of<iris::Error>([&] { iris::make_tcp_bootstrap(info, 5s); }),
                       "iris bootstrap: the store at " + store +
                           " serves the job of rank 0 (slurm job 7 step 0); this process (rank 1 of world size 2) "
                           "belongs to another job (slurm job 8 step 0). Is another job using the same port? Give "
                           "each job its own MASTER_PORT (or IRIS_MASTER_PORT).");
    }
    if (process == 1) std::this_thread::sleep_for(500ms);  // the other job's rank comes first
    auto bs = iris::make_tcp_bootstrap(info, 10s);
    const auto all = bs->allgather(std::to_string(process));
    CHILD_CHECK(process, all == (std::vector<std::string>{"0", "1"}));
    bs->barrier();
    return 0;
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, MismatchedCollectivesFail) {
  const Rendezvous rv;
  const std::string want =
      "iris bootstrap: ranks disagree on collective #2: rank 0 called barrier, rank 1 called broadcast from rank 1";
  auto codes = run_ranks(2, [&](int rank) {
    auto bs = iris::make_tcp_bootstrap(rv.info(rank, 2), 10s);
    bs->allgather("ok");
    if (rank == 0) return same_text(rank, what_of<iris::Error>([&] { bs->barrier(); }), want);
    return same_text(rank, what_of<iris::Error>([&] { bs->broadcast("v", 1); }), want);
  });
  expect_all_zero(codes);
}

TEST(BootstrapTcp, RejectsBadLaunchInfo) {
  EXPECT_EQ(what_of<iris::InvalidArgument>([] { iris::make_tcp_bootstrap(tcp_info(2, 2, 29500), 1s); }),
            "iris bootstrap: rank 2 is outside [0, 2)");
  EXPECT_EQ(what_of<iris::InvalidArgument>([] { iris::make_tcp_bootstrap(tcp_info(0, 1, 0), 1s); }),
            "iris bootstrap: master port 0 is outside 1..65535");
  EXPECT_EQ(what_of<iris::InvalidArgument>([] { iris::make_tcp_bootstrap(tcp_info(0, 1, 29500), 0ms); }),
            "iris bootstrap: timeout 0 ms must be positive");
  // A deadline of now plus a longer timeout would overflow the clock into the past and time out at once.
  const std::string beyond = "iris bootstrap: timeout " + std::to_string(std::chrono::milliseconds::max().count()) +
                             " ms is beyond the 1000000000000 ms (10^9 s) that deadlines can count to; pass at most "
                             "that";
  EXPECT_EQ(what_of<iris::InvalidArgument>(
                [] { iris::make_tcp_bootstrap(tcp_info(0, 1, 29500), std::chrono::milliseconds::max()); }),
            beyond);
  EXPECT_EQ(what_of<iris::InvalidArgument>([] { iris::make_thread_bootstraps(2, std::chrono::milliseconds::max()); }),
            beyond);
}

// A launcher that listens on MASTER_PORT before the ranks start hands the socket to rank 0's store
// (LaunchInfo::store_listen_fd): the port is never free for another program to take, and ranks that
// connect before the store runs wait in the backlog instead of retrying. The launcher's descriptor
// stays open after the store is gone; rank 0 opens and closes only its duplicate.
TEST(BootstrapTcp, StoreAdoptsTheLaunchersSocket) {
  constexpr int kWorld = 3;
  int port = 0;
  const int listener = listening_socket(&port);
  ASSERT_GE(listener, 0);
  auto codes = run_ranks(kWorld, [&](int rank) {
    iris::LaunchInfo info = tcp_info(rank, kWorld, port);
    if (rank == 0) {
      info.store_listen_fd = listener;
      std::this_thread::sleep_for(300ms);  // the others connect first, into the backlog
    } else {
      ::close(listener);
    }
    const int fds_before = open_fd_count();
    {
      auto bs = iris::make_tcp_bootstrap(info, 10s);
      for (int round = 0; round < 3; ++round) {
        auto all = bs->allgather(pattern(rank, round, contribution_length(rank, round)));
        for (int q = 0; q < kWorld; ++q) CHILD_CHECK(rank, all[q] == pattern(q, round, contribution_length(q, round)));
      }
      bs->barrier();
    }
    CHILD_CHECK(rank, open_fd_count() == fds_before);
    if (rank == 0) CHILD_CHECK(rank, is_listening(listener));
    // Kept for later stores, but not inherited by rank 0's children (they would hold the port open).
    if (rank == 0) CHILD_CHECK(rank, (::fcntl(listener, F_GETFD) & FD_CLOEXEC) != 0);
    return 0;
  });
  ::close(listener);
  expect_all_zero(codes);
}

// A handed-over descriptor that is not a TCP socket listening on MASTER_PORT is refused by name before
// the store starts (rank 0 alone: nothing else is waited for).
TEST(BootstrapTcp, RefusesAHandedOverSocketThatIsNotTheStores) {
  int port = 0;
  const int listener = listening_socket(&port);
  ASSERT_GE(listener, 0);
  auto start = [&](int fd, int master_port) {
    iris::LaunchInfo info = tcp_info(0, 2, master_port);
    info.store_listen_fd = fd;
    iris::make_tcp_bootstrap(info, 1s);
  };
  const std::string who = "iris bootstrap: IRIS_STORE_LISTEN_FD=";
  const std::string handed = " (the store socket the launcher handed over)";
  const int other_port = port == 65535 ? port - 1 : port + 1;
  EXPECT_EQ(what_of<iris::InvalidArgument>([&] { start(listener, other_port); }),
            who + std::to_string(listener) + handed + " listens on port " + std::to_string(port) +
                ", not on MASTER_PORT=" + std::to_string(other_port));
  const int unbound = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(what_of<iris::InvalidArgument>([&] { start(unbound, port); }),
            who + std::to_string(unbound) + handed +
                " is not a listening TCP socket; unset it, or hand over one that listens on MASTER_PORT=" +
                std::to_string(port));
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  EXPECT_EQ(what_of<iris::SysError>([&] { start(pipe_fds[0], port); }),
            who + std::to_string(pipe_fds[0]) + handed + " is not a socket: Socket operation on non-socket");
  EXPECT_TRUE(is_listening(listener)) << "a refused handover must leave the launcher's socket alone";
  for (int fd : {listener, unbound, pipe_fds[0], pipe_fds[1]}) ::close(fd);
}

// Rank 0 out of descriptors cannot accept its peers: the job fails at once, saying so, instead of polling a
// listener that stays readable (which spun and logged without end) until the ranks "never connected".
TEST(BootstrapTcp, AStoreOutOfDescriptorsFailsTheJobSayingSo) {
  const Rendezvous rv;
  const std::string store = "127.0.0.1:" + std::to_string(rv.port);
  auto codes = run_ranks(2, [&](int rank) {
    if (rank == 1) {  // connects once rank 0 is out of descriptors; whatever it gets, it ends by its timeout
      std::this_thread::sleep_for(500ms);
      (void)what_of<iris::Error>([&] { iris::make_tcp_bootstrap(rv.info(1, 2), 1s); });
      return 0;
    }
    std::string what;
    std::thread rank0([&] { what = what_of<iris::Error>([&] { iris::make_tcp_bootstrap(rv.info(0, 2), 10s); }); });
    std::this_thread::sleep_for(200ms);  // the store runs and rank 0's own client has joined it
    const rlimit low{64, 64};
    rlimit old{};
    CHILD_CHECK(rank, ::getrlimit(RLIMIT_NOFILE, &old) == 0 && ::setrlimit(RLIMIT_NOFILE, &low) == 0);
    std::vector<int> filler;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
    const auto start = std::chrono::steady_clock::now();
    rank0.join();
    for (int fd : filler) ::close(fd);
    CHILD_CHECK(rank, std::chrono::steady_clock::now() - start < 5s);  // failed at once, not at the timeout
    return same_text(rank, what,
                     "iris bootstrap: rank 0 cannot accept connections to the bootstrap store at " + store +
                         ": Too many open files; raise rank 0's limit of open files (ulimit -n), or close descriptors "
                         "it does not need");
  });
  expect_all_zero(codes);
}

// Another program on the port that answers a hello with a huge length is refused by the length, before a
// buffer of that size is allocated (2^39 bytes: a bad_alloc here, a long allocation on a large node).
TEST(BootstrapTcp, AnAnswerTooLongForAWelcomeIsNotAStore) {
  int port = 0;
  const int listener = listening_socket(&port);
  ASSERT_GE(listener, 0);
  std::thread impostor([&] {
    const int conn = ::accept(listener, nullptr, nullptr);
    if (conn < 0) return;
    char hello[64];
    (void)::recv(conn, hello, sizeof(hello), 0);
    const uint64_t length = uint64_t{1} << 39;  // little-endian, as the store writes its lengths
    unsigned char header[8];
    for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>(length >> (8 * i));
    (void)::send(conn, header, sizeof(header), MSG_NOSIGNAL);
    std::this_thread::sleep_for(500ms);
    ::close(conn);
  });
  EXPECT_EQ(what_of<iris::Error>([&] { iris::make_tcp_bootstrap(tcp_info(1, 2, port), 5s); }),
            "iris bootstrap: 127.0.0.1:" + std::to_string(port) +
                " answered with something that is not an iris bootstrap store (is another program listening on port " +
                std::to_string(port) +
                " from the default? IRIS_MASTER_PORT picks another port, the same on every rank)");
  impostor.join();
  ::close(listener);
}

// ---- threads of one process ----------------------------------------------------------------------------

// Runs body(rank, bootstrap) on one thread per rank; returns each thread's failure text ("" = ok).
std::vector<std::string> run_threads(const std::vector<std::shared_ptr<Bootstrap>>& group,
                                     const std::function<std::string(int, Bootstrap&)>& body) {
  std::vector<std::string> errors(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        errors[r] = body(static_cast<int>(r), *group[r]);
      } catch (const std::exception& e) {
        errors[r] = std::string("unexpected exception: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(BootstrapThreads, Collectives) {
  constexpr int kWorld = 4;
  auto group = iris::make_thread_bootstraps(kWorld, 10s);
  ASSERT_EQ(group.size(), size_t{kWorld});
  expect_no_errors(run_threads(group, [](int rank, Bootstrap& bs) -> std::string {
    if (bs.rank() != rank || bs.world_size() != kWorld || bs.timeout() != 10s) return "wrong rank/world/timeout";
    for (int round = 0; round < 50; ++round) {
      size_t len = round < 3 ? contribution_length(rank, round) : static_cast<size_t>(rank + round);
      auto all = bs.allgather(pattern(rank, round, len));
      for (int q = 0; q < kWorld; ++q) {
        size_t qlen = round < 3 ? contribution_length(q, round) : static_cast<size_t>(q + round);
        if (all[q] != pattern(q, round, qlen)) return "allgather mismatch in round " + std::to_string(round);
      }
      int root = round % kWorld;
      std::string value = "round " + std::to_string(round);
      if (bs.broadcast(rank == root ? value : "ignored", root) != value) return "broadcast mismatch";
      bs.barrier();
    }
    return "";
  }));
}

TEST(BootstrapThreads, BarrierWaitsForEveryRank) {
  constexpr int kWorld = 4;
  auto group = iris::make_thread_bootstraps(kWorld, 10s);
  std::atomic<int> counter{0};
  expect_no_errors(run_threads(group, [&](int rank, Bootstrap& bs) -> std::string {
    for (int round = 0; round < 5; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(((rank + round) % kWorld) * 10));
      counter.fetch_add(1);
      bs.barrier();
      if (counter.load() < kWorld * (round + 1)) return "barrier returned early in round " + std::to_string(round);
    }
    return "";
  }));
}

TEST(BootstrapThreads, AbortReleasesBlockedRanks) {
  constexpr int kWorld = 3;
  auto group = iris::make_thread_bootstraps(kWorld, 10s);
  const std::string want = "rank 1 failed: bad input";
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads(group, [&](int rank, Bootstrap& bs) -> std::string {
    if (rank == 1) {
      std::this_thread::sleep_for(100ms);
      bs.abort("bad input");
    }
    std::string got = what_of<iris::RemoteError>([&] { bs.barrier(); });
    return got == want ? "" : got;
  });
  expect_no_errors(errors);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // Later entries fail the same way.
  EXPECT_EQ(what_of<iris::RemoteError>([&] { group[0]->allgather("x"); }), want);
}

TEST(BootstrapThreads, TimeoutNamesMissingRanks) {
  constexpr int kWorld = 4;
  auto group = iris::make_thread_bootstraps(kWorld, 500ms);
  const std::string want = "iris bootstrap: timed out after 0.5 s in allgather #3 waiting for ranks 1, 3 (of 4)";
  std::atomic<int> gave_up{0};
  auto errors = run_threads(group, [&](int rank, Bootstrap& bs) -> std::string {
    bs.barrier();
    bs.allgather("two");
    std::string got;
    if (rank % 2 == 0) {
      got = what_of<iris::TimeoutError>([&] { bs.allgather("three"); });
      gave_up.fetch_add(1);
    } else {
      // Arrive only after the others gave up: the failure is sticky, same text.
      while (gave_up.load() < 2) std::this_thread::sleep_for(1ms);
      got = what_of<iris::TimeoutError>([&] { bs.barrier(); });
    }
    return got == want ? "" : got;
  });
  expect_no_errors(errors);
}

TEST(BootstrapThreads, MismatchedCollectivesFail) {
  auto group = iris::make_thread_bootstraps(2, 10s);
  const std::string want =
      "iris bootstrap: ranks disagree on collective #1: rank 0 called barrier, rank 1 called broadcast from rank 1";
  expect_no_errors(run_threads(group, [&](int rank, Bootstrap& bs) -> std::string {
    std::string got =
        rank == 0 ? what_of<iris::Error>([&] { bs.barrier(); }) : what_of<iris::Error>([&] { bs.broadcast("v", 1); });
    return got == want ? "" : got;
  }));
}

// One rank arriving twice (two threads sharing its bootstrap) fails the collective for both of them, instead
// of counting as the missing rank.
TEST(BootstrapThreads, ARankArrivingTwiceFails) {
  auto group = iris::make_thread_bootstraps(2, 10s);
  const std::string want =
      "iris bootstrap: rank 0 entered collective #1 twice: two threads use its bootstrap at once (one Context, or "
      "one bootstrap given to two Contexts); a rank's Context belongs to one thread at a time";
  std::string first;
  std::thread waiter([&] { first = what_of<iris::Error>([&] { group[0]->barrier(); }); });
  // Whichever of the two arrives second finds rank 0 present, and wakes the other with the failure.
  const std::string second = what_of<iris::Error>([&] { group[0]->barrier(); });
  waiter.join();
  EXPECT_EQ(first, want);
  EXPECT_EQ(second, want);
  EXPECT_EQ(what_of<iris::Error>([&] { group[1]->barrier(); }), want) << "the failure is sticky";
}

TEST(BootstrapThreads, ExchangeFdsIsForProcesses) {
  auto group = iris::make_thread_bootstraps(2, 1s);
  EXPECT_EQ(what_of<iris::Error>([&] { group[0]->exchange_fds(0); }),
            "exchange_fds is for separate processes; threads share one descriptor table");
}

TEST(BootstrapThreads, SingleRankAndBadArguments) {
  auto group = iris::make_thread_bootstraps(1, 1s);
  EXPECT_EQ(group[0]->allgather("solo"), std::vector<std::string>{"solo"});
  EXPECT_EQ(group[0]->broadcast("v", 0), "v");
  group[0]->barrier();
  EXPECT_EQ(what_of<iris::InvalidArgument>([] { iris::make_thread_bootstraps(0, 1s); }),
            "iris bootstrap: world size 0 must be at least 1");
  EXPECT_EQ(what_of<iris::InvalidArgument>([&] { group[0]->broadcast("v", 1); }),
            "iris bootstrap: broadcast root 1 is outside [0, 1)");
}

// ---- the harness of these tests -------------------------------------------------------------------------

// A rank that cannot be forked (the user's process limit, the host out of memory) is reported, and the ranks
// already started are ended: they would wait for it until their timeout. Before 2026-12-07 run_processes kept
// fork's -1 as that rank's pid, and at its limit called kill(-1, SIGKILL): every process the test's user may
// signal, all of the host's under root, as CI runs. Here the harness runs as nobody, allowed one process more
// than nobody has, so rank 0 starts and rank 1 does not; a bystander of nobody's shows that no process beyond
// the harness's own children was signalled.
TEST(ForkedRanks, ARankThatCannotBeForkedEndsTheOthersAndSignalsNoStranger) {
  if (const std::string why = why_no_process_of_nobody(); !why.empty()) GTEST_SKIP() << why;
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t bystander = ::fork();
  if (bystander == 0) {
    ::close(ready[0]);
    if (!become_nobody()) ::_exit(3);
    ::close(ready[1]);  // end-of-file for the test: this process is nobody's now
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  ASSERT_GT(bystander, 0);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 0);
  ::close(ready[0]);
  enum : int { kOk, kNotNobody = 3, kNoLimit, kWrongCodes, kWaitedForRankZero };
  const pid_t harness = ::fork();
  if (harness == 0) {
    if (!become_nobody()) ::_exit(kNotNobody);
    const rlim_t tasks = tasks_of_user(kNobody);
    const rlimit limit{tasks + 1, tasks + 1};
    if (tasks < 2 || ::setrlimit(RLIMIT_NPROC, &limit) != 0) ::_exit(kNoLimit);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int> codes = run_ranks(
        2,
        [](int rank) {
          if (rank == 0) std::this_thread::sleep_for(20s);  // as a rank waiting for its peer
          return 0;
        },
        10s);
    if (codes != std::vector<int>{kNotStarted, kNotStarted}) ::_exit(kWrongCodes);
    if (std::chrono::steady_clock::now() - start > 5s) ::_exit(kWaitedForRankZero);
    ::_exit(kOk);
  }
  ASSERT_GT(harness, 0);
  int status = -1;
  ASSERT_EQ(::waitpid(harness, &status, 0), harness);
  const bool bystander_lives = ::waitpid(bystander, nullptr, WNOHANG) == 0;
  ::kill(bystander, SIGKILL);
  ::waitpid(bystander, nullptr, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the harness ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kOk) << "3: could not become nobody; 4: could not count nobody's tasks or set the "
                                         "limit; 5: the codes were not kNotStarted for both ranks; 6: rank 0 was "
                                         "waited for, not ended";
  EXPECT_TRUE(bystander_lives) << "a process that was no rank of the harness was killed";
}

}  // namespace
