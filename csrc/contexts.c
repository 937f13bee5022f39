/* csrc/contexts.c: the dac_* functions that name a context by its id: create,
** look up, release. */
#include <stddef.h>
#include <stdint.h>

#include "dacgo.h"
#include "error.h"
#include "fork.h"
#include "library.h"
#include "refs.h"

/* ---- Contexts ---- */

int dac_context_new(dac_context **out) {
	GUARD_FORK();
	CHECK_OUT(out);
	uint64_t h = 0;
	int rc = dacgo_context_new(&dacc_tls_thread, &h, dacc_err());
	if (rc == DAC_OK)
		*out = dacc_to_ptr(h);
	return rc;
}

int dac_context_new_id(dac_context **out, int64_t *context_id) {
	GUARD_FORK();
	CHECK_OUT(out);
	CHECK_OUT(context_id);
	uint64_t h = 0;
	int rc = dacgo_context_new(&dacc_tls_thread, &h, dacc_err());
	if (rc == DAC_OK) {
		*out = dacc_to_ptr(h);
		*context_id = dacc_tls_current; /* what dac_context_new just made current */
	}
	return rc;
}

/* A release, in Go; the host drop of a context that died there, here. */
static int release(int64_t context_id, int if_present, const int32_t *worker_ids, size_t count, int *released) {
	dacc_pending_drop d = {0, 0};
	int rc = dacgo_context_release(&dacc_tls_thread, context_id, if_present, (int32_t *)worker_ids, count, released, &d,
	                               dacc_err());
	dacc_run_pending_drop(&d);
	return rc;
}

int dac_context_release(int64_t context_id) {
	GUARD_FORK();
	return release(context_id, 0, NULL, 0, NULL);
}

int dac_release_contexts_of_worker(int32_t worker_id, int64_t *released) {
	GUARD_FORK();
	return dacgo_release_contexts_of_worker(worker_id, released, dacc_err());
}

int dac_reap_idle_contexts(int64_t max_idle_ms, int64_t *released) {
	GUARD_FORK();
	return dacgo_reap_idle_contexts(max_idle_ms, released, dacc_err());
}

/* The fast paths below come before the fork guard: in a child they find
** no view (capi.c: on_fork_child) and fall through to it. */

static inline __attribute__((always_inline)) int current(const char *fn, dac_context **out) {
	uint64_t h = 0;
	if (__builtin_expect(dacc_tls_current != DAC_INVALID_ID && dacc_acquire(dacc_tls_current, &h) == DACC_ACQUIRED, 1)) {
		*out = dacc_to_ptr(h);
		return DAC_OK;
	}
	if (dacc_forked)
		return dacc_forked_error(fn);
	int rc = dacgo_context_current(dacc_tls_current, &h, dacc_err());
	if (rc == DAC_OK)
		*out = dacc_to_ptr(h);
	return rc;
}

int dac_context_current(dac_context **out) {
	CHECK_OUT(out);
	return current(__func__, out);
}

int dac_context_current_id(dac_context **out, int64_t *context_id) {
	CHECK_OUT(out);
	CHECK_OUT(context_id);
	int rc = current(__func__, out);
	if (rc == DAC_OK)
		*context_id = dacc_tls_current; /* the id it was found under */
	return rc;
}

static inline __attribute__((always_inline)) int retrieve(const char *fn, int64_t context_id, int if_present,
                                                         dac_context **out) {
	uint64_t h = 0;
	int found = dacc_acquire(context_id, &h);
	if (__builtin_expect(found == DACC_ACQUIRED, 1)) {
		*out = dacc_to_ptr(h);
		return DAC_OK;
	}
	if (found == DACC_ABSENT && if_present) {
		*out = NULL;
		return DAC_OK;
	}
	if (dacc_forked)
		return dacc_forked_error(fn);
	int rc = dacgo_context_retrieve(context_id, if_present, &h, dacc_err());
	if (rc == DAC_OK)
		*out = dacc_to_ptr(h);
	return rc;
}

int dac_context_retrieve(int64_t context_id, dac_context **out) {
	CHECK_OUT(out);
	return retrieve(__func__, context_id, 0, out);
}

int dac_context_retrieve_if_present(int64_t context_id, dac_context **out) {
	CHECK_OUT(out);
	return retrieve(__func__, context_id, 1, out);
}

int dac_context_get_or_create(int64_t context_id, dac_context **out) {
	CHECK_OUT(out);
	uint64_t h = 0;
	if (__builtin_expect(dacc_acquire(context_id, &h) == DACC_ACQUIRED, 1)) {
		*out = dacc_to_ptr(h);
		return DAC_OK;
	}
	GUARD_FORK();
	int rc = dacgo_context_get_or_create(context_id, &h, dacc_err());
	if (rc == DAC_OK)
		*out = dacc_to_ptr(h);
	return rc;
}

/* Nothing stored under the id (a cleanup message for a context gone
** already: the usual case, as every worker of a pass tells every other) is
** settled here: nothing to release, no need to enter Go. Unless it is the
** thread's current id: Go resets that if the container's clean-up reaped
** it (container/reaped.go). */
static inline __attribute__((always_inline)) int absent(int64_t context_id) {
	dacc_view *v = dacc_get_view();
	uint32_t index;
	int settled = 0;
	return v != NULL && context_id != dacc_tls_current && dacc_lookup(v, context_id, &index, &settled) == NULL && settled;
}

int dac_context_release_if_present(int64_t context_id, int *released) {
	if (__builtin_expect(absent(context_id), 1)) {
		if (released != NULL)
			*released = 0;
		return DAC_OK;
	}
	GUARD_FORK();
	return release(context_id, 1, NULL, 0, released);
}

int dac_context_release_with_workers(int64_t context_id, const int32_t *worker_ids, size_t count, int *released) {
	GUARD_FORK();
	if (worker_ids == NULL && count != 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "worker_ids must not be NULL when count is not 0");
	int in_range = 1; /* else Go says which is not, and changes nothing */
	for (size_t i = 0; i < count; i++)
		in_range &= worker_ids[i] >= 0 && worker_ids[i] <= UINT16_MAX;
	if (in_range && absent(context_id)) {
		if (released != NULL)
			*released = 0;
		return DAC_OK;
	}
	return release(context_id, 1, worker_ids, count, released);
}

int dac_context_is_valid(int64_t context_id) {
	dacc_view *v = dacc_get_view();
	uint32_t index;
	int settled = 0;
	dacc_record *r = v ? dacc_lookup(v, context_id, &index, &settled) : NULL;
	if (r != NULL) {
		/* Listed with that id between two reads of one life of the record
		** (a reference taken or dropped meanwhile changes nothing). */
		uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
		if ((st & DACC_STATE_LISTED) && __atomic_load_n(&r->id, __ATOMIC_ACQUIRE) == context_id &&
		    ((__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) ^ st) & ~DACC_STATE_REFS) == 0)
			return DAC_OK;
	}
	GUARD_FORK();
	return dacgo_context_is_valid(context_id, dacc_err());
}
