// mycel mesh init | info | join | revoke | revocations | peers | members |
//   leave | token create|ls|revoke | user add
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/cli_config.h"
#include "cli/flags.h"
#include "google/protobuf/util/time_util.h"
#include "mycel/v1/membership.grpc.pb.h"
#include "mycel/v1/mesh.grpc.pb.h"
#include "runtime/fs.h"

namespace mycel::cli {
namespace {

using google::protobuf::util::TimeUtil;

std::string FormatTime(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                          absl::FromUnixSeconds(t.seconds()),
                          absl::UTCTimeZone());
}

// Parses "90s", "10m", "1h", "2h30m" (absl::ParseDuration) into whole
// seconds.
bool ParseTtl(const std::string& text, int64_t* seconds) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration()) {
    return false;
  }
  *seconds = absl::ToInt64Seconds(d);
  return *seconds > 0;
}

int Usage(const char* cmd, const absl::Status& s) {
  fprintf(stderr, "mycel mesh %s: %s\n", cmd, std::string(s.message()).c_str());
  return kExitUsage;
}

// The node is in the mesh but cannot serve it yet (its daemon retries): on
// stderr, whatever the output format, so that a script sees it too.
void WarnNotServing(const char* cmd, const mycel::v1::MeshInfo& info) {
  if (info.listen_error().empty()) return;
  fprintf(stderr,
          "mycel mesh %s: warning: the node is in the mesh %s but does not "
          "serve it on %s yet: %s (myceld retries; see mycel mesh info)\n",
          cmd, info.mesh().c_str(), info.listen().c_str(),
          info.listen_error().c_str());
}

// "ADDR", "ADDR (not serving: WHY)" or "-".
std::string ListenColumn(const mycel::v1::MeshInfo& info) {
  if (info.listen().empty()) return "-";
  if (info.listen_error().empty()) return info.listen();
  return absl::StrCat(info.listen(), " (not serving: ", info.listen_error(),
                      ")");
}

int Init(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {"--name", "--admin"}, {});
  if (!parsed.ok()) return Usage("init", parsed.status());
  if (!parsed->positional.empty()) {
    fprintf(stderr, "mycel mesh init: unexpected argument \"%s\"\n",
            parsed->positional[0].c_str());
    return kExitUsage;
  }
  absl::StatusOr<std::string> dir = DefaultConfigDir();
  if (!dir.ok()) return ctx.Fail(dir.status());
  mycel::v1::InitMeshRequest req;
  req.set_mesh(parsed->get("--name"));
  req.set_admin(parsed->get("--admin"));
  mycel::v1::InitMeshResponse resp;
  int rc = Call(ctx, &mycel::v1::Mesh::Stub::Init, req, &resp);
  if (rc != kExitOk) return rc;
  // The admin's key exists only in this answer: write it before anything
  // else can fail.
  absl::StatusOr<std::string> file =
      WriteCredentials(absl::StrCat(*dir, "/", resp.mesh().mesh()),
                       resp.admin(), resp.mesh(), *dir + "/config.json");
  if (!file.ok()) return ctx.Fail(file.status());
  WarnNotServing("init", resp.mesh());
  return Print(ctx, resp.mesh(), [&] {
    PrintKeyValues({
        {"MESH", resp.mesh().mesh()},
        {"NODE", resp.mesh().spiffe_id()},
        {"CA SHA-256", resp.mesh().ca_fingerprint()},
        {"ADMIN", resp.admin().user()},
        {"CONFIG", *file},
    });
    return kExitOk;
  });
}

int Info(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel mesh info: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(
      ctx, &mycel::v1::Mesh::Stub::GetInfo, mycel::v1::GetMeshInfoRequest(),
      [](const mycel::v1::MeshInfo& info) {
        if (info.mesh().empty()) {
          printf("not in a mesh\n");
          return kExitOk;
        }
        PrintKeyValues({
            {"MESH", info.mesh()},
            {"NODE", info.spiffe_id()},
            {"AUTHORITY", info.authority() ? "yes" : "no"},
            {"CA SHA-256", info.ca_fingerprint()},
            {"CERT EXPIRES", FormatTime(info.certificate_expires())},
            {"LISTEN", ListenColumn(info)},
        });
        return kExitOk;
      });
}

// "alive", "suspect", "dead", "left".
std::string StateName(mycel::v1::MemberState state) {
  switch (state) {
    case mycel::v1::MEMBER_STATE_ALIVE:
      return "alive";
    case mycel::v1::MEMBER_STATE_SUSPECT:
      return "suspect";
    case mycel::v1::MEMBER_STATE_DEAD:
      return "dead";
    case mycel::v1::MEMBER_STATE_LEFT:
      return "left";
    default:
      return "?";
  }
}

// "3s ago", "-" when never.
std::string Ago(const mycel::v1::Member& m, absl::Time now) {
  if (!m.has_last_heard()) return "-";
  absl::Time t = absl::FromUnixSeconds(m.last_heard().seconds()) +
                 absl::Nanoseconds(m.last_heard().nanos());
  absl::Duration d = absl::Trunc(now - t, absl::Milliseconds(100));
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  return absl::StrCat(absl::FormatDuration(d), " ago");
}

int Members(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel mesh members: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(
      ctx, &mycel::v1::Membership::Stub::ListMembers,
      mycel::v1::ListMembersRequest(),
      [](const mycel::v1::ListMembersResponse& r) {
        const absl::Time now = absl::Now();
        std::vector<std::vector<std::string>> rows;
        for (const mycel::v1::Member& m : r.members()) {
          std::vector<std::string> labels;
          for (const auto& [k, v] : m.labels()) {
            labels.push_back(absl::StrCat(k, "=", v));
          }
          std::sort(labels.begin(), labels.end());
          rows.push_back(
              {m.self() ? absl::StrCat(m.name(), " (self)") : m.name(),
               m.addresses().empty() ? "-" : m.addresses(0),
               m.health_score() > 0
                   ? absl::StrCat(StateName(m.state()), " (health ",
                                  m.health_score(), ")")
                   : StateName(m.state()),
               absl::StrCat(m.incarnation()),
               labels.empty() ? "-" : absl::StrJoin(labels, ","),
               m.self() ? "-" : Ago(m, now),
               m.replication_behind() < 0
                   ? "-"
                   : absl::StrCat(m.replication_behind())});
        }
        PrintTable({"NAME", "ADDRESS", "STATE", "INCARNATION", "LABELS",
                    "LAST HEARD", "BEHIND"},
                   rows);
        return kExitOk;
      });
}

int Leave(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {"--wait"}, {});
  if (!parsed.ok()) return Usage("leave", parsed.status());
  if (!parsed->positional.empty()) {
    fprintf(stderr, "mycel mesh leave: unexpected argument \"%s\"\n",
            parsed->positional[0].c_str());
    return kExitUsage;
  }
  mycel::v1::LeaveRequest req;
  if (parsed->has("--wait")) {
    absl::StatusOr<absl::Duration> wait =
        ParseDurationFlag("--wait", parsed->get("--wait"));
    if (!wait.ok()) return Usage("leave", wait.status());
    if (*wait <= absl::ZeroDuration() || *wait > absl::Minutes(1)) {
      return Usage("leave", absl::InvalidArgumentError(
                                "--wait: want a duration from 1ms to 1m"));
    }
    req.set_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(*wait)));
  }
  mycel::v1::LeaveResponse resp;
  return Call(ctx, &mycel::v1::Membership::Stub::Leave, req, &resp);
}

int TokenCreate(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {"--ttl", "--uses"}, {"--authority"});
  if (!parsed.ok()) return Usage("token create", parsed.status());
  mycel::v1::CreateTokenRequest req;
  int64_t ttl = 3600;
  if (parsed->has("--ttl") && !ParseTtl(parsed->get("--ttl"), &ttl)) {
    fprintf(stderr,
            "mycel mesh token create: --ttl: want a duration such as 1h or "
            "30m, got \"%s\"\n",
            parsed->get("--ttl").c_str());
    return kExitUsage;
  }
  int64_t uses = 1;
  if (parsed->has("--uses") &&
      (!absl::SimpleAtoi(parsed->get("--uses"), &uses) || uses < 1)) {
    fprintf(stderr,
            "mycel mesh token create: --uses: want a positive number, got "
            "\"%s\"\n",
            parsed->get("--uses").c_str());
    return kExitUsage;
  }
  req.set_ttl_seconds(ttl);
  req.set_uses(uses);
  req.set_authority(parsed->has("--authority"));
  // The token alone on stdout, so that T=$(mycel mesh token create) works.
  return CallAndPrint(ctx, &mycel::v1::Mesh::Stub::CreateToken, req,
                      [](const mycel::v1::CreateTokenResponse& r) {
                        printf("%s\n", r.token().c_str());
                        return kExitOk;
                      });
}

int TokenList(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel mesh token ls: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(
      ctx, &mycel::v1::Mesh::Stub::ListTokens, mycel::v1::ListTokensRequest(),
      [](const mycel::v1::ListTokensResponse& r) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& t : r.tokens()) {
          rows.push_back({t.id(), FormatTime(t.created()),
                          FormatTime(t.expires()), absl::StrCat(t.uses_left()),
                          t.authority() ? "yes" : "no",
                          t.revoked() ? "yes" : "no"});
        }
        PrintTable(
            {"ID", "CREATED", "EXPIRES", "USES LEFT", "AUTHORITY", "REVOKED"},
            rows);
        return kExitOk;
      });
}

int TokenRevoke(Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    fprintf(stderr, "mycel mesh token revoke: want one token ID\n");
    return kExitUsage;
  }
  mycel::v1::RevokeTokenRequest req;
  req.set_id(args[0]);
  mycel::v1::RevokeTokenResponse resp;
  return Call(ctx, &mycel::v1::Mesh::Stub::RevokeToken, req, &resp);
}

constexpr Command kTokenCommands[] = {
    {"create", "[--ttl 1h] [--uses 1] [--authority]",
     "create a join token and print it alone",
     "The token carries the SHA-256 of the mesh CA (a joining node checks it\n"
     "before it sends anything secret) and a secret, of which the node keeps\n"
     "only a hash. --ttl is a duration (30m, 1h, 24h; at most 168h).\n"
     "--authority lets the nodes it admits join as authorities (mycel mesh\n"
     "join --authority), which receive the CA key.\n",
     TokenCreate},
    {"ls", "", "list join tokens (never their secrets)", "", TokenList},
    {"revoke", "ID", "revoke a join token", "", TokenRevoke},
};

const Group kTokenGroup = {"mesh token", "Join tokens of the mesh.",
                           kTokenCommands};

int Token(Context& ctx, const std::vector<std::string>& args) {
  return Dispatch(ctx, kTokenGroup, args);
}

int Join(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {"--token", "--token-file"}, {"--authority"});
  if (!parsed.ok()) return Usage("join", parsed.status());
  if (parsed->positional.size() != 1 ||
      parsed->has("--token") == parsed->has("--token-file")) {
    fprintf(stderr,
            "mycel mesh join: want ADDR and one of --token T or --token-file "
            "FILE\n");
    return kExitUsage;
  }
  mycel::v1::JoinMeshRequest req;
  req.set_address(parsed->positional[0]);
  if (parsed->has("--token")) {
    req.set_token(parsed->get("--token"));
  } else {
    absl::StatusOr<std::string> token = ReadFile(parsed->get("--token-file"));
    if (!token.ok()) return ctx.Fail(token.status());
    req.set_token(*token);
  }
  req.set_authority(parsed->has("--authority"));
  return CallAndPrint(
      ctx, &mycel::v1::Mesh::Stub::Join, req,
      [&](const mycel::v1::MeshInfo& info) {
        WarnNotServing("join", info);
        PrintKeyValues({
            {"MESH", info.mesh()},
            {"NODE", info.spiffe_id()},
            {"AUTHORITY", info.authority() ? "yes" : "no"},
            {"CA SHA-256", info.ca_fingerprint()},
            {"CERT EXPIRES", FormatTime(info.certificate_expires())},
            {"VIA", req.address()},
        });
        return kExitOk;
      });
}

int Revoke(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {}, {"--user", "--node", "--serial"});
  if (!parsed.ok()) return Usage("revoke", parsed.status());
  int kinds =
      parsed->has("--user") + parsed->has("--node") + parsed->has("--serial");
  if (parsed->positional.size() != 1 || kinds > 1) {
    fprintf(stderr,
            "mycel mesh revoke: want one NAME or SERIAL, and at most one of "
            "--node, --user, --serial\n");
    return kExitUsage;
  }
  mycel::v1::RevokeRequest req;
  req.set_target(parsed->positional[0]);
  if (parsed->has("--user")) req.set_kind("user");
  if (parsed->has("--node")) req.set_kind("node");
  if (parsed->has("--serial")) req.set_kind("serial");
  return CallAndPrint(
      ctx, &mycel::v1::Mesh::Stub::Revoke, req,
      [](const mycel::v1::RevokeResponse& r) {
        printf("revoked; revocation list generation %llu\n",
               static_cast<unsigned long long>(r.list().generation()));
        for (const std::string& n : r.pushed()) {
          printf("pushed to %s\n", n.c_str());
        }
        for (const std::string& n : r.failed()) {
          fprintf(stderr,
                  "mycel: warning: not pushed to %s (it gets "
                  "the list from its authority later)\n",
                  n.c_str());
        }
        return kExitOk;
      });
}

int Revocations(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel mesh revocations: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(
      ctx, &mycel::v1::Mesh::Stub::ListRevocations,
      mycel::v1::ListRevocationsRequest(),
      [](const mycel::v1::RevocationListInfo& r) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& e : r.entries()) {
          rows.push_back({e.kind(), e.target(), FormatTime(e.revoked())});
        }
        PrintTable({"KIND", "TARGET", "REVOKED"}, rows);
        return kExitOk;
      });
}

int Peers(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel mesh peers: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(
      ctx, &mycel::v1::Mesh::Stub::ListPeers, mycel::v1::ListPeersRequest(),
      [](const mycel::v1::ListPeersResponse& r) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& p : r.peers()) {
          rows.push_back({p.name(), p.address(), p.authority() ? "yes" : "no",
                          p.serial().empty() ? "-" : p.serial()});
        }
        PrintTable({"NAME", "ADDRESS", "AUTHORITY", "SERIAL"}, rows);
        return kExitOk;
      });
}

int UserAdd(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {"--role", "--out"}, {});
  if (!parsed.ok()) return Usage("user add", parsed.status());
  if (parsed->positional.size() != 1 || !parsed->has("--out")) {
    fprintf(stderr,
            "mycel mesh user add: want NAME --role admin|viewer --out DIR\n");
    return kExitUsage;
  }
  std::string role = parsed->get("--role", "viewer");
  if (role != "admin" && role != "viewer") {
    fprintf(stderr,
            "mycel mesh user add: --role: want admin or viewer, got \"%s\"\n",
            role.c_str());
    return kExitUsage;
  }
  mycel::v1::AddUserRequest req;
  req.set_name(parsed->positional[0]);
  req.set_role(role);
  mycel::v1::UserCredentials creds;
  int rc = Call(ctx, &mycel::v1::Mesh::Stub::AddUser, req, &creds);
  if (rc != kExitOk) return rc;
  mycel::v1::MeshInfo info;
  rc = Call(ctx, &mycel::v1::Mesh::Stub::GetInfo,
            mycel::v1::GetMeshInfoRequest(), &info);
  if (rc != kExitOk) return rc;
  absl::StatusOr<std::string> file =
      WriteCredentials(parsed->get("--out"), creds, info);
  if (!file.ok()) return ctx.Fail(file.status());
  printf("%s\n", file->c_str());
  return kExitOk;
}

int User(Context& ctx, const std::vector<std::string>& args);

constexpr Command kUserCommands[] = {
    {"add", "NAME --role admin|viewer --out DIR",
     "issue a user's credentials into DIR",
     "Writes DIR/ca.crt, DIR/client.crt, DIR/client.key (0600) and\n"
     "DIR/config.json, which mycel reads with MYCEL_CONFIG=DIR/config.json.\n",
     UserAdd},
};

const Group kUserGroup = {"mesh user", "Users of the mesh.", kUserCommands};

int User(Context& ctx, const std::vector<std::string>& args) {
  return Dispatch(ctx, kUserGroup, args);
}

constexpr Command kCommands[] = {
    {"init", "[--name MESH] [--admin NAME]",
     "create a mesh with this node as its first authority",
     "Creates the mesh CA, this node's certificate and an administrator's\n"
     "credentials, which are written under $XDG_CONFIG_HOME/mycel/MESH/\n"
     "(else ~/.config/mycel/MESH/) with config.json beside them; mycel\n"
     "reads $XDG_CONFIG_HOME/mycel/config.json for --node. MESH defaults\n"
     "to \"mycel\", NAME to \"admin\".\n",
     Init},
    {"info", "", "show this node's mesh", "", Info},
    {"join", "ADDR --token T|--token-file FILE [--authority]",
     "join the mesh of the node at ADDR",
     "Sent to this node's daemon, which must serve the mesh (--listen). It\n"
     "fetches the mesh CA from ADDR and compares its SHA-256 with the one in\n"
     "the token; on a mismatch it stops before anything secret is sent.\n"
     "Then it makes its key (which never leaves it), presents the token and\n"
     "a CSR to ADDR, which must be an authority, and starts serving with\n"
     "the certificate it gets. --authority (with a token made with\n"
     "--authority) also receives the CA key, so that this node can admit\n"
     "nodes too. A joined node stays a member across restarts.\n",
     Join},
    {"revoke", "NAME|SERIAL [--node|--user|--serial]",
     "revoke a node or a user, and push the list to the members",
     "Revokes every certificate of the node (or, with --user, the user)\n"
     "NAME issued until now, or the one certificate with SERIAL (hex, ':'\n"
     "allowed; an argument of 16 or more hex digits is read as a serial).\n"
     "Only an authority revokes; it pushes the list to the members it\n"
     "knows, and authorities pass it on. Calls on connections already open\n"
     "are refused from then on.\n",
     Revoke},
    {"revocations", "", "list the revocations this node enforces", "",
     Revocations},
    {"peers", "", "list the nodes this node admitted or joined through", "",
     Peers},
    {"members", "", "list the members of the mesh as this node sees them",
     "NAME, ADDRESS, STATE (alive, suspect, dead, left), INCARNATION (grows\n"
     "with every restart or change of the member), LABELS, LAST HEARD (the\n"
     "last message this node had from it directly) and BEHIND (replicated\n"
     "changes it lacks, by its last digest). -o json prints every field.\n",
     Members},
    {"leave", "[--wait 5s]", "leave the mesh gracefully",
     "Gossips a signed leaving record for up to --wait (default 5s), then\n"
     "this node stops gossiping until myceld restarts; the others mark it\n"
     "left rather than dead.\n",
     Leave},
    {"token", "create|ls|revoke ...", "join tokens", "", Token},
    {"user", "add ...", "users of the mesh", "", User},
};

}  // namespace

const Group kMeshGroup = {
    "mesh", "the mesh: CA, joins, members, tokens, users, revocations",
    kCommands};

}  // namespace mycel::cli
