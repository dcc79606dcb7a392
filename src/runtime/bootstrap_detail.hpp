// Internal helpers shared by the bootstrap transports (threads, TCP store, fd passing).
// Not installed; only src/runtime/bootstrap*.cc, fd_passing.cc and the tests include it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace iris::detail {

using Clock = std::chrono::steady_clock;

// The longest bootstrap timeout, 10^9 s (IRIS_BOOTSTRAP_TIMEOUT's bound too): deadlines of now plus it
// stay far inside the clock's range (about 292 years of nanoseconds), where a larger one would overflow
// into the past and time out at once.
inline constexpr std::chrono::milliseconds kMaxBootstrapTimeout{1'000'000'000'000};

// "2.0", "1.5", "0.25", "0.001": seconds for error messages. Always at least one decimal so that
// "after 2.0 s" reads as a duration, never more digits than the millisecond value needs.
std::string format_seconds(std::chrono::milliseconds duration);

// A finite number of seconds spelled whole by `text` ("300", "2.5", "1e9"), or nothing (trailing characters,
// out of double's range, inf, nan): what the environment's timeouts are read with, each checking its range.
std::optional<double> parse_seconds(const char* text);

// "rank 3" or "ranks 1, 3" (in the order given).
std::string format_ranks(const std::vector<int>& ranks);

// Waits until `fd` reports one of `events` (or an error / hang-up, which the next read or write
// will surface) or until `deadline`. Returns false on timeout. Retries on EINTR with the time left.
bool wait_fd(int fd, short events, Clock::time_point deadline);

// True when the connected TCP socket `fd` has itself as its peer (same address and port at both ends).
bool connected_to_itself(int fd);

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace iris::detail
