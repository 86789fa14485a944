// Error type and checking macros. Library code throws; the command line prints
// the message and exits non-zero. Never exit() inside the library.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace subdp {

/// Any error the user can cause or fix (bad config, bad file, bad layout).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace subdp

/// Throws subdp::Error with a formatted message when cond is false.
#define SUBDP_CHECK(cond, ...)                                   \
  do {                                                           \
    if (!(cond)) throw ::subdp::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

/// Internal invariant: names file and line (a bug in subdp, not user error).
#define SUBDP_ASSERT(cond)                                                                                           \
  do {                                                                                                               \
    if (!(cond)) throw ::subdp::Error(fmt::format("internal error: {} failed at {}:{}", #cond, __FILE__, __LINE__)); \
  } while (0)
