#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "proto/daemon_defaults.h"
#include "runtime/byte_size.h"
#include "runtime/fs.h"
#include "runtime/host_info.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {
namespace {

using google::protobuf::FieldDescriptor;
using mycel::v1::DaemonConfig;

// Sets the scalar `field` from `text`, the form a flag takes.
absl::Status SetFromText(const FieldDescriptor& field, const std::string& text,
                         DaemonConfig* config) {
  using google::protobuf::Reflection;
  const Reflection* r = config->GetReflection();
  // `n` gives the number's type, `set` the Reflection setter of that type.
  auto number = [&](auto n, auto set) -> absl::Status {
    if (!absl::SimpleAtoi(text, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field.name(), ": want a number, got \"", text, "\""));
    }
    (r->*set)(config, &field, n);
    return absl::OkStatus();
  };
  if (field.is_repeated()) {
    if (field.cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
      return absl::InternalError(
          absl::StrCat(field.name(), ": only repeated strings have a flag"));
    }
    r->AddString(config, &field, text);
    return absl::OkStatus();
  }
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(config, &field, text);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(config, &field, text == "true");
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_INT32:
      return number(int32_t{0}, &Reflection::SetInt32);
    case FieldDescriptor::CPPTYPE_INT64:
      return number(int64_t{0}, &Reflection::SetInt64);
    case FieldDescriptor::CPPTYPE_UINT32:
      return number(uint32_t{0}, &Reflection::SetUInt32);
    case FieldDescriptor::CPPTYPE_UINT64:
      return number(uint64_t{0}, &Reflection::SetUInt64);
    default:
      return absl::InternalError(absl::StrCat(
          field.name(), ": a ", field.cpp_type_name(), " has no flag form"));
  }
}

const DaemonSetting* FindFlag(absl::string_view flag) {
  for (const DaemonSetting& s : DaemonSettings()) {
    if (!s.flag.empty() && s.flag == flag) return &s;
  }
  return nullptr;
}

// `text` wrapped to lines of at most `width` characters, each after
// `indent` spaces but the first.
// Joins words that Wrap keeps on one line; it prints a space.
constexpr char kNoBreak = '\x1f';

// `text` in lines of at most `width`, each after the first indented by
// `indent`; breaks at spaces, never at kNoBreak.
std::string Wrap(absl::string_view text, size_t indent, size_t width) {
  std::string out;
  size_t line = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line > 0 && line + 1 + word.size() > width) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      line = 0;
    } else if (line > 0) {
      out += ' ';
      ++line;
    }
    absl::StrAppend(&out, word);
    line += word.size();
  }
  std::replace(out.begin(), out.end(), kNoBreak, ' ');
  return out;
}

}  // namespace

const std::vector<DaemonSetting>& DaemonSettings() {
  static const auto* settings = [] {
    auto* v = new std::vector<DaemonSetting>;
    const google::protobuf::Descriptor* d = DaemonConfig::descriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      const mycel::v1::Setting* o =
          &f->options().GetExtension(mycel::v1::setting);
      std::string flag;
      if (!f->is_repeated()) {
        flag = absl::StrCat("--", absl::StrReplaceAll(f->name(), {{"_", "-"}}));
      } else if (!o->repeated_flag().empty()) {
        flag = absl::StrCat("--", o->repeated_flag());
      }
      v->push_back({f, o, std::move(flag)});
    }
    return v;
  }();
  return *settings;
}

std::string DefaultText(const DaemonSetting& setting) {
  const mycel::v1::Setting& o = *setting.options;
  if (!o.default_value().empty()) return o.default_value();
  if (!o.default_field().empty()) {
    return absl::StrCat("the ",
                        absl::StrReplaceAll(o.default_field(), {{"_", " "}}));
  }
  if (o.default_hostname()) return "the hostname";
  return "";
}

absl::Status ApplyDefaults(DaemonConfig* config) {
  const google::protobuf::Reflection* r = config->GetReflection();
  auto unset = [&](const DaemonSetting& s) {
    return !s.field->is_repeated() && !r->HasField(*config, s.field);
  };
  for (const DaemonSetting& s : DaemonSettings()) {
    if (!unset(s)) continue;
    if (!s.options->default_value().empty()) {
      RETURN_IF_ERROR(
          SetFromText(*s.field, s.options->default_value(), config));
    } else if (s.options->default_hostname()) {
      ASSIGN_OR_RETURN(std::string host, Hostname());
      r->SetString(config, s.field, host);
    }
  }
  // After the others, so that the field a default names has its own.
  for (const DaemonSetting& s : DaemonSettings()) {
    if (!unset(s) || s.options->default_field().empty()) continue;
    const FieldDescriptor* from =
        DaemonConfig::descriptor()->FindFieldByName(s.options->default_field());
    if (from == nullptr || from->type() != s.field->type() ||
        from->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
      return absl::InternalError(absl::StrCat(
          s.field->name(), ": default_field names no string field"));
    }
    r->SetString(config, s.field, r->GetString(*config, from));
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ParseConfigJson(const std::string& json,
                                             const std::string& origin) {
  DaemonConfig config;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json, &config, opts);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", std::string(st.message())));
  }
  return config;
}

absl::Status ValidateConfig(const DaemonConfig& config) {
  if (!config.log_level().empty()) {
    RETURN_IF_ERROR(log::ParseLevel(config.log_level()).status());
  }
  if (config.state_dir().empty() || config.state_dir()[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dir: must be an absolute path, got \"",
                     config.state_dir(), "\""));
  }
  if (!config.durability().empty() && config.durability() != "normal" &&
      config.durability() != "full") {
    return absl::InvalidArgumentError(absl::StrCat(
        "durability: want normal or full, got \"", config.durability(), "\""));
  }
  if (config.socket().empty()) {
    return absl::InvalidArgumentError("socket: must not be empty");
  }
  if (config.socket().size() >= 108) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket: path is ", config.socket().size(),
                     " bytes; a unix socket path must be shorter than 108"));
  }
  // `field`: HOST:PORT, a port in 0..65535 (1..65535 with `nonzero`).
  auto host_port = [](absl::string_view field, absl::string_view hp,
                      bool nonzero) -> absl::Status {
    size_t colon = hp.rfind(':');
    int port = -1;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(hp.substr(colon + 1), &port) || port < 0 ||
        port > 65535 || (nonzero && port == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": want HOST:PORT with a port in ",
                       nonzero ? "1" : "0", "..65535, got \"", hp, "\""));
    }
    return absl::OkStatus();
  };
  if (!config.listen().empty()) {
    RETURN_IF_ERROR(host_port("listen", config.listen(), false));
  }
  // Port 0 (the default with --listen HOST:0) advertises the bound port.
  if (!config.advertise().empty()) {
    RETURN_IF_ERROR(host_port("advertise", config.advertise(), false));
  }
  for (const std::string& seed : config.seeds()) {
    RETURN_IF_ERROR(host_port("seeds", seed, true));
  }
  if (!config.membership_profile().empty() &&
      config.membership_profile() != "lan" &&
      config.membership_profile() != "wan") {
    return absl::InvalidArgumentError(
        absl::StrCat("membership_profile: want lan or wan, got \"",
                     config.membership_profile(), "\""));
  }
  RETURN_IF_ERROR(CertLifetime(config).status());
  RETURN_IF_ERROR(TokenRetention(config).status());
  RETURN_IF_ERROR(TombstoneRetention(config).status());
  RETURN_IF_ERROR(MembershipDeadRetention(config).status());
  RETURN_IF_ERROR(StateQuota(config).status());
  if (!config.cgroup_subtree().empty()) {
    absl::string_view sub = config.cgroup_subtree();
    bool ok = sub.front() != '/' && sub.back() != '/';
    for (absl::string_view part : absl::StrSplit(sub, '/')) {
      ok = ok && !part.empty() && part != "." && part != "..";
    }
    if (!ok || sub.find('\0') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("cgroup_subtree: want a relative path of names such as "
                       "\"mycel\" or \"mycel/node-b\", got \"",
                       sub, "\""));
    }
  }
  if (config.has_cell_pool() &&
      (config.cell_pool() < 0 || config.cell_pool() > kMaxCellPool)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cell_pool: want a number of cells from 0 to ", kMaxCellPool));
  }
  if (config.has_connections_per_source() &&
      (config.connections_per_source() < 1 ||
       config.connections_per_source() > kMaxConnectionsPerSource)) {
    return absl::InvalidArgumentError(
        absl::StrCat("connections_per_source: want a number from 1 to ",
                     kMaxConnectionsPerSource));
  }
  if (config.has_open_connections_per_source() &&
      (config.open_connections_per_source() < 1 ||
       config.open_connections_per_source() > kMaxConnectionsPerSource)) {
    return absl::InvalidArgumentError(
        absl::StrCat("open_connections_per_source: want a number from 1 to ",
                     kMaxConnectionsPerSource));
  }
  if (config.has_max_watches() &&
      (config.max_watches() < 1 || config.max_watches() > kMaxWatches)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_watches: want a number from 1 to ", kMaxWatches));
  }
  if (config.has_max_log_streams() &&
      (config.max_log_streams() < 1 ||
       config.max_log_streams() > kMaxWatches)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_log_streams: want a number from 1 to ", kMaxWatches));
  }
  if (config.has_oom_score_adj() &&
      (config.oom_score_adj() < -1000 || config.oom_score_adj() > 1000)) {
    return absl::InvalidArgumentError(
        "oom_score_adj: want a number from -1000 to 1000");
  }
  if (config.has_max_waits() &&
      (config.max_waits() < 1 || config.max_waits() > kMaxWatches)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_waits: want a number from 1 to ", kMaxWatches));
  }
  int tls = !config.tls_cert().empty() + !config.tls_key().empty() +
            !config.tls_ca().empty();
  if (tls != 0 && tls != 3) {
    return absl::InvalidArgumentError(
        "tls_cert, tls_key, tls_ca: give all three, or none");
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonFlags> ParseDaemonFlags(
    const std::vector<std::string>& args, const std::string& default_config) {
  DaemonFlags flags;
  std::vector<std::pair<const DaemonSetting*, std::string>> sets;
  std::string config_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      flags.help = true;
      continue;
    }
    if (arg == "--version") {
      flags.version = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\" (see --help)"));
    }
    std::string flag = arg;
    std::optional<std::string> value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const DaemonSetting* setting = FindFlag(flag);
    if (setting == nullptr && flag != "--config") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", flag, " (see --help)"));
    }
    const bool is_bool = setting != nullptr &&
                         setting->field->cpp_type() ==
                             google::protobuf::FieldDescriptor::CPPTYPE_BOOL;
    if (is_bool) {
      if (value.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": takes no value"));
      }
      value = "true";
    } else if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": missing value"));
      }
      value = args[++i];
    }
    if (setting == nullptr) {
      config_path = *value;
    } else {
      sets.emplace_back(setting, *value);
    }
  }
  if (config_path.empty() && !default_config.empty() &&
      CanAccess(default_config, R_OK)) {
    config_path = default_config;
  }
  if (!config_path.empty()) {
    absl::StatusOr<std::string> json = ReadFile(config_path);
    if (!json.ok()) return Annotate(json.status(), "--config");
    ASSIGN_OR_RETURN(
        flags.config,
        ParseConfigJson(*json, absl::StrCat("--config ", config_path)));
  }
  // A repeated setting's flags replace the file's list (the first of
  // them clears it).
  std::set<const FieldDescriptor*> cleared;
  for (const auto& [setting, value] : sets) {
    if (setting->field->is_repeated() &&
        cleared.insert(setting->field).second) {
      flags.config.GetReflection()->ClearField(&flags.config, setting->field);
    }
    RETURN_IF_ERROR(SetFromText(*setting->field, value, &flags.config));
  }
  RETURN_IF_ERROR(ApplyDefaults(&flags.config));
  RETURN_IF_ERROR(ValidateConfig(flags.config));
  return flags;
}

namespace {

// A duration setting (field `number`, named `name`) or its default, within
// [min, max]; INVALID_ARGUMENT naming the field otherwise.
absl::StatusOr<absl::Duration> DurationSetting(
    const std::string& value, int number, absl::string_view name,
    absl::Duration min, absl::Duration max, absl::string_view range) {
  const std::string& text = value.empty() ? DaemonDefault(number) : value;
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < min || d > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": want a duration in ", range, " such as ",
                     DaemonDefault(number), ", got \"", text, "\""));
  }
  return d;
}

}  // namespace

absl::StatusOr<absl::Duration> CertLifetime(const DaemonConfig& config) {
  return DurationSetting(
      config.cert_lifetime(), DaemonConfig::kCertLifetimeFieldNumber,
      "cert_lifetime", absl::Seconds(10), absl::Hours(8760), "10s..8760h");
}

absl::StatusOr<absl::Duration> TokenRetention(const DaemonConfig& config) {
  return DurationSetting(
      config.token_retention(), DaemonConfig::kTokenRetentionFieldNumber,
      "token_retention", absl::ZeroDuration(), absl::Hours(8760), "0s..8760h");
}

absl::StatusOr<absl::Duration> MembershipDeadRetention(
    const DaemonConfig& config) {
  return DurationSetting(config.membership_dead_retention(),
                         DaemonConfig::kMembershipDeadRetentionFieldNumber,
                         "membership_dead_retention", absl::Seconds(1),
                         absl::Hours(8760), "1s..8760h");
}

absl::StatusOr<absl::Duration> TombstoneRetention(const DaemonConfig& config) {
  return DurationSetting(config.tombstone_retention(),
                         DaemonConfig::kTombstoneRetentionFieldNumber,
                         "tombstone_retention", absl::Seconds(1),
                         absl::Hours(8760), "1s..8760h");
}

absl::StatusOr<int64_t> StateQuota(const DaemonConfig& config) {
  constexpr int64_t kMin = int64_t{1} << 20, kMax = int64_t{1} << 40;
  const std::string& text =
      config.state_quota().empty()
          ? DaemonDefault(DaemonConfig::kStateQuotaFieldNumber)
          : config.state_quota();
  absl::StatusOr<int64_t> bytes = ParseByteSize("state_quota", text);
  if (!bytes.ok() || *bytes < kMin || *bytes > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_quota: want a size in 1M..1T such as ",
                     DaemonDefault(DaemonConfig::kStateQuotaFieldNumber),
                     ", got \"", text, "\""));
  }
  return *bytes;
}

std::string DaemonUsage() {
  constexpr size_t kWidth = 79;
  struct Row {
    std::string label, help;
  };
  std::vector<Row> flags = {
      {"--config FILE",
       absl::StrCat("read settings from a JSON file; flags override it (as "
                    "PID 1 of a machine, myceld reads ",
                    kPid1Config, " when no --config is given)")}};
  std::vector<Row> file_only;
  for (const DaemonSetting& s : DaemonSettings()) {
    std::string help = s.options->help();
    if (std::string d = DefaultText(s); !d.empty()) {
      // "(default: the node name)" stays on one line.
      std::string text = absl::StrCat(
          absl::StartsWith(d, "the ") ? "(default: " : "(default ", d, ")");
      std::replace(text.begin(), text.end(), ' ', kNoBreak);
      absl::StrAppend(&help, " ", text);
    }
    if (s.flag.empty()) {
      file_only.push_back({s.field->name(), help});
    } else if (s.options->value_name().empty()) {
      flags.push_back({s.flag, help});
    } else {
      flags.push_back(
          {absl::StrCat(s.flag, " ", s.options->value_name()), help});
    }
  }
  flags.push_back({"--version", "print the version and exit"});
  flags.push_back({"-h, --help", "print this help"});
  size_t column = 0;
  for (const auto* rows : {&flags, &file_only}) {
    for (const Row& row : *rows) column = std::max(column, row.label.size());
  }
  column += 4;  // two spaces before the label, two after
  auto lines = [&](const std::vector<Row>& rows) {
    std::string out;
    for (const Row& row : rows) {
      std::string label = absl::StrCat("  ", row.label);
      label.resize(column, ' ');
      absl::StrAppend(&out, label, Wrap(row.help, column, kWidth - column),
                      "\n");
    }
    return out;
  };
  return absl::StrCat(
      "usage: myceld [flags]\n\n"
      "The mycel node agent. Serves the mycel gRPC API on a unix socket and,\n"
      "with TLS configured, on TCP with mutual TLS.\n\n"
      "flags (each also settable in the --config JSON file, as state_dir "
      "etc.):\n",
      lines(flags), "\nsettings only the --config JSON file can give:\n",
      lines(file_only));
}

}  // namespace mycel
