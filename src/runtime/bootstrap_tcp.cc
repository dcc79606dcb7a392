// Bootstrap for one process per rank: a small TCP store.
//
// Rank 0 runs the store on a thread of its own (so it keeps answering, and keeps time, even while
// rank 0's main thread is busy). Every rank, rank 0 included, is a client of it:
//
//   client                                   store
//   hello(magic, version, rank, world)  -->                      once all `world` ranks said hello
//                                       <--  welcome(job id)     (or error: who never connected)
//   collective(kind, root, seq, bytes)  -->                      once all ranks sent #seq
//                                       <--  result(seq, bytes...)
//   abort(reason) / goodbye             -->
//                                       <--  error(kind, text)   pushed to everyone on a failure
//
// Every message is a frame: 8-byte little-endian body length, then the body (1-byte type + fields).
// The store decides every failure (it sees who is missing, who died, who aborted) and pushes one
// error to all ranks, so every rank throws the same message. Failures are sticky.
//
// Descriptor passing (exchange_fds) does not go through the store: each rank listens on a Linux
// abstract Unix socket named after the job id the store handed out, and peers send their
// descriptor to it with SCM_RIGHTS.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "iris/core/error.hpp"
#include "iris/core/log.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "runtime/bootstrap_detail.hpp"
#include "runtime/fd_passing.hpp"

namespace iris {
namespace {

using detail::Clock;
using detail::format_ranks;
using detail::format_seconds;
using detail::str_cat;
using detail::UniqueFd;
using std::chrono::milliseconds;

constexpr uint32_t kMagic = 0x53495249;  // "IRIS" in little-endian bytes
// 2 (2026-12-05): the hello names the rank's job (LaunchInfo::job). 3 (2026-12-07): ErrKind::kBusy.
constexpr uint32_t kProtocolVersion = 3;
// The longest job name a hello carries; a longer LaunchInfo::job is cut here, alike on every rank.
constexpr size_t kMaxJobName = 1024;
// Lengths beyond this are garbage (another program on the port, a desynchronized stream) and are
// rejected instead of allocated.
constexpr uint64_t kMaxFrame = uint64_t{1} << 40;
// Until its hello a connection is untrusted, so it may only send a small frame: the hello's numbers and
// its job name.
constexpr uint64_t kMaxHelloFrame = 64 + kMaxJobName;
// The store's answer to a hello: its welcome (17 bytes) or an error frame. A larger length means another
// program answered, and is refused before anything of that size is allocated.
constexpr uint64_t kMaxWelcomeFrame = uint64_t{1} << 16;

enum class Msg : uint8_t { kHello = 1, kWelcome, kCollective, kResult, kError, kAbort, kGoodbye };
enum class Kind : uint8_t { kAllgather = 1, kBroadcast, kBarrier };
// kBusy: a store of this job that takes no more ranks (all connected, or closing): the store of the job's previous
// bootstrap, one Context after another in the same processes. The rank connects again, to its successor.
enum class ErrKind : uint8_t { kError = 0, kRemote, kTimeout, kBusy };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

std::string describe(Kind kind, int root) {
  return kind == Kind::kBroadcast ? str_cat("broadcast from rank ", root) : std::string(kind_name(kind));
}

// The stores this process has joined (host:port): a busy one of these is the job's previous store, still closing.
std::mutex joined_mu;
std::set<std::string>& joined_stores() {
  static std::set<std::string> stores;
  return stores;
}
void note_joined(const std::string& where) {
  std::lock_guard lock(joined_mu);
  joined_stores().insert(where);
}
bool joined_before(const std::string& where) {
  std::lock_guard lock(joined_mu);
  return joined_stores().count(where) > 0;
}

// The pause between a client's tries to reach the store: 5 ms, doubling up to 200 ms, never past the deadline.
class Backoff {
 public:
  void pause(Clock::time_point deadline) {
    std::this_thread::sleep_for(std::min<Clock::duration>(next_, deadline - Clock::now()));
    next_ = std::min(next_ * 2, milliseconds(200));
  }

 private:
  milliseconds next_{5};
};

// A store's refusal with ErrKind::kBusy, or a store that closed before its welcome (`closed`): internal, the
// client may connect again until its deadline.
class StoreBusy : public Error {
 public:
  explicit StoreBusy(const std::string& what, bool closed_before_welcome = false)
      : Error(what), closed(closed_before_welcome) {}
  bool closed;
};

[[noreturn]] void throw_as(ErrKind kind, const std::string& message) {
  switch (kind) {
    case ErrKind::kBusy:
      throw StoreBusy(message);
    case ErrKind::kRemote:
      throw RemoteError(message);
    case ErrKind::kTimeout:
      throw TimeoutError(message);
    default:
      throw Error(message);
  }
}

// A message that does not follow the protocol (internal; callers turn it into a user-facing error).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// ---- framing --------------------------------------------------------------------------------------

uint64_t load_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

class FrameWriter {
 public:
  explicit FrameWriter(Msg type) : buf_(8, '\0') { u8(static_cast<uint8_t>(type)); }
  FrameWriter& u8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  FrameWriter& u32(uint32_t v) { return put(v, 4); }
  FrameWriter& u64(uint64_t v) { return put(v, 8); }
  FrameWriter& bytes(std::string_view s) {
    u64(s.size());
    buf_.append(s);
    return *this;
  }
  // Fills in the length; the writer is spent afterwards.
  std::string finish() {
    uint64_t n = buf_.size() - 8;
    for (int i = 0; i < 8; ++i) buf_[i] = static_cast<char>(n >> (8 * i));
    return std::move(buf_);
  }

 private:
  FrameWriter& put(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) buf_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  std::string buf_;
};

class FrameReader {
 public:
  explicit FrameReader(std::string_view body) : s_(body) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() { return static_cast<uint32_t>(load_le(take(4), 4)); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  uint64_t u64() { return load_le(take(8), 8); }
  std::string_view bytes() {
    uint64_t n = u64();
    const char* p = take(n);
    return {p, static_cast<size_t>(n)};
  }
  void end() const {
    if (pos_ != s_.size()) throw ProtocolError("trailing bytes in a message");
  }

 private:
  const char* take(uint64_t n) {
    if (s_.size() - pos_ < n) throw ProtocolError("truncated message");
    const char* p = s_.data() + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  std::string_view s_;
  size_t pos_ = 0;
};

std::string error_frame(ErrKind kind, const std::string& message) {
  return FrameWriter(Msg::kError).u8(static_cast<uint8_t>(kind)).bytes(message).finish();
}

// ---- socket I/O with deadlines ----------------------------------------------------------------------

enum class Io { kOk, kClosed, kTimeout };

// Errors after which nothing more goes through the connection: the peer closed or reset it, or its host or
// network became unreachable (a rank's node gone). Each is a closed connection, a rank's death or the store's
// loss, said by rank, not an error of the store itself.
bool peer_gone(int err) {
  return err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ECONNABORTED || err == ETIMEDOUT ||
         err == EHOSTUNREACH || err == ENETUNREACH || err == ENETDOWN || err == EHOSTDOWN;
}

// Writes all of `data` to a non-blocking socket.
Io send_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!detail::wait_fd(fd, POLLOUT, deadline)) return Io::kTimeout;
      continue;
    }
    if (peer_gone(errno)) return Io::kClosed;
    IRIS_SYSCHECK(n);
  }
  return Io::kOk;
}

Io recv_all(int fd, char* p, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!detail::wait_fd(fd, POLLIN, deadline)) return Io::kTimeout;
      continue;
    }
    if (peer_gone(errno)) return Io::kClosed;
    IRIS_SYSCHECK(n);
  }
  return Io::kOk;
}

// Reads one frame's body. Throws ProtocolError on a length of 0 or above `max`.
Io recv_frame(int fd, std::string& body, Clock::time_point deadline, uint64_t max = kMaxFrame) {
  char header[8];
  Io io = recv_all(fd, header, sizeof(header), deadline);
  if (io != Io::kOk) return io;
  uint64_t n = load_le(header, 8);
  if (n == 0 || n > max) throw ProtocolError(str_cat("impossible frame length ", n));
  body.resize(static_cast<size_t>(n));
  return recv_all(fd, body.data(), body.size(), deadline);
}

// Reads and drops whatever the peer already sent, so that close() sends FIN rather than RST (an RST
// can make the peer lose data it has received but not read yet, such as our last error message).
void drain(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return;
  }
}

void set_nodelay(int fd) {
  int one = 1;
  // Small request/answer messages: do not let Nagle hold them back. Failure only costs latency.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string host_port(const std::string& host, int port) {
  // An IPv6 literal needs brackets to stay readable next to the port.
  return host.find(':') != std::string::npos ? str_cat("[", host, "]:", port) : str_cat(host, ":", port);
}

using AddrInfoPtr = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

AddrInfoPtr resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw Error(str_cat("iris bootstrap: cannot resolve MASTER_ADDR '", host, "': ", ::gai_strerror(rc)));
  return AddrInfoPtr(res, &::freeaddrinfo);
}

std::string errno_text(int err) {
  char buf[256];
  return ::strerror_r(err, buf, sizeof(buf));
}

// Takes `lock` if it becomes free within `limit`. A polled try_lock rather than std::timed_mutex,
// whose timed lock ThreadSanitizer does not understand (it reports every unlock as a bug).
bool lock_within(std::unique_lock<std::mutex>& lock, milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!lock.try_lock()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// ---- the store (rank 0's thread) --------------------------------------------------------------------

class StoreServer {
 public:
  StoreServer(const LaunchInfo& info, milliseconds timeout)
      : where_(host_port(info.master_addr, info.master_port)),
        job_(info.job.substr(0, kMaxJobName)),
        world_(info.world_size),
        timeout_(timeout),
        by_rank_(world_, nullptr),
        left_(world_, 0),
        present_(world_, 0),
        contrib_(world_) {
    listen_on(info);
    int pipe_fds[2];
    IRIS_SYSCHECK(::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC));
    wake_read_.reset(pipe_fds[0]);
    wake_write_.reset(pipe_fds[1]);
    std::random_device rd;
    job_id_ = (uint64_t{rd()} << 32) ^ rd() ^ (uint64_t(::getpid()) << 16) ^
              static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    connect_deadline_ = Clock::now() + timeout_;
    thread_ = std::thread([this] { run(); });
  }

  ~StoreServer() {
    char byte = 1;
    // A full pipe already holds a wake-up, so a failed write is fine.
    (void)!::write(wake_write_.get(), &byte, 1);
    thread_.join();
  }

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  struct Conn {
    UniqueFd fd;
    int rank = -1;   // -1 until its hello
    std::string in;  // received bytes not yet parsed into frames
    bool closed = false;
  };

  void listen_on(const LaunchInfo& info) {
    if (info.store_listen_fd >= 0) {
      adopt_listener(info);
      return;
    }
    AddrInfoPtr addrs = resolve(info.master_addr, info.master_port, true);
    int err = 0;
    for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd s(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!s.valid()) {
        err = errno;
        continue;
      }
      int one = 1;
      // Lets a new job reuse the port while connections of a finished one sit in TIME_WAIT.
      (void)::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(s.get(), ai->ai_addr, ai->ai_addrlen) < 0 || ::listen(s.get(), std::max(world_, 16)) < 0) {
        err = errno;
        continue;
      }
      listen_fd_ = std::move(s);
      IRIS_LOG_DEBUG("bootstrap store listening on ", where_, " for ", world_, " ranks");
      return;
    }
    throw SysError(str_cat("iris bootstrap: rank 0 cannot host the bootstrap store on ", where_, ": ", errno_text(err),
                           " (port ", info.master_port, " from ", info.master_port_source,
                           ": is another program using it? IRIS_MASTER_PORT picks another port, the same on every "
                           "rank. Or is MASTER_ADDR not an address of this host?)"),
                   err);
  }
  // The launcher's socket (LaunchInfo::store_listen_fd), checked to be what it claims: a TCP socket
  // listening on master_port. A duplicate serves this store, so the launcher's descriptor stays usable.
  void adopt_listener(const LaunchInfo& info) {
    const int fd = info.store_listen_fd;
    const std::string what =
        str_cat("iris bootstrap: IRIS_STORE_LISTEN_FD=", fd, " (the store socket the launcher handed over)");
    int listening = 0, type = 0;
    socklen_t len = sizeof(listening);
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) < 0) {
      const int err = errno;
      throw SysError(str_cat(what, " is not a socket: ", errno_text(err)), err);
    }
    len = sizeof(type);
    IRIS_SYSCHECK(::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len));
    int port = -1;
    if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    IRIS_CHECK_ARG(
        type == SOCK_STREAM && port >= 0 && listening != 0, what,
        " is not a listening TCP socket; unset it, or hand over one that listens on MASTER_PORT=", info.master_port);
    IRIS_CHECK_ARG(port == info.master_port, what, " listens on port ", port,
                   ", not on MASTER_PORT=", info.master_port);
    // The launcher's descriptor stays open for this process's later stores, but no child of it (a system()
    // call, a tool it starts) inherits it: a child holding the port open past this process's death would
    // leave the peers' connections waiting in a backlog nobody reads, until their timeout, instead of refused.
    const int fd_flags = ::fcntl(fd, F_GETFD);
    IRIS_SYSCHECK(fd_flags);
    IRIS_SYSCHECK(::fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC));
    UniqueFd s(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    IRIS_SYSCHECK(s.get());
    const int flags = ::fcntl(s.get(), F_GETFL);
    IRIS_SYSCHECK(flags);
    IRIS_SYSCHECK(::fcntl(s.get(), F_SETFL, flags | O_NONBLOCK));
    listen_fd_ = std::move(s);
    adopted_ = true;
    IRIS_LOG_DEBUG("bootstrap store listening on ", where_, " (socket handed over by the launcher) for ", world_,
                   " ranks");
  }

  void run() noexcept {
    try {
      loop();
    } catch (const std::exception& e) {
      IRIS_LOG_ERROR("bootstrap store on ", where_, " stopped: ", e.what());
      try {
        fail(ErrKind::kError, str_cat("iris bootstrap: the bootstrap store on ", where_, " failed: ", e.what()));
      } catch (...) {
      }
    } catch (...) {
    }
    shut_down();
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Conn*> owners;
    for (;;) {
      const bool accepting = Clock::now() >= accept_paused_until_;
      fds.assign({pollfd{wake_read_.get(), POLLIN, 0},
                  pollfd{listen_fd_.get(), static_cast<short>(accepting ? POLLIN : 0), 0}});
      owners.clear();
      for (Conn& c : conns_) {
        fds.push_back(pollfd{c.fd.get(), POLLIN, 0});
        owners.push_back(&c);
      }
      int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (n < 0) {
        if (errno == EINTR) continue;
        IRIS_SYSCHECK(n);
      }
      if (fds[0].revents != 0) return;  // the owner is shutting the store down
      if (fds[1].revents != 0) accept_new();
      for (size_t i = 0; i < owners.size(); ++i)
        if (fds[i + 2].revents != 0) read_from(*owners[i]);
      check_timers();
      conns_.remove_if([](const Conn& c) { return c.closed; });
      // Every rank came and went: nothing left to serve.
      if (all_connected_ && std::all_of(left_.begin(), left_.end(), [](char l) { return l != 0; })) return;
    }
  }

  int poll_timeout_ms() const {
    std::optional<Clock::time_point> deadline;
    if (!failed_ && !all_connected_) deadline = connect_deadline_;
    if (!failed_ && arrived_ > 0) deadline = coll_deadline_;
    // While accepting pauses, wake when it resumes.
    if (Clock::now() < accept_paused_until_)
      deadline = std::min(deadline.value_or(accept_paused_until_), accept_paused_until_);
    if (!deadline) return -1;
    auto left = std::chrono::ceil<milliseconds>(*deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
  }

  void accept_new() {
    for (;;) {
      int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EINTR || err == ECONNABORTED) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        // Out of descriptors or memory: the connection stays in the backlog and the listener readable, so
        // polling it again at once would spin (and log) without end. Accepting pauses for a moment. Before
        // every rank has connected the job cannot form: it fails, saying why, rather than at the timeout
        // with ranks "never connected" that did.
        accept_paused_until_ = Clock::now() + milliseconds(100);
        if (!all_connected_) {
          fail(ErrKind::kError, str_cat("iris bootstrap: rank 0 cannot accept connections to the bootstrap store at ",
                                        where_, ": ", errno_text(err),
                                        "; raise rank 0's limit of open files (ulimit -n), or close descriptors it "
                                        "does not need"));
        } else if (!accept_warned_) {
          accept_warned_ = true;
          IRIS_LOG_WARN("bootstrap store on ", where_, ": accept failed: ", errno_text(err),
                        " (connections after the job formed are strays; they wait)");
        }
        return;
      }
      set_nodelay(fd);
      conns_.emplace_back().fd.reset(fd);
    }
  }

  void read_from(Conn& c) {
    if (c.closed) return;
    bool eof = false;
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      eof = true;  // orderly close or a reset: either way the peer is gone
      break;
    }
    // Frames that arrived before the close still count (a goodbye right before exit is normal).
    size_t pos = 0;
    while (!c.closed && c.in.size() - pos >= 8) {
      uint64_t len = load_le(c.in.data() + pos, 8);
      if (len == 0 || len > (c.rank < 0 ? kMaxHelloFrame : kMaxFrame)) {
        protocol_violation(c, str_cat("impossible frame length ", len));
        break;
      }
      if (c.in.size() - pos - 8 < len) break;
      std::string_view body(c.in.data() + pos + 8, static_cast<size_t>(len));
      pos += 8 + static_cast<size_t>(len);
      try {
        handle_frame(c, body);
      } catch (const ProtocolError& e) {
        protocol_violation(c, e.what());
      }
    }
    c.in.erase(0, pos);
    if (eof) drop(c, /*died=*/true);
  }

  void protocol_violation(Conn& c, const std::string& what) {
    if (c.rank < 0) {
      IRIS_LOG_WARN("bootstrap store on ", where_, ": dropping a connection that is not an iris rank (", what, ")");
    } else {
      fail(ErrKind::kError, str_cat("iris bootstrap: rank ", c.rank, " sent a malformed message to the store at ",
                                    where_, " (", what, ")"));
    }
    drop(c, /*died=*/false);
  }

  void handle_frame(Conn& c, std::string_view body) {
    FrameReader r(body);
    auto type = static_cast<Msg>(r.u8());
    if (c.rank < 0) {
      if (type != Msg::kHello) throw ProtocolError("expected a hello");
      handle_hello(c, r);
      return;
    }
    switch (type) {
      case Msg::kCollective:
        handle_collective(c, r);
        return;
      case Msg::kAbort: {
        std::string_view reason = r.bytes();
        r.end();
        fail(ErrKind::kRemote, str_cat("rank ", c.rank, " failed: ", reason));
        return;
      }
      case Msg::kGoodbye:
        r.end();
        drop(c, /*died=*/false);
        return;
      default:
        throw ProtocolError(str_cat("unexpected message type ", int(type)));
    }
  }

  // Tells one not-yet-registered connection why it is refused, then closes it.
  void refuse(Conn& c, ErrKind kind, const std::string& message) {
    (void)send_all(c.fd.get(), error_frame(kind, message), Clock::now() + milliseconds(1000));
    drop(c, /*died=*/false);
  }

  void handle_hello(Conn& c, FrameReader& r) {
    uint32_t magic = r.u32();
    uint32_t version = r.u32();
    int rank = r.i32();
    int world = r.i32();
    if (magic != kMagic) throw ProtocolError("bad magic");
    if (version != kProtocolVersion) {  // what follows may be laid out otherwise: not read
      refuse(c, ErrKind::kError,
             str_cat("iris bootstrap: rank ", rank, " speaks bootstrap protocol version ", version,
                     " but the store at ", where_, " speaks version ", kProtocolVersion, " (mixed iris builds?)"));
      return;
    }
    const std::string_view job = r.bytes();
    r.end();
    if (!job.empty() && !job_.empty() && job != job_) {
      // A rank of another job that found this port (both jobs on the default MASTER_PORT, its own rank 0
      // unable to bind it): refused alone, before it can take a place of this job's ranks, whether or not
      // they have all connected.
      refuse(c, ErrKind::kError,
             str_cat("iris bootstrap: the store at ", where_, " serves the job of rank 0 (", job_,
                     "); this process (rank ", rank, " of world size ", world, ") belongs to another job (", job,
                     "). Is another job using the same port? Give each job its own MASTER_PORT (or "
                     "IRIS_MASTER_PORT)."));
      return;
    }
    if (all_connected_) {
      // Every rank of this job has connected, so the newcomer is a stray: a late duplicate, a rank of another
      // job that shares the port (two jobs on one node both defaulting to MASTER_PORT 29500), or a rank of this
      // job's next bootstrap, come before this store closed. It must not take down the running job: refused
      // alone, as busy (before the failure check: a rank of the next bootstrap after a failed job connects again
      // rather than inherit the failure).
      refuse(c, ErrKind::kBusy,
             str_cat("iris bootstrap: the store at ", where_, " serves a running job whose ", world_,
                     " ranks have all connected; this process (rank ", rank, " of world size ", world,
                     ") is not one of them. Is another job using the same port? Give each job its own "
                     "MASTER_PORT (or IRIS_MASTER_PORT)."));
      return;
    }
    if (failed_) {
      refuse(c, fail_kind_, fail_message_);
      return;
    }
    std::string problem;
    if (world != world_) {
      problem = str_cat("iris bootstrap: rank ", rank, " was started with world size ", world,
                        " but rank 0 with world size ", world_);
    } else if (rank < 0 || rank >= world_) {
      problem = str_cat("iris bootstrap: a process connected as rank ", rank, ", outside [0, ", world_, ")");
    } else if (by_rank_[rank] != nullptr || left_[rank]) {
      problem = str_cat("iris bootstrap: two processes connected to the store at ", where_, " as rank ", rank,
                        " (do two processes have the same rank?)");
    }
    if (!problem.empty()) {
      fail(ErrKind::kError, problem);       // every rank already connected learns it...
      refuse(c, ErrKind::kError, problem);  // ...and so does the newcomer
      return;
    }
    c.rank = rank;
    by_rank_[rank] = &c;
    ++connected_;
    if (connected_ < world_) return;
    all_connected_ = true;
    IRIS_LOG_DEBUG("bootstrap store on ", where_, ": all ", world_, " ranks connected");
    std::string welcome = FrameWriter(Msg::kWelcome).u32(kMagic).u64(job_id_).u32(world_).finish();
    send_to_all_host_last(welcome);
  }

  void handle_collective(Conn& c, FrameReader& r) {
    auto kind = static_cast<Kind>(r.u8());
    int root = r.i32();
    uint64_t seq = r.u64();
    std::string_view payload = r.bytes();
    r.end();
    if (kind != Kind::kAllgather && kind != Kind::kBroadcast && kind != Kind::kBarrier)
      throw ProtocolError(str_cat("unknown collective ", int(kind)));
    if (kind == Kind::kBroadcast && (root < 0 || root >= world_)) throw ProtocolError("broadcast root out of range");
    if (failed_) {
      send_to(c, error_frame(fail_kind_, fail_message_), Clock::now() + timeout_);
      return;
    }
    if (!all_connected_) throw ProtocolError("collective before the welcome");
    if (seq != seq_ || present_[c.rank]) {
      fail(ErrKind::kError,
           str_cat("iris bootstrap: rank ", c.rank, " called collective #", seq, " while the others are at #", seq_,
                   " (did a rank keep using the bootstrap after an error?)"));
      return;
    }
    // A rank that closed its bootstrap can never contribute: release everyone now, not at the timeout.
    for (int q = 0; q < world_; ++q) {
      if (left_[q]) {
        fail(ErrKind::kRemote, str_cat("rank ", q, " closed its bootstrap before ", kind_name(kind), " #", seq_));
        return;
      }
    }
    if (arrived_ > 0 && (kind != kind_ || (kind == Kind::kBroadcast && root != root_))) {
      int a = std::min(first_rank_, c.rank), b = std::max(first_rank_, c.rank);
      std::string mine = describe(kind, root), theirs = describe(kind_, root_);
      fail(ErrKind::kError,
           str_cat("iris bootstrap: ranks disagree on collective #", seq_, ": rank ", a, " called ",
                   a == c.rank ? mine : theirs, ", rank ", b, " called ", b == c.rank ? mine : theirs));
      return;
    }
    if (arrived_ == 0) {
      kind_ = kind;
      root_ = root;
      first_rank_ = c.rank;
      coll_deadline_ = Clock::now() + timeout_;
    }
    contrib_[c.rank].assign(payload);
    present_[c.rank] = 1;
    if (++arrived_ == world_) finish_collective();
  }

  void finish_collective() {
    FrameWriter w(Msg::kResult);
    w.u64(seq_);
    switch (kind_) {
      case Kind::kAllgather:
        w.u32(world_);
        for (const std::string& s : contrib_) w.bytes(s);
        break;
      case Kind::kBroadcast:
        w.u32(1);
        w.bytes(contrib_[root_]);
        break;
      case Kind::kBarrier:
        w.u32(0);
        break;
    }
    std::string frame = w.finish();
    // Reset before sending: a send that finds a dead rank must not see this collective as open.
    arrived_ = 0;
    present_.assign(world_, 0);
    for (std::string& s : contrib_) std::string().swap(s);
    ++seq_;
    send_to_all_host_last(frame);
  }

  void check_timers() {
    if (failed_) return;
    auto now = Clock::now();
    if (!all_connected_ && now >= connect_deadline_) {
      std::vector<int> missing;
      for (int q = 0; q < world_; ++q)
        if (by_rank_[q] == nullptr && !left_[q]) missing.push_back(q);
      fail(ErrKind::kTimeout, str_cat("iris bootstrap: timed out after ", format_seconds(timeout_),
                                      " s: ", format_ranks(missing), " never connected to the store at ", where_));
    } else if (arrived_ > 0 && now >= coll_deadline_) {
      std::vector<int> missing;
      for (int q = 0; q < world_; ++q)
        if (!present_[q]) missing.push_back(q);
      fail(ErrKind::kTimeout,
           str_cat("iris bootstrap: timed out after ", format_seconds(timeout_), " s in ", kind_name(kind_), " #", seq_,
                   " waiting for ", format_ranks(missing), " (of ", world_, ")"));
    }
  }

  // Rank 0 (this process) is served last: once its own client has the answer it may go on and
  // even exit, which would end this thread before the other ranks got theirs.
  // One deadline for the whole fan-out: ranks that do not read (stopped, their node silent) then hold this
  // thread, which also serves aborts and deaths, for one timeout in all rather than one each.
  void send_to_all_host_last(const std::string& frame) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (int i = 1; i <= world_ && !failed_; ++i) {
      Conn* c = by_rank_[i % world_];
      if (c != nullptr) send_to(*c, frame, deadline);
    }
  }

  // Sends to a registered rank; a rank that cannot be written to is treated as dead.
  void send_to(Conn& c, const std::string& frame, Clock::time_point deadline) {
    if (c.closed) return;
    Io io = send_all(c.fd.get(), frame, deadline);
    if (io != Io::kOk) drop(c, /*died=*/true);
  }

  // The job has failed: every rank gets the same error now, and every later request gets it again.
  void fail(ErrKind kind, const std::string& message) {
    if (failed_) return;  // the first failure is the cause; later ones are its consequences
    failed_ = true;
    fail_kind_ = kind;
    fail_message_ = message;
    arrived_ = 0;
    IRIS_LOG_DEBUG("bootstrap store on ", where_, ": ", message);
    std::string frame = error_frame(kind, message);
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (Conn& c : conns_)
      if (!c.closed && c.rank >= 0) send_to(c, frame, deadline);
  }

  void drop(Conn& c, bool died) {
    if (c.closed) return;
    c.closed = true;
    drain(c.fd.get());
    c.fd.reset();
    int r = c.rank;
    if (r < 0) return;
    by_rank_[r] = nullptr;
    left_[r] = 1;
    if (died) {
      fail(ErrKind::kRemote, str_cat("rank ", r, " disconnected from the bootstrap store (process exited?)"));
    } else if (arrived_ > 0) {
      fail(ErrKind::kRemote, str_cat("rank ", r, " closed its bootstrap before ", kind_name(kind_), " #", seq_));
    }
  }

  void shut_down() noexcept {
    try {
      std::string closing;
      if (!failed_)
        closing = error_frame(ErrKind::kRemote,
                              str_cat("rank 0 closed its bootstrap, and with it the bootstrap store at ", where_));
      for (Conn& c : conns_) {
        if (c.closed) continue;
        // Short deadline: the owner's destructor is waiting for this thread.
        if (c.rank >= 0 && !closing.empty()) (void)send_all(c.fd.get(), closing, Clock::now() + milliseconds(100));
        drain(c.fd.get());
        c.fd.reset();
        c.closed = true;
      }
      conns_.clear();
      // Connections still in the listener's backlog (a rank of this job's next bootstrap, come before this
      // store closed) are told, so that they connect again (kBusy) or learn the job's failure, instead of
      // finding their connection reset (before 2026-12-07: "rank 0 ... disconnected (process exited?)").
      // A listener handed over by the launcher stays open past this store: its backlog waits for the next one.
      for (int fd; listen_fd_.valid() && !adopted_ &&
                   (fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        UniqueFd pending(fd);
        const std::string frame =
            failed_ && !all_connected_
                ? error_frame(fail_kind_, fail_message_)
                : error_frame(ErrKind::kBusy, str_cat("iris bootstrap: the store at ", where_, " is closing"));
        (void)send_all(pending.get(), frame, Clock::now() + milliseconds(100));
        drain(pending.get());
      }
      listen_fd_.reset();
    } catch (...) {
    }
  }

  const std::string where_;
  const std::string job_;  // rank 0's LaunchInfo::job (cut to kMaxJobName); empty: no job is checked
  const int world_;
  const milliseconds timeout_;
  UniqueFd listen_fd_;
  bool adopted_ = false;  // listen_fd_ is a duplicate of the launcher's socket (LaunchInfo::store_listen_fd)
  UniqueFd wake_read_, wake_write_;
  uint64_t job_id_ = 0;
  Clock::time_point connect_deadline_;

  // Everything below belongs to the store thread once it started.
  std::list<Conn> conns_;       // a list: Conn addresses stay valid while others come and go
  std::vector<Conn*> by_rank_;  // the connection of each registered rank
  std::vector<char> left_;      // rank said goodbye or died after registering
  int connected_ = 0;
  bool all_connected_ = false;
  Clock::time_point accept_paused_until_{};  // accept_new: out of descriptors, accepting pauses until then
  bool accept_warned_ = false;

  bool failed_ = false;
  ErrKind fail_kind_ = ErrKind::kError;
  std::string fail_message_;

  uint64_t seq_ = 1;  // the collective in progress (1-based, as printed)
  int arrived_ = 0;
  std::vector<char> present_;
  std::vector<std::string> contrib_;
  Kind kind_ = Kind::kAllgather;
  int root_ = 0;
  int first_rank_ = 0;
  Clock::time_point coll_deadline_;

  std::thread thread_;  // last: started once everything above is initialized
};

// ---- the client (every rank) -----------------------------------------------------------------------

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(const LaunchInfo& info, milliseconds timeout)
      : info_(info), timeout_(timeout), where_(host_port(info.master_addr, info.master_port)) {
    const auto start = Clock::now();
    if (info_.rank == 0) server_ = std::make_unique<StoreServer>(info_, timeout_);
    Backoff backoff;
    for (;;) {
      connect_to_store(start + timeout_);
      try {
        // The wait for the welcome counts from the connection: the store's own wait (timeout_ from rank 0's
        // start) then ends first, naming the ranks that never connected. Counted from this rank's start, a rank
        // started more than grace() before rank 0 timed out first, and the store took its leaving for a death
        // ("rank 1 disconnected ... (process exited?)"), naming no missing rank.
        handshake(Clock::now() + timeout_ + grace());
        break;
      } catch (const StoreBusy& e) {
        // A store that takes no more ranks (or one that closed on this rank before its welcome): another job's
        // (a stray, refused at once, as before), or, when this process has joined a store at this address
        // before, the job's previous one, still closing while this rank made its next bootstrap (one Context
        // after another: before 2026-12-07 that failed the new Context, at random). Then it connects again,
        // until its deadline.
        sock_.reset();
        if (!joined_before(where_)) {
          if (e.closed) throw RemoteError(e.what());
          throw Error(e.what());
        }
        if (Clock::now() >= start + timeout_)
          throw TimeoutError(str_cat("iris bootstrap: rank ", info_.rank, " could not join the store at ", where_,
                                     " within ", format_seconds(timeout_), " s: ", e.what(),
                                     " (this process joined a store there before: is that job's rank 0 still in "
                                     "its previous bootstrap, or is another job using the same port?)"));
        backoff.pause(start + timeout_);
      }
    }
    note_joined(where_);
    IRIS_LOG_DEBUG("bootstrap: rank ", info_.rank, "/", info_.world_size, " joined the store at ", where_);
  }

  ~TcpBootstrap() override {
    try {
      std::unique_lock lock(write_mu_, std::defer_lock);
      if (sock_.valid() && lock_within(lock, milliseconds(1000)) && !sent_partly_) {
        // The goodbye tells the store this is a normal exit, not a dead process.
        (void)send_all(sock_.get(), FrameWriter(Msg::kGoodbye).finish(), Clock::now() + milliseconds(1000));
        ::shutdown(sock_.get(), SHUT_WR);
      }
      if (sock_.valid()) drain(sock_.get());
    } catch (...) {
    }
    sock_.reset();
    server_.reset();  // stops and joins rank 0's store thread
  }

  int rank() const override { return info_.rank; }
  int world_size() const override { return info_.world_size; }
  milliseconds timeout() const override { return timeout_; }

  std::vector<std::string> allgather(std::string_view mine) override {
    auto out = collective(Kind::kAllgather, 0, mine);
    if (static_cast<int>(out.size()) != info_.world_size) fail_protocol("allgather result of the wrong size");
    return out;
  }

  std::string broadcast(std::string_view value, int root) override {
    IRIS_CHECK_ARG(root >= 0 && root < info_.world_size, "iris bootstrap: broadcast root ", root, " is outside [0, ",
                   info_.world_size, ")");
    auto out = collective(Kind::kBroadcast, root, info_.rank == root ? value : std::string_view{});
    if (out.size() != 1) fail_protocol("broadcast result of the wrong size");
    return std::move(out[0]);
  }

  void barrier() override { collective(Kind::kBarrier, 0, {}); }

  std::vector<int> exchange_fds(int fd) override;

  void abort(const std::string& reason) noexcept override {
    try {
      record_failure(ErrKind::kRemote, str_cat("rank ", info_.rank, " failed: ", reason));
      tell_store(reason);
    } catch (...) {
      // abort() promises not to throw; the local failure is recorded whatever happens to the send.
    }
  }

 private:
  // Extra time a client waits beyond the store's own timeout, so that the store, which knows who
  // is missing, is the one to report it. Only a store that stopped answering hits this.
  milliseconds grace() const { return std::min(timeout_, milliseconds(5000)); }

  std::string store_lost() const {
    return str_cat("rank 0 (host of the bootstrap store at ", where_, ") disconnected (process exited?)");
  }

  void connect_to_store(Clock::time_point deadline) {
    AddrInfoPtr addrs = resolve(info_.master_addr, info_.master_port, false);
    Backoff backoff;
    int last_err = ETIMEDOUT;
    for (;;) {
      for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
        UniqueFd s(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!s.valid()) {
          last_err = errno;
          continue;
        }
        int rc = ::connect(s.get(), ai->ai_addr, ai->ai_addrlen);
        // EINTR leaves the connection being established in the background, like EINPROGRESS.
        if (rc < 0 && errno != EINPROGRESS && errno != EINTR) {
          last_err = errno;
          continue;
        }
        if (rc < 0) {
          if (!detail::wait_fd(s.get(), POLLOUT, deadline)) {
            last_err = ETIMEDOUT;
            continue;
          }
          int err = 0;
          socklen_t len = sizeof(err);
          IRIS_SYSCHECK(::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len));
          if (err != 0) {
            last_err = err;
            continue;
          }
        }
        // With nobody listening yet, a connect to a loopback port in the ephemeral range can pick that
        // very port as its source and connect the socket to itself (TCP simultaneous open). It would
        // then read its own hello back, and hold the port rank 0 is about to bind: drop it and retry.
        if (detail::connected_to_itself(s.get())) {
          last_err = ECONNREFUSED;
          continue;
        }
        set_nodelay(s.get());
        sock_ = std::move(s);
        return;
      }
      auto now = Clock::now();
      if (now >= deadline)
        throw TimeoutError(str_cat("iris bootstrap: rank ", info_.rank, " could not connect to the bootstrap store at ",
                                   where_, " within ", format_seconds(timeout_), " s (", errno_text(last_err),
                                   "); rank 0 hosts the store: is it running, and do all ranks use the same "
                                   "MASTER_ADDR and port (this rank's: ",
                                   info_.master_port, " from ", info_.master_port_source,
                                   ")? The store also closes when its job fails or ends before this rank "
                                   "connects: then rank 0's error says why."));
      // The store may simply not be up yet (rank 0 starting later): retry, backing off a little.
      backoff.pause(deadline);
    }
  }

  void handshake(Clock::time_point deadline) {
    std::string hello = FrameWriter(Msg::kHello)
                            .u32(kMagic)
                            .u32(kProtocolVersion)
                            .u32(static_cast<uint32_t>(info_.rank))
                            .u32(static_cast<uint32_t>(info_.world_size))
                            .bytes(std::string_view(info_.job).substr(0, kMaxJobName))
                            .finish();
    // If the send fails the store closed on us; the read below finds out why.
    (void)send_all(sock_.get(), hello, deadline);
    std::string body;
    Io io;
    try {
      io = recv_frame(sock_.get(), body, deadline, kMaxWelcomeFrame);
    } catch (const ProtocolError&) {
      throw Error(str_cat("iris bootstrap: ", where_,
                          " answered with something that is not an iris bootstrap store "
                          "(is another program listening on port ",
                          info_.master_port, " from ", info_.master_port_source,
                          "? IRIS_MASTER_PORT picks another port, the same on every rank)"));
    }
    if (io == Io::kTimeout)
      throw TimeoutError(str_cat("iris bootstrap: timed out after ", format_seconds(timeout_ + grace()),
                                 " s waiting for the bootstrap store at ", where_,
                                 " (hosted by rank 0) to report that all ranks connected"));
    if (io == Io::kClosed) throw StoreBusy(store_lost(), /*closed_before_welcome=*/true);
    try {
      FrameReader r(body);
      auto type = static_cast<Msg>(r.u8());
      if (type == Msg::kError) {
        auto kind = static_cast<ErrKind>(r.u8());
        throw_as(kind, std::string(r.bytes()));
      }
      if (type != Msg::kWelcome || r.u32() != kMagic) throw ProtocolError("expected a welcome");
      job_id_ = r.u64();
      if (static_cast<int>(r.u32()) != info_.world_size) throw ProtocolError("welcome for another world size");
      r.end();
    } catch (const ProtocolError& e) {
      throw Error(
          str_cat("iris bootstrap: unexpected answer from the bootstrap store at ", where_, " (", e.what(), ")"));
    }
  }

  // Between collectives (exchange_fds' connects and accepts) the store sends only to say the job failed: a
  // peer's abort, or a peer that died. Throws that failure when it has come (or the store is gone), so a rank
  // waiting for a peer's descriptor learns why it will never come instead of waiting out the timeout.
  void throw_if_store_spoke() {
    throw_if_failed();
    if (!detail::wait_fd(sock_.get(), POLLIN, Clock::now())) return;
    if (!store_frame(Clock::now() + milliseconds(1000))) fail_protocol("a partial message between collectives");
    fail_protocol("a message between collectives");  // store_frame has thrown an error frame's failure
  }

  // The store's next frame: its body, or nothing when `deadline` passed first. When the store is gone, sent
  // what is no frame, or sent an error frame (the job failed: a peer's abort, a peer that died, a timeout),
  // records that failure and throws it instead.
  std::optional<std::string> store_frame(Clock::time_point deadline) {
    std::string body;
    Io io = Io::kOk;
    try {
      io = recv_frame(sock_.get(), body, deadline);
    } catch (const ProtocolError& e) {
      fail_protocol(e.what());
    }
    if (io == Io::kTimeout) return std::nullopt;
    if (io == Io::kClosed) fail_and_throw(ErrKind::kRemote, store_lost());
    try {
      FrameReader r(body);
      if (static_cast<Msg>(r.u8()) == Msg::kError) {
        const auto kind = static_cast<ErrKind>(r.u8());
        fail_and_throw(kind, std::string(r.bytes()));
      }
    } catch (const ProtocolError& e) {
      fail_protocol(e.what());
    }
    return body;
  }

  void record_failure(ErrKind kind, const std::string& message) {
    std::lock_guard lock(fail_mu_);
    if (failed_) return;  // keep the first: it is the cause
    failed_ = true;
    fail_kind_ = kind;
    fail_message_ = message;
  }

  void throw_if_failed() {
    std::lock_guard lock(fail_mu_);
    if (failed_) throw_as(fail_kind_, fail_message_);
  }

  [[noreturn]] void fail_and_throw(ErrKind kind, const std::string& message) {
    record_failure(kind, message);
    throw_if_failed();
    std::abort();  // unreachable: a failure was just recorded
  }

  // A store that answered what this rank cannot read: its peers are told, as by abort(), rather than left to
  // wait for it in their next collective until the timeout.
  [[noreturn]] void fail_protocol(const std::string& what) {
    const std::string message =
        str_cat("iris bootstrap: unexpected answer from the bootstrap store at ", where_, " (", what, ")");
    record_failure(ErrKind::kError, message);
    try {
      tell_store(message);
    } catch (...) {
    }
    throw_if_failed();
    std::abort();  // unreachable: a failure was just recorded
  }

  // Sends the store an abort with `reason`, bounded: another thread of this rank may be in the middle of
  // sending a collective. Nothing is written after a send left a frame partly written: the abort's bytes
  // would be read as the rest of that frame.
  void tell_store(const std::string& reason) {
    std::unique_lock lock(write_mu_, std::defer_lock);
    if (sock_.valid() && lock_within(lock, milliseconds(1000)) && !sent_partly_)
      (void)send_all(sock_.get(), FrameWriter(Msg::kAbort).bytes(reason).finish(), Clock::now() + milliseconds(1000));
  }

  std::vector<std::string> collective(Kind kind, int root, std::string_view payload) {
    throw_if_failed();
    const uint64_t seq = ++seq_;
    const auto deadline = Clock::now() + timeout_ + grace();
    std::string request = FrameWriter(Msg::kCollective)
                              .u8(static_cast<uint8_t>(kind))
                              .u32(static_cast<uint32_t>(root))
                              .u64(seq)
                              .bytes(payload)
                              .finish();
    Io io;
    {
      std::lock_guard lock(write_mu_);
      io = send_all(sock_.get(), request, deadline);
      // A frame cut off by the deadline leaves the stream unreadable: nothing more is written to it (the store
      // would take the next frame's bytes for this one's rest, or for a whole request), and the store reads
      // the shutdown as this rank's end.
      if (io == Io::kTimeout) {
        sent_partly_ = true;
        ::shutdown(sock_.get(), SHUT_WR);
      }
    }
    if (io == Io::kTimeout)
      fail_and_throw(ErrKind::kTimeout, str_cat("iris bootstrap: timed out after ", format_seconds(timeout_ + grace()),
                                                " s in ", kind_name(kind), " #", seq,
                                                " sending to the bootstrap store at ", where_, " (hosted by rank 0)"));
    // On Io::kClosed the store may have said why before closing: read on, the error is first in line.
    const std::optional<std::string> body = store_frame(deadline);
    if (!body)
      fail_and_throw(
          ErrKind::kTimeout,
          str_cat("iris bootstrap: timed out after ", format_seconds(timeout_ + grace()), " s in ", kind_name(kind),
                  " #", seq, ": no answer from the bootstrap store at ", where_, " (hosted by rank 0)"));
    try {
      FrameReader r(*body);
      auto type = static_cast<Msg>(r.u8());
      if (type != Msg::kResult) throw ProtocolError(str_cat("unexpected message type ", int(type)));
      if (r.u64() != seq) throw ProtocolError("result for another collective");
      uint32_t n = r.u32();
      std::vector<std::string> out;
      out.reserve(n);
      for (uint32_t i = 0; i < n; ++i) out.emplace_back(r.bytes());
      r.end();
      return out;
    } catch (const ProtocolError& e) {
      fail_protocol(e.what());
    }
  }

  const LaunchInfo info_;
  const milliseconds timeout_;
  const std::string where_;
  std::unique_ptr<StoreServer> server_;  // rank 0 only; declared before sock_ so it is destroyed after
  UniqueFd sock_;
  uint64_t job_id_ = 0;
  uint64_t seq_ = 0;
  uint64_t exchanges_ = 0;
  std::mutex write_mu_;  // abort() may send while another thread is in a collective
  bool sent_partly_ = false;  // a send timed out partway through a frame (under write_mu_)

  std::mutex fail_mu_;
  bool failed_ = false;
  ErrKind fail_kind_ = ErrKind::kError;
  std::string fail_message_;
};

// ---- descriptor exchange ------------------------------------------------------------------------------

// Linux abstract socket address (leading NUL: no file on disk, gone when the socket closes).
std::pair<sockaddr_un, socklen_t> abstract_address(uint64_t job_id, uint64_t exchange, int rank) {
  char name[96];
  int len = std::snprintf(name, sizeof(name), "iris-%016llx-%llu-%d", static_cast<unsigned long long>(job_id),
                          static_cast<unsigned long long>(exchange), rank);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';
  std::memcpy(addr.sun_path + 1, name, static_cast<size_t>(len));
  return {addr, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len)};
}

std::vector<int> TcpBootstrap::exchange_fds(int fd) {
  throw_if_failed();
  const int world = info_.world_size, me = info_.rank;
  std::vector<int> out(world, -1);
  try {
    IRIS_CHECK_ARG(fd >= 0 && ::fcntl(fd, F_GETFD) >= 0, "iris bootstrap: exchange_fds: ", fd,
                   " is not an open file descriptor");
    IRIS_CHECK_ARG(info_.local_world_size == world,
                   "iris bootstrap: exchange_fds passes descriptors between the "
                   "processes of one host, but only ",
                   info_.local_world_size, " of the ", world, " ranks run on this host");
    if (world == 1) return out;
    const uint64_t exchange = ++exchanges_;  // in the name, so consecutive exchanges never meet

    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    IRIS_SYSCHECK(listener.get());
    auto [my_addr, my_len] = abstract_address(job_id_, exchange, me);
    IRIS_SYSCHECK(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&my_addr), my_len));
    // A backlog of `world` holds every peer's connection even before we accept, so all ranks can
    // send first and receive afterwards without waiting on each other.
    IRIS_SYSCHECK(::listen(listener.get(), world));
    barrier();  // every rank is listening from here on

    const auto deadline = Clock::now() + timeout_;
    auto timed_out = [&](const std::string& doing) {
      return TimeoutError(str_cat("iris bootstrap: timed out after ", format_seconds(timeout_), " s in exchange_fds #",
                                  exchange, " ", doing));
    };
    for (int step = 1; step < world; ++step) {
      const int peer = (me + step) % world;  // staggered so ranks do not all queue on rank 0 first
      auto [addr, len] = abstract_address(job_id_, exchange, peer);
      UniqueFd s;
      for (;;) {
        s.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        IRIS_SYSCHECK(s.get());
        if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) break;
        // EAGAIN: the peer's backlog is full for a moment. ECONNREFUSED/ENOENT: not listening (yet).
        if (errno != EAGAIN && errno != ECONNREFUSED && errno != ENOENT && errno != EINTR)
          detail::throw_sys_error(errno, "connect(<peer's abstract Unix socket>)", __FILE__, __LINE__);
        if (Clock::now() >= deadline) throw timed_out(str_cat("connecting to rank ", peer, "'s Unix socket"));
        throw_if_store_spoke();  // a peer that failed or died never listens
        std::this_thread::sleep_for(milliseconds(1));
      }
      if (!detail::send_fd(s.get(), fd, me, deadline)) throw timed_out(str_cat("sending a descriptor to rank ", peer));
    }

    // Processes of other users that connected (the first four, and how many), for the timeout's message.
    std::string strangers;
    int stranger_count = 0;
    for (int received = 0; received < world - 1;) {
      // In slices, listening to the store between them: a peer that failed or died never sends.
      throw_if_store_spoke();
      if (!detail::wait_fd(listener.get(), POLLIN, std::min(deadline, Clock::now() + milliseconds(20)))) {
        if (Clock::now() < deadline) continue;
        std::vector<int> missing;
        for (int q = 0; q < world; ++q)
          if (q != me && out[q] < 0) missing.push_back(q);
        throw timed_out(
            str_cat("waiting for descriptors from ", format_ranks(missing),
                    stranger_count == 0
                        ? std::string()
                        : str_cat(" (closed connections from other users' processes: ", strangers,
                                  stranger_count > 4 ? str_cat(" and ", stranger_count - 4, " more") : "", ")")));
      }
      UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!conn.valid()) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
        detail::throw_sys_error(errno, "accept4(<abstract Unix socket>)", __FILE__, __LINE__);
      }
      // An abstract socket has no permissions and its name shows in /proc/net/unix: any process of the host
      // may connect. A descriptor is taken from a process of this user only; another user's is never mapped
      // as a peer's heap (its connection is closed, and named if the exchange times out).
      ucred cred{};
      socklen_t cred_len = sizeof(cred);
      IRIS_SYSCHECK(::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_len));
      if (cred.uid != ::geteuid()) {
        const std::string who = str_cat("process ", cred.pid, " of user ", cred.uid);
        IRIS_LOG_WARN("bootstrap: exchange_fds #", exchange, ": closed a connection from ", who,
                      ": only processes of this rank's user (", ::geteuid(), ") may pass it descriptors");
        if (++stranger_count <= 4) strangers += (strangers.empty() ? "" : ", ") + who;
        continue;
      }
      auto got = detail::recv_fd(conn.get(), deadline);
      if (!got) throw timed_out("waiting for a connected peer to send its descriptor");
      UniqueFd received_fd(got->fd);
      int from = got->tag;
      if (from < 0 || from >= world || from == me || out[from] >= 0)
        throw Error(str_cat("iris bootstrap: exchange_fds #", exchange, " received a descriptor labelled rank ", from,
                            ", which is not an expected sender"));
      out[from] = received_fd.release();
      ++received;
    }
    return out;
  } catch (const std::exception& e) {
    for (int& f : out) {
      if (f >= 0) ::close(f);
      f = -1;
    }
    // The others are waiting on this rank: release them rather than let them time out.
    abort(str_cat("exchange_fds failed: ", e.what()));
    throw;
  }
}

}  // namespace

std::shared_ptr<Bootstrap> make_tcp_bootstrap(const LaunchInfo& info, std::chrono::milliseconds timeout) {
  IRIS_CHECK_ARG(info.world_size >= 1, "iris bootstrap: world size ", info.world_size, " must be at least 1");
  IRIS_CHECK_ARG(info.rank >= 0 && info.rank < info.world_size, "iris bootstrap: rank ", info.rank, " is outside [0, ",
                 info.world_size, ")");
  IRIS_CHECK_ARG(info.local_world_size >= 1 && info.local_world_size <= info.world_size,
                 "iris bootstrap: local world size ", info.local_world_size, " is outside [1, ", info.world_size, "]");
  IRIS_CHECK_ARG(info.local_rank >= 0 && info.local_rank < info.local_world_size, "iris bootstrap: local rank ",
                 info.local_rank, " is outside [0, ", info.local_world_size, ")");
  IRIS_CHECK_ARG(!info.master_addr.empty(), "iris bootstrap: the master address is empty");
  IRIS_CHECK_ARG(info.master_port >= 1 && info.master_port <= 65535, "iris bootstrap: master port ", info.master_port,
                 " is outside 1..65535");
  IRIS_CHECK_ARG(timeout.count() > 0, "iris bootstrap: timeout ", timeout.count(), " ms must be positive");
  IRIS_CHECK_ARG(timeout <= detail::kMaxBootstrapTimeout, "iris bootstrap: timeout ", timeout.count(),
                 " ms is beyond the ", detail::kMaxBootstrapTimeout.count(),
                 " ms (10^9 s) that deadlines can count to; pass at most that");
  return std::make_shared<TcpBootstrap>(info, timeout);
}

}  // namespace iris
