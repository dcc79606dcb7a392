// Rank-tagged logging. The level comes from IRIS_LOG_LEVEL (error, warn, info, debug, trace;
// default warn), read once. Lines look like:  [iris rank 1/2 WARN] message
#pragma once

#include <string>

#include "iris/core/error.hpp"

namespace iris {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Current level (from IRIS_LOG_LEVEL unless set_log_level was called).
LogLevel log_level();
void set_log_level(LogLevel level);
// Parses "error", "warn", "info", "debug", "trace" (case-insensitive) or a digit 0-4.
// Throws InvalidArgument naming the accepted values otherwise.
LogLevel parse_log_level(const std::string& text);

// The rank tag of the calling thread (set by Context; -1/-1 prints no rank).
void set_thread_rank(int rank, int world_size);

void log_message(LogLevel level, const std::string& message);

}  // namespace iris

#define IRIS_LOG(level, ...)                                                       \
  do {                                                                             \
    if (static_cast<int>(level) <= static_cast<int>(::iris::log_level()))          \
      ::iris::log_message(level, ::iris::detail::str_cat(__VA_ARGS__));            \
  } while (0)
#define IRIS_LOG_ERROR(...) IRIS_LOG(::iris::LogLevel::kError, __VA_ARGS__)
#define IRIS_LOG_WARN(...) IRIS_LOG(::iris::LogLevel::kWarn, __VA_ARGS__)
#define IRIS_LOG_INFO(...) IRIS_LOG(::iris::LogLevel::kInfo, __VA_ARGS__)
#define IRIS_LOG_DEBUG(...) IRIS_LOG(::iris::LogLevel::kDebug, __VA_ARGS__)
