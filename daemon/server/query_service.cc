#include "daemon/server/query_service.h"

#include "absl/strings/str_cat.h"
#include "daemon/server/status_convert.h"
#include "daemon/store/query.h"
#include "google/protobuf/stubs/common.h"

namespace mycel {
namespace {

constexpr int kMaxRows = 100000;
constexpr int kMaxTimeoutMs = 30000;

}  // namespace

grpc::Status QueryService::Run(grpc::ServerContext*,
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
  absl::StatusOr<store::QueryResult> result =
      store::RunQuery(store_, req->sql(), limits);
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
