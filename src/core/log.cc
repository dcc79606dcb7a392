#include "iris/core/log.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace iris {
namespace {

constexpr const char* kLevelNames[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

LogLevel level_from_env() {
  const char* env = std::getenv("IRIS_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return LogLevel::kWarn;
  try {
    return parse_log_level(env);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "[iris WARN] ignoring IRIS_LOG_LEVEL: %s\n", e.what());
    return LogLevel::kWarn;
  }
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

thread_local int t_rank = -1;
thread_local int t_world = -1;

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel parse_log_level(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  for (int i = 0; i < 5; ++i) {
    std::string name = kLevelNames[i];
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t == name || t == std::to_string(i)) return static_cast<LogLevel>(i);
  }
  if (t == "warning") return LogLevel::kWarn;
  throw InvalidArgument("Unknown log level '" + text + "': use one of error, warn, info, debug, trace (or 0-4).");
}

void set_thread_rank(int rank, int world_size) {
  t_rank = rank;
  t_world = world_size;
}

void log_message(LogLevel level, const std::string& message) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const char* name = kLevelNames[static_cast<int>(level)];
  if (t_rank >= 0)
    std::fprintf(stderr, "[iris rank %d/%d %s] %s\n", t_rank, t_world, name, message.c_str());
  else
    std::fprintf(stderr, "[iris %s] %s\n", name, message.c_str());
  std::fflush(stderr);
}

}  // namespace iris
