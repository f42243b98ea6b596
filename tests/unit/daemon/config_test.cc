#include "daemon/config.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/fs.h"
#include "runtime/host_info.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

using google::protobuf::FieldDescriptor;

// A scalar field's value as a flag would write it.
std::string Text(const mycel::v1::DaemonConfig& c, const FieldDescriptor* f) {
  const google::protobuf::Reflection* r = c.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(c, f);
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r->GetInt32(c, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(c, f) ? "true" : "false";
    default:
      FAIL("no text form for ", f->name());
      return "";
  }
}

// The default column of the docs' tables: `literal`, "the hostname", or
// "off" (a bool) / "none".
std::string DocDefault(const DaemonSetting& s) {
  std::string text = DefaultText(s);
  if (!s.options->default_value().empty()) return absl::StrCat("`", text, "`");
  if (!text.empty()) return text;
  return s.field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL ? "off" : "none";
}

// The cells of every markdown table row in `doc` (after `after`, before the
// next "## " heading) whose first cell is `code`, keyed by that cell.
std::map<std::string, std::vector<std::string>> TableRows(
    const std::string& doc, const std::string& after) {
  std::map<std::string, std::vector<std::string>> rows;
  size_t start = doc.find(after);
  REQUIRE(start != std::string::npos);
  size_t end = doc.find("\n## ", start + after.size());
  absl::string_view section(doc.data() + start,
                            std::min(end, doc.size()) - start);
  for (absl::string_view line : absl::StrSplit(section, '\n')) {
    if (!absl::ConsumePrefix(&line, "| `")) continue;
    std::vector<std::string> cells;
    for (absl::string_view cell : absl::StrSplit(line, " | ")) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    cells[0] = absl::StrCat("`", cells[0]);
    rows[cells[0]] = cells;
  }
  return rows;
}

std::string SourceFile(const std::string& path) {
  absl::StatusOr<std::string> text =
      ReadFile(absl::StrCat(MYCEL_SOURCE_DIR, "/", path));
  REQUIRE_MESSAGE(text.ok(), text.status().ToString());
  return *text;
}

TEST_CASE("defaults fill in state dir, socket, level and node name") {
  auto f = ParseDaemonFlags({});
  REQUIRE(f.ok());
  CHECK(f->config.state_dir() == "/var/lib/mycel");
  CHECK(f->config.socket() == "/run/mycel/mycel.sock");
  CHECK(f->config.log_level() == "info");
  CHECK_FALSE(f->config.node_name().empty());
}

TEST_CASE("flags take both --flag value and --flag=value") {
  auto f = ParseDaemonFlags({"--state-dir", "/srv/m", "--socket=/tmp/s.sock",
                             "--node-name", "n1", "--log-level=debug"});
  REQUIRE(f.ok());
  CHECK(f->config.state_dir() == "/srv/m");
  CHECK(f->config.socket() == "/tmp/s.sock");
  CHECK(f->config.node_name() == "n1");
  CHECK(f->config.log_level() == "debug");
}

TEST_CASE("a config file sets fields and flags override it wherever they are") {
  testing::TempDir dir;
  std::string path = dir.Sub("c.json");
  REQUIRE(
      WriteFile(path, R"({"state_dir": "/from/file", "node_name": "filenode",
                              "log_level": "warn"})")
          .ok());
  auto f = ParseDaemonFlags({"--node-name", "flagnode", "--config", path});
  REQUIRE(f.ok());
  CHECK(f->config.state_dir() == "/from/file");
  CHECK(f->config.node_name() == "flagnode");
  CHECK(f->config.log_level() == "warn");
}

TEST_CASE("bad input names the flag or field") {
  auto unknown = ParseDaemonFlags({"--state-dri", "/x"});
  CHECK(unknown.status().message() == "unknown flag --state-dri (see --help)");
  auto missing = ParseDaemonFlags({"--socket"});
  CHECK(missing.status().message() == "--socket: missing value");
  auto relative = ParseDaemonFlags({"--state-dir", "rel"});
  CHECK(relative.status().message().find("state_dir") == 0);
  auto level = ParseDaemonFlags({"--log-level", "loud"});
  CHECK(level.status().message().find("log_level") == 0);
  auto listen = ParseDaemonFlags({"--listen", "nohost"});
  CHECK(listen.status().message().find("listen:") == 0);
  auto port = ParseDaemonFlags({"--listen", "127.0.0.1:70000"});
  CHECK(port.status().message().find("listen:") == 0);
  auto tls = ParseDaemonFlags({"--tls-cert", "/a"});
  CHECK(tls.status().message().find("tls_cert, tls_key, tls_ca") == 0);
  std::string long_sock(120, 's');
  auto sock = ParseDaemonFlags({"--socket", "/" + long_sock});
  CHECK(sock.status().message().find("socket:") == 0);
  for (const char* bad : {"/abs", "a/../b", "a//b", "trailing/", ".", ".."}) {
    auto subtree = ParseDaemonFlags({"--cgroup-subtree", bad});
    CHECK_MESSAGE(subtree.status().code() == absl::StatusCode::kInvalidArgument,
                  bad);
    CHECK_MESSAGE(subtree.status().message().find("cgroup_subtree:") == 0, bad);
  }
  for (const char* bad : {"-1", "17", "many"}) {
    auto pool = ParseDaemonFlags({"--cell-pool", bad});
    CHECK_MESSAGE(pool.status().message().find("cell_pool:") == 0, bad);
  }
  for (const char* bad : {"0", "-5", "100001", "lots"}) {
    auto conns = ParseDaemonFlags({"--connections-per-source", bad});
    CHECK_MESSAGE(conns.status().code() == absl::StatusCode::kInvalidArgument,
                  bad);
    CHECK_MESSAGE(conns.status().message().find("connections_per_source:") == 0,
                  bad);
  }
  auto conns = ParseDaemonFlags({"--connections-per-source", "2000"});
  REQUIRE(conns.ok());
  CHECK(conns->config.connections_per_source() == 2000);
  for (const char* bad : {"0", "-1", "100001", "many"}) {
    auto open = ParseDaemonFlags({"--open-connections-per-source", bad});
    CHECK_MESSAGE(open.status().code() == absl::StatusCode::kInvalidArgument,
                  bad);
    CHECK_MESSAGE(
        open.status().message().find("open_connections_per_source:") == 0, bad);
  }
  auto open = ParseDaemonFlags({"--open-connections-per-source", "20"});
  REQUIRE(open.ok());
  CHECK(open->config.open_connections_per_source() == 20);
  for (const char* bad : {"0", "-1", "1000001", "many"}) {
    auto watches = ParseDaemonFlags({"--max-watches", bad});
    CHECK_MESSAGE(watches.status().code() == absl::StatusCode::kInvalidArgument,
                  bad);
    CHECK_MESSAGE(watches.status().message().find("max_watches:") == 0, bad);
    for (const char* flag : {"max_log_streams", "max_waits"}) {
      std::string dashed = absl::StrReplaceAll(flag, {{"_", "-"}});
      auto r = ParseDaemonFlags({"--" + dashed, bad});
      CHECK_MESSAGE(r.status().code() == absl::StatusCode::kInvalidArgument,
                    flag, " ", bad);
      CHECK_MESSAGE(r.status().message().find(absl::StrCat(flag, ":")) == 0,
                    flag, " ", bad, ": ", r.status().message());
    }
  }
  auto streams =
      ParseDaemonFlags({"--max-log-streams", "7", "--max-waits", "9"});
  REQUIRE(streams.ok());
  CHECK(streams->config.max_log_streams() == 7);
  CHECK(streams->config.max_waits() == 9);
  auto defaults = ParseDaemonFlags({});
  REQUIRE(defaults.ok());
  CHECK(defaults->config.max_watches() == 4096);
  CHECK(defaults->config.max_log_streams() == 1024);
  CHECK(defaults->config.max_waits() == 4096);
  CHECK(defaults->config.connections_per_source() == 512);
  CHECK(defaults->config.open_connections_per_source() == 256);
  auto pool = ParseDaemonFlags({"--cell-pool", "0"});
  REQUIRE(pool.ok());
  CHECK(pool->config.has_cell_pool());
  CHECK(pool->config.cell_pool() == 0);
  auto nested = ParseDaemonFlags({"--cgroup-subtree", "mycel/node-b"});
  REQUIRE(nested.ok());
  CHECK(nested->config.cgroup_subtree() == "mycel/node-b");
  for (const auto& s : {unknown.status(), missing.status(), relative.status(),
                        level.status(), tls.status()}) {
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("tombstone_retention: 72h by default, bounded, named in errors") {
  auto defaults = ParseDaemonFlags({});
  REQUIRE(defaults.ok());
  CHECK(*TombstoneRetention(defaults->config) == absl::Hours(72));
  auto brief = ParseDaemonFlags({"--tombstone-retention", "1s"});
  REQUIRE(brief.ok());
  CHECK(*TombstoneRetention(brief->config) == absl::Seconds(1));
  for (const char* bad : {"0s", "900ms", "8761h", "later", "-1h"}) {
    CAPTURE(bad);
    auto f = ParseDaemonFlags({"--tombstone-retention", bad});
    CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(f.status().message() ==
          absl::StrCat("tombstone_retention: want a duration in 1s..8760h "
                       "such as 72h, got \"",
                       bad, "\""));
  }
}

TEST_CASE("state_quota: 2G by default, a size in 1M..1T, named in errors") {
  auto defaults = ParseDaemonFlags({});
  REQUIRE(defaults.ok());
  CHECK(*StateQuota(defaults->config) == int64_t{2} << 30);
  auto small = ParseDaemonFlags({"--state-quota", "1M"});
  REQUIRE(small.ok());
  CHECK(*StateQuota(small->config) == int64_t{1} << 20);
  auto mib = ParseDaemonFlags({"--state-quota", "512MiB"});
  REQUIRE(mib.ok());
  CHECK(*StateQuota(mib->config) == int64_t{512} << 20);
  for (const char* bad :
       {"0", "1023K", "2T", "lots", "-1G", "nan", "inf", "1e30", ""}) {
    CAPTURE(bad);
    auto f = ParseDaemonFlags({"--state-quota", bad});
    if (std::string(bad).empty()) {
      // Empty is the default, as for every string setting.
      CHECK(f.ok());
      continue;
    }
    CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(f.status().message() ==
          absl::StrCat("state_quota: want a size in 1M..1T such as 2G, got \"",
                       bad, "\""));
  }
}

TEST_CASE("an unknown field or bad JSON in the config file is named") {
  testing::TempDir dir;
  std::string path = dir.Sub("c.json");
  REQUIRE(WriteFile(path, R"({"state_dri": "/x"})").ok());
  auto f = ParseDaemonFlags({"--config", path});
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.status().message().find("state_dri") != absl::string_view::npos);
  CHECK(f.status().message().find(path) != absl::string_view::npos);

  REQUIRE(WriteFile(path, "{not json").ok());
  CHECK(ParseDaemonFlags({"--config", path}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(
      ParseDaemonFlags({"--config", dir.Sub("absent.json")}).status().code() ==
      absl::StatusCode::kNotFound);
}

TEST_CASE("every setting has help, and a flag or a place in the file only") {
  REQUIRE(DaemonSettings().size() ==
          static_cast<size_t>(
              mycel::v1::DaemonConfig::descriptor()->field_count()));
  for (const DaemonSetting& s : DaemonSettings()) {
    CAPTURE(s.field->name());
    CHECK_FALSE(s.options->help().empty());
    if (s.field->is_repeated()) {
      // Only a named repeated_flag gives one, for a list of strings.
      CHECK(s.flag.empty() == s.options->repeated_flag().empty());
      if (!s.flag.empty()) {
        CHECK(s.flag == "--" + s.options->repeated_flag());
        CHECK(s.field->cpp_type() == FieldDescriptor::CPPTYPE_STRING);
      }
      continue;
    }
    std::string dashed(s.field->name());
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    CHECK(s.flag == "--" + dashed);
    // The parser knows the flag and can set the field from text.
    bool is_bool = s.field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL;
    CHECK(s.options->value_name().empty() == is_bool);
    auto parsed = ParseDaemonFlags({is_bool ? s.flag : s.flag + "=7"});
    CHECK(parsed.status().message().find("unknown flag") ==
          absl::string_view::npos);
    CHECK(parsed.status().code() != absl::StatusCode::kInternal);
  }
  // A file-only setting is no flag.
  CHECK(ParseDaemonFlags({"--modules", "x"}).status().message() ==
        "unknown flag --modules (see --help)");
  CHECK(ParseDaemonFlags({"--pid1=true"}).status().message() ==
        "--pid1: takes no value");
  auto pid1 = ParseDaemonFlags({"--pid1"});
  REQUIRE(pid1.ok());
  CHECK(pid1->config.pid1());
}

TEST_CASE("every default is applied, once, where the proto says") {
  auto f = ParseDaemonFlags({});
  REQUIRE(f.ok());
  const mycel::v1::DaemonConfig& c = f->config;
  const google::protobuf::Reflection* r = c.GetReflection();
  for (const DaemonSetting& s : DaemonSettings()) {
    CAPTURE(s.field->name());
    const mycel::v1::Setting& o = *s.options;
    CHECK(int(!o.default_value().empty()) + int(!o.default_field().empty()) +
              int(o.default_hostname()) <=
          1);
    if (!o.default_value().empty()) {
      CHECK(Text(c, s.field) == o.default_value());
      // Without presence a number's 0 would read as unset and give way to
      // the default: --cell-pool 0 could not be asked for.
      CHECK((s.field->cpp_type() == FieldDescriptor::CPPTYPE_STRING ||
             s.field->has_presence()));
    } else if (!o.default_field().empty()) {
      const FieldDescriptor* from =
          c.GetDescriptor()->FindFieldByName(o.default_field());
      REQUIRE(from != nullptr);
      CHECK(Text(c, s.field) == Text(c, from));
    } else if (o.default_hostname()) {
      CHECK(Text(c, s.field) == Hostname().value());
    } else if (s.field->is_repeated()) {
      CHECK(r->FieldSize(c, s.field) == 0);
    } else {
      CHECK_FALSE(r->HasField(c, s.field));
    }
  }
  CHECK(c.hostname() == c.node_name());
  CHECK(c.cgroup_subtree() == kDefaultCgroupSubtree);
  // Applying them again changes nothing; a value given is kept.
  mycel::v1::DaemonConfig again = c;
  REQUIRE(ApplyDefaults(&again).ok());
  CHECK(again.SerializeAsString() == c.SerializeAsString());
  auto given = ParseDaemonFlags({"--node-name", "n1", "--module-dir", "/m",
                                 "--hostname", "h1", "--cell-pool", "0"});
  REQUIRE(given.ok());
  CHECK(given->config.module_dir() == "/m");
  CHECK(given->config.hostname() == "h1");
  CHECK(given->config.cell_pool() == 0);
  auto follows = ParseDaemonFlags({"--node-name", "n1"});
  REQUIRE(follows.ok());
  CHECK(follows->config.hostname() == "n1");
}

TEST_CASE("--help lists every flag with its default, and the file-only ones") {
  const std::string usage = DaemonUsage();
  for (const DaemonSetting& s : DaemonSettings()) {
    CAPTURE(s.field->name());
    std::string label =
        s.flag.empty()
            ? std::string(s.field->name())
            : absl::StrCat(s.flag, s.options->value_name().empty() ? "" : " ",
                           s.options->value_name());
    CHECK(usage.find("\n  " + label + " ") != std::string::npos);
    if (!DefaultText(s).empty()) {
      CHECK(usage.find(DefaultText(s) + ")") != std::string::npos);
    }
  }
  for (const char* flag : {"--config FILE", "--version", "-h, --help"}) {
    CHECK(usage.find(absl::StrCat("\n  ", flag, " ")) != std::string::npos);
  }
  CHECK(usage.find(kPid1Config) != std::string::npos);
  CHECK(usage.find(absl::StrCat("0..", kMaxCellPool)) != std::string::npos);
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    CHECK_MESSAGE(line.size() <= 79, line);
  }
}

TEST_CASE("README.md's flag table lists every setting and its default") {
  const std::string readme = SourceFile("README.md");
  auto rows = TableRows(readme, "\n## myceld\n");
  size_t synopsis = readme.find("\nmyceld [");
  REQUIRE(synopsis != std::string::npos);
  const std::string usage_line =
      readme.substr(synopsis, readme.find("```", synopsis) - synopsis);
  std::set<std::string> known = {"`--config`"};
  for (const DaemonSetting& s : DaemonSettings()) {
    CAPTURE(s.field->name());
    std::string key = absl::StrCat(
        "`", s.flag.empty() ? std::string(s.field->name()) : s.flag, "`");
    known.insert(key);
    REQUIRE(rows.count(key) == 1);
    CHECK(rows[key][1] == DocDefault(s));
    if (s.flag.empty()) {
      CHECK(rows[key][2].find("only in the `--config` file") == 0);
    } else {
      CHECK((absl::StrContains(usage_line, s.flag + " ") ||
             absl::StrContains(usage_line, s.flag + "]")));
    }
  }
  for (const auto& row : rows) {
    CHECK_MESSAGE(known.count(row.first) == 1, row.first);
  }
}

TEST_CASE("docs/api.md's configuration schema lists every field") {
  auto rows =
      TableRows(SourceFile("docs/api.md"), "\n## Configuration schema\n");
  std::set<std::string> known;
  for (const DaemonSetting& s : DaemonSettings()) {
    CAPTURE(s.field->name());
    std::string key = absl::StrCat("`", s.field->name(), "`");
    known.insert(key);
    REQUIRE(rows.count(key) == 1);
    CHECK(rows[key][1] == (s.flag.empty() ? "file only"
                           : s.field->is_repeated()
                               ? absl::StrCat("`", s.flag, "` (repeatable)")
                               : absl::StrCat("`", s.flag, "`")));
    CHECK(rows[key][2] == DocDefault(s));
  }
  for (const auto& row : rows) {
    CHECK_MESSAGE(known.count(row.first) == 1, row.first);
  }
}

}  // namespace
}  // namespace mycel
