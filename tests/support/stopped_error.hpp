// The checks shared by the tests in which a rank's wait gave up and read its peers' call words
// (include/iris/device/timeout.cuh: record_wait_timeout): a peer in another call, one that has not started this
// call, one whose workspace stopped (its later calls skip: src/ccl/ccl_common.cuh, begin_call).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "iris/core/error.hpp"

namespace iris::test {

// `err`, a TimeoutError's text, is a wait of `op_head` ("iris device timeout in all_reduce(", say) on rank `me`
// that gave up and names rank `stopped`, whose call `failed` on the workspace failed, while this rank is in
// its call `call` there.
inline void expect_peer_stopped_error(const std::string& err, const std::string& op_head, int me, int stopped,
                                      uint64_t failed, uint64_t call) {
  EXPECT_EQ(err.rfind(op_head, 0), 0u) << err;
  EXPECT_NE(err.find(detail::str_cat(" on rank ", me, " (block ")), std::string::npos) << err;
  EXPECT_NE(err.find(detail::str_cat(", and rank ", stopped, " stopped its calls on this workspace at its call ",
                                     failed, ", where a wait of its own gave up (this rank is in call ", call,
                                     "): a workspace stops at its first failed call")),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("This rank's output of that call is not valid. Call the preamble again on every rank before "
                     "using the workspace."),
            std::string::npos)
      << err;
}

// `err`, a TimeoutError's text, starts with `head` ("iris device timeout in all_gather on rank 0 (block ", say) and
// names rank `peer` as in this call by count but with another call key.
inline void expect_peer_in_another_call_error(const std::string& err, const std::string& head, int peer) {
  EXPECT_EQ(err.rfind(head, 0), 0u) << err;
  EXPECT_NE(err.find(" ms for the word at 0x"), std::string::npos) << err;
  EXPECT_NE(err.find(detail::str_cat(", and rank ", peer,
                                     " is in another call on this workspace: the same call by count, but its call key "
                                     "is ")),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("This rank's output of that call is not valid."), std::string::npos) << err;
}

// `err`, a TimeoutError's text, names rank `peer` as not having started this rank's call `call` on the
// workspace, where it made none yet since the preamble.
inline void expect_peer_made_no_call_error(const std::string& err, int peer, uint64_t call) {
  EXPECT_NE(err.find(detail::str_cat(", and rank ", peer, " has not started this call: this rank is in call ", call,
                                     " on this workspace, and the latest call rank ", peer, " started there is none")),
            std::string::npos)
      << err;
}

}  // namespace iris::test
