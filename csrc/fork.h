/* csrc/fork.h: fork(): the guard that fails every call in a child of a
** process that loaded the library, and the handlers that capi.c registers
** with pthread_atfork (csrc/fork.c). */
#ifndef DISTAUTOGRAD_CSRC_FORK_H
#define DISTAUTOGRAD_CSRC_FORK_H

#include "dacc.h"

/* Set in a child process after fork(): the Go runtime did not come along. */
extern DACC_HIDDEN volatile int dacc_forked;

/* Fails the call fn of a forked child with DAC_ERR_FORKED. */
DACC_HIDDEN int dacc_forked_error(const char *fn);

/* Fails the calling dac_* function in a forked child. */
#define GUARD_FORK()                                  \
	do {                                              \
		if (__builtin_expect(dacc_forked, 0))         \
			return dacc_forked_error(__func__);       \
	} while (0)

/* pthread_atfork's handlers: the gate on calls into the host closed before
** fork() and opened after it in the parent; in the child, dacc_forked set
** (capi.c then has each room forget what the child must not use). */
DACC_HIDDEN void dacc_fork_prepare_handler(void);
DACC_HIDDEN void dacc_fork_parent_handler(void);
DACC_HIDDEN void dacc_fork_child_handler(void);

#endif
