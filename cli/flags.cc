#include "cli/flags.h"

#include <signal.h>
#include <string.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/byte_size.h"

namespace mycel::cli {

absl::StatusOr<int64_t> ParseSize(absl::string_view flag,
                                  absl::string_view text) {
  return ParseByteSize(flag, text);
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view text) {
  absl::Duration d;
  double secs = 0;
  if (absl::SimpleAtod(text, &secs) && secs >= 0) return absl::Seconds(secs);
  if (absl::ParseDuration(text, &d) && d >= absl::ZeroDuration()) return d;
  return absl::InvalidArgumentError(absl::StrCat(
      flag, ": want a duration such as 500ms, 5s or 2m, got \"", text, "\""));
}

absl::StatusOr<std::pair<std::string, std::string>> ParseExeRef(
    absl::string_view text) {
  size_t slash = text.find('/');
  if (slash == absl::string_view::npos || slash == 0 ||
      slash + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("want CELL/EXECUTABLE, got \"", text, "\""));
  }
  return std::make_pair(std::string(text.substr(0, slash)),
                        std::string(text.substr(slash + 1)));
}

absl::StatusOr<int> ParseSignal(absl::string_view text) {
  int n = 0;
  if (absl::SimpleAtoi(text, &n) && n > 0 && n < NSIG) return n;
  std::string name = absl::AsciiStrToUpper(text);
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev != nullptr && name == abbrev) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("signal: unknown signal \"", text, "\""));
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseUser(
    absl::string_view text) {
  size_t colon = text.find(':');
  absl::string_view uid = text.substr(0, colon);
  absl::string_view gid =
      colon == absl::string_view::npos ? uid : text.substr(colon + 1);
  uint32_t uv = 0, gv = 0;
  if (!absl::SimpleAtoi(uid, &uv) || !absl::SimpleAtoi(gid, &gv)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--user: want UID or UID:GID (numbers), got \"", text, "\""));
  }
  return std::make_pair(uv, gv);
}

}  // namespace mycel::cli
