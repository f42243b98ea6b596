// myceld: the mycel node agent.
#include <malloc.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "runtime/log.h"

int main(int argc, char** argv) {
  // gRPC threads would each get a malloc arena; a node agent's allocation
  // rate does not need them, and each costs resident memory.
  mallopt(M_ARENA_MAX, 2);

  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<mycel::DaemonFlags> flags = mycel::ParseDaemonFlags(args);
  if (!flags.ok()) {
    fprintf(stderr, "myceld: %s\n",
            std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    fputs(mycel::DaemonUsage().c_str(), stdout);
    return 0;
  }
  if (flags->version) {
    printf("myceld %s\n", MYCEL_VERSION);
    return 0;
  }
  mycel::log::SetLevel(*mycel::log::ParseLevel(flags->config.log_level()));

  mycel::Daemon daemon(flags->config);
  absl::Status s = daemon.Start();
  if (!s.ok()) {
    mycel::log::Error("startup failed",
                      {{"error", std::string(s.message())},
                       {"code", absl::StatusCodeToString(s.code())}});
    return 1;
  }
  return daemon.Run();
}
