// Collective steps of the runtime's setup that every rank passes or fails together.
// Not installed; src/runtime/context.cc, symmetric_heap.cc, src/ccl/workspace.cc and src/ops/fused.cc include it.
#pragma once

#include <exception>
#include <string>
#include <vector>

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
// agree_gather: the same for a step that returns a payload, and every rank's payloads, in rank order, in
// the same exchange (one allgather: a failure or a payload per rank).
// `bootstrap` is the exchange: a Bootstrap, or anything with its allgather (ccl::WorkspaceHost, whose
// preambles and reservations end with such a step).
template <typename Exchange, typename Step>
std::vector<std::string> agree_gather(Exchange& bootstrap, const char* what, Step&& step,
                                      bool* failed_together = nullptr) {
  std::exception_ptr error;
  std::string mine;  // '+' and the payload, or '!' and the failure
  try {
    mine = "+" + step();
  } catch (const std::exception& e) {
    error = std::current_exception();
    mine = std::string("!") + (*e.what() != '\0' ? e.what() : "unknown error");
  } catch (...) {  // still agreed: the peers must not wait for this rank
    error = std::current_exception();
    mine = "!an exception that is not a std::exception";
  }
  std::vector<std::string> all = bootstrap.allgather(mine);
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (!all[r].empty() && all[r][0] == '+') continue;
    if (failed_together != nullptr) *failed_together = true;
    if (error) std::rethrow_exception(error);
    throw RemoteError(
        str_cat("rank ", r, " failed ", what, ": ", all[r].empty() ? std::string("(no reply)") : all[r].substr(1)));
  }
  if (error) std::rethrow_exception(error);  // not reached: this rank's own failure is in `all`
  for (std::string& s : all) s.erase(0, 1);
  return all;
}

template <typename Exchange, typename Step>
void agree(Exchange& bootstrap, const char* what, Step&& step, bool* failed_together = nullptr) {
  agree_gather(
      bootstrap, what,
      [&] {
        step();
        return std::string();
      },
      failed_together);
}

}  // namespace iris::detail
