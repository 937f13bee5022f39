/* capi_internal.h: what the C side (capi.c) and the Go side (export.go) of
** the library share. Not installed. The public functions (dac_*, in capi.c)
** own the per-thread state and call the Go functions (dacgo_*, export.go),
** passing that state in; the dacgo_* symbols are not exported from the .so
** (see libdistautograd.map). */
#ifndef DISTAUTOGRAD_CAPI_INTERNAL_H
#define DISTAUTOGRAD_CAPI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "include/distautograd.h"

/* One thread's last error: a status and a NUL-terminated message. Go writes
** it through the pointer that every dacgo_* function takes. */
#define DAC_ERROR_MSG_CAP 1024
typedef struct dac_error_slot {
	int code;
	char msg[DAC_ERROR_MSG_CAP];
} dac_error_slot;

/* Trampolines: Go cannot call a C function pointer itself; it holds them as
** void* (the casts are POSIX-sanctioned, as for dlsym). */

static inline int dac_call_cleanup_sender(void *fn, void *user_data, int32_t worker_id, int64_t context_id) {
	return ((dac_cleanup_sender)fn)(user_data, worker_id, context_id);
}

static inline void dac_call_log(void *fn, void *user_data, int level, const char *message) {
	((dac_log_hook)fn)(user_data, level, message);
}

#endif
