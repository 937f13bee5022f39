/* shim.S: the exported entry points of libdistautograd_torch.so. Each is
** one indirect jump through dat_fn, so a call keeps its registers, stack and
** hidden return pointer exactly as the caller made them, whatever the C++
** signature. dat_fn starts out pointing at a stub that resolves the table
** (shim.c, dat_resolve) on the first call and then jumps where it points. */
#include "symbols.h"

	.section .data.rel.local,"aw"
	.balign 8
	.globl dat_fn
	.hidden dat_fn
dat_fn:
#define X_ENTRY(i, name, sym) .quad .Llazy_##i;
	DAT_SYMBOLS(X_ENTRY)

	.text
#define X_EXPORT(i, name, sym)                                                             \
	.globl sym; .type sym, @function; .balign 16; sym: .cfi_startproc;                     \
	jmp *(dat_fn+8*i)(%rip); .cfi_endproc; .size sym, .-sym;                                 \
	.Llazy_##i: movl $i, %eax; jmp dat_lazy;
	DAT_SYMBOLS(X_EXPORT)

	.globl DAT_CTOR2
	.type DAT_CTOR2, @function
	.set DAT_CTOR2, _ZN5torch11distributed8autograd21DistAutogradContainerC1Ej

/* The first call of an entry: save the argument registers (none of these
** functions takes floating-point arguments), resolve, jump. */
	.type dat_lazy, @function
dat_lazy:
	.cfi_startproc
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	pushq %rdi
	pushq %rsi
	pushq %rdx
	pushq %rcx
	pushq %r8
	pushq %r9
	pushq %rax
	subq $8, %rsp
	movl %eax, %edi
	call dat_resolve
	addq $8, %rsp
	popq %rax
	popq %r9
	popq %r8
	popq %rcx
	popq %rdx
	popq %rsi
	popq %rdi
	popq %rbp
	.cfi_def_cfa %rsp, 8
	leaq dat_fn(%rip), %r11
	movl %eax, %eax
	jmp *(%r11,%rax,8)
	.cfi_endproc
	.size dat_lazy, .-dat_lazy

/* sendReleaseContextRpc while the backend serves: nothing to tell. */
	.globl dat_noop
	.hidden dat_noop
	.type dat_noop, @function
dat_noop:
	ret
	.size dat_noop, .-dat_noop

	.section .note.GNU-stack,"",@progbits
