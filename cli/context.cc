#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <stdio.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/cli_config.h"
#include "daemon/store/json_text.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/fs.h"
#include "runtime/status.h"

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

// Accepts a server whose certificate (already chained to the mesh CA by
// gRPC) carries exactly the SPIFFE ID `want`.
class ServerIdVerifier final
    : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit ServerIdVerifier(std::string want) : want_(std::move(want)) {}
  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    for (const grpc::string_ref& uri : request->uri_names()) {
      if (absl::string_view(uri.data(), uri.size()) == want_) {
        *sync_status = grpc::Status::OK;
        return true;
      }
    }
    *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                "the server's certificate is not " + want_);
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {
  }

 private:
  const std::string want_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> Context::ConfigChannel(
    const std::string& path, const mycel::v1::CliConfig& config,
    grpc::ChannelArguments args) {
  // The server must be the node this address belongs to: its certificate
  // chains to the mesh CA and its SPIFFE ID is that node's (a mesh
  // certificate names no host, so the TLS host name check is replaced by
  // this one).
  std::string node;
  for (const mycel::v1::CliEndpoint& e : config.endpoints()) {
    if (e.address() == opts_.node) node = e.node();
  }
  if (node.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node ", opts_.node, ": not an endpoint of the mesh ",
                     config.mesh(), " in ", path,
                     " (add it to \"endpoints\" with its node name, or "
                     "pass --tls-ca, --tls-cert and --tls-key)"));
  }
  auto ca = ReadPemFile("ca", config.ca());
  if (!ca.ok()) return ca.status();
  auto cert = ReadPemFile("cert", config.cert());
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile("key", config.key());
  if (!key.ok()) return key.status();
  namespace gx = grpc::experimental;
  std::vector<gx::IdentityKeyCertPair> pairs = {{*key, *cert}};
  gx::TlsChannelCredentialsOptions tls;
  tls.set_certificate_provider(
      std::make_shared<gx::StaticDataCertificateProvider>(*ca, pairs));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_verify_server_certs(true);
  tls.set_check_call_host(false);
  tls.set_certificate_verifier(
      gx::ExternalCertificateVerifier::Create<ServerIdVerifier>(
          absl::StrCat("spiffe://", config.mesh(), "/node/", node)));
  channel_ =
      grpc::CreateCustomChannel(opts_.node, gx::TlsCredentials(tls), args);
  return channel_;
}

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
  if (opts_.tls_ca.empty() && opts_.tls_cert.empty() && opts_.tls_key.empty()) {
    // No --tls-* flags: the credentials of the config file, if there is one.
    absl::StatusOr<std::string> path = ConfigPath();
    absl::StatusOr<mycel::v1::CliConfig> config =
        path.ok() ? ReadConfig(*path) : path.status();
    if (config.ok()) return ConfigChannel(*path, *config, args);
    if (config.status().code() != absl::StatusCode::kNotFound) {
      return config.status();
    }
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
  // UNAVAILABLE from a daemon that answered (the channel is connected) is
  // the daemon's own: a peer it could not reach during a join, say.
  const bool answered =
      channel_ != nullptr && channel_->GetState(false) == GRPC_CHANNEL_READY;
  const std::string& message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !answered &&
      !opts_.node.empty() &&
      (absl::StrContains(message, "Socket closed") ||
       absl::StrContains(message, "Connection reset"))) {
    // A TCP node that accepted the connection and closed it: it is
    // running, and refused this client.
    fprintf(stderr,
            "mycel: myceld at %s closed the connection: too many connections "
            "from this address (--connections-per-source, "
            "--open-connections-per-source), or a certificate it does not "
            "take (%s)\n",
            Target().c_str(), message.c_str());
  } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
             !answered) {
    fprintf(stderr, "mycel: cannot reach myceld at %s: is it running? (%s)\n",
            Target().c_str(), message.c_str());
  } else if (status.error_message().empty()) {
    // gRPC's own refusals can come without one (a request it could not
    // parse): the code is then all there is to say.
    // gRPC's codes are absl's, number for number.
    fprintf(stderr, "mycel: the call failed with %s and no message\n",
            absl::StatusCodeToString(
                static_cast<absl::StatusCode>(status.error_code()))
                .c_str());
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

namespace {

absl::Status CheckUtf8Fields(const google::protobuf::Message& m,
                             const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name =
        prefix.empty() ? f->name() : prefix + "." + f->name();
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string at =
          f->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        absl::Status s =
            store::CheckUtf8(f->is_repeated() ? r->GetRepeatedString(m, f, i)
                                              : r->GetString(m, f));
        if (!s.ok()) return Annotate(s, at);
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        RETURN_IF_ERROR(CheckUtf8Fields(f->is_repeated()
                                            ? r->GetRepeatedMessage(m, f, i)
                                            : r->GetMessage(m, f),
                                        at));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckUtf8Fields(const google::protobuf::Message& request) {
  return CheckUtf8Fields(request, "");
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
