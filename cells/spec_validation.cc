#include "cells/spec_validation.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cells/names.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

// google.protobuf.Duration's documented range: about ±10,000 years.
constexpr int64_t kMaxDurationSeconds = 315576000000;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Whether [a, a+n) and [b, b+m) share an id. Ranges were checked not to
// wrap, so 64-bit sums cannot overflow.
bool Overlap(uint32_t a, uint32_t n, uint32_t b, uint32_t m) {
  return uint64_t{a} < uint64_t{b} + m && uint64_t{b} < uint64_t{a} + n;
}

}  // namespace

absl::StatusOr<std::vector<IdMapRange>> ParseIdMap(absl::string_view field,
                                                   absl::string_view text) {
  RETURN_IF_ERROR(ValidateNoNul(field, text));
  std::vector<IdMapRange> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.empty()) continue;
    const std::string where = absl::StrCat(field, ": line ", line_no);
    if (words.size() != 3) {
      return Invalid(
          where,
          absl::StrCat("want \"INSIDE OUTSIDE COUNT\", got \"", line, "\""));
    }
    uint32_t v[3];
    for (int i = 0; i < 3; ++i) {
      if (words[i].find_first_not_of("0123456789") != absl::string_view::npos ||
          !absl::SimpleAtoi(words[i], &v[i])) {
        return Invalid(
            where, absl::StrCat("\"", words[i], "\" is not an id from 0 to ",
                                kUnchangedId - 1));
      }
    }
    IdMapRange r{v[0], v[1], v[2]};
    if (r.count == 0) return Invalid(where, "COUNT must be at least 1");
    // The kernel refuses a range that includes (u32)-1 on either side.
    for (uint32_t first : {r.inside, r.outside}) {
      if (uint64_t{first} + r.count - 1 >= kUnchangedId) {
        return Invalid(
            where, absl::StrCat("the range ", first, "+", r.count, " reaches ",
                                kUnchangedId, ", which is not an id"));
      }
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (Overlap(out[i].inside, out[i].count, r.inside, r.count) ||
          Overlap(out[i].outside, out[i].count, r.outside, r.count)) {
        return Invalid(where, absl::StrCat("overlaps an earlier line"));
      }
    }
    out.push_back(r);
    if (out.size() > kMaxIdMapLines) {
      return Invalid(field, absl::StrCat("more than ", kMaxIdMapLines,
                                         " lines (the kernel's limit)"));
    }
  }
  if (out.empty()) return Invalid(field, "no mapping line");
  return out;
}

bool IdMapped(const std::vector<IdMapRange>& map, uint32_t id) {
  return std::any_of(map.begin(), map.end(), [id](const IdMapRange& r) {
    return id >= r.inside && uint64_t{id} < uint64_t{r.inside} + r.count;
  });
}

absl::Status ValidateId(absl::string_view field, uint32_t id) {
  if (id == kUnchangedId) {
    return Invalid(field,
                   absl::StrCat(id,
                                " is (uid_t)-1, which the kernel reads as "
                                "\"leave the id unchanged\"; give a real id"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDuration(absl::string_view field,
                              const google::protobuf::Duration& d) {
  if (d.nanos() <= -1000000000 || d.nanos() >= 1000000000) {
    return Invalid(field, absl::StrCat("nanos ", d.nanos(),
                                       " is outside -999999999..999999999"));
  }
  if ((d.seconds() > 0 && d.nanos() < 0) ||
      (d.seconds() < 0 && d.nanos() > 0)) {
    return Invalid(field, absl::StrCat("seconds ", d.seconds(), " and nanos ",
                                       d.nanos(), " have different signs"));
  }
  if (d.seconds() > kMaxDurationSeconds || d.seconds() < -kMaxDurationSeconds) {
    return Invalid(field, absl::StrCat("seconds ", d.seconds(),
                                       " is outside the range of a Duration"));
  }
  if (d.seconds() < 0 || d.nanos() < 0) {
    return Invalid(field, "must not be negative");
  }
  return absl::OkStatus();
}

absl::Status ValidateNoNul(absl::string_view field, absl::string_view value) {
  size_t nul = value.find('\0');
  if (nul == absl::string_view::npos) return absl::OkStatus();
  return Invalid(field, absl::StrCat("contains a NUL byte at offset ", nul,
                                     ", which would cut it short"));
}

absl::Status ValidateNoNul(
    absl::string_view field,
    const google::protobuf::RepeatedPtrField<std::string>& values) {
  for (int i = 0; i < values.size(); ++i) {
    RETURN_IF_ERROR(
        ValidateNoNul(absl::StrCat(field, "[", i, "]"), values.Get(i)));
  }
  return absl::OkStatus();
}

absl::Status ValidateCellSpec(const mycel::v1::CellSpec& spec) {
  RETURN_IF_ERROR(ValidateName("name", spec.name()));
  bool user = false;
  for (int i = 0; i < spec.isolate_size(); ++i) {
    const int ns = spec.isolate(i);
    if (ns == mycel::v1::NAMESPACE_UNSPECIFIED ||
        !mycel::v1::Namespace_IsValid(ns)) {
      return Invalid(absl::StrCat("isolate[", i, "]"),
                     absl::StrCat("unknown namespace ", ns));
    }
    for (int j = 0; j < i; ++j) {
      if (spec.isolate(j) == ns) {
        return Invalid(absl::StrCat("isolate[", i, "]"),
                       absl::StrCat(mycel::v1::Namespace_Name(
                                        static_cast<mycel::v1::Namespace>(ns)),
                                    " is already listed at isolate[", j, "]"));
      }
    }
    user |= ns == mycel::v1::NAMESPACE_USER;
  }
  bool mount = false;
  for (int ns : spec.isolate()) mount |= ns == mycel::v1::NAMESPACE_MOUNT;
  for (const auto& [field, map] :
       {std::pair<absl::string_view, const std::string*>{"uid_map",
                                                         &spec.uid_map()},
        {"gid_map", &spec.gid_map()}}) {
    if (map->empty()) continue;
    if (!user) return Invalid(field, "needs a user namespace (isolate user)");
    ASSIGN_OR_RETURN(std::vector<IdMapRange> ranges, ParseIdMap(field, *map));
    // A cell given the host's root is confined by its mount namespace, as
    // a cell without a user namespace is; it cannot join the node's
    // confined view of the host's files from inside its own user
    // namespace, so it needs a mount namespace of its own.
    for (const IdMapRange& r : ranges) {
      if (r.outside == 0 && !mount) {
        return Invalid(field,
                       "maps the host's id 0 (root) into the cell, which "
                       "then needs a mount namespace of its own (isolate "
                       "mount) to keep the host's system files read-only");
      }
    }
  }
  RETURN_IF_ERROR(ValidateNoNul("rootfs", spec.rootfs()));
  RETURN_IF_ERROR(ValidateNoNul("seccomp", spec.seccomp()));
  RETURN_IF_ERROR(ValidateNoNul("seccomp_deny", spec.seccomp_deny()));
  RETURN_IF_ERROR(ValidateNoNul("capabilities", spec.capabilities()));
  RETURN_IF_ERROR(
      ValidateNoNul("limits.cpuset_cpus", spec.limits().cpuset_cpus()));
  RETURN_IF_ERROR(
      ValidateNoNul("limits.cpuset_mems", spec.limits().cpuset_mems()));
  return absl::OkStatus();
}

absl::Status ValidateExecutableSpec(const mycel::v1::ExecutableSpec& spec) {
  RETURN_IF_ERROR(ValidateName("cell", spec.cell()));
  if (!spec.name().empty()) RETURN_IF_ERROR(ValidateName("name", spec.name()));
  if (spec.command_size() == 0 || spec.command(0).empty()) {
    return Invalid("command", "must not be empty");
  }
  RETURN_IF_ERROR(ValidateNoNul("command", spec.command()));
  RETURN_IF_ERROR(ValidateNoNul("env", spec.env()));
  for (int i = 0; i < spec.env_size(); ++i) {
    size_t eq = spec.env(i).find('=');
    if (eq == std::string::npos || eq == 0) {
      return Invalid(absl::StrCat("env[", i, "]"),
                     absl::StrCat("want KEY=VALUE, got \"", spec.env(i), "\""));
    }
  }
  RETURN_IF_ERROR(ValidateNoNul("cwd", spec.cwd()));
  if (!spec.cwd().empty() && spec.cwd()[0] != '/') {
    return Invalid(
        "cwd", absl::StrCat("\"", spec.cwd(), "\" is not an absolute path"));
  }
  if (spec.has_uid()) RETURN_IF_ERROR(ValidateId("uid", spec.uid()));
  if (spec.has_gid()) RETURN_IF_ERROR(ValidateId("gid", spec.gid()));
  if (spec.has_stop_grace()) {
    RETURN_IF_ERROR(ValidateDuration("stop_grace", spec.stop_grace()));
  }
  const mycel::v1::Restart& r = spec.restart();
  if (r.has_restart_sec()) {
    RETURN_IF_ERROR(ValidateDuration("restart.restart_sec", r.restart_sec()));
  }
  if (r.has_start_limit_interval()) {
    RETURN_IF_ERROR(ValidateDuration("restart.start_limit_interval",
                                     r.start_limit_interval()));
  }
  return absl::OkStatus();
}

}  // namespace mycel::cells
