#include "mesh/pki/join_token.h"

#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mesh/pki/internal/openssl.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

constexpr absl::string_view kIdAlphabet =
    "abcdefghijklmnopqrstuvwxyz0123456789";
constexpr size_t kHexLength = 64;

absl::Status TokenError(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("join token: ", reason));
}

bool IsLowerHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// Checks a 64-digit lower-case hex field; the message names the field and
// the position, never the content.
absl::Status CheckHexField(absl::string_view value, absl::string_view field) {
  if (value.size() != kHexLength) {
    return TokenError(absl::StrCat(
        field, ": ", value.size(), " characters, expected ", kHexLength,
        value.size() < kHexLength ? " (truncated?)" : ""));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (!IsLowerHex(value[i])) {
      return TokenError(
          absl::StrCat(field, ": character ", i + 1, " is not lower-case hex"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJoinTokenId(absl::string_view id) {
  if (id.size() != kJoinTokenIdLength) {
    return TokenError(absl::StrCat("id: ", id.size(), " characters, expected ",
                                   kJoinTokenIdLength));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (kIdAlphabet.find(id[i]) == absl::string_view::npos) {
      return TokenError(
          absl::StrCat("id: character ", i + 1, " is not in [a-z0-9]"));
    }
  }
  return absl::OkStatus();
}

std::string HashJoinSecret(absl::string_view secret) {
  return internal::Hex(internal::Sha256(secret));
}

absl::StatusOr<JoinToken> JoinToken::Generate(
    absl::string_view ca_fingerprint) {
  RETURN_IF_ERROR(CheckHexField(ca_fingerprint, "CA fingerprint"));
  // Rejection sampling keeps every id character uniform: 252 = 7 * 36.
  std::string id;
  while (id.size() < kJoinTokenIdLength) {
    ASSIGN_OR_RETURN(std::string bytes, internal::RandomBytes(16));
    for (unsigned char b : bytes) {
      if (b < 252 && id.size() < kJoinTokenIdLength) {
        id.push_back(kIdAlphabet[b % kIdAlphabet.size()]);
      }
    }
  }
  ASSIGN_OR_RETURN(std::string secret,
                   internal::RandomBytes(kJoinTokenSecretBytes));
  return JoinToken(std::move(id), std::move(secret),
                   std::string(ca_fingerprint));
}

absl::StatusOr<JoinToken> JoinToken::Parse(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return TokenError("empty");
  std::vector<absl::string_view> fields = absl::StrSplit(text, '.');
  absl::string_view version = fields[0];
  if (version != kJoinTokenVersion) {
    if (absl::StartsWith(version, "mycel") && version.size() > 5 &&
        version.size() <= 8 &&
        absl::c_all_of(version.substr(5), absl::ascii_isdigit)) {
      return TokenError(absl::StrCat("version \"", version,
                                     "\" is not supported (expected \"",
                                     kJoinTokenVersion, "\")"));
    }
    return TokenError(
        absl::StrCat("does not start with \"", kJoinTokenVersion, ".\""));
  }
  if (fields.size() != 4) {
    return TokenError(absl::StrCat("has ", fields.size(),
                                   " fields separated by '.', expected 4",
                                   fields.size() < 4 ? " (truncated?)" : ""));
  }
  RETURN_IF_ERROR(ValidateJoinTokenId(fields[1]));
  RETURN_IF_ERROR(CheckHexField(fields[2], "secret"));
  RETURN_IF_ERROR(CheckHexField(fields[3], "CA fingerprint"));
  ASSIGN_OR_RETURN(std::string secret, internal::Unhex(fields[2], "secret"));
  return JoinToken(std::string(fields[1]), std::move(secret),
                   std::string(fields[3]));
}

absl::StatusOr<JoinToken> JoinToken::FromPresented(
    absl::string_view id, absl::string_view secret,
    absl::string_view ca_fingerprint) {
  RETURN_IF_ERROR(ValidateJoinTokenId(id));
  if (secret.size() != kJoinTokenSecretBytes) {
    return TokenError(absl::StrCat("secret: ", secret.size(),
                                   " bytes, expected ", kJoinTokenSecretBytes));
  }
  RETURN_IF_ERROR(CheckHexField(ca_fingerprint, "CA fingerprint"));
  return JoinToken(std::string(id), std::string(secret),
                   std::string(ca_fingerprint));
}

std::string JoinToken::ToString() const {
  return absl::StrCat(kJoinTokenVersion, ".", id_, ".", internal::Hex(secret_),
                      ".", ca_fingerprint_);
}

StoredJoinToken JoinToken::ToStored(absl::Time created, absl::Time expires,
                                    int64_t uses) const {
  StoredJoinToken stored;
  stored.id = id_;
  stored.secret_hash = HashJoinSecret(secret_);
  stored.created = created;
  stored.expires = expires;
  stored.uses_left = uses;
  return stored;
}

absl::Status JoinToken::CheckCa(const Certificate& ca) const {
  // Both values are public; no need for a constant-time comparison.
  if (ca.fingerprint() == ca_fingerprint_) return absl::OkStatus();
  return absl::UnauthenticatedError(
      absl::StrCat("CA certificate fingerprint ", ca.fingerprint(),
                   " does not match the join token's pin ", ca_fingerprint_));
}

absl::Status CheckJoinToken(const StoredJoinToken& stored,
                            const JoinToken& presented, absl::Time now) {
  if (stored.id != presented.id()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "join token: stored id \"", stored.id,
        "\" differs from the presented id \"", presented.id(), "\""));
  }
  absl::StatusOr<std::string> stored_hash =
      internal::Unhex(stored.secret_hash, "stored secret hash");
  if (!stored_hash.ok() || stored_hash->size() != 32) {
    return absl::InternalError(absl::StrCat(
        "join token ", stored.id, ": stored secret hash is malformed"));
  }
  // Both sides are 32-byte digests: the comparison time depends on nothing
  // secret, and a partial match of the secret says nothing about the hash.
  if (!internal::ConstantTimeEquals(internal::Sha256(presented.secret()),
                                    *stored_hash)) {
    return absl::UnauthenticatedError(
        absl::StrCat("join token ", stored.id, ": wrong secret"));
  }
  if (stored.revoked) {
    return absl::UnauthenticatedError(
        absl::StrCat("join token ", stored.id, ": revoked"));
  }
  if (now >= stored.expires) {
    return absl::UnauthenticatedError(
        absl::StrCat("join token ", stored.id, ": expired at ",
                     internal::TimeString(stored.expires)));
  }
  if (stored.uses_left <= 0) {
    return absl::UnauthenticatedError(
        absl::StrCat("join token ", stored.id, ": used up"));
  }
  return absl::OkStatus();
}

}  // namespace mycel::pki
