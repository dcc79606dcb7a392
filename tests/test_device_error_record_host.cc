// The host's side of the device error record (src/runtime/device_error_record.hpp), on plain host memory
// with a host thread as the writer: what a kernel's record_device_error does (timeout.cuh) in the same
// order, claim `code`, the fields, then `written`. Then the exception each code raises (throw_device_error),
// its type and text checked without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "iris/core/error.hpp"
#include "iris/device/common.cuh"
#include "runtime/device_error_record.hpp"
#include "support/error_text.hpp"

namespace iris::detail {
namespace {

using namespace std::chrono_literals;

void fill_fields(DeviceErrorRecord& r, const char* op) {
  r.rank = 3;
  r.peer = 5;
  r.block = 7;
  r.values_signed = 1;
  r.address = 0x1000;
  r.observed = 11;
  r.expected = 12;
  r.elapsed_ns = 13;
  std::strncpy(r.op, op, DeviceErrorRecord::kOpNameSize - 1);
}

void expect_cleared(const DeviceErrorRecord& r) {
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.written, 0);
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.peer, 0);
  EXPECT_EQ(r.block, 0);
  EXPECT_EQ(r.values_signed, 0);
  EXPECT_EQ(r.address, 0u);
  EXPECT_EQ(r.observed, 0u);
  EXPECT_EQ(r.expected, 0u);
  EXPECT_EQ(r.elapsed_ns, 0u);
  for (char c : r.op) EXPECT_EQ(c, '\0');
}

TEST(DeviceErrorRecordHost, NoneRecordedTakesNothingAndLeavesTheOutputAlone) {
  DeviceErrorRecord rec{}, out{};
  bool abandoned = false;
  out.rank = 42;
  EXPECT_FALSE(take_device_error(rec, out, abandoned));
  EXPECT_EQ(out.rank, 42);
}

TEST(DeviceErrorRecordHost, AFinishedRecordIsCopiedAndClearedWithItsCodeLast) {
  DeviceErrorRecord rec{}, out{};
  bool abandoned = false;
  rec.code = 1;
  fill_fields(rec, "all_reduce");
  rec.written = 1;
  ASSERT_TRUE(take_device_error(rec, out, abandoned));
  EXPECT_EQ(out.code, 1);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.peer, 5);
  EXPECT_EQ(out.block, 7);
  EXPECT_EQ(out.values_signed, 1);
  EXPECT_EQ(out.address, 0x1000u);
  EXPECT_EQ(out.observed, 11u);
  EXPECT_EQ(out.expected, 12u);
  EXPECT_EQ(out.elapsed_ns, 13u);
  EXPECT_STREQ(out.op, "all_reduce");
  expect_cleared(rec);
  EXPECT_FALSE(take_device_error(rec, out, abandoned)) << "taken once";
}

// The writer has claimed the record (code set) but not yet written its fields when the host looks: the host
// waits for them. (Before 2026-12-06 it copied at once and raised with rank 0, block 0 and no op name.)
TEST(DeviceErrorRecordHost, AClaimedRecordIsReadOnlyOnceItsWriterHasWrittenIt) {
  DeviceErrorRecord rec{}, out{};
  bool abandoned = false;
  std::atomic_ref<int32_t>(rec.code).store(2, std::memory_order_relaxed);
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    fill_fields(rec, "fused op matmul_all_reduce");
    std::atomic_ref<int32_t>(rec.written).store(1, std::memory_order_release);
  });
  const bool taken = take_device_error(rec, out, abandoned, 10s);
  writer.join();
  ASSERT_TRUE(taken);
  EXPECT_EQ(out.code, 2);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.observed, 11u);
  EXPECT_STREQ(out.op, "fused op matmul_all_reduce");
  expect_cleared(rec);
}

// A writer that has not finished after the wait (stalled, or its kernel was killed between its claim and its
// fields): the host reports the record as it is, saying so in the op name, and leaves the claim in place, so
// that the writer's late stores cannot mix into the next failure's record. Later takes report it again until the
// writer has finished; the one after clears the record silently, and the next failure is taken whole.
TEST(DeviceErrorRecordHost, ARecordLeftUnfinishedIsReportedUntilItsWriterFinishesAndThenCleared) {
  DeviceErrorRecord rec{}, out{};
  bool abandoned = false;
  rec.code = 1;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(take_device_error(rec, out, abandoned, 50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_EQ(out.code, 1);
  EXPECT_EQ(out.written, 0);
  EXPECT_EQ(std::string(out.op), "a kernel whose record was left unfinished");
  EXPECT_TRUE(abandoned);
  EXPECT_EQ(rec.code, 1) << "the claim stays while its writer may still store";

  // While its writer has not finished, every bounded wait gives up with no record of its own: reported again.
  ASSERT_TRUE(take_device_error(rec, out, abandoned, 50ms)) << "an unfinished claim is not passed over";
  EXPECT_EQ(out.code, 1);
  EXPECT_EQ(std::string(out.op), "a kernel whose record is still unfinished");
  EXPECT_TRUE(abandoned);
  EXPECT_EQ(rec.code, 1);
  fill_fields(rec, "late writer");  // the stalled writer finishes
  std::atomic_ref<int32_t>(rec.written).store(1, std::memory_order_release);
  EXPECT_FALSE(take_device_error(rec, out, abandoned, 50ms)) << "its late record is not reported again";
  EXPECT_FALSE(abandoned);
  expect_cleared(rec);

  rec.code = 2;  // the next failure
  fill_fields(rec, "next");
  rec.written = 1;
  ASSERT_TRUE(take_device_error(rec, out, abandoned));
  EXPECT_EQ(out.code, 2);
  EXPECT_STREQ(out.op, "next");
  expect_cleared(rec);
}

// A record as a kernel leaves it: rank 3's wait of block 7 on a word of rank 5, 250 ms.
DeviceErrorRecord recorded(int32_t code, uint64_t observed, uint64_t expected, bool values_signed = false) {
  DeviceErrorRecord r{};
  r.code = code;
  r.written = 1;
  r.rank = 3;
  r.peer = 5;
  r.block = 7;
  r.values_signed = values_signed ? 1 : 0;
  r.address = 0xabc0;
  r.observed = observed;
  r.expected = expected;
  r.elapsed_ns = 250'000'000;
  std::strncpy(r.op, "all_reduce", DeviceErrorRecord::kOpNameSize - 1);
  return r;
}

std::string timeout_text(const DeviceErrorRecord& r) {
  return test::error_text<TimeoutError>([&] { throw_device_error(r); });
}
std::string invalid_text(const DeviceErrorRecord& r) {
  return test::error_text<InvalidArgument>([&] { throw_device_error(r); });
}

TEST(DeviceErrorRecordHost, AWaitThatGaveUpIsATimeoutNamingTheWordItsOwnerAndBothValues) {
  EXPECT_EQ(timeout_text(recorded(device::kDeviceErrorTimeout, 11, 12)),
            "iris device timeout in all_reduce on rank 3 (block 7): waited 250 ms for the word at 0xabc0 owned by "
            "rank 5; last value 11, waiting for 12. A peer never signalled: check that every rank launched the same "
            "ops, in the same order on each workspace (IRIS_CHECK_CALLS=1 compares every iris call across ranks "
            "before its launch and names the first that differs).");
  DeviceErrorRecord unowned = recorded(device::kDeviceErrorTimeout, 0, ~uint64_t{0});
  unowned.peer = -1;  // a word outside the heaps
  EXPECT_NE(timeout_text(unowned).find("waited 250 ms for the word at 0xabc0; last value 0, waiting for "
                                       "18446744073709551615. "),
            std::string::npos)
      << timeout_text(unowned);
}

// A collective's wait that gave up while every peer was in the same call, with the same key (timeout.cuh,
// record_wait_timeout): the calls agree, so the message says so and names what keeps a block from running, not
// "check that every rank launched the same ops" (2026-12-07: three ranks sharing one GPU under MPS, a checked
// library build, all_gather's last blocks never got an SM, and the message sent the reader to the calls).
TEST(DeviceErrorRecordHost, AWaitThatGaveUpWithEveryPeerInTheCallSaysTheCallsAgree) {
  EXPECT_EQ(timeout_text(recorded(device::kDeviceErrorPeersInCall, 13, 15)),
            "iris device timeout in all_reduce on rank 3 (block 7): waited 250 ms for the word at 0xabc0 owned by "
            "rank 5; last value 13, waiting for 15. Every peer had started this call on the workspace, with this "
            "call's key, and none had given up: the ranks' calls agree, but a block of the call, on this rank or a "
            "peer, never reached the signal this wait needs. The usual cause is a block that got no SM: iris's "
            "communication kernels need every block of every rank's grid running at once, and a kernel that never "
            "ends holding SMs beside them, or ranks sharing one GPU (under MPS the ranks' shares of the SMs "
            "overlap), can keep some of them from starting. This rank's output of that call is not valid.");
}

// A signed flag's values are sign-extended by the kernel (signal.cuh, as_u64) and printed signed: before
// 2026-12-07 a wait of an int32 flag for -1 read "waiting for 4294967295", an int64's "18446744073709551615".
TEST(DeviceErrorRecordHost, ASignedFlagsValuesArePrintedSigned) {
  const auto minus = [](int64_t v) { return static_cast<uint64_t>(v); };
  EXPECT_NE(timeout_text(recorded(device::kDeviceErrorTimeout, 0, minus(-1), true))
                .find("; last value 0, waiting "
                      "for -1. "),
            std::string::npos);
  EXPECT_NE(timeout_text(recorded(device::kDeviceErrorTimeout, minus(-5), 3, true))
                .find("; last value -5, waiting "
                      "for 3. "),
            std::string::npos);
  EXPECT_NE(timeout_text(recorded(device::kDeviceErrorTimeout, minus(INT64_MIN), minus(INT64_MAX), true))
                .find("; last value -9223372036854775808, waiting for 9223372036854775807. "),
            std::string::npos);
}

// Each code, the exception it raises and the words that say what happened, here without a GPU; the GPU tests
// (test_ccl_*, test_fused_gpu.cu, test_device_timeout.cu) provoke them from kernels.
TEST(DeviceErrorRecordHost, EachCodeRaisesItsOwnExceptionAndMessage) {
  const std::string differ_advice =
      " Every rank must make the same calls on a workspace, in the same order; IRIS_CHECK_CALLS=1 names the "
      "difference before launch. Call the preamble again on every rank before using the workspace.";
  std::string m = invalid_text(recorded(device::kDeviceErrorCallMismatch, 0xab, 0xcd));
  EXPECT_EQ(m.rfind("iris device error in all_reduce on rank 3: rank 5 made another call on this workspace (its call "
                    "lays out the data as ab, this rank's as cd), so the ranks' calls differ",
                    0),
            0u)
      << m;
  EXPECT_TRUE(m.ends_with("The kernel ended before it touched its peers' data." + differ_advice)) << m;

  m = invalid_text(recorded(device::kDeviceErrorCallMismatchLate, 0xab, 0xcd));
  EXPECT_NE(m.find("rank 5 made another call on this workspace (its call key is ab, this rank's cd; "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("This rank's output of that call is not valid"), std::string::npos) << m;
  EXPECT_TRUE(m.ends_with(differ_advice)) << m;

  m = invalid_text(recorded(device::kDeviceErrorCallTagMismatch, 0x12, 0x34));
  EXPECT_NE(m.find("(the flag it set for this call carries the tag 12 of its call's key, this rank's call has 34)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the exchange stopped before it read rank 5's data there"), std::string::npos) << m;
  DeviceErrorRecord fused = recorded(device::kDeviceErrorCallTagMismatch, 0x12, 0x34);
  std::strncpy(fused.op, "fused op matmul_all_reduce", DeviceErrorRecord::kOpNameSize - 1);
  m = invalid_text(fused);
  EXPECT_NE(m.find("its copies by the copy engine (FusedConfig::copy_engine) ran"), std::string::npos) << m;

  m = timeout_text(recorded(device::kDeviceErrorCallDiffers, 0xab, 0xcd));
  EXPECT_EQ(m.rfind("iris device timeout in all_reduce on rank 3 (block 7): waited 250 ms for the word at 0xabc0, and "
                    "rank 5 is in another call on this workspace: the same call by count, but its call key is ab and "
                    "this rank's cd",
                    0),
            0u)
      << m;

  m = invalid_text(recorded(device::kDeviceErrorCallStopped, 4, 6));
  EXPECT_EQ(m.rfind("iris device error in all_reduce on rank 3: call 6 on its workspace did not run, because call 4 "
                    "there failed on this rank",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("they wrote nothing, on this rank or a peer"), std::string::npos) << m;

  m = invalid_text(recorded(device::kDeviceErrorMisuse, static_cast<uint64_t>(-2), 4, true));
  EXPECT_EQ(m.rfind("iris device error in all_reduce on rank 3 (block 7): got -2, which must be in [0, 4). ", 0), 0u)
      << m;

  m = timeout_text(recorded(device::kDeviceErrorPeerNotInCall, 0, 9));
  EXPECT_NE(m.find("waited 250 ms for the word at 0xabc0, and rank 5 has not started this call: this rank is in call 9 "
                   "on this workspace, and the latest call rank 5 started there is none "),
            std::string::npos)
      << m;
  m = timeout_text(recorded(device::kDeviceErrorPeerNotInCall, 8, 9));
  EXPECT_NE(m.find("the latest call rank 5 started there is call 8 "), std::string::npos) << m;

  m = timeout_text(recorded(device::kDeviceErrorPeerStopped, 7, 9));
  EXPECT_NE(m.find("and rank 5 stopped its calls on this workspace at its call 7, where a wait of its own gave up "
                   "(this rank is in call 9)"),
            std::string::npos)
      << m;
}

// IRIS_DEVICE_CHECKS (memory.cuh): a translation that failed its check, each reason in its words. The GPU test
// (test_device_checks.cu) provokes each from a kernel.
TEST(DeviceErrorRecordHost, ATranslationThatFailedItsCheckSaysWhatIsWrongAndThatTheContextIsLost) {
  const auto bad = [](int64_t to, int owner, uint64_t bytes) {
    DeviceErrorRecord r = recorded(device::kDeviceErrorBadTranslate, static_cast<uint64_t>(to), 4, true);
    std::strncpy(r.op, "translate", DeviceErrorRecord::kOpNameSize - 1);
    r.peer = owner;
    r.elapsed_ns = bytes;
    return invalid_text(r);
  };
  const std::string lost =
      ". IRIS_DEVICE_CHECKS stopped the kernel there with a trap, before the access: this process's CUDA context is "
      "unusable now (every later CUDA call fails), so the process must end; its peers' waits for it time out.";
  EXPECT_EQ(bad(4, 3, 8),
            "iris device error in translate on rank 3 (block 7, to rank 4): rank 4 is not one of the 4 "
            "ranks [0, 4)" +
                lost);
  EXPECT_EQ(bad(-1, 3, 8),
            "iris device error in translate on rank 3 (block 7, to rank -1): rank -1 is not one of the "
            "4 ranks [0, 4)" +
                lost);
  EXPECT_EQ(bad(1, -1, 8),
            "iris device error in translate on rank 3 (block 7, to rank 1): the pointer 0xabc0 is outside the "
            "symmetric heap: a form that takes a rank takes a pointer into this rank's heap (an allocation of its "
            "Context, or inside one), not cudaMalloc memory or a stack or __shared__ address" +
                lost);
  EXPECT_EQ(bad(1, 2, 8),
            "iris device error in translate on rank 3 (block 7, to rank 1): the pointer 0xabc0 is in rank 2's heap, "
            "not this rank's: it was translated already (pass this rank's pointer with a rank, or a translated one "
            "to a form without a rank)" +
                lost);
  EXPECT_EQ(bad(1, 3, 4096),
            "iris device error in translate on rank 3 (block 7, to rank 1): the 4096 bytes from "
            "0xabc0 run past the end of this rank's heap" +
                lost);
}

}  // namespace
}  // namespace iris::detail
