/* csrc/error.c: the calling thread's last error (status and message), and
** the refusals C makes itself (csrc/error.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../capi_status.h"
#include "error.h"

/* Freed at thread exit by error_key's destructor. */
DACC_TLS dacc_error_slot *dacc_tls_error;
static pthread_key_t error_key;
dacc_error_slot dacc_no_memory_slot = {DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"};

static void free_error_slot(void *p) {
	dacc_tls_error = NULL; /* a later destructor's call allocates it anew */
	if (p != &dacc_no_memory_slot)
		free(p);
}

void dacc_error_setup(void) { pthread_key_create(&error_key, free_error_slot); }

__attribute__((noinline)) dacc_error_slot *dacc_new_error_slot(void) {
	dacc_error_slot *e = calloc(1, sizeof *e);
	if (e == NULL || pthread_setspecific(error_key, e) != 0) {
		free(e);
		e = &dacc_no_memory_slot;
	}
	dacc_tls_error = e;
	return e;
}

int dacc_reject(int code, const char *fn, const char *what) {
	dacc_error_slot *e = dacc_err();
	if (e == &dacc_no_memory_slot)
		return code;
	e->code = code;
	snprintf(e->msg, sizeof e->msg, "distautograd: %s: %s", fn, what);
	return code;
}

const char *dac_status_string(int status) {
	if (status < 0 || (size_t)status >= sizeof dacc_status_names / sizeof dacc_status_names[0])
		return "DAC_UNKNOWN";
	return dacc_status_names[status];
}

const char *dac_last_error(void) { return dacc_tls_error ? dacc_tls_error->msg : ""; }

int dac_last_status(void) { return dacc_tls_error ? dacc_tls_error->code : DAC_OK; }
