// Logging, controlled by TIDE_DEBUG (or NCCL_DEBUG): VERSION, WARN, INFO, TRACE.
// Lines go to stderr (or TIDE_DEBUG_FILE) prefixed with host:pid:tid [rank].
// Thread-safe.
#pragma once

namespace tide {

enum class LogLevel { None = 0, Version = 1, Warn = 2, Info = 3, Trace = 4 };

LogLevel logLevel();
void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Sets the rank shown in this thread's log lines (-1: none).
void setLogRank(int rank);

}  // namespace tide

#define TIDE_LOG(level, ...)                                                        \
  do {                                                                              \
    if (::tide::logLevel() >= ::tide::LogLevel::level)                              \
      ::tide::logMessage(::tide::LogLevel::level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TIDE_WARN(...) TIDE_LOG(Warn, __VA_ARGS__)
#define TIDE_INFO(...) TIDE_LOG(Info, __VA_ARGS__)
#define TIDE_TRACE(...) TIDE_LOG(Trace, __VA_ARGS__)
