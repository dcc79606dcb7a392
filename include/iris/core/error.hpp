// iris error family.
//
//   iris::Error            base of everything iris throws that is not a bad argument
//   ├─ iris::CudaError     a CUDA runtime call failed   (call text, file:line, error name and string)
//   ├─ iris::CuError       a CUDA driver call failed    (same)
//   ├─ iris::SysError      a POSIX call failed          (call text, file:line, errno text)
//   ├─ iris::TimeoutError  a bounded wait expired (host bootstrap or a device-side spin)
//   ├─ iris::RemoteError   another rank failed; this rank was released instead of left blocked
//   └─ iris::HeapCorruption a heap guard was overwritten (IRIS_HEAP_GUARDS=1: a write past a heap object)
//   iris::InvalidArgument  (a std::invalid_argument) bad shapes, sizes, configs, workspaces
//
// Library code never calls exit(); every failure reaches the caller as one of these.
#pragma once

#include <stdexcept>
#include <string>

namespace iris {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CudaError : public Error {
 public:
  CudaError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

class CuError : public Error {
 public:
  CuError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

class SysError : public Error {
 public:
  SysError(const std::string& what, int err) : Error(what), errno_(err) {}
  int error_number() const noexcept { return errno_; }

 private:
  int errno_;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

class RemoteError : public Error {
 public:
  using Error::Error;
};

class HeapCorruption : public Error {
 public:
  using Error::Error;
};

class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A workspace holds less than a call needs: a collective's or fused op's heap arrays (the "Lock array
// too small: ..." family), or the GEMM core's split-K memory. Running the op's preamble with the call's
// arguments (or a fresh workspace) is the fix; every other InvalidArgument is about the arguments.
class WorkspaceTooSmall : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// The lock or flag array of a workspace holds fewer entries than a call's tiling needs: the
// "Lock array too small: ..." and "Flags array too small: ..." refusals, whose text DESIGN.md fixes. A fused
// op's band pipeline raises it as it is; an array of its GEMM or unfused collective, named after the op and its
// preamble around that text (ops/fused.cc, refusals_of).
class SyncArrayTooSmall : public WorkspaceTooSmall {
 public:
  using WorkspaceTooSmall::WorkspaceTooSmall;
};

namespace detail {
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cu_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_sys_error(int err, const char* call, const char* file, int line);
// Joins its arguments with operator<< into one string (for error messages).
template <typename... Args>
std::string str_cat(const Args&... args);
}  // namespace detail

}  // namespace iris

#include <sstream>

template <typename... Args>
std::string iris::detail::str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Throw iris::InvalidArgument with a message built from the arguments when cond is false.
#define IRIS_CHECK_ARG(cond, ...)                                          \
  do {                                                                     \
    if (!(cond)) throw ::iris::InvalidArgument(::iris::detail::str_cat(__VA_ARGS__)); \
  } while (0)

// Throw iris::Error (an internal invariant broke: a bug in iris, not in the caller).
#define IRIS_ASSERT(cond, ...)                                                                      \
  do {                                                                                              \
    if (!(cond))                                                                                    \
      throw ::iris::Error(::iris::detail::str_cat("iris internal error at ", __FILE__, ":", __LINE__, \
                                                  ": ", #cond, " failed. ", ##__VA_ARGS__));       \
  } while (0)

#define IRIS_SYSCHECK(expr)                                                          \
  do {                                                                               \
    if ((expr) < 0) ::iris::detail::throw_sys_error(errno, #expr, __FILE__, __LINE__); \
  } while (0)
