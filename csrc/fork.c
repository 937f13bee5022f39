/* csrc/fork.c: fork(): the gate that holds calls into the host back while
** a fork is prepared (csrc/host.h), and the guard that fails every call in
** the child (csrc/fork.h). */
#include <stdint.h>

#include "error.h"
#include "fork.h"
#include "host.h"

volatile int dacc_forked;

/* fork() while a library thread is inside the host's sender or log hook
** gives the child a copy of whatever that thread held at that instant. For
** a Python host that can be CPython's own lock on its thread states, which
** a ctypes callback takes (without the GIL) to make the calling thread's
** state, and which CPython before 3.13 re-initializes in the child only
** after using it: the child hangs in os.fork(). So fork() closes a gate on
** new calls into the host and waits for those in progress, up to
** DACC_FORK_WAIT_MS. A call that cannot finish because the forking thread
** holds what it needs (the GIL, when CPython forks) would make that the
** whole wait: the Python package therefore calls dac_fork_prepare from an
** os.register_at_fork hook, where ctypes releases the GIL, and the wait
** here then finds nothing in flight. */
#define DACC_FORK_WAIT_MS DAC_FORK_WAIT_MS /* the header's */
/* Holders of the gate through dac_fork_prepare: the host waited already,
** with its own bound, and the atfork handler does not wait again. */
static int host_prepared;

void dacc_fork_prepare_handler(void) {
	if (__atomic_load_n(&host_prepared, __ATOMIC_SEQ_CST) > 0)
		__atomic_add_fetch(&dacc_cb_fork_gate, 1, __ATOMIC_SEQ_CST);
	else
		dacc_host_gate_close(DACC_FORK_WAIT_MS);
}

void dacc_fork_parent_handler(void) { dacc_host_gate_open(); }

/* In the child, the fast paths that come before the fork guard must find
** nothing to serve (the view gone, the forking thread's message-id block
** empty: the child's only thread is the one that forked), so that every
** call reaches its slow path, which fails with DAC_ERR_FORKED first: capi.c
** has each room forget its part after this. */
void dacc_fork_child_handler(void) { dacc_forked = 1; }

int dacc_forked_error(const char *fn) {
	return dacc_reject(DAC_ERR_FORKED, fn,
	                   "the library was loaded before fork() and cannot be used in the child process "
	                   "(the Go runtime does not survive fork); load it after fork, or use the 'spawn' "
	                   "start method");
}

/* ---- Fork ---- */

int dac_fork_prepare(int64_t timeout_ms) {
	GUARD_FORK();
	if (timeout_ms < 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "timeout_ms must be >= 0");
	__atomic_add_fetch(&host_prepared, 1, __ATOMIC_SEQ_CST);
	if (!dacc_host_gate_close(timeout_ms))
		return dacc_reject(DAC_ERR_TIMEOUT, __func__,
		                   "calls into the cleanup sender or log hook were still in progress when the wait ran out");
	return DAC_OK;
}

int dac_fork_parent(void) {
	GUARD_FORK();
	int v = __atomic_load_n(&host_prepared, __ATOMIC_SEQ_CST);
	while (v > 0 && !__atomic_compare_exchange_n(&host_prepared, &v, v - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (v > 0)
		dacc_host_gate_open();
	return DAC_OK;
}
