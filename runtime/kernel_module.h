// Loading kernel modules without modprobe: finit_module(2) on a .ko file,
// with the parameters modprobe would have taken from the kernel command line.
#ifndef MYCEL_RUNTIME_KERNEL_MODULE_H_
#define MYCEL_RUNTIME_KERNEL_MODULE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mycel {

// The parameters for module `name` found on a kernel command line: every
// word "name.param=value" becomes "param=value", space-separated, in order.
// '-' and '_' are equivalent in module names, as for the kernel.
std::string ModuleParamsFromCmdline(absl::string_view cmdline,
                                    absl::string_view name);

// Loads `dir`/`name`.ko with `params`. A module that is already loaded
// (EEXIST) is success. Errors name the file.
absl::Status LoadModule(const std::string& dir, const std::string& name,
                        const std::string& params);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_KERNEL_MODULE_H_
