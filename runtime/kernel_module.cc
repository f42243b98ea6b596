#include "runtime/kernel_module.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

std::string NormalizeModuleName(absl::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (c == '-') c = '_';
  }
  return out;
}

}  // namespace

std::string ModuleParamsFromCmdline(absl::string_view cmdline,
                                    absl::string_view name) {
  std::string want = NormalizeModuleName(name) + ".";
  std::string out;
  for (absl::string_view word :
       absl::StrSplit(cmdline, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    size_t dot = word.find('.');
    size_t eq = word.find('=');
    if (dot == absl::string_view::npos ||
        (eq != absl::string_view::npos && eq < dot)) {
      continue;
    }
    if (NormalizeModuleName(word.substr(0, dot + 1)) != want) continue;
    if (!out.empty()) out.push_back(' ');
    out.append(word.data() + dot + 1, word.size() - dot - 1);
  }
  return out;
}

absl::Status LoadModule(const std::string& dir, const std::string& name,
                        const std::string& params) {
  std::string path = absl::StrCat(dir, "/", name, ".ko");
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open module ", path), errno);
  if (syscall(SYS_finit_module, fd.get(), params.c_str(), 0) != 0) {
    if (errno == EEXIST) return absl::OkStatus();
    return PosixError(absl::StrCat("finit_module ", path), errno);
  }
  return absl::OkStatus();
}

}  // namespace mycel
