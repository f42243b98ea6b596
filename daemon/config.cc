#include "daemon/config.h"

#include <unistd.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/host_info.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {
namespace {

using mycel::v1::DaemonConfig;
using Setter = std::function<void(DaemonConfig*, const std::string&)>;

// Flag name → field setter. The JSON field of each flag has the same name
// with underscores (state-dir ↔ state_dir).
const std::map<std::string, Setter>& FlagSetters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"state-dir",
       [](DaemonConfig* c, const std::string& v) { c->set_state_dir(v); }},
      {"socket",
       [](DaemonConfig* c, const std::string& v) { c->set_socket(v); }},
      {"node-name",
       [](DaemonConfig* c, const std::string& v) { c->set_node_name(v); }},
      {"listen",
       [](DaemonConfig* c, const std::string& v) { c->set_listen(v); }},
      {"tls-cert",
       [](DaemonConfig* c, const std::string& v) { c->set_tls_cert(v); }},
      {"tls-key",
       [](DaemonConfig* c, const std::string& v) { c->set_tls_key(v); }},
      {"tls-ca",
       [](DaemonConfig* c, const std::string& v) { c->set_tls_ca(v); }},
      {"log-level",
       [](DaemonConfig* c, const std::string& v) { c->set_log_level(v); }},
      {"module-dir",
       [](DaemonConfig* c, const std::string& v) { c->set_module_dir(v); }},
      {"hostname",
       [](DaemonConfig* c, const std::string& v) { c->set_hostname(v); }},
      {"cgroup-subtree",
       [](DaemonConfig* c, const std::string& v) { c->set_cgroup_subtree(v); }},
      {"cell-pool",
       [](DaemonConfig* c, const std::string& v) {
         int n = 0;
         // Not a number: out of range, so that ValidateConfig names it.
         c->set_cell_pool(absl::SimpleAtoi(v, &n) ? n : -1);
       }},
  };
  return *setters;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return PosixError(absl::StrCat("--config: open ", path), errno);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

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
  if (config.socket().empty()) {
    return absl::InvalidArgumentError("socket: must not be empty");
  }
  if (config.socket().size() >= 108) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket: path is ", config.socket().size(),
                     " bytes; a unix socket path must be shorter than 108"));
  }
  if (!config.listen().empty()) {
    absl::string_view hp = config.listen();
    size_t colon = hp.rfind(':');
    int port = -1;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(hp.substr(colon + 1), &port) || port < 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "listen: want HOST:PORT with a port in 0..65535, got \"", hp, "\""));
    }
  }
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
  std::vector<std::pair<std::string, std::string>> sets;
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
    if (arg == "--pid1") {
      flags.config.set_pid1(true);
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\" (see --help)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (name != "config" && FlagSetters().count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    } else {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": missing value"));
      }
      value = args[++i];
    }
    if (name == "config") {
      config_path = value;
    } else if (FlagSetters().count(name) != 0) {
      sets.emplace_back(name, value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
  }
  if (config_path.empty() && !default_config.empty() &&
      access(default_config.c_str(), R_OK) == 0) {
    config_path = default_config;
  }
  if (!config_path.empty()) {
    bool pid1 = flags.config.pid1();
    ASSIGN_OR_RETURN(std::string json, ReadFile(config_path));
    ASSIGN_OR_RETURN(
        flags.config,
        ParseConfigJson(json, absl::StrCat("--config ", config_path)));
    if (pid1) flags.config.set_pid1(true);
  }
  for (const auto& [name, value] : sets) {
    FlagSetters().at(name)(&flags.config, value);
  }
  DaemonConfig& c = flags.config;
  if (c.state_dir().empty()) c.set_state_dir(kDefaultStateDir);
  if (c.socket().empty()) c.set_socket(kDefaultSocket);
  if (c.log_level().empty()) c.set_log_level("info");
  if (c.node_name().empty()) {
    ASSIGN_OR_RETURN(std::string host, Hostname());
    c.set_node_name(host);
  }
  RETURN_IF_ERROR(ValidateConfig(c));
  return flags;
}

std::string DaemonUsage() {
  return R"(usage: myceld [flags]

The mycel node agent. Serves the mycel gRPC API on a unix socket and,
with TLS configured, on TCP with mutual TLS.

flags (each also settable in the --config JSON file, as state_dir etc.):
  --config FILE        read settings from a JSON file; flags override it
  --state-dir DIR      state directory (default /var/lib/mycel)
  --socket PATH        unix socket for local administration
                       (default /run/mycel/mycel.sock)
  --node-name NAME     this node's name (default: the hostname)
  --listen HOST:PORT   serve the API on TCP; requires the three TLS files
  --tls-cert FILE      PEM server certificate for --listen
  --tls-key FILE       PEM private key for --tls-cert
  --tls-ca FILE        PEM CA that client certificates must chain to
  --log-level LEVEL    debug, info, warn or error (default info)
  --pid1               act as PID 1 of a container even when the pid is not 1
                       (PID 1 itself is detected; as PID 1 of a machine,
                       myceld reads /etc/mycel/myceld.json when no --config
                       is given)
  --module-dir DIR     where PID 1 finds the .ko files of "modules"
  --hostname NAME      hostname PID 1 sets (default: the node name)
  --cgroup-subtree P   where cells live below each cgroup mount, e.g.
                       mycel/node-b (default mycel); two myceld on one
                       host need different ones
  --cell-pool N        blank cells (cgroup and init) kept ready for each
                       set of namespaces in recent use, 0..16 (default 1;
                       0 turns the pool off)
  --version            print the version and exit
  -h, --help           print this help
)";
}

}  // namespace mycel
