// Conversions between the store's changes and the wire messages of
// proto/mycel/v1/replication.proto.
#ifndef MYCEL_MESH_REPLICATION_CODEC_H_
#define MYCEL_MESH_REPLICATION_CODEC_H_

#include "absl/status/statusor.h"
#include "daemon/store/objects.h"
#include "mycel/v1/replication.pb.h"

namespace mycel::replication {

v1::ReplicationChange ToProto(const store::ObjectChange& change);
v1::ReplicationChange ToProto(const store::Object& row);
// INVALID_ARGUMENT, naming the field, for a seq or time out of range.
absl::StatusOr<store::ObjectChange> FromProto(const v1::ReplicationChange& p);

void ToProto(const store::VersionVector& v,
             google::protobuf::RepeatedPtrField<v1::ReplicationVersion>* out);
absl::StatusOr<store::VersionVector> FromProto(
    const google::protobuf::RepeatedPtrField<v1::ReplicationVersion>& p);

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_CODEC_H_
