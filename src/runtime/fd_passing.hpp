// Passing file descriptors between processes of one host over a connected Unix-domain stream
// socket (SCM_RIGHTS). Used by TcpBootstrap::exchange_fds to share CUDA VMM handles.
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/bootstrap_detail.hpp"

namespace iris::detail {

// Sends a duplicate of `fd` and a 4-byte `tag` (the sender's rank) over `sock` (non-blocking or
// blocking). Returns false if `deadline` passed first. Throws SysError on a failed call.
bool send_fd(int sock, int fd, int32_t tag, Clock::time_point deadline);

struct ReceivedFd {
  int32_t tag = -1;
  int fd = -1;  // close-on-exec, owned by the caller
};

// Receives one descriptor and its tag from `sock`. Returns nullopt if `deadline` passed first.
// Throws iris::Error if the peer closed or sent no (or more than one) descriptor, SysError on a
// failed call. Never leaks a descriptor it received.
std::optional<ReceivedFd> recv_fd(int sock, Clock::time_point deadline);

}  // namespace iris::detail
