// Host tests of Context-level configuration: no GPU needed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "iris/context.hpp"
#include "iris/runtime/bootstrap.hpp"
#include "support/error_text.hpp"
#include "support/scoped_env.hpp"

namespace iris {
namespace {

using test::ScopedEnv;

TEST(HeapSize, ParsesPlainNumbersAndSuffixes) {
  EXPECT_EQ(parse_byte_size("1073741824"), size_t{1} << 30);
  EXPECT_EQ(parse_byte_size("64K"), size_t{64} << 10);
  EXPECT_EQ(parse_byte_size("512M"), size_t{512} << 20);
  EXPECT_EQ(parse_byte_size("2G"), size_t{2} << 30);
  EXPECT_EQ(parse_byte_size("3GiB"), size_t{3} << 30);
  EXPECT_EQ(parse_byte_size("1T"), size_t{1} << 40);
}

TEST(HeapSize, RejectsMalformedWithExactMessage) {
  for (const char* bad : {"", "G", "-1", "1.5G", "12Q", "0", "99999999999999999999"}) {
    try {
      parse_byte_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("Invalid byte size '") + bad +
                    "': expected a positive integer with an optional K, M, G or T suffix (powers of 1024), "
                    "e.g. 1073741824, 512M or 2G.");
    }
  }
}

TEST(HeapSize, ComesFromEnvironmentWithDefaultOneGiB) {
  {
    ScopedEnv env("IRIS_HEAP_SIZE", nullptr);
    EXPECT_EQ(heap_size_from_env(), size_t{1} << 30);
  }
  {
    ScopedEnv env("IRIS_HEAP_SIZE", "256M");
    EXPECT_EQ(heap_size_from_env(), size_t{256} << 20);
  }
  {
    ScopedEnv env("IRIS_HEAP_SIZE", "lots");
    try {
      heap_size_from_env();
      ADD_FAILURE() << "accepted IRIS_HEAP_SIZE=lots";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(),
                   "IRIS_HEAP_SIZE: Invalid byte size 'lots': expected a positive integer with an optional K, M, G or "
                   "T suffix (powers of 1024), e.g. 1073741824, 512M or 2G.");
    }
  }
}

// IRIS_HEAP_GUARDS is read before any device is touched: a bad value is named, GPU or not.
// IRIS_DEVICE_TIMEOUT in seconds, from a millisecond to 10^9 s: "inf", 1e300 and 1e-4 became 0 ms or wrapped,
// which the device took as its 10 s default (and device_timeout() reported as negative).
TEST(DeviceTimeout, EnvironmentTakesSecondsTheDeviceCanCount) {
  {
    ScopedEnv unset("IRIS_DEVICE_TIMEOUT", nullptr);
    EXPECT_EQ(device_timeout_from_env(), std::chrono::milliseconds(10000));
  }
  for (const auto& [text, ms] : {std::pair{"2.5", 2500}, std::pair{"0.001", 1}, std::pair{"30", 30000}}) {
    ScopedEnv set("IRIS_DEVICE_TIMEOUT", text);
    EXPECT_EQ(device_timeout_from_env(), std::chrono::milliseconds(ms)) << text;
  }
  {
    ScopedEnv set("IRIS_DEVICE_TIMEOUT", "1e9");
    EXPECT_EQ(device_timeout_from_env(), std::chrono::milliseconds(1'000'000'000'000));
  }
  for (const char* bad : {"inf", "nan", "1e300", "1e-4", "0", "-3", "10s", ""}) {
    if (*bad == '\0') continue;  // empty means unset
    ScopedEnv set("IRIS_DEVICE_TIMEOUT", bad);
    EXPECT_EQ(test::error_text<std::invalid_argument>([] { device_timeout_from_env(); }),
              std::string("Invalid IRIS_DEVICE_TIMEOUT='") + bad +
                  "': expected a number of seconds from 0.001 to 1000000000 (e.g. 10 or 2.5).");
  }
}

// Values the device or the heap cannot hold are refused by every rank before any CUDA call (here with no
// GPU at all): a heap above 2^48 bytes (which rounding up to the granularity could wrap to 0) and a device
// timeout above 10^9 s (whose nanoseconds would wrap).
TEST(ContextOptions, ValuesTheDeviceCannotHoldAreRefusedFirst) {
  ContextOptions heap;
  heap.heap_size = std::numeric_limits<size_t>::max();
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { Context(make_thread_bootstraps(1, std::chrono::seconds(10))[0], heap); }),
            "a symmetric heap of " + std::to_string(std::numeric_limits<size_t>::max()) +
                " bytes is more than a GPU can address (2^48); set IRIS_HEAP_SIZE or ContextOptions::heap_size to "
                "what the GPU holds.");
  ContextOptions timeout;
  timeout.device_timeout = std::chrono::milliseconds::max();
  EXPECT_EQ(test::error_text<std::invalid_argument>(
                [&] { Context(make_thread_bootstraps(1, std::chrono::seconds(10))[0], timeout); }),
            "ContextOptions::device_timeout of " + std::to_string(std::chrono::milliseconds::max().count()) +
                " ms is above 10^9 s, more than the device's clock counts to; pass at most that.");
}

TEST(HeapGuards, EnvironmentTakesOnlyZeroOrOne) {
  ScopedEnv env("IRIS_HEAP_GUARDS", "yes");
  auto bootstraps = make_thread_bootstraps(1, std::chrono::seconds(10));
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { Context ctx(bootstraps[0]); }),
            "Invalid IRIS_HEAP_GUARDS='yes': expected 0 or 1.");
}

// So is IRIS_CHECK_CALLS.
TEST(CheckCalls, EnvironmentTakesOnlyZeroOrOne) {
  ScopedEnv env("IRIS_CHECK_CALLS", "on");
  auto bootstraps = make_thread_bootstraps(1, std::chrono::seconds(10));
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { Context ctx(bootstraps[0]); }),
            "Invalid IRIS_CHECK_CALLS='on': expected 0 or 1.");
}

// The library says how its kernels were built (CMake option IRIS_DEVICE_CHECKS, passed to this test as built).
TEST(LibraryDeviceChecks, SayWhatTheBuildChose) {
  EXPECT_EQ(library_device_checks(), IRIS_TEST_LIBRARY_DEVICE_CHECKS != 0);
}

// So is IRIS_NVTX_HEAP (before 2026-12-07 "true", "yes" or "on" left it off without a word).
TEST(NvtxHeap, EnvironmentTakesOnlyZeroOrOne) {
  ScopedEnv env("IRIS_NVTX_HEAP", "true");
  auto bootstraps = make_thread_bootstraps(1, std::chrono::seconds(10));
  EXPECT_EQ(test::error_text<std::invalid_argument>([&] { Context ctx(bootstraps[0]); }),
            "Invalid IRIS_NVTX_HEAP='true': expected 0 or 1.");
}

TEST(RunThreads, RejectsMoreRanksThanGpusWithClearMessage) {
  int n = local_device_count();
  try {
    run_threads(n + 1, [](Context&) {});
    ADD_FAILURE() << "run_threads accepted more ranks than GPUs";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "run_threads needs " + std::to_string(n + 1) + " GPUs (one per rank) but " +
                                         std::to_string(n) + " CUDA device(s) are visible.");
  }
  EXPECT_THROW(run_threads(0, [](Context&) {}), std::invalid_argument);
}

TEST(CreateFromEnv, RejectsJobsSpanningHosts) {
  ScopedEnv a("RANK", "0"), b("WORLD_SIZE", "4"), c("LOCAL_RANK", "0"), d("LOCAL_WORLD_SIZE", "2"),
      e("MASTER_ADDR", "127.0.0.1"), f("MASTER_PORT", "29999");
  try {
    Context::create_from_env();
    ADD_FAILURE() << "accepted a multi-host job";
  } catch (const std::invalid_argument& err) {
    EXPECT_STREQ(err.what(),
                 "iris maps every rank's heap over NVLink, so all ranks must share one host: this job has 4 ranks "
                 "but 2 on this host (multi-node fabric handles are not implemented).");
  }
}

// One rank exchanges with nobody, so it hosts no store: before 2026-12-05 a second single-rank program on a
// host (another GPU's job, a batch script's) found MASTER_PORT (29500 by default) taken by the first and
// failed with "cannot host the bootstrap store on 127.0.0.1:29500: Address already in use". Here the port
// is taken by a listener of this test: the context is made (a GPU host) or fails for want of a device
// (no GPU), never for the port.
TEST(CreateFromEnv, OneRankTakesNoPort) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // a port the kernel picks, then read back
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ScopedEnv no_rank("RANK", nullptr), no_world("WORLD_SIZE", nullptr), no_mpi("OMPI_COMM_WORLD_RANK", nullptr),
      no_slurm("SLURM_PROCID", nullptr), no_iris_port("IRIS_MASTER_PORT", nullptr), taken("MASTER_PORT", port.c_str());
  ContextOptions options;
  options.heap_size = size_t{64} << 20;
  for (bool launched : {false, true}) {  // no launcher, then a launcher's job of one rank
    SCOPED_TRACE(launched ? "RANK=0 WORLD_SIZE=1" : "no launcher");
    ScopedEnv rank("RANK", launched ? "0" : nullptr), world("WORLD_SIZE", launched ? "1" : nullptr);
    try {
      std::unique_ptr<Context> ctx = Context::create_from_env(options);
      EXPECT_EQ(ctx->world_size(), 1);
      EXPECT_EQ(ctx->rank(), 0);
    } catch (const std::exception& e) {
      EXPECT_EQ(local_device_count(), 0) << "a GPU host failed to make a one-rank context: " << e.what();
      EXPECT_EQ(std::string(e.what()).find("bootstrap"), std::string::npos) << e.what();
    }
  }
  ::close(listener);
}

}  // namespace
}  // namespace iris
