// The limit and isolation flags shared by `mycel cell create` and
// `mycel run`.
#ifndef MYCEL_CLI_CELL_FLAGS_H_
#define MYCEL_CLI_CELL_FLAGS_H_

#include <set>
#include <string>

#include "absl/status/status.h"
#include "cli/cli.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cli {

// Flags that take a value / boolean flags.
const std::set<std::string>& CellValueFlags();
const std::set<std::string>& CellBoolFlags();

// Help text for them.
extern const char kCellFlagsHelp[];

// Fills `spec` from the parsed flags. Errors name the flag.
absl::Status FillCellSpec(const ParsedArgs& args, mycel::v1::CellSpec* spec);

}  // namespace mycel::cli

#endif  // MYCEL_CLI_CELL_FLAGS_H_
