#include "daemon/server/query_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/server/status_convert.h"
#include "daemon/store/query.h"
#include "google/protobuf/stubs/common.h"

namespace mycel {
namespace {

constexpr int kMaxRows = 100000;
constexpr int kMaxTimeoutMs = 30000;

// How often a query waiting for a place looks whether its caller left.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

}  // namespace

absl::Status QueryGate::Enter(absl::Duration wait,
                              absl::FunctionRef<bool()> cancelled) {
  const absl::Time deadline = absl::Now() + wait;
  absl::MutexLock lock(&mu_);
  const absl::Condition free(
      +[](QueryGate* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g->mu_) {
        return g->running_ < g->max_running_;
      },
      this);
  if (running_ >= max_running_ && waiting_ >= max_waiting_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "query: ", max_running_, " queries are running and ", waiting_,
        " wait already, the most this node takes at once; try again later"));
  }
  ++waiting_;
  absl::Status s;
  while (running_ >= max_running_) {
    if (cancelled()) {
      s = absl::CancelledError(
          "query: the caller went away while it waited for a place");
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      s = absl::ResourceExhaustedError(absl::StrCat(
          "query: ", max_running_,
          " queries are running, the most this node runs at once, and none "
          "ended within this one's time limit (",
          absl::FormatDuration(wait), "); try again later"));
      break;
    }
    mu_.AwaitWithDeadline(free, std::min(deadline, now + kCancelPoll));
  }
  --waiting_;
  if (s.ok()) ++running_;
  return s;
}

void QueryGate::Leave() {
  absl::MutexLock lock(&mu_);
  --running_;
}

int QueryGate::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

int QueryGate::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

grpc::Status QueryService::Run(grpc::ServerContext* ctx,
                               const mycel::v1::QueryRequest* req,
                               mycel::v1::QueryResponse* resp) {
  store::QueryLimits limits;
  if (req->max_rows() < 0 || req->max_rows() > kMaxRows) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("max_rows: want 0 (default) to ", kMaxRows, ", got ",
                     req->max_rows())));
  }
  if (req->timeout_ms() < 0 || req->timeout_ms() > kMaxTimeoutMs) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: want 0 (default) to ", kMaxTimeoutMs,
                     ", got ", req->timeout_ms())));
  }
  if (req->max_rows() > 0) limits.max_rows = req->max_rows();
  if (req->timeout_ms() > 0) {
    limits.timeout = absl::Milliseconds(req->timeout_ms());
  }
  if (absl::Status s =
          gate_.Enter(limits.timeout, [ctx] { return ctx->IsCancelled(); });
      !s.ok()) {
    return ToGrpc(s);
  }
  absl::StatusOr<store::QueryResult> result =
      store::RunQuery(store_, req->sql(), limits);
  gate_.Leave();
  if (!result.ok()) return ToGrpc(result.status());
  for (std::string& c : result->columns) resp->add_columns(std::move(c));
  for (std::vector<store::QueryValue>& row : result->rows) {
    mycel::v1::QueryRow* out = resp->add_rows();
    for (store::QueryValue& v : row) {
      mycel::v1::QueryValue* value = out->add_values();
      switch (v.type) {
        case store::QueryValue::Type::kNull:
          value->set_null(true);
          break;
        case store::QueryValue::Type::kInteger:
          value->set_integer(v.integer);
          break;
        case store::QueryValue::Type::kReal:
          value->set_real(v.real);
          break;
        case store::QueryValue::Type::kText:
          // A proto string must be UTF-8 (CAST(x'ff' AS TEXT) is not): send
          // such text as the bytes it is.
          if (google::protobuf::internal::IsStructurallyValidUTF8(
                  v.bytes.data(), static_cast<int>(v.bytes.size()))) {
            value->set_text(std::move(v.bytes));
          } else {
            value->set_blob(std::move(v.bytes));
          }
          break;
        case store::QueryValue::Type::kBlob:
          value->set_blob(std::move(v.bytes));
          break;
      }
    }
  }
  resp->set_truncated(result->truncated);
  return grpc::Status::OK;
}

}  // namespace mycel
