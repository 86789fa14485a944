// The message of the subdp::Error a call throws, for tests of error texts.
#pragma once
#include <functional>
#include <string>

#include "engine/core/error.h"

namespace subdp::testing {

/// e.what() of the subdp::Error fn throws; "(no error)" when it returns.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace subdp::testing
