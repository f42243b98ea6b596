// Conversions between Abseil's time types and the well-known protobuf ones.
#ifndef MYCEL_PROTO_PROTO_TIME_H_
#define MYCEL_PROTO_PROTO_TIME_H_

#include <cstdint>

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace mycel {

inline void ToProto(absl::Duration d, google::protobuf::Duration* out) {
  int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

inline absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

inline void ToProto(absl::Time t, google::protobuf::Timestamp* out) {
  int64_t us = absl::ToUnixMicros(t);
  out->set_seconds(us / 1000000);
  out->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
}

}  // namespace mycel

#endif  // MYCEL_PROTO_PROTO_TIME_H_
