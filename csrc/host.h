/* csrc/host.h: calls into the host from the library (its cleanup sender,
** log hook and host values' drop functions), and the gate that fork()
** closes on them (csrc/host.c; csrc/fork.c says why). */
#ifndef DISTAUTOGRAD_CSRC_HOST_H
#define DISTAUTOGRAD_CSRC_HOST_H

#include <stdint.h>
#include <time.h>

#include "../include/distautograd.h"
#include "dacc.h"

/* Around every call into the host from a library thread, so that fork()
** can hold such calls back and wait for those in progress: calls in
** progress, the number of holders of the gate (a fork being prepared), and
** this thread's depth of calls into the host (a host callback that calls
** back into the library and so into the host again is one call, and never
** waits at the gate it is already past). */
typedef struct {
	int n;
} __attribute__((aligned(64))) dacc_line_int; /* an int alone on its cache line */
extern DACC_HIDDEN dacc_line_int dacc_cb_in_flight;
extern DACC_HIDDEN int dacc_cb_fork_gate;
extern DACC_TLS int dacc_tls_in_callback DACC_HIDDEN;

/* Set on a thread while it runs the host's cleanup sender, so that
** dac_set_cleanup_sender called from inside a sender does not wait for
** itself. */
extern DACC_TLS int dacc_tls_in_sender DACC_HIDDEN;

static inline void dacc_callback_enter(void) {
	if (dacc_tls_in_callback++ > 0)
		return;
	for (;;) {
		while (__atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST)) {
			struct timespec ts = {0, 50 * 1000};
			nanosleep(&ts, NULL);
		}
		__atomic_add_fetch(&dacc_cb_in_flight.n, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST))
			break;
		__atomic_sub_fetch(&dacc_cb_in_flight.n, 1, __ATOMIC_SEQ_CST);
	}
}

static inline void dacc_callback_leave(void) {
	if (--dacc_tls_in_callback > 0)
		return;
	__atomic_sub_fetch(&dacc_cb_in_flight.n, 1, __ATOMIC_SEQ_CST);
}

/* Closes the gate (one holder more) and waits up to timeout_ms for the
** calls in progress on other threads; returns whether none is left. */
DACC_HIDDEN int dacc_host_gate_close(int64_t timeout_ms);
/* One holder of the gate fewer (none: no effect). */
DACC_HIDDEN void dacc_host_gate_open(void);

/* ---- Trampolines: Go's calls into the host ----
** Go cannot call a C function pointer itself; it holds them as void* (the
** casts are POSIX-sanctioned, as for dlsym) and calls these, which pass the
** gate above. */

/* The cleanup sender (the release fan-out's delivery); marks the thread as
** inside a sender for dac_set_cleanup_sender. */
static inline int dacc_call_cleanup_sender(void *fn, void *user_data, int32_t worker_id, int64_t context_id) {
	dacc_callback_enter();
	dacc_tls_in_sender++;
	int rc = ((dac_cleanup_sender)fn)(user_data, worker_id, context_id);
	dacc_tls_in_sender--;
	dacc_callback_leave();
	return rc;
}

/* The log hook. */
static inline void dacc_call_log(void *fn, void *user_data, int level, const char *message) {
	dacc_callback_enter();
	((dac_log_hook)fn)(user_data, level, message);
	dacc_callback_leave();
}

/* A host value's drop function, run where the context's last reference
** went: on the thread that dropped it, outside every lock of the container.
** C calls it after a release or an unref (Go hands the drop back:
** csrc/refs.h, dacc_run_pending_drop); Go calls it for a reap or a bulk
** release. */
static inline void dacc_call_host_drop(uintptr_t fn, uint64_t value) {
	dacc_callback_enter();
	((dac_host_value_drop)fn)(value);
	dacc_callback_leave();
}

#endif
