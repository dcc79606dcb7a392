// The host's side of the device error record (iris/device/device_context.hpp): taking a failure a kernel
// recorded, and clearing the record for the next one, while kernels that may record may still run; raising
// it as the exception its code calls for.
#pragma once

#include <chrono>

#include "iris/device/device_context.hpp"

namespace iris::detail {

// Copies the failure recorded in `record` into `out` and clears the record; false (and `out` untouched)
// when none is recorded. A writer claims `code` first and sets `written` after the other fields (timeout.cuh,
// record_device_error), so a record whose code is set is read once `written` is, waiting up to
// `writer_wait` for it (the writer's stores follow its claim at once). The record is then cleared field by
// field and `code` last, so that the next writer's claim finds the other fields cleared and nothing clears
// what it writes. A writer that has not finished by then (stalled, or its kernel killed) is reported with
// the fields as they are and an op name that says so, and its claim is left in place, `abandoned` set: a
// later take reports it again while that writer has not finished (every bounded wait gives up meanwhile,
// with no record of its own) and clears it, silently, once it has, so that its late stores cannot mix into
// the next writer's record (a reviewer's finding). `abandoned` is the reader's own state, false at first.
// (Before 2026-12-06 the host copied the record without waiting for the writer and cleared it with one
// memset from `code` on: a caller that took it while a kernel was recording could read fields not yet
// written, and a second failure claimed in the middle of the memset lost its fields.)
bool take_device_error(DeviceErrorRecord& record, DeviceErrorRecord& out, bool& abandoned,
                       std::chrono::milliseconds writer_wait = std::chrono::milliseconds(1000));

// Raises the failure a record describes (taken by take_device_error), as the exception its code calls for:
// TimeoutError for a wait that gave up (whatever it then found in the peers' call words), InvalidArgument
// for calls that differ across ranks, a misuse, or a call that a stopped workspace skipped. Each message
// names the op, the rank, and what to fix. Context::check_device_error's; host code of its own, so that
// every code's message is tested without a GPU.
[[noreturn]] void throw_device_error(const DeviceErrorRecord& record);

}  // namespace iris::detail
