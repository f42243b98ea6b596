#include "daemon/store/json_text.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mycel::store {
namespace {

// Accepts every value and counts the nesting; keeps the first error.
class Checker final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool key(string_t&) override { return true; }
  bool start_object(std::size_t) override { return Enter(); }
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 5: syntax error while parsing value - invalid literal; last
    // read: '...'" or "[json.exception.out_of_range.406] number overflow
    // parsing '1E400'". Keep the reason, name the byte, and leave out the
    // echo of the input (it can be long).
    std::string why = ex.what();
    if (why.starts_with("[json.exception.")) {
      why.erase(0, why.find("] ") + 2);
    }
    if (why.starts_with("parse error at ")) {
      why.erase(0, why.find(": ") + 2);
    }
    for (const char* echo : {"; last read:", " parsing '"}) {
      if (size_t at = why.find(echo); at != std::string::npos) why.erase(at);
    }
    error_ = absl::StrCat(why, " (byte ", position, ")");
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      error_ = absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels");
      return false;
    }
    return true;
  }
  bool Leave() {
    --depth_;
    return true;
  }

  int depth_ = 0;
  std::string error_;
};

}  // namespace

absl::Status CheckJsonText(absl::string_view text) {
  // The parser takes a NUL byte for the end of its input, so "1\0junk"
  // would pass. A JSON text has none outside a string, and none raw in one.
  if (size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON text: a NUL byte (byte ", nul, ")"));
  }
  // A byte order mark, which the parser would skip: RFC 8259 section 8.1
  // forbids sending one, and other parsers refuse it.
  if (absl::StartsWith(text, "\xef\xbb\xbf")) {
    return absl::InvalidArgumentError(
        "not a JSON text: a byte order mark (byte 0)");
  }
  Checker checker;
  // strict: the whole input is one value; nothing but whitespace follows.
  const bool ok = nlohmann::json::sax_parse(
      text.begin(), text.end(), &checker, nlohmann::json::input_format_t::json,
      /*strict=*/true, /*ignore_comments=*/false);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "not a JSON text: ",
      checker.error().empty() ? "rejected by the parser" : checker.error()));
}

absl::Status CheckUtf8(absl::string_view text) {
  try {
    // Serializing a JSON string validates its UTF-8 (strictly: overlong
    // forms and surrogates refused).
    (void)nlohmann::json(std::string(text)).dump();
  } catch (const nlohmann::json::type_error& e) {
    std::string why = e.what();
    if (size_t at = why.find("] "); at != std::string::npos)
      why.erase(0, at + 2);
    return absl::InvalidArgumentError(absl::StrCat("not UTF-8: ", why));
  }
  return absl::OkStatus();
}

}  // namespace mycel::store
