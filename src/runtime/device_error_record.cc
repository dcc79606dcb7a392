// The host's side of the device error record (device_error_record.hpp).
#include "runtime/device_error_record.hpp"

#include <atomic>
#include <cstring>
#include <thread>

namespace iris::detail {

namespace {
void clear(DeviceErrorRecord& record) {
  volatile DeviceErrorRecord& r = record;
  std::atomic_ref<int32_t>(record.written).store(0, std::memory_order_relaxed);
  r.rank = 0;
  r.peer = 0;
  r.block = 0;
  r.address = 0;
  r.observed = 0;
  r.expected = 0;
  r.elapsed_ns = 0;
  for (int i = 0; i < DeviceErrorRecord::kOpNameSize; ++i) r.op[i] = '\0';
  std::atomic_ref<int32_t>(record.code).store(0, std::memory_order_release);  // last: a claim from here on finds
                                                                              // the fields cleared
}
}  // namespace

bool take_device_error(DeviceErrorRecord& record, DeviceErrorRecord& out, bool& abandoned,
                       std::chrono::milliseconds writer_wait) {
  std::atomic_ref<int32_t> code(record.code), written(record.written);
  if (code.load(std::memory_order_acquire) == 0) {
    abandoned = false;
    return false;
  }
  if (abandoned) {  // reported already: cleared once its writer has finished, and then not reported again
    if (written.load(std::memory_order_acquire) != 0) {
      clear(record);
      abandoned = false;
      return false;
    }
    // Still claimed by a writer that has not finished: every bounded wait gives up meanwhile, with no record
    // of its own, so the failure is reported again rather than nothing.
    out = DeviceErrorRecord{};
    out.code = code.load(std::memory_order_relaxed);
    std::strncpy(out.op, "a kernel whose record is still unfinished", DeviceErrorRecord::kOpNameSize - 1);
    return true;
  }
  const auto give_up = std::chrono::steady_clock::now() + writer_wait;
  bool complete = written.load(std::memory_order_acquire) != 0;
  while (!complete && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
    complete = written.load(std::memory_order_acquire) != 0;
  }
  // The fields, read through volatile: device stores to this mapped memory the compiler cannot see.
  const volatile DeviceErrorRecord& rec = record;
  out.code = code.load(std::memory_order_relaxed);
  out.written = complete ? 1 : 0;
  out.rank = rec.rank;
  out.peer = rec.peer;
  out.block = rec.block;
  out.address = rec.address;
  out.observed = rec.observed;
  out.expected = rec.expected;
  out.elapsed_ns = rec.elapsed_ns;
  for (int i = 0; i < DeviceErrorRecord::kOpNameSize; ++i) out.op[i] = rec.op[i];
  out.op[DeviceErrorRecord::kOpNameSize - 1] = '\0';
  if (!complete) {
    std::strncpy(out.op, "a kernel whose record was left unfinished", DeviceErrorRecord::kOpNameSize - 1);
    abandoned = true;
    return true;
  }
  clear(record);
  return true;
}

}  // namespace iris::detail
