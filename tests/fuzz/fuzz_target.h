// The contract of a fuzz target in tests/fuzz (README.md there).
//
// A target defines LLVMFuzzerTestOneInput, which libFuzzer drives in a
// fuzzing build (MYCEL_FUZZ=ON, tests/fuzz/fuzz.sh), and Seeds(): inputs
// that reach deep into the code under test (valid messages, queries that
// run), built by the code's own encoders so that they stay valid as the
// formats change. In the ordinary build the same target links
// replay_main.cc instead of libFuzzer, and ctest replays the seeds, fixed
// mutations of them and the files of tests/fuzz/corpus/<target>/ (inputs
// that once broke something): deterministic, so a failure replays exactly.
//
// A target checks what its code promises (round trips, invariants, error
// codes) with FUZZ_CHECK, which aborts: a finding, in either build.
#ifndef MYCEL_TESTS_FUZZ_FUZZ_TARGET_H_
#define MYCEL_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace mycel::fuzz {

// Defined by each target.
std::vector<std::string> Seeds();

[[noreturn]] inline void Fail(const char* file, int line, const char* what,
                              const std::string& detail) {
  std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s %s\n", file, line, what,
               detail.c_str());
  std::abort();
}

// Quiets what the code under test logs about the bad input it is fed
// (protobuf's parse errors; myceld's log below `error`), which would bury
// a finding. Idempotent.
void QuietLogs();

// Reads an input front to back; past the end it yields zeros and empty
// strings, so a target never runs off an input that ended early.
class Input {
 public:
  Input(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  bool empty() const { return at_ >= size_; }
  uint8_t Byte() { return empty() ? 0 : static_cast<uint8_t>(data_[at_++]); }
  uint16_t U16() {
    const uint16_t high = Byte();  // two statements: an order
    return static_cast<uint16_t>(high << 8 | Byte());
  }
  // A string of U16() bytes (as many as are left).
  std::string Bytes() {
    size_t n = U16();
    if (n > size_ - at_) n = size_ - at_;
    std::string s(data_ + at_, n);
    at_ += n;
    return s;
  }

 private:
  const char* data_;
  size_t size_;
  size_t at_ = 0;
};

// Builds inputs in Input's format.
class InputBuilder {
 public:
  InputBuilder& Byte(uint8_t b) {
    out_.push_back(static_cast<char>(b));
    return *this;
  }
  InputBuilder& U16(uint16_t v) { return Byte(v >> 8).Byte(v & 0xff); }
  InputBuilder& Bytes(std::string_view s) {
    if (s.size() > 0xffff) Fail(__FILE__, __LINE__, "seed too long", "");
    U16(static_cast<uint16_t>(s.size()));
    out_.append(s);
    return *this;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace mycel::fuzz

#define FUZZ_CHECK(cond, detail)                                           \
  do {                                                                     \
    if (!(cond)) ::mycel::fuzz::Fail(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

#endif  // MYCEL_TESTS_FUZZ_FUZZ_TARGET_H_
