/* csrc/library.h: the calling thread's current context id, which C owns
** (the native thread_local), and its block of message ids (csrc/library.c). */
#ifndef DISTAUTOGRAD_CSRC_LIBRARY_H
#define DISTAUTOGRAD_CSRC_LIBRARY_H

#include <stdint.h>

#include "dacc.h"

/* The calling thread's current context id (DAC_INVALID_ID: none). Go is
** passed its address when a call may change it (export.go: dacgo_context_new). */
extern DACC_TLS int64_t dacc_tls_current DACC_HIDDEN;

/* In a forked child: the forking thread's block of message ids forgotten,
** so that the child's next id goes to the slow path and its fork guard. */
DACC_HIDDEN void dacc_message_ids_forget(void);

#endif
