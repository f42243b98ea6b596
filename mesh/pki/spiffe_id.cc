#include "mesh/pki/spiffe_id.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

constexpr absl::string_view kScheme = "spiffe://";
constexpr size_t kMaxMeshLength = 253;
constexpr size_t kMaxNameLength = 63;

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Shows a character in an error message: printable ASCII as is, anything
// else as an escape, so hostile input cannot forge log lines.
std::string Show(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  static constexpr char kDigits[] = "0123456789abcdef";
  return absl::StrCat("\\x", std::string(1, kDigits[u >> 4]),
                      std::string(1, kDigits[u & 0xf]));
}

}  // namespace

absl::string_view IdentityKindName(IdentityKind kind) {
  switch (kind) {
    case IdentityKind::kNode:
      return "node";
    case IdentityKind::kUser:
      return "user";
  }
  return "unknown";
}

absl::Status ValidateMeshName(absl::string_view mesh) {
  if (mesh.empty()) return absl::InvalidArgumentError("mesh name: empty");
  if (mesh.size() > kMaxMeshLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh name: longer than ", kMaxMeshLength, " characters"));
  }
  for (size_t i = 0; i < mesh.size(); ++i) {
    char c = mesh[i];
    if (!IsLowerAlnum(c) && c != '.' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat("mesh name: character ",
                                                     i + 1, " '", Show(c),
                                                     "' is not in [a-z0-9.-]"));
    }
  }
  if (!IsLowerAlnum(mesh.front()) || !IsLowerAlnum(mesh.back())) {
    return absl::InvalidArgumentError(
        "mesh name: must start and end with [a-z0-9]");
  }
  if (absl::StrContains(mesh, "..")) {
    return absl::InvalidArgumentError("mesh name: contains \"..\"");
  }
  return absl::OkStatus();
}

absl::Status ValidateIdentityName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("name: empty");
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: longer than ", kMaxNameLength, " characters"));
  }
  if (!IsLowerAlnum(name.front())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: first character '", Show(name.front()), "' is not in [a-z0-9]"));
  }
  for (size_t i = 1; i < name.size(); ++i) {
    char c = name[i];
    if (!IsLowerAlnum(c) && c != '_' && c != '.' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "name: character ", i + 1, " '", Show(c), "' is not in [a-z0-9_.-]"));
    }
  }
  return absl::OkStatus();
}

std::string TrustDomainId(absl::string_view mesh) {
  return absl::StrCat(kScheme, mesh);
}

absl::StatusOr<SpiffeId> SpiffeId::Create(IdentityKind kind,
                                          absl::string_view mesh,
                                          absl::string_view name) {
  RETURN_IF_ERROR(ValidateMeshName(mesh));
  RETURN_IF_ERROR(ValidateIdentityName(name));
  return SpiffeId(kind, std::string(mesh), std::string(name));
}

absl::StatusOr<SpiffeId> SpiffeId::Parse(absl::string_view uri) {
  auto error = [](absl::string_view reason) {
    return absl::InvalidArgumentError(absl::StrCat("SPIFFE ID: ", reason));
  };
  if (uri.empty()) return error("empty");
  if (!absl::StartsWith(uri, kScheme)) {
    return error("does not start with \"spiffe://\"");
  }
  absl::string_view rest = uri.substr(kScheme.size());
  size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) {
    return error("no path (expected /node/NAME or /user/NAME)");
  }
  absl::string_view mesh = rest.substr(0, slash);
  absl::Status mesh_ok = ValidateMeshName(mesh);
  if (!mesh_ok.ok()) return error(mesh_ok.message());
  absl::string_view path = rest.substr(slash);
  IdentityKind kind;
  absl::string_view name;
  if (absl::StartsWith(path, "/node/")) {
    kind = IdentityKind::kNode;
    name = path.substr(6);
  } else if (absl::StartsWith(path, "/user/")) {
    kind = IdentityKind::kUser;
    name = path.substr(6);
  } else {
    return error("path must be /node/NAME or /user/NAME");
  }
  absl::Status name_ok = ValidateIdentityName(name);
  if (!name_ok.ok()) return error(name_ok.message());
  return SpiffeId(kind, std::string(mesh), std::string(name));
}

std::string SpiffeId::ToString() const {
  return absl::StrCat(kScheme, mesh_, "/", IdentityKindName(kind_), "/", name_);
}

}  // namespace mycel::pki
