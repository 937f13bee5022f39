/* csrc/library.c: the library's own dac_* functions: versions, dac_init and
** what it set, message ids, and the calling thread's current context id
** (which C owns: csrc/library.h). */
#include <stdint.h>

#include "dacgo.h"
#include "error.h"
#include "fork.h"
#include "library.h"

DACC_TLS dacc_thread dacc_tls_thread = {.current = DAC_INVALID_ID};

/* For the functions that never enter Go: C's cache of Go's answer to "has
** dac_init succeeded?". Go is the one source of truth (it may say yes
** before the dac_init that made it so has returned to C); once it has said
** yes, that never changes, so the cache need not ask again. */
static int c_initialized;

static __attribute__((noinline)) int check_initialized_slow(void) {
	int rc = dacgo_check_initialized(dacc_err());
	if (rc == DAC_OK)
		__atomic_store_n(&c_initialized, 1, __ATOMIC_RELEASE);
	return rc;
}

static inline int check_initialized(void) {
	if (__builtin_expect(__atomic_load_n(&c_initialized, __ATOMIC_ACQUIRE), 1))
		return DAC_OK;
	return check_initialized_slow();
}

#define GUARD_INIT()                          \
	do {                                      \
		int rc_ = check_initialized();        \
		if (rc_ != DAC_OK)                    \
			return rc_;                       \
	} while (0)

const char *dac_version(void) { return DAC_VERSION_STRING; }

int dac_version_number(void) { return DAC_VERSION_NUMBER; }

/* ---- Container ---- */

int dac_init(int64_t worker_id) {
	GUARD_FORK();
	int rc = dacgo_init(worker_id, dacc_err());
	if (rc == DAC_OK)
		__atomic_store_n(&c_initialized, 1, __ATOMIC_RELEASE);
	return rc;
}

int dac_worker_id(int32_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	return dacgo_worker_id(out, dacc_err());
}

int dac_max_id(int64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	return dacgo_max_id(out, dacc_err());
}

int dac_num_contexts(int64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	return dacgo_num_contexts(out, dacc_err());
}

/* Message ids come to each thread in blocks of DAC_MESSAGE_ID_BLOCK that Go
** reserves from the one counter, so most calls never leave C. Ids stay unique
** and keep the layout; a thread's ids are consecutive, but ids of different
** threads interleave by block rather than one by one. Ids a thread reserved
** and did not use before it exited are never issued (ids are never reused).
** Why a block that size: a block costs one call into Go, and spread over the
** block that call is a small fraction of an id (docs/performance.md, "Message ids").
** A thread that takes one id and exits leaves the rest of its block
** unused, 2^48 / DAC_MESSAGE_ID_BLOCK such threads per worker before the ids
** run out. */
#define DACC_MESSAGE_ID_BLOCK DAC_MESSAGE_ID_BLOCK /* the header's, from Go's MessageIDBlock */
/* This thread's block, [next, end); one struct, so one offset to load.
** Placed in .tbss by name, which leaves it its words' alignment: GCC gives
** a static 16-byte struct 16, and the padding that costs would take the
** library's static TLS past the header's 64 bytes (TestStaticTLSIsSmall). */
static DACC_TLS struct {
	int64_t next, end;
} tls_msg __attribute__((section(".tbss")));

void dacc_message_ids_forget(void) { tls_msg.next = tls_msg.end = 0; }

/* The slow path, out of line so that the fast one saves no registers. */
static __attribute__((noinline)) int new_message_id_block(int64_t *out) {
	if (dacc_forked)
		return dacc_forked_error("dac_new_autograd_message_id");
	int64_t first = 0, count = 0;
	int rc = dacgo_new_autograd_message_id_block(DACC_MESSAGE_ID_BLOCK, &first, &count, dacc_err());
	if (rc != DAC_OK)
		return rc;
	*out = first;
	tls_msg.next = first + 1;
	tls_msg.end = first + count;
	return DAC_OK;
}

int dac_new_autograd_message_id(int64_t *out) {
	CHECK_OUT(out);
	if (__builtin_expect(tls_msg.next < tls_msg.end, 1)) {
		*out = tls_msg.next++;
		return DAC_OK;
	}
	return new_message_id_block(out);
}

int dac_debug_info(char *buf, size_t capacity, size_t *length) {
	GUARD_FORK();
	CHECK_OUT(length);
	if (buf == NULL && capacity != 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "buf must not be NULL when capacity is not 0");
	return dacgo_debug_info(buf, capacity, length, dacc_err());
}

int dac_set_max_contexts(int64_t max_contexts) {
	GUARD_FORK();
	return dacgo_set_max_contexts(max_contexts, dacc_err());
}

/* ---- The calling thread's current context id: no Go call on success ---- */

int dac_current_context_id(int64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	GUARD_INIT();
	*out = dacc_tls_current;
	return DAC_OK;
}

int dac_has_valid_context(int *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	GUARD_INIT();
	*out = dacc_tls_current != DAC_INVALID_ID;
	return DAC_OK;
}

int dac_set_current_context_id(int64_t context_id) {
	GUARD_FORK();
	GUARD_INIT();
	if (dacc_tls_current != DAC_INVALID_ID)
		return dacgo_fill_error(DAC_ERR_ALREADY_HAS_CONTEXT, dacc_err());
	dacc_tls_current = context_id;
	return DAC_OK;
}

int dac_force_current_context_id(int64_t context_id) {
	GUARD_FORK();
	GUARD_INIT();
	dacc_tls_current = context_id;
	return DAC_OK;
}

int dac_clear_current_context(void) {
	GUARD_FORK();
	GUARD_INIT();
	dacc_tls_current = DAC_INVALID_ID;
	return DAC_OK;
}
