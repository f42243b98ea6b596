#include "tests/unit/runtime/seccomp/bpf_interpreter.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace mycel::testing {
namespace {

uint32_t Alu(uint16_t op, uint32_t a, uint32_t operand, bool* ok) {
  switch (op) {
    case BPF_ADD:
      return a + operand;
    case BPF_SUB:
      return a - operand;
    case BPF_MUL:
      return a * operand;
    case BPF_DIV:
      if (operand == 0) *ok = false;
      return operand == 0 ? 0 : a / operand;
    case BPF_MOD:
      if (operand == 0) *ok = false;
      return operand == 0 ? 0 : a % operand;
    case BPF_OR:
      return a | operand;
    case BPF_AND:
      return a & operand;
    case BPF_XOR:
      return a ^ operand;
    case BPF_LSH:
      return operand >= 32 ? 0 : a << operand;
    case BPF_RSH:
      return operand >= 32 ? 0 : a >> operand;
    case BPF_NEG:
      return 0u - a;
  }
  *ok = false;
  return 0;
}

}  // namespace

absl::StatusOr<uint32_t> RunSeccompFilter(
    const std::vector<struct sock_filter>& program,
    const struct seccomp_data& data) {
  if (program.empty() || program.size() > BPF_MAXINSNS) {
    return absl::InvalidArgumentError(
        absl::StrCat("program of ", program.size(), " instructions"));
  }
  uint32_t a = 0, x = 0;
  uint32_t mem[BPF_MEMWORDS] = {};
  size_t pc = 0;
  // Classic BPF only jumps forward, so this terminates.
  while (pc < program.size()) {
    const struct sock_filter& insn = program[pc];
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " at instruction ", pc, " (code 0x",
                       absl::Hex(insn.code), ", k 0x", absl::Hex(insn.k), ")"));
    };
    uint16_t cls = BPF_CLASS(insn.code);
    switch (cls) {
      case BPF_LD:
      case BPF_LDX: {
        uint32_t value = 0;
        uint16_t mode = BPF_MODE(insn.code);
        if (mode == BPF_ABS && cls == BPF_LD && BPF_SIZE(insn.code) == BPF_W) {
          if (insn.k % 4 != 0 || insn.k + 4 > sizeof(data)) {
            return error("bad seccomp_data offset");
          }
          std::memcpy(&value, reinterpret_cast<const char*>(&data) + insn.k, 4);
        } else if (mode == BPF_IMM) {
          value = insn.k;
        } else if (mode == BPF_MEM) {
          if (insn.k >= BPF_MEMWORDS) return error("bad scratch slot");
          value = mem[insn.k];
        } else if (mode == BPF_LEN) {
          value = sizeof(data);
        } else {
          return error("unsupported load");
        }
        (cls == BPF_LD ? a : x) = value;
        ++pc;
        break;
      }
      case BPF_ST:
      case BPF_STX:
        if (insn.k >= BPF_MEMWORDS) return error("bad scratch slot");
        mem[insn.k] = cls == BPF_ST ? a : x;
        ++pc;
        break;
      case BPF_ALU: {
        bool ok = true;
        uint32_t operand = BPF_SRC(insn.code) == BPF_X ? x : insn.k;
        a = Alu(BPF_OP(insn.code), a, operand, &ok);
        if (!ok) return error("bad ALU operation");
        ++pc;
        break;
      }
      case BPF_JMP: {
        uint16_t op = BPF_OP(insn.code);
        if (op == BPF_JA) {
          pc += 1 + insn.k;
          break;
        }
        uint32_t operand = BPF_SRC(insn.code) == BPF_X ? x : insn.k;
        bool taken;
        switch (op) {
          case BPF_JEQ:
            taken = a == operand;
            break;
          case BPF_JGT:
            taken = a > operand;
            break;
          case BPF_JGE:
            taken = a >= operand;
            break;
          case BPF_JSET:
            taken = (a & operand) != 0;
            break;
          default:
            return error("unsupported jump");
        }
        pc += 1 + (taken ? insn.jt : insn.jf);
        break;
      }
      case BPF_RET:
        if (BPF_RVAL(insn.code) == BPF_K) return insn.k;
        if (BPF_RVAL(insn.code) == BPF_A) return a;
        return error("unsupported return");
      case BPF_MISC:
        if (BPF_MISCOP(insn.code) == BPF_TAX) {
          x = a;
        } else if (BPF_MISCOP(insn.code) == BPF_TXA) {
          a = x;
        } else {
          return error("unsupported misc operation");
        }
        ++pc;
        break;
      default:
        return error("unsupported instruction class");
    }
  }
  return absl::InvalidArgumentError("program ran off its end");
}

struct seccomp_data SyscallData(uint32_t audit_arch, int nr,
                                std::initializer_list<uint64_t> args) {
  struct seccomp_data data = {};
  data.nr = nr;
  data.arch = audit_arch;
  size_t i = 0;
  for (uint64_t arg : args) {
    if (i < 6) data.args[i++] = arg;
  }
  return data;
}

std::string DescribeAction(uint32_t ret) {
  uint32_t action = ret & SECCOMP_RET_ACTION_FULL;
  uint32_t value = ret & SECCOMP_RET_DATA;
  switch (action) {
    case SECCOMP_RET_ALLOW:
      return "ALLOW";
    case SECCOMP_RET_ERRNO:
      return absl::StrCat("ERRNO(", value, ")");
    case SECCOMP_RET_KILL_PROCESS:
      return "KILL_PROCESS";
    case SECCOMP_RET_KILL_THREAD:
      return "KILL_THREAD";
    case SECCOMP_RET_TRAP:
      return "TRAP";
    case SECCOMP_RET_TRACE:
      return "TRACE";
    case SECCOMP_RET_LOG:
      return "LOG";
    case SECCOMP_RET_USER_NOTIF:
      return "USER_NOTIF";
  }
  return absl::StrCat("0x", absl::Hex(ret));
}

}  // namespace mycel::testing
