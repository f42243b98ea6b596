// The main() of a fuzz target in the ordinary build, under ctest: no
// libFuzzer, no coverage feedback, and the same inputs on every run.
//
//   TARGET [--mutations N] [FILE|DIR]...
//   TARGET --write-mutation SEED ROUND FILE
//
// Runs the target's seeds; then N fixed mutations of each (bit flips, byte
// changes, insertions, deletions, duplications, truncations, splices with
// another seed), from a PRNG seeded by the seed's index and the round, so
// that a failure replays exactly; then each FILE, and each file in each DIR
// (a corpus: inputs that broke something once). A broken check aborts
// (FUZZ_CHECK); the output names the input that was running, and
// --write-mutation writes that input to FILE (to read it, or to keep it in
// the corpus once the bug is fixed).
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

// splitmix64: small, fixed, and the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t state_;
};

std::string Mutate(const std::vector<std::string>& seeds, size_t index,
                   uint64_t round) {
  Rng rng(index * 0x100000001b3ull + round + 1);
  std::string s = seeds[index];
  const int ops = 1 + static_cast<int>(rng.Below(4));
  for (int i = 0; i < ops; ++i) {
    const size_t at = rng.Below(s.size() + 1);
    switch (rng.Below(8)) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng.Below(s.size())] ^= 1 << rng.Below(8);
        break;
      case 1:  // a random byte
        if (!s.empty()) s[rng.Below(s.size())] = static_cast<char>(rng.Next());
        break;
      case 2: {  // a byte that sits on a boundary
        static constexpr unsigned char kEdges[] = {0x00, 0x01, 0x7f,
                                                   0x80, 0xfe, 0xff};
        if (!s.empty()) {
          s[rng.Below(s.size())] = static_cast<char>(kEdges[rng.Below(6)]);
        }
        break;
      }
      case 3:  // insert bytes
        s.insert(at, rng.Below(4) + 1, static_cast<char>(rng.Next()));
        break;
      case 4:  // delete a range
        if (at < s.size()) s.erase(at, rng.Below(s.size() - at) + 1);
        break;
      case 5:  // duplicate a range
        if (at < s.size()) {
          s.insert(
              at,
              s.substr(at, rng.Below(std::min<size_t>(s.size() - at, 64)) + 1));
        }
        break;
      case 6:  // truncate
        s.resize(at);
        break;
      case 7: {  // splice: a piece of another seed
        const std::string& other = seeds[rng.Below(seeds.size())];
        if (!other.empty()) {
          const size_t from = rng.Below(other.size());
          s.insert(at, other.substr(from, rng.Below(other.size() - from) + 1));
        }
        break;
      }
    }
  }
  return s;
}

// The input running, for the crash handler to name.
char g_running[256];

void OnCrash(int sig) {
  static constexpr char kPrefix[] = "\nfuzz replay: crashed in ";
  (void)!write(STDERR_FILENO, kPrefix, sizeof(kPrefix) - 1);
  (void)!write(STDERR_FILENO, g_running, strnlen(g_running, sizeof(g_running)));
  (void)!write(STDERR_FILENO, "\n", 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input, const std::string& name) {
  std::snprintf(g_running, sizeof(g_running), "%s (%zu bytes)", name.c_str(),
                input.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 200;
  std::vector<std::string> paths;
  if (argc == 5 && std::strcmp(argv[1], "--write-mutation") == 0) {
    const std::vector<std::string> seeds = mycel::fuzz::Seeds();
    const size_t seed = std::strtoul(argv[2], nullptr, 10);
    if (seed >= seeds.size()) {
      std::fprintf(stderr, "seed %zu: there are %zu\n", seed, seeds.size());
      return 1;
    }
    const std::string input =
        Mutate(seeds, seed, std::strtoull(argv[3], nullptr, 10));
    FILE* f = std::fopen(argv[4], "wb");
    if (f == nullptr ||
        std::fwrite(input.data(), 1, input.size(), f) != input.size() ||
        std::fclose(f) != 0) {
      std::perror(argv[4]);
      return 1;
    }
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutations") == 0 && i + 1 < argc) {
      mutations = std::strtol(argv[++i], nullptr, 10);
    } else {
      paths.push_back(argv[i]);
    }
  }
  mycel::fuzz::QuietLogs();
  const std::vector<std::string> seeds = mycel::fuzz::Seeds();
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds: a target must have some\n");
    return 1;
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    signal(sig, OnCrash);
  }
  size_t runs = 0;
  for (size_t i = 0; i < seeds.size(); ++i) {
    Run(seeds[i], "seed " + std::to_string(i));
    ++runs;
  }
  for (long round = 0; round < mutations; ++round) {
    for (size_t i = 0; i < seeds.size(); ++i) {
      Run(Mutate(seeds, i, round), "mutation " + std::to_string(round) +
                                       " of seed " + std::to_string(i));
      ++runs;
    }
  }
  for (const std::string& path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
    std::vector<std::string> files;
    if (S_ISDIR(st.st_mode)) {
      DIR* dir = opendir(path.c_str());
      if (dir == nullptr) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), std::strerror(errno));
        return 1;
      }
      while (dirent* e = readdir(dir)) {
        if (e->d_name[0] != '.') files.push_back(path + "/" + e->d_name);
      }
      closedir(dir);
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(path);
    }
    for (const std::string& f : files) {
      std::string input;
      if (!ReadFile(f, &input)) {
        std::fprintf(stderr, "%s: cannot read\n", f.c_str());
        return 1;
      }
      Run(input, f);
      ++runs;
    }
  }
  std::printf("%zu inputs: %zu seeds, %ld rounds of mutations, %zu paths\n",
              runs, seeds.size(), mutations, paths.size());
  return 0;
}
