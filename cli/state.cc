// mycel state get | put | del | ls | watch: the user key/value namespace
// of the replicated store, on the node the CLI talks to.
#include <stdio.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "daemon/store/json_text.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/state.grpc.pb.h"

namespace mycel::cli {
namespace {

using mycel::v1::State;

int Usage(const char* usage, const std::string& why) {
  if (!why.empty()) fprintf(stderr, "mycel state: %s\n", why.c_str());
  fprintf(stderr, "usage: mycel state %s\n", usage);
  return kExitUsage;
}

// Words after the flags: positional ones, then those after "--" (for a
// JSON value that starts with '-', such as -1).
std::vector<std::string> Words(const ParsedArgs& a) {
  std::vector<std::string> out = a.positional;
  out.insert(out.end(), a.rest.begin(), a.rest.end());
  return out;
}

// A value for a table cell: one line, at most `width` characters.
std::string Cell(const std::string& value, size_t width) {
  std::string out;
  for (char c : value) out.push_back(c == '\n' || c == '\t' ? ' ' : c);
  if (out.size() > width) out = out.substr(0, width - 3) + "...";
  return out;
}

int Get(Context& ctx, const std::vector<std::string>& args) {
  constexpr char kUsage[] = "get KEY";
  auto parsed = ParseArgs(args, {}, {});
  if (!parsed.ok())
    return Usage(kUsage, std::string(parsed.status().message()));
  std::vector<std::string> words = Words(*parsed);
  if (words.size() != 1) return Usage(kUsage, "want one KEY");
  mycel::v1::GetStateRequest req;
  req.set_key(words[0]);
  // The value alone on stdout, so that $(mycel state get k) is the JSON.
  return CallAndPrint(ctx, &State::Stub::Get, req,
                      [](const mycel::v1::StateObject& o) {
                        printf("%s\n", o.value().c_str());
                        return kExitOk;
                      });
}

int Put(Context& ctx, const std::vector<std::string>& args) {
  constexpr char kUsage[] = "put KEY JSON [--if-version VERSION|none]";
  auto parsed = ParseArgs(args, {"--if-version"}, {});
  if (!parsed.ok())
    return Usage(kUsage, std::string(parsed.status().message()));
  std::vector<std::string> words = Words(*parsed);
  if (words.size() != 2) return Usage(kUsage, "want KEY and a JSON value");
  // Checked here as myceld checks it, so that a value that is not even
  // UTF-8 (which gRPC would refuse to parse, with no message) is named.
  if (absl::Status json = store::CheckJsonText(words[1]); !json.ok()) {
    fprintf(stderr, "mycel: value: %s\n", std::string(json.message()).c_str());
    return kExitFailure;
  }
  mycel::v1::PutStateRequest req;
  req.set_key(words[0]);
  req.set_value(words[1]);
  if (parsed->has("--if-version")) {
    req.set_if_version(parsed->get("--if-version"));
  }
  return CallAndPrint(ctx, &State::Stub::Put, req,
                      [](const mycel::v1::StateObject& o) {
                        printf("%s\n", o.version().c_str());
                        return kExitOk;
                      });
}

int Del(Context& ctx, const std::vector<std::string>& args) {
  constexpr char kUsage[] = "del KEY";
  auto parsed = ParseArgs(args, {}, {});
  if (!parsed.ok())
    return Usage(kUsage, std::string(parsed.status().message()));
  std::vector<std::string> words = Words(*parsed);
  if (words.size() != 1) return Usage(kUsage, "want one KEY");
  mycel::v1::DeleteStateRequest req;
  req.set_key(words[0]);
  return CallAndPrint(ctx, &State::Stub::Delete, req,
                      [](const mycel::v1::DeleteStateResponse& r) {
                        printf("%s\n", r.version().c_str());
                        return kExitOk;
                      });
}

int Ls(Context& ctx, const std::vector<std::string>& args) {
  constexpr char kUsage[] = "ls [PREFIX]";
  auto parsed = ParseArgs(args, {}, {});
  if (!parsed.ok())
    return Usage(kUsage, std::string(parsed.status().message()));
  std::vector<std::string> words = Words(*parsed);
  if (words.size() > 1) return Usage(kUsage, "want at most one PREFIX");
  // Every page, gathered into one answer.
  mycel::v1::ListStateResponse all;
  mycel::v1::ListStateRequest req;
  if (!words.empty()) req.set_prefix(words[0]);
  for (bool first = true;; first = false) {
    mycel::v1::ListStateResponse page;
    int rc = Call(ctx, &State::Stub::List, req, &page);
    if (rc != kExitOk) return rc;
    if (first) all.set_revision(page.revision());
    for (auto& o : *page.mutable_objects()) {
      *all.add_objects() = std::move(o);
    }
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  return Print(ctx, all, [&] {
    std::vector<std::vector<std::string>> rows;
    for (const auto& o : all.objects()) {
      rows.push_back({o.key(), o.version(), Cell(o.value(), 60)});
    }
    PrintTable({"KEY", "VERSION", "VALUE"}, rows);
    return kExitOk;
  });
}

int Watch(Context& ctx, const std::vector<std::string>& args) {
  constexpr char kUsage[] = "watch [PREFIX] [--from REVISION]";
  auto parsed = ParseArgs(args, {"--from"}, {});
  if (!parsed.ok())
    return Usage(kUsage, std::string(parsed.status().message()));
  std::vector<std::string> words = Words(*parsed);
  if (words.size() > 1) return Usage(kUsage, "want at most one PREFIX");
  mycel::v1::WatchStateRequest req;
  if (!words.empty()) req.set_prefix(words[0]);
  if (parsed->has("--from")) {
    int64_t from = 0;
    if (!absl::SimpleAtoi(parsed->get("--from"), &from) || from < 0) {
      return Usage(kUsage, absl::StrCat("--from: want a revision (a number), "
                                        "got \"",
                                        parsed->get("--from"), "\""));
    }
    req.set_from_revision(from);
  }
  if (absl::Status utf8 = CheckUtf8Fields(req); !utf8.ok()) {
    fprintf(stderr, "mycel: %s\n", std::string(utf8.message()).c_str());
    return kExitFailure;
  }
  int rc = kExitOk;
  auto stub = Connect<State::Stub>(ctx, &rc);
  if (stub == nullptr) return rc;
  // A watch lasts until interrupted: no deadline.
  grpc::ClientContext call;
  auto reader = stub->Watch(&call, req);
  mycel::v1::StateEvent e;
  const bool json = ctx.options().output == Output::kJson;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  while (reader->Read(&e)) {
    if (json) {
      std::string line;
      (void)google::protobuf::util::MessageToJsonString(e, &line, opts);
      printf("%s\n", line.c_str());
    } else if (e.type() == mycel::v1::StateEvent::TYPE_SYNCED) {
      printf("%lld SYNCED\n", static_cast<long long>(e.revision()));
    } else if (e.type() == mycel::v1::StateEvent::TYPE_DELETE) {
      printf("%lld DELETE %s\n", static_cast<long long>(e.revision()),
             e.object().key().c_str());
    } else {
      printf("%lld PUT %s %s\n", static_cast<long long>(e.revision()),
             e.object().key().c_str(), e.object().value().c_str());
    }
    fflush(stdout);
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return ctx.Fail(st);
  return kExitOk;
}

constexpr Command kState[] = {
    {"get", "KEY", "print a key's JSON value",
     "-o json prints the object with its version (for put --if-version).\n",
     Get},
    {"put", "KEY JSON [--if-version VERSION|none]",
     "write a key; prints the new version",
     "JSON is any JSON text ('{\"a\": 1}', '\"text\"', 42); put one that\n"
     "starts with '-' after --. --if-version writes only when the key holds\n"
     "that version on this node now (none: only when it does not exist);\n"
     "otherwise it fails, naming the version the key holds.\n",
     Put},
    {"del", "KEY", "delete a key; prints the version of the delete", "", Del},
    {"ls", "[PREFIX]", "list keys (with a prefix) and their values", "", Ls},
    {"watch", "[PREFIX] [--from REVISION]",
     "print keys as they change, until interrupted",
     "Without --from: every key first, then SYNCED, then each change. Each\n"
     "line starts with the node-local revision: after a disconnect, resume\n"
     "with --from the last one printed. A revision older than what the node\n"
     "kept fails (exit 1): list again and watch from ls -o json's revision.\n",
     Watch},
};

}  // namespace

const Group kStateGroup = {"state",
                           "read and write the mesh's replicated key/value "
                           "state",
                           kState};

}  // namespace mycel::cli
