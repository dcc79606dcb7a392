// The checks shared by the tests whose last rank's call differs from its peers' after the preamble, and whose
// kernels find it in a call-tagged flag (kDeviceErrorCallTagMismatch: the chunked exchanges' flags, the fused
// ops' ready flags; src/ccl/collective_kernels.hpp, tagged_epoch).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace iris::test {

// `err` starts with `head` ("iris device error in <op> on rank <me>: rank "), then names the rank whose call
// differs: the last rank, on its peers; on the last rank a peer, rank 0 at two ranks (at more, whichever
// peer's flag its waits saw first). Then the text every such error has.
inline void expect_call_tag_error_naming_the_culprit(const std::string& err, const std::string& head, int me,
                                                     int world) {
  const int culprit = world - 1;
  ASSERT_EQ(err.rfind(head, 0), 0u) << err;
  const int named = std::atoi(err.c_str() + head.size());
  if (me != culprit)
    EXPECT_EQ(named, culprit) << err;
  else if (world == 2)
    EXPECT_EQ(named, 0) << err;
  else
    EXPECT_TRUE(named >= 0 && named < culprit) << err;
  EXPECT_NE(err.find(" made another call on this workspace (the flag it set for this call carries the tag "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("), so the ranks' calls differ in shape, dtype, reduction, root, bias or config. "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("Call the preamble again on every rank before using the workspace."), std::string::npos) << err;
}

}  // namespace iris::test
