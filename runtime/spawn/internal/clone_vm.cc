#include "runtime/spawn/internal/clone_vm.h"

#include <errno.h>
#include <sys/syscall.h>

namespace mycel::spawn_internal {

#if defined(__x86_64__)

#define MYCEL_STR2(x) #x
#define MYCEL_STR(x) MYCEL_STR2(x)

// long mycel_clone3_vm(struct clone_args* args, size_t size,
//                      int (*fn)(void*), void* arg)
// Returns clone3's raw result (-errno on failure) in the caller. syscall
// clobbers only rcx and r11, and the child starts with the caller's other
// registers, so fn and arg travel in r8 and r9. The kernel starts the child
// with rsp at the top of its stack; the call pushes the return address, so
// fn starts with rsp = 8 mod 16, as the ABI wants.
extern "C" long mycel_clone3_vm(struct clone_args* args, unsigned long size,
                                int (*fn)(void*), void* arg);
asm(R"(
    .text
    .globl mycel_clone3_vm
    .type mycel_clone3_vm, @function
    .p2align 4
mycel_clone3_vm:
    .cfi_startproc
    movq %rdx, %r8
    movq %rcx, %r9
    movl $)" MYCEL_STR(SYS_clone3) R"(, %eax
    syscall
    testq %rax, %rax
    jz 1f
    ret
1:
    .cfi_undefined rip
    xorl %ebp, %ebp
    movq %r9, %rdi
    callq *%r8
    movl %eax, %edi
    movl $)" MYCEL_STR(SYS_exit) R"(, %eax
    syscall
    hlt
    .cfi_endproc
    .size mycel_clone3_vm, .-mycel_clone3_vm
)");

long CloneVm(struct clone_args* args, int (*fn)(void*), void* arg) {
  long r = mycel_clone3_vm(args, sizeof(*args), fn, arg);
  if (r < 0) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

#else

long CloneVm(struct clone_args*, int (*)(void*), void*) {
  errno = ENOSYS;
  return -1;
}

#endif

}  // namespace mycel::spawn_internal
