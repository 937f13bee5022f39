/* ab.S: the timing wrappers of the A/B build of the shim (make torch-ab:
** build/libdistautograd_torch_ab.so, for bench/ only; shim.c,
** DAT_AB, says what the build is). dat_ab_wrap_<i> calls the member that
** dat_ab_target[i] names, with the caller's arguments, and adds the time
** stamp counter's ticks it took and one call to dat_ab_ticks[2i],
** dat_ab_ticks[2i+1], and keeps the call's ticks as a sample
** (dat_ab_sample, shim.c: the medians). The members take at most three
** integer arguments and return in rax:rdx (a returned shared_ptr through
** the hidden pointer in rdi, which comes back in rax), so saving the six
** argument registers and the two return registers covers every one; the
** frame is rbp-based with its CFI, so an exception thrown by a member
** unwinds through it. */
#include "symbols.h"

	.bss
	.balign 64
	.globl dat_ab_target
	.hidden dat_ab_target
dat_ab_target:
	.zero 8*DAT_NSYMS
	.balign 64
	.globl dat_ab_ticks
	.hidden dat_ab_ticks
dat_ab_ticks:
	.zero 16*DAT_NSYMS

	.text
#define X_WRAP(i, name, sym)                                                                   \
	.globl dat_ab_wrap_##i; .hidden dat_ab_wrap_##i; .type dat_ab_wrap_##i, @function;         \
	.balign 16; dat_ab_wrap_##i: .cfi_startproc;                                                \
	pushq %rbp; .cfi_def_cfa_offset 16; .cfi_offset %rbp, -16;                                  \
	movq %rsp, %rbp; .cfi_def_cfa_register %rbp;                                                \
	pushq %rbx; .cfi_offset %rbx, -24;                                                          \
	pushq %rdi; pushq %rsi; pushq %rdx; pushq %rcx; pushq %r8; pushq %r9;                       \
	lfence; rdtsc; shlq $32, %rdx; orq %rdx, %rax; movq %rax, %rbx;                             \
	popq %r9; popq %r8; popq %rcx; popq %rdx; popq %rsi; popq %rdi;                             \
	subq $8, %rsp;                                                                              \
	call *(dat_ab_target+8*i)(%rip);                                                            \
	movq %rax, (%rsp); pushq %rdx;                                                              \
	lfence; rdtsc; shlq $32, %rdx; orq %rdx, %rax; subq %rbx, %rax;                             \
	pushq %rax; movl $i, %edi; movq %rax, %rsi; call dat_ab_sample; popq %rax;                  \
	lock xaddq %rax, (dat_ab_ticks+16*i)(%rip);                                                 \
	lock incq (dat_ab_ticks+16*i+8)(%rip);                                                      \
	popq %rdx; movq (%rsp), %rax; addq $8, %rsp;                                                \
	popq %rbx; popq %rbp; .cfi_def_cfa %rsp, 8; ret;                                            \
	.cfi_endproc; .size dat_ab_wrap_##i, .-dat_ab_wrap_##i;
	DAT_SYMBOLS(X_WRAP)

	.section .note.GNU-stack,"",@progbits
