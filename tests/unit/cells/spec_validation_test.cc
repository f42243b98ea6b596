// The host-independent checks of specs: each bad value is INVALID_ARGUMENT
// whose message starts with the field at fault.
#include "cells/spec_validation.h"

#include <doctest/doctest.h>

#include <string>

#include "google/protobuf/util/json_util.h"

namespace mycel::cells {
namespace {

using mycel::v1::CellSpec;
using mycel::v1::ExecutableSpec;

template <typename T>
T FromJson(const std::string& json) {
  T out;
  REQUIRE_MESSAGE(google::protobuf::util::JsonStringToMessage(json, &out).ok(),
                  json);
  return out;
}

// Checks that `s` is INVALID_ARGUMENT and that its message starts with
// `field` followed by ": " or a space (for "uid_map: line 1: ...").
void ExpectField(const absl::Status& s, const std::string& field,
                 const std::string& also = "") {
  CHECK_MESSAGE(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
  CHECK_MESSAGE(s.message().rfind(field, 0) == 0, s.message());
  if (!also.empty()) {
    CHECK_MESSAGE(s.message().find(also) != absl::string_view::npos,
                  s.message());
  }
}

TEST_CASE("uid and gid: (uid_t)-1 would keep the daemon's ids") {
  CHECK(ValidateId("uid", 0).ok());
  CHECK(ValidateId("uid", 65534).ok());
  CHECK(ValidateId("uid", 4294967294u).ok());
  ExpectField(ValidateId("uid", 4294967295u), "uid:", "unchanged");
  auto exe = FromJson<ExecutableSpec>(
      R"({"cell": "c", "command": ["id"], "uid": 4294967295})");
  ExpectField(ValidateExecutableSpec(exe), "uid:");
  exe = FromJson<ExecutableSpec>(
      R"({"cell": "c", "command": ["id"], "uid": 5, "gid": 4294967295})");
  ExpectField(ValidateExecutableSpec(exe), "gid:");
}

TEST_CASE("id maps: the kernel's rules, reported with the line") {
  auto ok = ParseIdMap("uid_map", "0 100000 65536");
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 1);
  CHECK((*ok)[0].outside == 100000);
  CHECK(IdMapped(*ok, 0));
  CHECK(IdMapped(*ok, 65535));
  CHECK_FALSE(IdMapped(*ok, 65536));
  auto two = ParseIdMap("gid_map", "0 100000 1000\n1000 200000 10\n");
  REQUIRE(two.ok());
  CHECK(two->size() == 2);
  CHECK(IdMapped(*two, 1009));
  CHECK_FALSE(IdMapped(*two, 1010));

  struct Bad {
    const char* map;
    const char* want;
  } bad[] = {
      {"", "uid_map: no mapping line"},
      {"0 100000", "uid_map: line 1: want"},
      {"0 100000 65536 7", "uid_map: line 1: want"},
      {"0 -1 10", "uid_map: line 1: \"-1\""},
      {"0 x 10", "uid_map: line 1: \"x\""},
      {"0 100000 0", "uid_map: line 1: COUNT must be at least 1"},
      {"0 4294967295 1", "uid_map: line 1: the range 4294967295+1"},
      {"4294967290 0 10", "uid_map: line 1: the range 4294967290+10"},
      {"0 100000 10\n5 300000 10", "uid_map: line 2: overlaps"},
      {"0 100000 10\n100 100005 10", "uid_map: line 2: overlaps"},
      {"0 99999999999 1", "uid_map: line 1: \"99999999999\""},
  };
  for (const Bad& b : bad) {
    absl::Status s = ParseIdMap("uid_map", b.map).status();
    CHECK_MESSAGE(s.code() == absl::StatusCode::kInvalidArgument, b.map);
    CHECK_MESSAGE(s.message().rfind(b.want, 0) == 0, b.map, " -> ",
                  s.message());
  }
  std::string many;
  for (int i = 0; i < 341; ++i)
    many += std::to_string(i) + " " + std::to_string(100000 + i) + " 1\n";
  ExpectField(ParseIdMap("uid_map", many).status(), "uid_map:", "340");
  ExpectField(ParseIdMap("uid_map", std::string("0 1 1\0x", 7)).status(),
              "uid_map:", "NUL");
}

TEST_CASE("durations: the protobuf definition, and not negative") {
  google::protobuf::Duration d;
  d.set_seconds(1);
  d.set_nanos(500);
  CHECK(ValidateDuration("grace", d).ok());
  d.set_seconds(0);
  d.set_nanos(0);
  CHECK(ValidateDuration("grace", d).ok());
  d.set_nanos(-5);
  ExpectField(ValidateDuration("grace", d), "grace:", "negative");
  d.set_seconds(3);
  d.set_nanos(-5);
  ExpectField(ValidateDuration("grace", d), "grace:", "different signs");
  d.set_seconds(0);
  d.set_nanos(1000000000);
  ExpectField(ValidateDuration("grace", d), "grace:", "nanos");
  d.set_seconds(-1);
  d.set_nanos(0);
  ExpectField(ValidateDuration("grace", d), "grace:", "negative");
  d.set_seconds(int64_t{1} << 60);
  ExpectField(ValidateDuration("grace", d), "grace:", "range");

  auto exe = FromJson<ExecutableSpec>(
      R"({"cell": "c", "command": ["x"], "stop_grace": "-0.5s"})");
  ExpectField(ValidateExecutableSpec(exe), "stop_grace:");
  exe = FromJson<ExecutableSpec>(R"({"cell": "c", "command": ["x"]})");
  exe.mutable_restart()->mutable_restart_sec()->set_seconds(1);
  exe.mutable_restart()->mutable_restart_sec()->set_nanos(-1);
  ExpectField(ValidateExecutableSpec(exe), "restart.restart_sec:");
  exe.clear_restart();
  exe.mutable_restart()->mutable_start_limit_interval()->set_nanos(-7);
  ExpectField(ValidateExecutableSpec(exe), "restart.start_limit_interval:");
}

TEST_CASE("NUL bytes would cut argv, env and paths short") {
  ExecutableSpec exe;
  exe.set_cell("c");
  exe.add_command("sh");
  exe.add_command(std::string("-c\0rm -rf /", 11));
  ExpectField(ValidateExecutableSpec(exe), "command[1]:", "NUL");
  exe.clear_command();
  exe.add_command("env");
  exe.add_env(std::string("A=1\0B=2", 7));
  ExpectField(ValidateExecutableSpec(exe), "env[0]:", "NUL");
  exe.clear_env();
  exe.set_cwd(std::string("/tmp\0/etc", 9));
  ExpectField(ValidateExecutableSpec(exe), "cwd:", "NUL");

  CellSpec cell;
  cell.set_name("c");
  cell.set_rootfs(std::string("/srv/a\0b", 8));
  ExpectField(ValidateCellSpec(cell), "rootfs:", "NUL");
  cell.clear_rootfs();
  cell.mutable_limits()->set_cpuset_cpus(std::string("0\0-1", 4));
  ExpectField(ValidateCellSpec(cell), "limits.cpuset_cpus:", "NUL");
}

TEST_CASE("cell specs: isolate entries once each; maps need a user ns") {
  auto spec = FromJson<CellSpec>(
      R"({"name": "c", "isolate": ["NAMESPACE_PID", "NAMESPACE_MOUNT"]})");
  CHECK(ValidateCellSpec(spec).ok());
  spec = FromJson<CellSpec>(
      R"({"name": "c", "isolate": ["NAMESPACE_PID", "NAMESPACE_PID"]})");
  ExpectField(ValidateCellSpec(spec), "isolate[1]:", "already listed");
  spec = FromJson<CellSpec>(
      R"({"name": "c", "isolate": ["NAMESPACE_UNSPECIFIED"]})");
  ExpectField(ValidateCellSpec(spec), "isolate[0]:", "unknown");
  spec = FromJson<CellSpec>(R"({"name": "c"})");
  spec.add_isolate(static_cast<mycel::v1::Namespace>(42));
  ExpectField(ValidateCellSpec(spec), "isolate[0]:", "unknown namespace 42");

  spec = FromJson<CellSpec>(R"({"name": "c", "uid_map": "0 100000 65536"})");
  ExpectField(ValidateCellSpec(spec), "uid_map:", "user namespace");
  spec = FromJson<CellSpec>(R"({"name": "c", "gid_map": "0 100000 65536"})");
  ExpectField(ValidateCellSpec(spec), "gid_map:", "user namespace");
  spec = FromJson<CellSpec>(
      R"({"name": "c", "isolate": ["NAMESPACE_USER"], "uid_map": "0 1"})");
  ExpectField(ValidateCellSpec(spec), "uid_map: line 1:");
  spec = FromJson<CellSpec>(
      R"({"name": "c", "isolate": ["NAMESPACE_USER"],
          "uid_map": "0 100000 65536", "gid_map": "0 100000 65536"})");
  CHECK(ValidateCellSpec(spec).ok());
}

}  // namespace
}  // namespace mycel::cells
