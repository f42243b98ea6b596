#include "mesh/membership/signing.h"

#include <cstdint>

namespace mycel::membership {
namespace {

void PutU64(uint64_t v, std::string* out) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

void PutBytes(absl::string_view s, std::string* out) {
  PutU64(s.size(), out);
  out->append(s.data(), s.size());
}

}  // namespace

std::string CanonicalAliveBytes(const Alive& alive) {
  std::string out;
  out.reserve(64 + alive.name.size() + 32 * alive.meta.addresses.size() +
              48 * alive.meta.labels.size());
  // The tag keeps a signature over these bytes from meaning anything in
  // another protocol that the same node key signs.
  PutBytes("mycel.v1.GossipAlive", &out);
  PutBytes(alive.name, &out);
  PutU64(alive.incarnation, &out);
  PutU64(alive.meta.addresses.size(), &out);
  for (const std::string& a : alive.meta.addresses) PutBytes(a, &out);
  PutU64(alive.meta.labels.size(), &out);
  for (const auto& [k, v] : alive.meta.labels) {
    PutBytes(k, &out);
    PutBytes(v, &out);
  }
  PutU64(alive.meta.capacity.size(), &out);
  for (const auto& [k, v] : alive.meta.capacity) {
    PutBytes(k, &out);
    PutU64(static_cast<uint64_t>(v), &out);
  }
  out.push_back(alive.leaving ? 1 : 0);
  return out;
}

}  // namespace mycel::membership
