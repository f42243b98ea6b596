// Structured logging: one line per event, logfmt style, written with a
// single write(2) so lines from different threads never interleave.
//
//   ts=2026-12-02T14:30:00.123Z level=info msg="serving" socket=/run/x.sock
//
// Thread-safe. The default sink is stderr; as PID 1 the daemon switches it to
// /dev/kmsg, where each line becomes one kernel log record.
#ifndef MYCEL_RUNTIME_LOG_H_
#define MYCEL_RUNTIME_LOG_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Parses "debug", "info", "warn"/"warning" or "error".
absl::StatusOr<Level> ParseLevel(absl::string_view name);
absl::string_view LevelName(Level level);

// Events below `level` are dropped.
void SetLevel(Level level);
Level GetLevel();

// Sends lines to `fd` (not owned; it must stay open while logging goes on).
// With `kmsg` set, each line gets a syslog priority prefix ("<6>") so that
// /dev/kmsg files it at the right level.
void SetSink(int fd, bool kmsg);

// One key=value pair. Values that need it are quoted and escaped.
struct Field {
  Field(absl::string_view k, absl::string_view v) : key(k), value(v) {}
  Field(absl::string_view k, const std::string& v) : key(k), value(v) {}
  Field(absl::string_view k, const char* v) : key(k), value(v) {}
  Field(absl::string_view k, int64_t v);
  Field(absl::string_view k, int v) : Field(k, static_cast<int64_t>(v)) {}
  Field(absl::string_view k, uint64_t v);
  Field(absl::string_view k, double v);
  Field(absl::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
  Field(absl::string_view k, const absl::Status& s);

  absl::string_view key;
  std::string value;
};

void Write(Level level, absl::string_view msg,
           std::initializer_list<Field> fields = {});

// Formats one line without writing it (exposed for tests).
std::string Format(Level level, absl::string_view msg,
                   std::initializer_list<Field> fields);

inline void Debug(absl::string_view msg, std::initializer_list<Field> f = {}) {
  Write(Level::kDebug, msg, f);
}
inline void Info(absl::string_view msg, std::initializer_list<Field> f = {}) {
  Write(Level::kInfo, msg, f);
}
inline void Warn(absl::string_view msg, std::initializer_list<Field> f = {}) {
  Write(Level::kWarn, msg, f);
}
inline void Error(absl::string_view msg, std::initializer_list<Field> f = {}) {
  Write(Level::kError, msg, f);
}

}  // namespace mycel::log

#endif  // MYCEL_RUNTIME_LOG_H_
