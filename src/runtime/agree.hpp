// Collective steps of the runtime's setup that every rank passes or fails together.
// Not installed; src/runtime/context.cc and symmetric_heap.cc include it.
#pragma once

#include <exception>
#include <string>

#include "iris/core/error.hpp"
#include "iris/runtime/bootstrap.hpp"

namespace iris::detail {

// Runs `step` on this rank and tells every rank whether any rank failed it, so that a local error (a bad
// device, out of memory, a peer's memory it cannot map) raises on every rank together instead of
// stranding the others in the next collective until the bootstrap timeout. The failing rank rethrows
// its own exception; the others get RemoteError "rank R failed <what>: <its message>" (the lowest such
// rank). When a rank failed, `*failed_together` (if given) is set first: every rank then knows, and may
// undo its setup with collective steps of its own. A failure of the exchange itself (a peer that died
// or timed out) propagates as the bootstrap raised it, and leaves the flag unset.
template <typename Step>
void agree(Bootstrap& bootstrap, const char* what, Step&& step, bool* failed_together = nullptr) {
  std::exception_ptr error;
  std::string message;
  try {
    step();
  } catch (const std::exception& e) {
    error = std::current_exception();
    message = e.what();
    if (message.empty()) message = "unknown error";
  } catch (...) {  // still agreed: the peers must not wait for this rank
    error = std::current_exception();
    message = "an exception that is not a std::exception";
  }
  const auto all = bootstrap.allgather(message);
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].empty()) continue;
    if (failed_together != nullptr) *failed_together = true;
    if (error) std::rethrow_exception(error);
    throw RemoteError(str_cat("rank ", r, " failed ", what, ": ", all[r]));
  }
  if (error) std::rethrow_exception(error);  // not reached: this rank's own message is in `all`
}

}  // namespace iris::detail
