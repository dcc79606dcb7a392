// The host's side of the device error record (src/runtime/device_error_record.hpp), on plain host memory
// with a host thread as the writer: what a kernel's record_device_error does (timeout.cuh) in the same
// order, claim `code`, the fields, then `written`.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/device_error_record.hpp"

namespace iris::detail {
namespace {

using namespace std::chrono_literals;

void fill_fields(DeviceErrorRecord& r, const char* op) {
  r.rank = 3;
  r.peer = 5;
  r.block = 7;
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

}  // namespace
}  // namespace iris::detail
