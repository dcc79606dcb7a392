// The message of whatever a call throws, for tests that compare exact error texts.
#pragma once

#include <exception>
#include <string>

namespace iris::test {

// what() of the exception fn throws, or "(nothing thrown)".
template <typename Fn>
std::string error_text(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace iris::test
