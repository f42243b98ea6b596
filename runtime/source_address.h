// The source of a connection, as the per-source limits count it.
//
// A limit per source address (new connections, open connections, failed
// joins) assumes that a new address costs an attacker something. That holds
// for IPv4, not for IPv6: the smallest block a provider or a cloud hands out
// is a /64 (RFC 6177, RFC 7421), 2^64 addresses that one holder can bind at
// will. So an IPv6 source is its /64, as in fail2ban and most rate
// limiters. An IPv4 client of a dual-stack listener arrives as an
// IPv4-mapped IPv6 address (::ffff:a.b.c.d); it is its IPv4 address, not the
// /64 that every IPv4 client shares.
#ifndef MYCEL_RUNTIME_SOURCE_ADDRESS_H_
#define MYCEL_RUNTIME_SOURCE_ADDRESS_H_

#include <sys/socket.h>

#include <string>

#include "absl/strings/string_view.h"

namespace mycel {

// "192.0.2.7" for an IPv4 peer (or an IPv4-mapped IPv6 one), "2001:db8::/64"
// for an IPv6 peer; empty for any other family (a unix socket's peers have
// no address to tell apart).
std::string SourceBlock(const sockaddr_storage& peer);

// The same, from the peer string gRPC gives a call ("ipv4:192.0.2.7:4711",
// "ipv6:%5B2001:db8::1%5D:4711"; the brackets are percent-encoded, and the
// IPv6 address may carry a zone, "%25eth0"). A string that is not an IP
// peer ("unix:...") comes back unchanged.
std::string SourceBlockOfPeer(absl::string_view grpc_peer);

// The host of a gRPC peer string without its port, for logs: "192.0.2.7",
// "[2001:db8::1]"; a string that is not an IP peer comes back unchanged.
std::string PeerHost(absl::string_view grpc_peer);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SOURCE_ADDRESS_H_
