/* capi.c: the public dac_* functions. They hold what Go cannot: the calling
** thread's current context id and last error (C thread-local storage), and
** the fork guard. Everything else they pass to the dacgo_* functions of
** export.go, one Go call per operation; the functions that only read or
** write the current id never enter Go at all.
**
** One translation unit of rooms of one concern each, in csrc/: the rooms
** share static state and always-inline fast paths (a lookup inlined into
** every function that takes a reference), which separate units would turn
** into calls; and cgo compiles only the .c files of the package's own
** folder. The build hashes csrc/ through build_inputs.go. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi_internal.h"
#include "capi_status.h"
#include "_cgo_export.h"

/* Thread-local storage in the initial-exec model: an access is one load at
** a fixed offset from the thread pointer instead of a __tls_get_addr call.
** It costs nothing extra: the Go runtime's own TLS already makes the library
** STATIC_TLS, so the loader gives its whole TLS block static space anyway. */
#define DACC_TLS __thread __attribute__((tls_model("initial-exec")))

#include "csrc/error.c"
#include "csrc/fork.c"
#include "csrc/records.c"
#include "csrc/library.c"
#include "csrc/contexts.c"
#include "csrc/handles.c"
#include "csrc/cleanup.c"
#include "csrc/testing.c"

/* What a forked child forgets, in every room (fork.c: on_fork_child). */
static void clear_for_child(void) {
	__atomic_store_n(&g_view, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&dacc_records, 0, __ATOMIC_RELAXED);
	tls_msg.next = tls_msg.end = 0;
	/* The reference the forking thread held uncounted is the parent's: the
	** child's unref of it must not drop it in C, but say DAC_ERR_FORKED. */
	dacc_tls_uncounted = &dacc_no_uncounted;
}

__attribute__((constructor)) static void dacc_setup(void) {
	pthread_key_create(&error_key, free_error_slot);
	dacc_uncounted_setup(unref_counted_void);
	pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
}
