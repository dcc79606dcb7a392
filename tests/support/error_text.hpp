// The message of whatever a call throws, for tests that compare exact error texts.
#pragma once

#include <exception>
#include <string>
#include <type_traits>

namespace iris::test {

// what() of the exception of type E (or derived) that fn throws, or a text saying none was. Other
// exceptions propagate, so error_text<std::invalid_argument> also checks the type.
template <typename E = std::exception, typename Fn>
std::string error_text(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return std::is_same_v<E, std::exception> ? "(nothing thrown)" : "(no exception of the expected type thrown)";
}

}  // namespace iris::test
