// Random numbers from the kernel (getrandom(2)), for names and tokens that
// must not repeat or be guessed.
#ifndef MYCEL_RUNTIME_RANDOM_H_
#define MYCEL_RUNTIME_RANDOM_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace mycel {

// Fills `n` bytes at `out` from getrandom(2), retrying on EINTR and short
// reads. Fails only as getrandom(2) can (PosixError("getrandom", errno)).
absl::Status RandomBytes(void* out, size_t n);

// 64 random bits. Blocks only before the kernel's pool is initialised
// (early boot), as getrandom(2) does.
uint64_t RandomUint64();

// `bytes` random bytes as lower-case hex (2 * bytes characters).
std::string RandomHex(size_t bytes);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_RANDOM_H_
