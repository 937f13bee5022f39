/* csrc/handles.c: the dac_* functions that reach a context through a handle. */
#include <stddef.h>
#include <stdint.h>

#include "dacgo.h"
#include "error.h"
#include "fork.h"
#include "refs.h"

/* A live handle needs no check that dac_init succeeded (it could not
** exist otherwise, and a thread racing dac_init may hold one before C's
** cache knows); everything else goes to Go, which says
** DAC_ERR_NOT_INITIALIZED before dac_init, else why the handle is bad. */

int dac_context_ref(dac_context *ctx) {
	uint64_t h = dacc_to_handle(ctx);
	for (;;) {
		uint32_t gen;
		dacc_record *r = dacc_handle_record(h, &gen);
		if (__builtin_expect(r != NULL, 1)) {
			uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
			/* Referenced: counted, or held uncounted by this thread. */
			while (dacc_holds(st, gen, h) &&
			       (st & DACC_STATE_REFS) != DACC_STATE_REFS) {
				if (__atomic_compare_exchange_n(&r->state, &st, st + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
					return DAC_OK;
			}
		}
		/* Go says why not; DACC_RETRY: the state moved meanwhile. */
		GUARD_FORK();
		dacc_for_go(h);
		dacc_pending_drop none = {0, 0}; /* a ref never kills */
		int rc = dacgo_context_ref(h, 1, &none, dacc_err());
		if (rc != DACC_RETRY)
			return rc;
	}
}

int dac_context_unref(dac_context *ctx) {
	uint64_t h = dacc_to_handle(ctx);
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (h != 0 && __atomic_load_n(&s->h, __ATOMIC_RELAXED) == h) {
		/* Only this thread puts a handle in its slot, so the exchange
		** finds h, dropped now, or 0: a settle counted it meanwhile. */
		if (__builtin_expect(__atomic_exchange_n(&s->h, 0, __ATOMIC_SEQ_CST) == h, 1))
			return DAC_OK;
	}
	return dacc_unref_counted(h);
}

static __attribute__((noinline)) int context_id_slow(dac_context *ctx, int64_t *out) {
	if (dacc_forked)
		return dacc_forked_error("dac_context_id");
	if (out == NULL)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, "dac_context_id", "out must not be NULL");
	uint64_t h = dacc_to_handle(ctx);
	if (dacc_get_view() != NULL && dacc_read_id(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, out))
		return DAC_OK;
	if (dacc_owns(h)) { /* held uncounted by this thread: its life cannot end meanwhile */
		uint32_t gen;
		const dacc_record *r = dacc_record_of(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, &gen);
		if (r != NULL) {
			*out = __atomic_load_n(&r->id, __ATOMIC_ACQUIRE);
			return DAC_OK;
		}
	}
	dacc_for_go(h);
	return dacgo_context_id(h, out, dacc_err());
}

int dac_context_unref_many(dac_context *const *ctxs, size_t count) {
	GUARD_FORK();
	if (ctxs == NULL && count != 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "ctxs must not be NULL when count is not 0");
	int last = DAC_OK;
	for (size_t i = 0; i < count; i++) {
		int rc = dac_context_unref(ctxs[i]);
		if (rc != DAC_OK)
			last = rc;
	}
	return last;
}

/* The slow path out of line: the fast one is a leaf that saves nothing. */
int dac_context_id(dac_context *ctx, int64_t *out) {
	if (__builtin_expect(out != NULL && dacc_read_id(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), dacc_to_handle(ctx), out), 1))
		return DAC_OK;
	return context_id_slow(ctx, out);
}

/* As dac_context_id: the torch backend reads the host value on every
** retrieve, and a call into Go there costs more than the rest of it. The
** value is set once per life of the record (Go clears it only when the
** record dies), so one read between two checks of that life is its value. */
int dac_context_host_value(dac_context *ctx, uint64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	uint64_t h = dacc_to_handle(ctx);
	uint32_t gen;
	dacc_record *r = dacc_handle_record(h, &gen);
	if (__builtin_expect(r != NULL, 1) && dacc_holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
		uint64_t v = __atomic_load_n(&r->host_value, __ATOMIC_ACQUIRE);
		if (dacc_holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
			*out = v;
			return DAC_OK;
		}
	}
	dacc_for_go(h);
	return dacgo_context_host_value(h, out, dacc_err());
}

int dac_context_add_known_worker_id(dac_context *ctx, int32_t worker_id) {
	/* Already known (among the ids C sees) through a referenced handle:
	** nothing to add, nothing to enter Go for. */
	uint64_t h = dacc_to_handle(ctx);
	uint32_t gen;
	dacc_record *r = dacc_handle_record(h, &gen);
	if (__builtin_expect(r != NULL, 1) && dacc_holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
		uint32_t n = __atomic_load_n(&r->nworkers, __ATOMIC_ACQUIRE);
		if (n > DACC_INLINE_WORKERS)
			n = DACC_INLINE_WORKERS;
		for (uint32_t i = 0; i < n; i++)
			if ((int32_t)r->workers[i] == worker_id)
				return DAC_OK;
	}
	GUARD_FORK();
	dacc_for_go(h);
	return dacgo_context_add_known_worker_id(h, worker_id, dacc_err());
}

int dac_context_list(dac_context **out, size_t capacity, size_t *count) {
	GUARD_FORK();
	CHECK_OUT(count);
	if (out == NULL && capacity != 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "out must not be NULL when capacity is not 0");
	_Static_assert(sizeof(dac_context *) == sizeof(uint64_t), "a handle is a pointer of 64 bits");
	return dacgo_context_list((uint64_t *)out, capacity, count, dacc_err());
}

/* How long ago the context was last used, read from its record and the
** coarse clock without entering Go (what looks after idle contexts asks it
** of every context, often); its age only Go knows. */
int dac_context_times(dac_context *ctx, int64_t *age_ms, int64_t *idle_ms) {
	GUARD_FORK();
	uint64_t h = dacc_to_handle(ctx);
	if (age_ms == NULL && idle_ms != NULL) {
		uint32_t gen = 0;
		dacc_record *r = dacc_handle_record(h, &gen);
		dacc_view *v = dacc_get_view();
		if (__builtin_expect(r != NULL && v != NULL, 1) && dacc_holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
			int64_t last = __atomic_load_n(&r->last_used, __ATOMIC_RELAXED);
			if (dacc_holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
				int64_t now = dacc_now(v);
				*idle_ms = now > last ? now - last : 0;
				return DAC_OK;
			}
		}
	}
	dacc_for_go(h);
	return dacgo_context_times(h, age_ms, idle_ms, dacc_err());
}

int dac_context_known_worker_ids(dac_context *ctx, int32_t *ids, size_t capacity, size_t *count) {
	GUARD_FORK();
	CHECK_OUT(count);
	if (ids == NULL && capacity != 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "ids must not be NULL when capacity is not 0");
	dacc_for_go(dacc_to_handle(ctx));
	return dacgo_context_known_worker_ids(dacc_to_handle(ctx), ids, capacity, count, dacc_err());
}

int dac_context_add_send_function(dac_context *ctx, int64_t message_id, uint64_t fn) {
	GUARD_FORK();
	dacc_for_go(dacc_to_handle(ctx));
	return dacgo_context_add_function(dacc_to_handle(ctx), DACC_SEND, message_id, fn, dacc_err());
}

int dac_context_add_recv_function(dac_context *ctx, int64_t message_id, uint64_t fn) {
	GUARD_FORK();
	dacc_for_go(dacc_to_handle(ctx));
	return dacgo_context_add_function(dacc_to_handle(ctx), DACC_RECV, message_id, fn, dacc_err());
}

int dac_context_send_function(dac_context *ctx, int64_t message_id, uint64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	dacc_for_go(dacc_to_handle(ctx));
	return dacgo_context_function(dacc_to_handle(ctx), DACC_SEND, message_id, out, dacc_err());
}

int dac_context_recv_function(dac_context *ctx, int64_t message_id, uint64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	dacc_for_go(dacc_to_handle(ctx));
	return dacgo_context_function(dacc_to_handle(ctx), DACC_RECV, message_id, out, dacc_err());
}

static int list_functions(const char *fn, dac_context *ctx, int kind, int64_t *message_ids, uint64_t *fns,
                          size_t capacity, size_t *count) {
	if (count == NULL)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, fn, "count must not be NULL");
	if ((message_ids == NULL || fns == NULL) && capacity != 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, fn, "message_ids and fns must not be NULL when capacity is not 0");
	dacc_for_go(dacc_to_handle(ctx));
	return dacgo_context_functions(dacc_to_handle(ctx), kind, message_ids, fns, capacity, count, dacc_err());
}

int dac_context_send_functions(dac_context *ctx, int64_t *message_ids, uint64_t *fns, size_t capacity,
                               size_t *count) {
	GUARD_FORK();
	return list_functions(__func__, ctx, DACC_SEND, message_ids, fns, capacity, count);
}

int dac_context_recv_functions(dac_context *ctx, int64_t *message_ids, uint64_t *fns, size_t capacity,
                               size_t *count) {
	GUARD_FORK();
	return list_functions(__func__, ctx, DACC_RECV, message_ids, fns, capacity, count);
}

/* ---- Host values ---- */

/* Set here, not in Go: the torch backend sets one on every context it
** makes, and a call into Go there costs more than the rest of it. The
** value goes in by compare-and-swap from 0 (setters agree on the first),
** then its drop; the caller's reference keeps the record from dying until
** both are written, and Go takes both when it dies (records.go, Record). */
int dac_context_set_host_value(dac_context *ctx, uint64_t value, dac_host_value_drop drop, uint64_t *current) {
	GUARD_FORK();
	CHECK_OUT(current);
	uint64_t h = dacc_to_handle(ctx);
	uint32_t gen;
	dacc_record *r;
	/* Go says why the handle is not usable (not initialized, or which
	** handle is bad); if Go finds it live (a lookup took a reference to its
	** context meanwhile, the same life), it is tried again. */
	while (__builtin_expect((r = dacc_handle_record(h, &gen)) == NULL || !dacc_holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h),
	                        0)) {
		uint64_t ignored;
		dacc_for_go(h);
		int rc = dacgo_context_host_value(h, &ignored, dacc_err());
		if (rc != DAC_OK)
			return rc;
	}
	if (value == 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "the host value must not be 0 (0 means none)");
	uint64_t expect = 0;
	if (__atomic_compare_exchange_n(&r->host_value, &expect, value, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&r->host_drop, (uintptr_t)drop, __ATOMIC_RELEASE);
		*current = value;
	} else {
		*current = expect;
	}
	return DAC_OK;
}
