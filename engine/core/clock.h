// The engine's one way to time a span: seconds on the steady clock.
#pragma once
#include <chrono>

namespace subdp {

using Clock = std::chrono::steady_clock;

/// Seconds from t to now (steady clock).
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace subdp
