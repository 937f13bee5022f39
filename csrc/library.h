/* csrc/library.h: the calling thread's state in the container, its current
** context id first (the native thread_local), and its block of message ids
** (csrc/library.c). */
#ifndef DISTAUTOGRAD_CSRC_LIBRARY_H
#define DISTAUTOGRAD_CSRC_LIBRARY_H

#include <stdint.h>

#include "dacc.h"
#include "dacgo.h"

/* The calling thread's state in the container (csrc/dacgo.h: dacc_thread):
** its current context id (DAC_INVALID_ID: none), which C reads and sets
** itself, and its run's next context id, which only Go reads and sets. Go
** is passed its address when a call may change either (export.go:
** dacgo_context_new, dacgo_context_release). */
extern DACC_TLS dacc_thread dacc_tls_thread DACC_HIDDEN;
#define dacc_tls_current (dacc_tls_thread.current)

/* In a forked child: the forking thread's block of message ids forgotten,
** so that the child's next id goes to the slow path and its fork guard. */
DACC_HIDDEN void dacc_message_ids_forget(void);

#endif
