#include "runtime/log.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mycel::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_fd{STDERR_FILENO};
std::atomic<bool> g_kmsg{false};

bool NeedsQuoting(absl::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f) {
      return true;
    }
  }
  return false;
}

void AppendValue(std::string* out, absl::string_view v) {
  if (!NeedsQuoting(v)) {
    out->append(v.data(), v.size());
    return;
  }
  out->push_back('"');
  for (unsigned char c : v) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < ' ' || c == 0x7f) {
          absl::StrAppendFormat(out, "\\x%02x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

int SyslogPriority(Level level) {
  switch (level) {
    case Level::kDebug:
      return 7;
    case Level::kInfo:
      return 6;
    case Level::kWarn:
      return 4;
    case Level::kError:
      return 3;
  }
  return 6;
}

}  // namespace

Field::Field(absl::string_view k, int64_t v) : key(k), value(absl::StrCat(v)) {}
Field::Field(absl::string_view k, uint64_t v)
    : key(k), value(absl::StrCat(v)) {}
Field::Field(absl::string_view k, double v)
    : key(k), value(absl::StrFormat("%.6g", v)) {}
Field::Field(absl::string_view k, const absl::Status& s)
    : key(k), value(s.ok() ? std::string("OK") : s.ToString()) {}

absl::StatusOr<Level> ParseLevel(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "debug") return Level::kDebug;
  if (lower == "info") return Level::kInfo;
  if (lower == "warn" || lower == "warning") return Level::kWarn;
  if (lower == "error") return Level::kError;
  return absl::InvalidArgumentError(absl::StrCat(
      "log_level: unknown level \"", name, "\" (want debug|info|warn|error)"));
}

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

void SetLevel(Level level) { g_level.store(static_cast<int>(level)); }
Level GetLevel() { return static_cast<Level>(g_level.load()); }

void SetSink(int fd, bool kmsg) {
  g_fd.store(fd);
  g_kmsg.store(kmsg);
}

std::string Format(Level level, absl::string_view msg,
                   std::initializer_list<Field> fields) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  std::string line = absl::StrFormat(
      "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=",
      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
      tm.tm_sec, ts.tv_nsec / 1000000, LevelName(level));
  AppendValue(&line, msg);
  for (const Field& f : fields) {
    line.push_back(' ');
    line.append(f.key.data(), f.key.size());
    line.push_back('=');
    AppendValue(&line, f.value);
  }
  line.push_back('\n');
  return line;
}

void Write(Level level, absl::string_view msg,
           std::initializer_list<Field> fields) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) {
    return;
  }
  std::string line = Format(level, msg, fields);
  if (g_kmsg.load()) {
    line = absl::StrCat("<", SyslogPriority(level), ">myceld: ", line);
  }
  const char* p = line.data();
  size_t left = line.size();
  int fd = g_fd.load();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // Nowhere left to report a logging failure.
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace mycel::log
