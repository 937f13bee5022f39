/* csrc/error.h: the calling thread's last error (csrc/error.c), which Go
** fills in too (export.go: setError), and the refusals C makes itself. */
#ifndef DISTAUTOGRAD_CSRC_ERROR_H
#define DISTAUTOGRAD_CSRC_ERROR_H

#include "../include/distautograd.h"
#include "dacc.h"

/* One thread's last error: a status and a NUL-terminated message. Go writes
** it through the pointer that every dacgo_* function takes. It is allocated
** per thread on the thread's first call that may fail (and freed when the
** thread exits), so that the library's static TLS stays a few words: a
** library loaded late with dlopen must fit in glibc's small static-TLS
** surplus, which other libraries share. */
#define DACC_ERROR_MSG_CAP 1024
typedef struct dacc_error_slot {
	int code;
	char msg[DACC_ERROR_MSG_CAP];
} dacc_error_slot;

/* The slot of every thread whose own could not be allocated: shared, and
** written by nobody (dacc_reject, and Go's setError, leave it as it is). */
extern DACC_HIDDEN dacc_error_slot dacc_no_memory_slot;

/* The calling thread's slot; NULL until its first use. */
extern DACC_TLS dacc_error_slot *dacc_tls_error DACC_HIDDEN;

/* Allocates the calling thread's slot (dacc_no_memory_slot if it cannot). */
DACC_HIDDEN dacc_error_slot *dacc_new_error_slot(void);

/* The calling thread's error slot, allocated on first use. */
static inline __attribute__((always_inline)) dacc_error_slot *dacc_err(void) {
	dacc_error_slot *e = dacc_tls_error;
	if (__builtin_expect(e == NULL, 0))
		return dacc_new_error_slot();
	return e;
}

/* Fails a call that C refuses by itself (an argument, fork, a timeout):
** the message, "distautograd: fn: what", is made here. Go's failures come
** back filled in by Go. Returns code. */
DACC_HIDDEN int dacc_reject(int code, const char *fn, const char *what);

/* Once, at load: what frees a thread's slot when it exits. */
DACC_HIDDEN void dacc_error_setup(void);

/* Refuses a NULL out-argument p of the calling dac_* function. */
#define CHECK_OUT(p)                                               \
	do {                                                           \
		if ((p) == NULL)                                           \
			return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, \
			                   #p " must not be NULL");            \
	} while (0)

#endif
