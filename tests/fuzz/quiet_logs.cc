#include "google/protobuf/stubs/logging.h"
#include "runtime/log.h"
#include "tests/fuzz/fuzz_target.h"

namespace mycel::fuzz {

void QuietLogs() {
  google::protobuf::SetLogHandler(nullptr);
  log::SetLevel(log::Level::kError);
}

}  // namespace mycel::fuzz
