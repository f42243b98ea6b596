#include "runtime/net_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <net/route.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

absl::StatusOr<UniqueFd> ControlSocket() {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return PosixError("socket(AF_INET, SOCK_DGRAM)", errno);
  return fd;
}

absl::Status FillName(ifreq* req, const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(
        absl::StrCat("interface: bad name \"", ifname, "\""));
  }
  memset(req, 0, sizeof(*req));
  memcpy(req->ifr_name, ifname.data(), ifname.size());
  return absl::OkStatus();
}

void SetAddr(sockaddr* sa, in_addr addr) {
  auto* sin = reinterpret_cast<sockaddr_in*>(sa);
  memset(sin, 0, sizeof(*sin));
  sin->sin_family = AF_INET;
  sin->sin_addr = addr;
}

}  // namespace

absl::StatusOr<in_addr> ParseIpv4(absl::string_view text) {
  in_addr a{};
  std::string s(text);
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an IPv4 address: \"", text, "\""));
  }
  return a;
}

absl::StatusOr<Ipv4Prefix> ParseIpv4Prefix(absl::string_view text) {
  size_t slash = text.find('/');
  Ipv4Prefix p;
  if (slash == absl::string_view::npos ||
      !absl::SimpleAtoi(text.substr(slash + 1), &p.prefix_len) ||
      p.prefix_len < 0 || p.prefix_len > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: want A.B.C.D/LEN, got \"", text, "\""));
  }
  ASSIGN_OR_RETURN(p.address, ParseIpv4(text.substr(0, slash)));
  return p;
}

absl::Status InterfaceUp(const std::string& ifname) {
  ASSIGN_OR_RETURN(UniqueFd fd, ControlSocket());
  ifreq req;
  RETURN_IF_ERROR(FillName(&req, ifname));
  if (ioctl(fd.get(), SIOCGIFFLAGS, &req) != 0) {
    return PosixError(absl::StrCat("SIOCGIFFLAGS ", ifname), errno);
  }
  req.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(fd.get(), SIOCSIFFLAGS, &req) != 0) {
    return PosixError(absl::StrCat("SIOCSIFFLAGS ", ifname, " up"), errno);
  }
  return absl::OkStatus();
}

absl::Status ConfigureInterface(const std::string& ifname,
                                const Ipv4Prefix& prefix,
                                const std::string& gateway) {
  ASSIGN_OR_RETURN(UniqueFd fd, ControlSocket());
  ifreq req;
  RETURN_IF_ERROR(FillName(&req, ifname));
  SetAddr(&req.ifr_addr, prefix.address);
  if (ioctl(fd.get(), SIOCSIFADDR, &req) != 0) {
    return PosixError(absl::StrCat("SIOCSIFADDR ", ifname), errno);
  }
  in_addr mask{};
  mask.s_addr = prefix.prefix_len == 0
                    ? 0
                    : htonl(~uint32_t{0} << (32 - prefix.prefix_len));
  RETURN_IF_ERROR(FillName(&req, ifname));
  SetAddr(&req.ifr_netmask, mask);
  if (ioctl(fd.get(), SIOCSIFNETMASK, &req) != 0) {
    return PosixError(absl::StrCat("SIOCSIFNETMASK ", ifname), errno);
  }
  RETURN_IF_ERROR(InterfaceUp(ifname));
  if (gateway.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(in_addr gw, ParseIpv4(gateway));
  rtentry route;
  memset(&route, 0, sizeof(route));
  SetAddr(&route.rt_dst, in_addr{});
  SetAddr(&route.rt_genmask, in_addr{});
  SetAddr(&route.rt_gateway, gw);
  route.rt_flags = RTF_UP | RTF_GATEWAY;
  std::string dev = ifname;
  route.rt_dev = dev.data();
  if (ioctl(fd.get(), SIOCADDRT, &route) != 0 && errno != EEXIST) {
    return PosixError(
        absl::StrCat("SIOCADDRT default via ", gateway, " dev ", ifname),
        errno);
  }
  return absl::OkStatus();
}

}  // namespace mycel
