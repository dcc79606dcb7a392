// SCM_RIGHTS send and receive: the kernel duplicates the sender's descriptor into the receiver's
// descriptor table, so both refer to the same open file (a memfd, a pipe, a CUDA VMM handle).
#include "runtime/fd_passing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "iris/core/error.hpp"

namespace iris::detail {

bool send_fd(int sock, int fd, int32_t tag, Clock::time_point deadline) {
  char data[sizeof(tag)];
  std::memcpy(data, &tag, sizeof(tag));
  size_t sent = 0;
  // The descriptor rides on the first byte; if the kernel ever takes fewer than 4 bytes, the rest
  // follows as plain data.
  while (sent < sizeof(data)) {
    iovec iov{data + sent, sizeof(data) - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (sent == 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(sock, POLLOUT, deadline)) return false;
      continue;
    }
    IRIS_SYSCHECK(n);
  }
  return true;
}

std::optional<ReceivedFd> recv_fd(int sock, Clock::time_point deadline) {
  char data[sizeof(int32_t)];
  size_t got = 0;
  std::vector<int> fds;  // everything that arrived, so that nothing leaks on an error path
  auto close_all = [&] {
    for (int f : fds) ::close(f);
    fds.clear();
  };
  try {
    while (got < sizeof(data)) {
      iovec iov{data + got, sizeof(data) - got};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      // Room for a few descriptors: a misbehaving peer sending extras gets them closed, not leaked.
      alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!wait_fd(sock, POLLIN, deadline)) {
            close_all();
            return std::nullopt;
          }
          continue;
        }
        IRIS_SYSCHECK(n);
      }
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int f;
          std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.push_back(f);
        }
      }
      if ((msg.msg_flags & MSG_CTRUNC) && fds.empty())
        throw Error(
            "iris bootstrap: a peer's descriptor was dropped on arrival (MSG_CTRUNC): is this process at its limit of "
            "open files (ulimit -n)?");
      if (msg.msg_flags & MSG_CTRUNC) throw Error("iris bootstrap: a peer sent more descriptors than expected");
      if (n == 0) throw Error("iris bootstrap: a peer closed its Unix socket before sending its descriptor");
      got += static_cast<size_t>(n);
    }
    if (fds.size() != 1)
      throw Error(str_cat("iris bootstrap: expected one descriptor from a peer, received ", fds.size()));
  } catch (...) {
    close_all();
    throw;
  }
  ReceivedFd out;
  std::memcpy(&out.tag, data, sizeof(out.tag));
  out.fd = fds[0];
  return out;
}

}  // namespace iris::detail
