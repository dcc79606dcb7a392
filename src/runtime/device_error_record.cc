// The host's side of the device error record (device_error_record.hpp).
#include "runtime/device_error_record.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "iris/core/error.hpp"
#include "iris/device/common.cuh"

namespace iris::detail {

namespace {
void clear(DeviceErrorRecord& record) {
  volatile DeviceErrorRecord& r = record;
  std::atomic_ref<int32_t>(record.written).store(0, std::memory_order_relaxed);
  r.rank = 0;
  r.peer = 0;
  r.block = 0;
  r.values_signed = 0;
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
  out.values_signed = rec.values_signed;
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

void throw_device_error(const DeviceErrorRecord& copy) {
  // Every message of calls that differ ends the same way.
  const char* const differ_advice =
      " Every rank must make the same calls on a workspace, in the same order; IRIS_CHECK_CALLS=1 names the "
      "difference before launch. Call the preamble again on every rank before using the workspace.";
  char theirs[32], ours[32];
  std::snprintf(theirs, sizeof(theirs), "%llx", static_cast<unsigned long long>(copy.observed));
  std::snprintf(ours, sizeof(ours), "%llx", static_cast<unsigned long long>(copy.expected));
  // Two places compare the ranks' calls before any wait could give up: a fence, layouts before any data
  // moves; an LL exchange, call keys beside its data. The calls' arguments differ: InvalidArgument.
  if (copy.code == device::kDeviceErrorCallMismatch || copy.code == device::kDeviceErrorCallMismatchLate) {
    const std::string what =
        copy.code == device::kDeviceErrorCallMismatch
            ? detail::str_cat(
                  " made another call on this workspace (its call lays out the data as ", theirs, ", this rank's as ",
                  ours,
                  "), so the ranks' calls differ in shape, dtype, reduction, variant or config. The kernel ended "
                  "before it touched its peers' data.")
            : detail::str_cat(
                  " made another call on this workspace (its call key is ", theirs, ", this rank's ", ours,
                  "; hex digits from the top: exchange, dtype, reduction and a 0 (broadcast: two of the root), then 12 "
                  "of elements per "
                  "block), so the ranks' calls differ in shape, dtype, reduction or root. This rank's output "
                  "of that call is not valid: the exchange found the difference beside the data, which "
                  "it may have combined already.");
    throw InvalidArgument(detail::str_cat("iris device error in ", copy.op, " on rank ", copy.rank, ": rank ",
                                          copy.peer, what, differ_advice));
  }
  // A chunked exchange's flag, set by the peer for this call, carries a tag of another call's key.
  if (copy.code == device::kDeviceErrorCallTagMismatch)
    throw InvalidArgument(detail::str_cat(
        "iris device error in ", copy.op, " on rank ", copy.rank, ": rank ", copy.peer,
        " made another call on this workspace (the flag it set for this call carries the tag ", theirs,
        " of its call's key, this rank's call has ", ours,
        "), so the ranks' calls differ in shape, dtype, reduction, root, bias or config. ",
        std::string_view(copy.op).starts_with("fused op")
            ? detail::str_cat("The outputs of that call are not valid on any rank: its later kernels returned at "
                              "once, as after a timeout, but its copies by the copy engine (FusedConfig::copy_engine) "
                              "ran, into its peers' staging and, for the ops that write there, their C.")
            : detail::str_cat("This rank's output of that call is not valid: the exchange stopped before it read "
                              "rank ",
                              copy.peer, "'s data there, but may have written other parts of it."),
        differ_advice));
  char addr[32];
  std::snprintf(addr, sizeof(addr), "0x%llx", static_cast<unsigned long long>(copy.address));
  // A signed flag's values were sign-extended: -1, not 18446744073709551615.
  auto value = [&copy](uint64_t v) {
    return copy.values_signed != 0 ? std::to_string(static_cast<long long>(v))
                                   : std::to_string(static_cast<unsigned long long>(v));
  };
  const std::string seen = value(copy.observed), want = value(copy.expected);
  // A wait that gave up, and then found in the call words why. A wait past its bound is a TimeoutError
  // whatever it finds (DESIGN.md), so that code catching timeouts to recover from a hang catches these too.
  const std::string waited =
      detail::str_cat("iris device timeout in ", copy.op, " on rank ", copy.rank, " (block ", copy.block, "): waited ",
                      copy.elapsed_ns / 1000000, " ms for the word at ", addr);
  if (copy.code == device::kDeviceErrorCallDiffers)
    throw TimeoutError(detail::str_cat(
        waited, ", and rank ", copy.peer,
        " is in another call on this workspace: the same call by count, but its call key is ", theirs,
        " and this rank's ", ours,
        " (hashes of the op, shapes, dtype, variant and config), so the ranks' calls differ in a way their kernels "
        "could not see (one rank's exchange took the LL protocol and the other's did not, say). This rank's output "
        "of that call is not valid.",
        differ_advice));
  // A call that a stopped workspace skipped (ccl_common.cuh, begin_call), recorded only when no other error was
  // pending: after the host raised the one that stopped it.
  if (copy.code == device::kDeviceErrorCallStopped)
    throw InvalidArgument(detail::str_cat(
        "iris device error in ", copy.op, " on rank ", copy.rank, ": call ", copy.expected,
        " on its workspace did not run, because call ", copy.observed,
        " there failed on this rank (the error raised for it says why) and a workspace stops at its first failed "
        "call until its preamble runs again on every rank. ",
        std::string_view(copy.op).starts_with("fused op")
            ? "The op's kernels returned at once, but its copies by the copy engine ran. "
            : "Its kernels returned at once: they wrote nothing, on this rank or a peer. ",
        "Calls replayed by a CUDA graph captured before that failure skip so too: call the preamble again on every "
        "rank, then replay."));
  // IRIS_DEVICE_CHECKS (memory.cuh): a translation with a rank out of range, or a pointer not in this rank's heap.
  if (copy.code == device::kDeviceErrorBadTranslate) {
    const auto to = static_cast<int64_t>(copy.observed);
    const auto world = static_cast<int64_t>(copy.expected);
    std::string why;
    if (to < 0 || to >= world)
      why = detail::str_cat("rank ", to, " is not one of the ", world, " ranks [0, ", world, ")");
    else if (copy.peer < 0)
      why = detail::str_cat("the pointer ", addr,
                            " is outside the symmetric heap: a form that takes a rank takes a pointer into this "
                            "rank's heap (an allocation of its Context, or inside one), not cudaMalloc memory or a "
                            "stack or __shared__ address");
    else if (copy.peer != copy.rank)
      why = detail::str_cat("the pointer ", addr, " is in rank ", copy.peer,
                            "'s heap, not this rank's: it was translated already (pass this rank's pointer with a "
                            "rank, or a translated one to a form without a rank)");
    else
      why = detail::str_cat("the ", copy.elapsed_ns, " bytes from ", addr, " run past the end of this rank's heap");
    throw InvalidArgument(detail::str_cat(
        "iris device error in ", copy.op, " on rank ", copy.rank, " (block ", copy.block, ", to rank ", to, "): ", why,
        ". IRIS_DEVICE_CHECKS stopped the kernel there with a trap, before the access: this process's CUDA context "
        "is unusable now (every later CUDA call fails), so the process must end; its peers' waits for it time "
        "out."));
  }
  if (copy.code == device::kDeviceErrorMisuse)
    throw InvalidArgument(detail::str_cat("iris device error in ", copy.op, " on rank ", copy.rank, " (block ",
                                          copy.block, "): got ", static_cast<int64_t>(copy.observed),
                                          ", which must be in [0, ", copy.expected,
                                          "). The kernel gave up there, and so did every bounded wait of this "
                                          "rank's kernels running at the time."));
  if (copy.code == device::kDeviceErrorPeerNotInCall)
    throw TimeoutError(detail::str_cat(
        waited, ", and rank ", copy.peer, " has not started this call: this rank is in call ", copy.expected,
        " on this workspace, and the latest call "
        "rank ",
        copy.peer, " started there is ",
        copy.observed == 0 ? std::string("none") : detail::str_cat("call ", copy.observed),
        " (counted since the workspace's arrays were zeroed). Rank ", copy.peer,
        " made fewer calls on this workspace (a call without elements launches nothing: it must be so on every "
        "rank), or has not reached this one (it waits for another stream, another rank or its host). "
        "IRIS_CHECK_CALLS=1 compares every iris call across ranks before its launch and names the first that "
        "differs."));
  if (copy.code == device::kDeviceErrorPeerStopped)
    throw TimeoutError(detail::str_cat(
        waited, ", and rank ", copy.peer, " stopped its calls on this workspace at its call ", copy.observed,
        ", where a wait of its own gave up (this rank is in call ", copy.expected,
        "): a workspace stops at its first failed call, and its later calls there return at once, until its "
        "preamble runs again on every rank. The error rank ",
        copy.peer,
        " raises for that call says why. This rank's output of that call is not valid. Call the preamble again on "
        "every rank before using the workspace."));
  // A wait that gave up with no peer to blame: the word, its owner and both values, then why it may have happened.
  const std::string word =
      detail::str_cat(waited, copy.peer >= 0 ? detail::str_cat(" owned by rank ", copy.peer) : std::string(),
                      "; last value ", seen, ", waiting for ", want, ". ");
  // Every peer is in this call with its key: the calls agree, so "launch the same ops" is not the advice.
  if (copy.code == device::kDeviceErrorPeersInCall)
    throw TimeoutError(detail::str_cat(
        word,
        "Every peer had started this call on the workspace, with this call's key, and none had given up: the "
        "ranks' calls agree, but a block of the call, on this rank or a peer, never reached the signal this wait "
        "needs. The usual cause is a block that got no SM: iris's communication kernels need every block of every "
        "rank's grid running at once, and a kernel that never ends holding SMs beside them, or ranks sharing one "
        "GPU (under MPS the ranks' shares of the SMs overlap), can keep some of them from starting. This rank's "
        "output of that call is not valid."));
  throw TimeoutError(detail::str_cat(
      word,
      "A peer never signalled: check that every rank launched the same ops, in the same order on each workspace "
      "(IRIS_CHECK_CALLS=1 compares every iris call across ranks before its launch and names the first that "
      "differs)."));
}

}  // namespace iris::detail
