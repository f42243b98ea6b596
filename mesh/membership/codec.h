// Converts membership messages (message.h) to and from their wire form,
// proto/mycel/v1/gossip.proto, and computes the exact encoded size of a
// message without encoding it (the simulator counts bytes this way, and the
// state machine sizes its piggyback budget with it).
#ifndef MYCEL_MESH_MEMBERSHIP_CODEC_H_
#define MYCEL_MESH_MEMBERSHIP_CODEC_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesh/membership/message.h"
#include "mycel/v1/gossip.pb.h"

namespace mycel::membership {

void ToProto(const Message& message, v1::GossipMessage* out);
void ToProto(const Alive& alive, v1::GossipAlive* out);

// INVALID_ARGUMENT naming the field for anything ValidateMessage rejects or
// a oneof left unset.
absl::StatusOr<Message> FromProto(const v1::GossipMessage& proto);
absl::StatusOr<Alive> FromProto(const v1::GossipAlive& proto);

std::string EncodeMessage(const Message& message);

// RESOURCE_EXHAUSTED above `max_bytes` (before parsing anything);
// INVALID_ARGUMENT when the bytes are not a valid GossipMessage.
absl::StatusOr<Message> DecodeMessage(absl::string_view bytes,
                                      size_t max_bytes);

// A signed record alone, e.g. for the driver's member table.
std::string EncodeAlive(const Alive& alive);
absl::StatusOr<Alive> DecodeAlive(absl::string_view bytes);

// == EncodeMessage(message).size(), by arithmetic.
size_t EncodedSize(const Message& message);
// The bytes one update adds to a GossipMessage (field tag and length
// included), so that the sizes of a message's parts add up.
size_t UpdateEncodedSize(const Update& update);
// The bytes one member adds to a push-pull body.
size_t MemberDigestEncodedSize(const MemberDigest& digest);
// The bytes one summary adds to a push-pull body.
size_t MemberSummaryEncodedSize(const MemberSummary& summary);

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_CODEC_H_
