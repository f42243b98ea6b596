// The bytes a process has sent on its TCP sockets open now, from `ss
// -tinpH` (bytes_sent of each socket whose users include the pid): the
// BYTES figure of memberlist_bench.sh's mycel nodes. Connections already
// closed are not counted. Plain C++: mycel_node links nothing else.
#ifndef MYCEL_TESTS_BENCH_MEMBERLIST_TCP_BYTES_H_
#define MYCEL_TESTS_BENCH_MEMBERLIST_TCP_BYTES_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mycel::bench {

struct TcpBytes {
  uint64_t sent = 0;
  uint64_t connections = 0;
};

// Zeros when ss cannot be run.
inline TcpBytes TcpBytesOf(pid_t pid) {
  TcpBytes out;
  FILE* ss = popen("ss -tinpH 2>/dev/null", "r");
  if (ss == nullptr) return out;
  const std::string mine = "pid=" + std::to_string(pid) + ",";
  bool in_mine = false;
  char buf[4096];
  while (fgets(buf, sizeof(buf), ss) != nullptr) {
    const std::string line(buf);
    if (line.empty()) continue;
    // A socket's line, then its details indented on the next.
    if (line[0] != ' ' && line[0] != '\t') {
      in_mine = line.find(mine) != std::string::npos;
      out.connections += in_mine;
      continue;
    }
    const size_t at = line.find("bytes_sent:");
    if (in_mine && at != std::string::npos) {
      out.sent += std::strtoull(line.c_str() + at + 11, nullptr, 10);
    }
  }
  pclose(ss);
  return out;
}

}  // namespace mycel::bench

#endif  // MYCEL_TESTS_BENCH_MEMBERLIST_TCP_BYTES_H_
