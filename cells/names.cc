#include "cells/names.h"

#include "absl/strings/str_cat.h"

namespace mycel::cells {

absl::Status ValidateName(absl::string_view field, absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must not be empty"));
  }
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": \"", name.substr(0, 16), "...\" is ", name.size(),
        " characters; at most ", kMaxNameLength, " are allowed"));
  }
  auto lower_or_digit = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  if (!lower_or_digit(name[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", name,
                     "\" must start with a lowercase letter or a digit"));
  }
  for (char c : name) {
    if (!lower_or_digit(c) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", name,
                       "\" may contain only a-z, 0-9, '-', '_' and '.'"));
    }
  }
  if (name.find("..") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", name, "\" must not contain \"..\""));
  }
  return absl::OkStatus();
}

}  // namespace mycel::cells
