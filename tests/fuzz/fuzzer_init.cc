// libFuzzer's initialization hook for the targets of tests/fuzz, in a
// fuzzing build: with MYCEL_FUZZ_SEEDS_OUT set to a directory, writes the
// target's seeds there first (fuzz.sh hands that directory to libFuzzer as
// a corpus).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mycel::fuzz::QuietLogs();
  const char* dir = std::getenv("MYCEL_FUZZ_SEEDS_OUT");
  if (dir == nullptr || *dir == '\0') return 0;
  const std::vector<std::string> seeds = mycel::fuzz::Seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(dir) + "/seed-" + std::to_string(i);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr ||
        std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) !=
            seeds[i].size() ||
        std::fclose(f) != 0) {
      std::perror(path.c_str());
      std::exit(1);
    }
  }
  return 0;
}
