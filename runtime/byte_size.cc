#include "runtime/byte_size.h"

#include <string.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mycel {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view flag,
                                      absl::string_view text) {
  std::string t = absl::AsciiStrToUpper(text);
  for (const char* suffix : {"IB", "B", "I"}) {
    size_t n = strlen(suffix);
    if (t.size() > n && t.compare(t.size() - n, n, suffix) == 0) {
      t.resize(t.size() - n);
      break;
    }
  }
  int shift = 0;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
    }
    if (shift != 0) t.pop_back();
  }
  double v = 0;
  // !(v >= 0) also refuses "nan"; "inf" fails the bound.
  if (t.empty() || !absl::SimpleAtod(t, &v) || !(v >= 0) ||
      v * static_cast<double>(int64_t{1} << shift) > 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": want a size such as 65536, 512K, 64M or 2G, got \"", text,
        "\""));
  }
  return static_cast<int64_t>(v * static_cast<double>(int64_t{1} << shift));
}

}  // namespace mycel
