/* csrc/error.c: the calling thread's last error (status and message), and
** the refusals C makes itself.
** Part of capi.c's one translation unit (capi.c says why): never compiled
** alone. */

/* The calling thread's last error, allocated on its first use (see
** capi_internal.h: static TLS must stay small); freed at thread exit by
** error_key's destructor. */
static DACC_TLS dacc_error_slot *tls_error;
static pthread_key_t error_key;
/* For a thread whose slot cannot be allocated: its status and message are
** then this one, shared, and say so; nobody writes it (reject, and Go's
** setError, leave it as it is). */
dacc_error_slot dacc_no_memory_slot = {DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"};

static void free_error_slot(void *p) {
	tls_error = NULL; /* a later destructor's call allocates it anew */
	if (p != &dacc_no_memory_slot)
		free(p);
}

/* The calling thread's error slot, allocated on first use. */
static __attribute__((noinline)) dacc_error_slot *new_error_slot(void) {
	dacc_error_slot *e = calloc(1, sizeof *e);
	if (e == NULL || pthread_setspecific(error_key, e) != 0) {
		free(e);
		e = &dacc_no_memory_slot;
	}
	tls_error = e;
	return e;
}

static inline __attribute__((always_inline)) dacc_error_slot *err(void) {
	dacc_error_slot *e = tls_error;
	if (__builtin_expect(e == NULL, 0))
		return new_error_slot();
	return e;
}

/* Fails a call that C refuses by itself (an argument, fork, a timeout):
** the message is made here. Go's failures come back filled in by Go. */
static int reject(int code, const char *fn, const char *what) {
	dacc_error_slot *e = err();
	if (e == &dacc_no_memory_slot)
		return code;
	e->code = code;
	snprintf(e->msg, sizeof e->msg, "distautograd: %s: %s", fn, what);
	return code;
}

#define CHECK_OUT(p)                                          \
	do {                                                      \
		if ((p) == NULL)                                      \
			return reject(DAC_ERR_INVALID_ARGUMENT, __func__, \
			              #p " must not be NULL");            \
	} while (0)

const char *dac_status_string(int status) {
	if (status < 0 || (size_t)status >= sizeof dacc_status_names / sizeof dacc_status_names[0])
		return "DAC_UNKNOWN";
	return dacc_status_names[status];
}

const char *dac_last_error(void) { return tls_error ? tls_error->msg : ""; }

int dac_last_status(void) { return tls_error ? tls_error->code : DAC_OK; }
