#include "core/log.h"

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "core/config.h"

namespace tide {

namespace {

thread_local int tlsRank = -1;

struct LogState {
  LogLevel level = LogLevel::Warn;
  FILE* out = stderr;
  char host[64] = {};
  std::mutex mu;
};

LogLevel parseLevel(const std::string& s) {
  if (strcasecmp(s.c_str(), "NONE") == 0) return LogLevel::None;
  if (strcasecmp(s.c_str(), "VERSION") == 0) return LogLevel::Version;
  if (strcasecmp(s.c_str(), "INFO") == 0) return LogLevel::Info;
  if (strcasecmp(s.c_str(), "TRACE") == 0) return LogLevel::Trace;
  return LogLevel::Warn;
}

LogState& state() {
  static LogState* s = [] {
    auto* st = new LogState();  // never destroyed: logging may run at exit
    st->level = parseLevel(knobString(Knob::Debug));
    gethostname(st->host, sizeof(st->host) - 1);
    if (char* dot = strchr(st->host, '.')) *dot = '\0';
    std::string path = knobString(Knob::DebugFile);
    if (!path.empty()) {
      std::string expanded;
      for (size_t i = 0; i < path.size(); ++i) {
        if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'h') {
          expanded += st->host;
          ++i;
        } else if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
          expanded += std::to_string(getpid());
          ++i;
        } else {
          expanded += path[i];
        }
      }
      if (FILE* f = fopen(expanded.c_str(), "a")) st->out = f;
    }
    return st;
  }();
  return *s;
}

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::Warn:
      return "WARN";
    case LogLevel::Info:
      return "INFO";
    case LogLevel::Trace:
      return "TRACE";
    default:
      return "";
  }
}

}  // namespace

LogLevel logLevel() { return state().level; }

void setLogRank(int rank) { tlsRank = rank; }

void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...) {
  LogState& st = state();
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char rank[16] = "";
  if (tlsRank >= 0) snprintf(rank, sizeof(rank), " [%d]", tlsRank);
  std::lock_guard<std::mutex> lock(st.mu);
  if (level == LogLevel::Trace) {
    fprintf(st.out, "%s:%d:%ld%s TIDE %s %s:%d %s\n", st.host, getpid(),
            static_cast<long>(syscall(SYS_gettid)), rank, levelName(level), base, line, msg);
  } else {
    fprintf(st.out, "%s:%d:%ld%s TIDE %s %s\n", st.host, getpid(),
            static_cast<long>(syscall(SYS_gettid)), rank, levelName(level), msg);
  }
  fflush(st.out);
}

}  // namespace tide
