#include "runtime/random.h"

#include <errno.h>
#include <sys/random.h>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/escaping.h"
#include "runtime/status.h"

namespace mycel {
namespace {

void Fill(void* out, size_t n) {
  // getrandom(2) does not fail for lack of entropy when blocking is
  // allowed, and RandomBytes retries EINTR.
  ABSL_RAW_CHECK(RandomBytes(out, n).ok(), "getrandom failed");
}

}  // namespace

absl::Status RandomBytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return PosixError("getrandom", errno);
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

uint64_t RandomUint64() {
  uint64_t v = 0;
  Fill(&v, sizeof(v));
  return v;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  Fill(raw.data(), raw.size());
  return absl::BytesToHexString(raw);
}

}  // namespace mycel
