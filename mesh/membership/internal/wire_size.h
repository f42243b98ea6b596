// Protocol-buffer wire sizes computed by arithmetic, so that a message's
// encoded size is known without building it (codec.cc). codec tests check
// every formula against real serialization.
#ifndef MYCEL_MESH_MEMBERSHIP_INTERNAL_WIRE_SIZE_H_
#define MYCEL_MESH_MEMBERSHIP_INTERNAL_WIRE_SIZE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace mycel::membership::internal {

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline size_t TagSize(int field) {
  return VarintSize(static_cast<uint64_t>(field) << 3);
}

// A length-delimited field that is always written (a set sub-message, a
// repeated element, a map entry).
inline size_t LenField(int field, size_t len) {
  return TagSize(field) + VarintSize(len) + len;
}

// proto3 singular fields are omitted at their default.
inline size_t StringField(int field, absl::string_view s) {
  return s.empty() ? 0 : LenField(field, s.size());
}
inline size_t VarintField(int field, uint64_t v) {
  return v == 0 ? 0 : TagSize(field) + VarintSize(v);
}
inline size_t BoolField(int field, bool b) {
  return b ? TagSize(field) + 1 : 0;
}
inline size_t Fixed64Field(int field, uint64_t v) {
  return v == 0 ? 0 : TagSize(field) + 8;
}

}  // namespace mycel::membership::internal

#endif  // MYCEL_MESH_MEMBERSHIP_INTERNAL_WIRE_SIZE_H_
