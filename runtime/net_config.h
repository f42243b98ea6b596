// Minimal IPv4 interface configuration through ioctl(2): enough for PID 1 to
// bring up loopback and a guest's user-mode network.
#ifndef MYCEL_RUNTIME_NET_CONFIG_H_
#define MYCEL_RUNTIME_NET_CONFIG_H_

#include <netinet/in.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel {

struct Ipv4Prefix {
  in_addr address{};
  int prefix_len = 0;
};

// Parses "10.0.2.15/24". INVALID_ARGUMENT names the text.
absl::StatusOr<Ipv4Prefix> ParseIpv4Prefix(absl::string_view text);
// Parses "10.0.2.2".
absl::StatusOr<in_addr> ParseIpv4(absl::string_view text);

// Sets IFF_UP on `ifname`.
absl::Status InterfaceUp(const std::string& ifname);

// Assigns `prefix` to `ifname`, brings it up, and when `gateway` is not
// empty adds a default route through it.
absl::Status ConfigureInterface(const std::string& ifname,
                                const Ipv4Prefix& prefix,
                                const std::string& gateway);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_NET_CONFIG_H_
