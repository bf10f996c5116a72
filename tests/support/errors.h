#pragma once
// The message a call fails with, for tests that check an error names the value and the fix.
#include <exception>
#include <string>

#include "core/error.h"

namespace scalelab::test {

// What `f` throws as an E (UsageError unless said): its what(); "no error" when f returns;
// "not a <E>: …" when it throws something else, so a test's find() fails with the reason shown.
template <typename E = UsageError, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not the expected error type: ") + e.what();
  }
  return "no error";
}

}  // namespace scalelab::test
