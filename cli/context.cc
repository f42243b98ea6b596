#include <stdio.h>

#include "absl/strings/str_cat.h"
#include "cli/cli.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/fs.h"

namespace mycel::cli {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag,
                                    const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node needs --tls-ca, --tls-cert and --tls-key (", flag,
                     " is missing)"));
  }
  return ReadPemFile(flag, path);
}

}  // namespace

std::string Context::Target() const {
  if (!opts_.node.empty()) return opts_.node;
  return absl::StrCat("unix://", opts_.socket);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Context::Channel() {
  if (channel_ != nullptr) return channel_;
  grpc::ChannelArguments args;
  // Fail fast instead of retrying DNS/connect for the whole deadline.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  if (opts_.node.empty()) {
    channel_ =
        grpc::CreateCustomChannel(absl::StrCat("unix:", opts_.socket),
                                  grpc::InsecureChannelCredentials(), args);
    return channel_;
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadPem("--tls-ca", opts_.tls_ca);
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem("--tls-cert", opts_.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("--tls-key", opts_.tls_key);
  if (!key.ok()) return key.status();
  ssl.pem_root_certs = *ca;
  ssl.pem_cert_chain = *cert;
  ssl.pem_private_key = *key;
  channel_ =
      grpc::CreateCustomChannel(opts_.node, grpc::SslCredentials(ssl), args);
  return channel_;
}

std::unique_ptr<grpc::ClientContext> Context::NewCall() const {
  auto call = std::make_unique<grpc::ClientContext>();
  call->set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(opts_.timeout_seconds));
  return call;
}

int Context::Fail(const grpc::Status& status) const {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    fprintf(stderr, "mycel: cannot reach myceld at %s: is it running? (%s)\n",
            Target().c_str(), status.error_message().c_str());
  } else {
    fprintf(stderr, "mycel: %s\n", status.error_message().c_str());
  }
  return kExitFailure;
}

int Context::Fail(const absl::Status& status) const {
  fprintf(stderr, "mycel: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                             : kExitFailure;
}

int Context::PrintJson(const google::protobuf::Message& msg) const {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string out;
  auto st = google::protobuf::util::MessageToJsonString(msg, &out, opts);
  if (!st.ok()) {
    fprintf(stderr, "mycel: cannot print JSON: %s\n",
            std::string(st.message()).c_str());
    return kExitFailure;
  }
  fputs(out.c_str(), stdout);
  return kExitOk;
}

void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], r[i].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size())
        out += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    printf("%s\n", out.c_str());
  };
  line(header);
  for (const auto& r : rows) line(r);
}

void PrintKeyValues(
    const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t width = 0;
  for (const auto& [k, v] : rows) width = std::max(width, k.size());
  for (const auto& [k, v] : rows) {
    printf("%-*s  %s\n", static_cast<int>(width), k.c_str(), v.c_str());
  }
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

}  // namespace mycel::cli
