// myceld's defaults as config.proto writes them (each field's
// mycel.v1.setting option), for programs that must agree with myceld
// without linking it: the CLI's --socket is the daemon's socket.
#ifndef MYCEL_PROTO_DAEMON_DEFAULTS_H_
#define MYCEL_PROTO_DAEMON_DEFAULTS_H_

#include <string>

#include "mycel/v1/config.pb.h"
#include "mycel/v1/options.pb.h"

namespace mycel {

// The default_value of DaemonConfig's field `number`, e.g.
// DaemonDefault(mycel::v1::DaemonConfig::kSocketFieldNumber).
inline const std::string& DaemonDefault(int number) {
  return mycel::v1::DaemonConfig::descriptor()
      ->FindFieldByNumber(number)
      ->options()
      .GetExtension(mycel::v1::setting)
      .default_value();
}

}  // namespace mycel

#endif  // MYCEL_PROTO_DAEMON_DEFAULTS_H_
