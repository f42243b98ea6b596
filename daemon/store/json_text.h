// CheckJsonText: whether a value of the user key/value namespace is a JSON
// text (RFC 8259): one value of any kind, surrounded by whitespace only, in
// valid UTF-8, strings free of lone surrogates. Nesting is bounded so that
// every client's parser can read what the store accepted.
//
// It parses without building anything (a SAX pass of nlohmann/json), so a
// 1 MiB value costs a scan, not a document tree: the State.Put path calls it
// for every write.
#ifndef MYCEL_DAEMON_STORE_JSON_TEXT_H_
#define MYCEL_DAEMON_STORE_JSON_TEXT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mycel::store {

// Arrays and objects nested deeper than this are refused: protobuf's JSON
// parser (google.protobuf.Value, which clients such as `mycel state get -o
// json` use) stops at 100.
inline constexpr int kMaxJsonDepth = 100;

// OK, or INVALID_ARGUMENT "not a JSON text: <why, at which byte>". The
// caller names the field.
absl::Status CheckJsonText(absl::string_view text);

// OK, or INVALID_ARGUMENT "not UTF-8: invalid UTF-8 byte at index N: 0xXX".
// For a client to check a protobuf string field before sending it: gRPC
// 1.51 answers a request whose string field is not UTF-8 with
// UNIMPLEMENTED and no message.
absl::Status CheckUtf8(absl::string_view text);

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_JSON_TEXT_H_
