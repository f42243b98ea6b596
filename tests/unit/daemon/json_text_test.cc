#include "daemon/store/json_text.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "doctest/doctest.h"

namespace mycel::store {
namespace {

TEST_CASE("CheckJsonText takes every kind of JSON text") {
  for (const char* text :
       {"{}", "[]", "0", "-0", "1.5e-3", "1E300", "18446744073709551616",
        "-9223372036854775809", "true", "false", "null", "\"\"",
        "\"caf\xc3\xa9 \xf0\x9f\x8d\x84\"", "\"\\ud83c\\udf44\"",
        "\"\\u0000\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
        " \t\r\n{\"a\": [1, {\"b\": null}]} \n", "{\"a\": 1, \"a\": 2}"}) {
    CAPTURE(text);
    CHECK(CheckJsonText(text).ok());
  }
}

TEST_CASE("CheckJsonText refuses what is not one JSON text, and says why") {
  struct Case {
    std::string text;
    const char* why;
  };
  const Case cases[] = {
      {"", "unexpected end of input"},
      {"   ", "unexpected end of input"},
      {"{not json", "invalid literal"},
      {"[1,]", "unexpected ']'"},
      {"{\"a\" 1}", "expected ':'"},
      {"{'a': 1}", "invalid literal"},
      {"01", "unexpected number literal"},
      {"1 2", "expected end of input"},
      {"{} x", "syntax error"},
      {"1E400", "number overflow"},
      {"NaN", "invalid literal"},
      {"Infinity", "invalid literal"},
      {"+1", "invalid literal"},
      {".5", "invalid literal"},
      {"1.", "invalid number"},
      {"\"open", "missing closing quote"},
      {"\"tab\there\"", "control character"},
      {"\"\\x\"", "forbidden character after backslash"},
      {"\"\\ud800\"", "surrogate"},
      {"\"\\udc00\"", "surrogate"},
      {"\"\xff\"", "ill-formed UTF-8"},
      {"\"\xc0\xaf\"", "ill-formed UTF-8"},
      {"\"\xed\xa0\x80\"", "ill-formed UTF-8"},
      {std::string("\"a\0b\"", 5), "a NUL byte (byte 2)"},
      {std::string("1\0junk", 6), "a NUL byte (byte 1)"},
      {"\xef\xbb\xbf{}", "a byte order mark"},
      {"/* c */ 1", "invalid literal"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    absl::Status s = CheckJsonText(c.text);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("not a JSON text: ") == 0);
    CHECK(s.message().find(c.why) != std::string::npos);
    CHECK(s.message().find("(byte ") != std::string::npos);
    // The reason is short: it does not echo the input back.
    CHECK(s.message().find("last read") == std::string::npos);
    CHECK(s.message().find("json.exception") == std::string::npos);
    CHECK(s.message().find("line 1") == std::string::npos);
  }
}

TEST_CASE("CheckJsonText bounds nesting at kMaxJsonDepth, without recursion") {
  auto nested = [](int depth, char open, char close) {
    return std::string(depth, open) + std::string(depth, close);
  };
  CHECK(CheckJsonText(nested(kMaxJsonDepth, '[', ']')).ok());
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth; ++i) objects += "{\"k\":";
  objects += "1" + std::string(kMaxJsonDepth, '}');
  CHECK(CheckJsonText(objects).ok());

  absl::Status deep = CheckJsonText(nested(kMaxJsonDepth + 1, '[', ']'));
  CHECK(deep.code() == absl::StatusCode::kInvalidArgument);
  CHECK(deep.message() == "not a JSON text: nested deeper than 100 levels");
  // A megabyte of brackets: refused at depth 101, the stack untouched.
  CHECK(CheckJsonText(std::string(1 << 20, '[')).message() ==
        "not a JSON text: nested deeper than 100 levels");
  // Wide is fine: depth, not size, is bounded here (the caller bounds size).
  std::string wide = "[";
  for (int i = 0; i < 100000; ++i) wide += "[],";
  wide += "[]]";
  CHECK(CheckJsonText(wide).ok());
}

TEST_CASE("CheckUtf8 takes UTF-8 and names the first byte that is not") {
  CHECK(CheckUtf8("").ok());
  CHECK(CheckUtf8("plain/key").ok());
  CHECK(CheckUtf8("caf\xc3\xa9 \xf0\x9f\x8d\x84 \"quoted\" \\ \t").ok());
  CHECK(CheckUtf8(std::string("nul\0inside", 11)).ok());
  struct Case {
    std::string text;
    const char* why;
  };
  const Case cases[] = {
      {"\xff", "invalid UTF-8 byte at index 0: 0xFF"},
      {"ok\xc3", "incomplete UTF-8 string; last byte: 0xC3"},
      {"a\xc0\xaf", "invalid UTF-8 byte at index 1: 0xC0"},       // overlong
      {"ab\xed\xa0\x80", "invalid UTF-8 byte at index 3: 0xA0"},  // surrogate
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    absl::Status s = CheckUtf8(c.text);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message() == absl::StrCat("not UTF-8: ", c.why));
  }
}

}  // namespace
}  // namespace mycel::store
