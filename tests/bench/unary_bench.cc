// unary_bench: the cost of one unary call (Node.GetInfo) to one or more
// myceld endpoints, interleaved so that load on a shared machine lands on
// every target alike.
//
//   unary_bench [--runs N] [--warmup W] [--tsv] TARGET...
//
// A TARGET is one of
//   unix:PATH                          the local socket, one channel reused
//   tls:HOST:PORT:CA:CERT:KEY[:NAME]   TCP with mutual TLS, one channel
//                                      reused (the handshake is paid once);
//                                      NAME is the server certificate's
//                                      name (default localhost; a mesh
//                                      node's is its node name)
//   tls-fresh:HOST:PORT:CA:CERT:KEY[:NAME]
//                                      a new channel per call: a TCP
//                                      connect, a TLS handshake and HTTP/2's
//                                      preface every time
// Prints p50/p90/p99 in ms per target.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "mycel/v1/node.grpc.pb.h"
#include "runtime/fs.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Target {
  std::string spec;
  std::string address;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  bool fresh = false;
  std::string server_name = "localhost";
  std::shared_ptr<grpc::Channel> channel;
  std::vector<double> ms;
};

std::shared_ptr<grpc::Channel> Connect(const Target& t) {
  grpc::ChannelArguments args;
  // Node certificates name no host; the test CA's server certificate names
  // "localhost".
  args.SetSslTargetNameOverride(t.server_name);
  // A fresh channel must not share a subchannel with an earlier one.
  if (t.fresh) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(t.address, t.creds, args);
}

bool Parse(const std::string& spec, Target* t) {
  t->spec = spec;
  if (spec.rfind("unix:", 0) == 0) {
    t->address = spec;
    t->creds = grpc::InsecureChannelCredentials();
    return true;
  }
  std::vector<std::string> p = absl::StrSplit(spec, ':');
  if ((p.size() != 6 && p.size() != 7) ||
      (p[0] != "tls" && p[0] != "tls-fresh")) {
    return false;
  }
  if (p.size() == 7) t->server_name = p[6];
  t->fresh = p[0] == "tls-fresh";
  t->address = p[1] + ":" + p[2];
  grpc::SslCredentialsOptions o;
  auto ca = mycel::ReadFile(p[3]), cert = mycel::ReadFile(p[4]),
       key = mycel::ReadFile(p[5]);
  if (!ca.ok() || !cert.ok() || !key.ok()) return false;
  o.pem_root_certs = *ca;
  o.pem_cert_chain = *cert;
  o.pem_private_key = *key;
  t->creds = grpc::SslCredentials(o);
  return true;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 500, warmup = 20;
  bool tsv = false;
  std::vector<Target> targets;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--runs" || a == "--warmup") && i + 1 < argc) {
      int* out = a == "--runs" ? &runs : &warmup;
      if (!absl::SimpleAtoi(argv[++i], out)) return 2;
    } else if (a == "--tsv") {
      tsv = true;
    } else {
      Target t;
      if (!Parse(a, &t)) {
        fprintf(stderr, "unary_bench: bad target %s\n", a.c_str());
        return 2;
      }
      targets.push_back(std::move(t));
    }
  }
  if (targets.empty()) {
    fprintf(stderr,
            "usage: unary_bench [--runs N] [--warmup W] [--tsv] TARGET...\n");
    return 2;
  }
  for (int i = -warmup; i < runs; ++i) {
    for (Target& t : targets) {
      const auto start = Clock::now();
      if (t.fresh || t.channel == nullptr) t.channel = Connect(t);
      auto stub = mycel::v1::Node::NewStub(t.channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
      mycel::v1::NodeInfo info;
      grpc::Status st = stub->GetInfo(&ctx, {}, &info);
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - start)
              .count();
      if (!st.ok()) {
        fprintf(stderr, "unary_bench: %s: %s\n", t.spec.c_str(),
                st.error_message().c_str());
        return 1;
      }
      if (i >= 0) t.ms.push_back(ms);
    }
  }
  if (!tsv) printf("%-60s %8s %8s %8s\n", "target", "p50 ms", "p90", "p99");
  for (const Target& t : targets) {
    printf(tsv ? "%s\t%.3f\t%.3f\t%.3f\n" : "%-60s %8.3f %8.3f %8.3f\n",
           t.spec.c_str(), Percentile(t.ms, 0.5), Percentile(t.ms, 0.9),
           Percentile(t.ms, 0.99));
  }
  return 0;
}
