#include "runtime/source_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mycel {
namespace {

std::string Ipv4Text(const in_addr& a) {
  char buf[INET_ADDRSTRLEN];
  if (inet_ntop(AF_INET, &a, buf, sizeof(buf)) == nullptr) return {};
  return buf;
}

std::string Ipv6Block(const in6_addr& a) {
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    in_addr v4;
    memcpy(&v4, &a.s6_addr[12], sizeof(v4));
    return Ipv4Text(v4);
  }
  in6_addr block{};
  memcpy(block.s6_addr, a.s6_addr, 8);
  char buf[INET6_ADDRSTRLEN];
  if (inet_ntop(AF_INET6, &block, buf, sizeof(buf)) == nullptr) return {};
  return absl::StrCat(buf, "/64");
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// `s` with its %XX escapes decoded; a '%' not followed by two hex digits
// is kept as it is.
std::string PercentDecoded(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexDigit(s[i + 1]) >= 0 &&
        HexDigit(s[i + 2]) >= 0) {
      out.push_back(
          static_cast<char>(HexDigit(s[i + 1]) * 16 + HexDigit(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The host part of an "ipv4:" or "ipv6:" gRPC peer string, decoded and
// without its port: "192.0.2.7" or "[2001:db8::1%eth0]". `family` is set
// to AF_INET or AF_INET6; false for any other string.
bool PeerHostPart(absl::string_view peer, int* family, std::string* host) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    *family = AF_INET;
  } else if (absl::ConsumePrefix(&peer, "ipv6:")) {
    *family = AF_INET6;
  } else {
    return false;
  }
  std::string decoded = PercentDecoded(peer);
  const size_t colon = decoded.rfind(':');
  if (colon == std::string::npos) return false;
  decoded.resize(colon);
  *host = std::move(decoded);
  return true;
}

}  // namespace

std::string SourceBlock(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    return Ipv4Text(reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr);
  }
  if (peer.ss_family == AF_INET6) {
    return Ipv6Block(reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr);
  }
  return {};
}

std::string SourceBlockOfPeer(absl::string_view grpc_peer) {
  int family = 0;
  std::string host;
  if (!PeerHostPart(grpc_peer, &family, &host)) return std::string(grpc_peer);
  if (family == AF_INET) {
    in_addr a;
    if (inet_pton(AF_INET, host.c_str(), &a) == 1) return Ipv4Text(a);
    return std::string(grpc_peer);
  }
  absl::string_view inner = host;
  if (!absl::ConsumePrefix(&inner, "[") || !absl::ConsumeSuffix(&inner, "]")) {
    return std::string(grpc_peer);
  }
  // A zone ("fe80::1%eth0") names the link, not the address.
  inner = inner.substr(0, inner.find('%'));
  in6_addr a;
  if (inet_pton(AF_INET6, std::string(inner).c_str(), &a) == 1) {
    return Ipv6Block(a);
  }
  return std::string(grpc_peer);
}

std::string PeerHost(absl::string_view grpc_peer) {
  int family = 0;
  std::string host;
  if (!PeerHostPart(grpc_peer, &family, &host)) return std::string(grpc_peer);
  return host;
}

}  // namespace mycel
