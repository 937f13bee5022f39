/* capi.c: the C side of the library, one translation unit. The public dac_*
** functions it takes in from csrc/ (library.c, contexts.c, handles.c,
** cleanup.c) hold what Go cannot: the calling thread's current context id
** and last error (C thread-local storage), and the fork guard. Everything
** else they pass to the dacgo_* functions of export.go, one Go call per
** operation; the functions that only read or write the current id, or
** that the records Go publishes can serve, never enter Go at all. This
** file itself only sets the unit up and clears each room's state in a
** forked child.
**
** The rooms of one concern each are in csrc/ (csrc/dacc.h says how they
** share what they share); this file includes every one of them into one
** unit, as SQLite's amalgamation does, so that the fast paths inline across
** rooms (a lookup inlined into every function that takes a reference), and
** because cgo compiles only the .c files of the package's own folder. Each
** room also compiles alone (make lint-c). The build hashes csrc/ through
** build_inputs.go. */
#include <pthread.h>

#include "csrc/error.c"
#include "csrc/clock.c"
#include "csrc/host.c"
#include "csrc/fork.c"
#include "csrc/records.c"
#include "csrc/uncounted.c"
#include "csrc/refs.c"
#include "csrc/library.c"
#include "csrc/contexts.c"
#include "csrc/handles.c"
#include "csrc/cleanup.c"
#include "csrc/testing.c"
/* cgo's declarations of the Go side, against csrc/dacgo.h's: one that
** disagrees is a compile error here. */
#include "_cgo_export.h"

/* In a forked child: the guard set, then what each room must forget for the
** fast paths that come before the guard to fall through to it (fork.c says
** why). */
static void on_fork_child(void) {
	dacc_fork_child_handler();
	dacc_records_forget();
	dacc_message_ids_forget();
	dacc_uncounted_forget();
}

__attribute__((constructor)) static void dacc_setup(void) {
	dacc_error_setup();
	dacc_refs_setup();
	pthread_atfork(dacc_fork_prepare_handler, dacc_fork_parent_handler, on_fork_child);
}
