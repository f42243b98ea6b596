// mycel query "SELECT ...": read-only SQL over the node's replica.
#include <math.h>
#include <stdio.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "mycel/v1/query.grpc.pb.h"

namespace mycel::cli {
namespace {

constexpr char kUsage[] =
    "usage: mycel query \"SELECT ...\" [--max-rows N] [--timeout-ms MS]\n";

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

std::string Json(const mycel::v1::QueryValue& v) {
  switch (v.kind_case()) {
    case mycel::v1::QueryValue::kInteger:
      return absl::StrCat(v.integer());
    case mycel::v1::QueryValue::kReal:
      return isfinite(v.real()) ? absl::StrFormat("%.17g", v.real()) : "null";
    case mycel::v1::QueryValue::kText:
      return JsonString(v.text());
    case mycel::v1::QueryValue::kBlob:
      return JsonString(absl::BytesToHexString(v.blob()));
    default:
      return "null";
  }
}

std::string Text(const mycel::v1::QueryValue& v) {
  switch (v.kind_case()) {
    case mycel::v1::QueryValue::kInteger:
      return absl::StrCat(v.integer());
    case mycel::v1::QueryValue::kReal:
      return absl::StrFormat("%g", v.real());
    case mycel::v1::QueryValue::kText: {
      std::string out;
      for (char c : v.text()) out.push_back(c == '\n' || c == '\t' ? ' ' : c);
      return out;
    }
    case mycel::v1::QueryValue::kBlob:
      return absl::StrCat("x'", absl::BytesToHexString(v.blob()), "'");
    default:
      return "NULL";
  }
}

int Query(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {"--max-rows", "--timeout-ms"}, {});
  if (!parsed.ok()) {
    fprintf(stderr, "mycel query: %s\n%s",
            std::string(parsed.status().message()).c_str(), kUsage);
    return kExitUsage;
  }
  std::vector<std::string> words = parsed->positional;
  words.insert(words.end(), parsed->rest.begin(), parsed->rest.end());
  if (words.size() != 1) {
    fprintf(stderr, "mycel query: want the SQL as one argument (quote it)\n%s",
            kUsage);
    return kExitUsage;
  }
  mycel::v1::QueryRequest req;
  req.set_sql(words[0]);
  for (const char* flag : {"--max-rows", "--timeout-ms"}) {
    if (!parsed->has(flag)) continue;
    int n = 0;
    if (!absl::SimpleAtoi(parsed->get(flag), &n) || n <= 0) {
      fprintf(stderr, "mycel query: %s: want a positive number, got \"%s\"\n",
              flag, parsed->get(flag).c_str());
      return kExitUsage;
    }
    if (std::string(flag) == "--max-rows") {
      req.set_max_rows(n);
    } else {
      req.set_timeout_ms(n);
    }
  }
  mycel::v1::QueryResponse resp;
  int rc = Call(ctx, &mycel::v1::Query::Stub::Run, req, &resp);
  if (rc != kExitOk) return rc;
  if (ctx.options().output == Output::kJson) {
    // An array of objects, one per row, keyed by column name.
    printf("[");
    for (int r = 0; r < resp.rows_size(); ++r) {
      const auto& row = resp.rows(r);
      std::vector<std::string> fields;
      for (int c = 0; c < resp.columns_size() && c < row.values_size(); ++c) {
        fields.push_back(absl::StrCat(JsonString(resp.columns(c)), ": ",
                                      Json(row.values(c))));
      }
      printf("%s\n  {%s}", r == 0 ? "" : ",",
             absl::StrJoin(fields, ", ").c_str());
    }
    printf("%s]\n", resp.rows_size() > 0 ? "\n" : "");
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& row : resp.rows()) {
      std::vector<std::string> cells;
      for (const auto& v : row.values()) cells.push_back(Text(v));
      rows.push_back(std::move(cells));
    }
    std::vector<std::string> header(resp.columns().begin(),
                                    resp.columns().end());
    PrintTable(header, rows);
  }
  if (resp.truncated()) {
    fprintf(stderr, "mycel query: truncated after %d rows (the row limit)\n",
            resp.rows_size());
  }
  return kExitOk;
}

constexpr Command kQuery[] = {
    {"", "\"SELECT ...\" [--max-rows N] [--timeout-ms MS]",
     "run a read-only SQL query on the node's replica",
     "One SELECT over the relations kv, nodes, members, cells, executables\n"
     "and changes (docs/cli.md). A query stops after 2 s and 10000 rows by\n"
     "default (--timeout-ms up to 30000, --max-rows up to 100000); a\n"
     "truncated answer says so on stderr. -o json prints an array of\n"
     "objects.\n",
     Query}};

}  // namespace

const Group kQueryGroup = {"query", "run a read-only SQL query", kQuery};

}  // namespace mycel::cli
