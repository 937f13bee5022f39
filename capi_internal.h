/* capi_internal.h: what the C side (capi.c) and the Go side (export.go) of
** the library share. Not installed. The public functions (dac_*, in capi.c)
** own the per-thread state and call the Go functions (dacgo_*, export.go),
** passing that state in; the dacgo_* symbols are not exported from the .so
** (see libdistautograd.map). */
#ifndef DISTAUTOGRAD_CAPI_INTERNAL_H
#define DISTAUTOGRAD_CAPI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "include/distautograd.h"

/* One thread's last error: a status and a NUL-terminated message. Go writes
** it through the pointer that every dacgo_* function takes. capi.c allocates
** it per thread on the thread's first call into Go (and frees it when the
** thread exits), so that the library's static TLS stays a few words: a
** library loaded late with dlopen must fit in glibc's small static-TLS
** surplus, which other libraries share. */
#define DACC_ERROR_MSG_CAP 1024
typedef struct dacc_error_slot {
	int code;
	char msg[DACC_ERROR_MSG_CAP];
} dacc_error_slot;
/* The slot of every thread whose own could not be allocated (csrc/error.c):
** shared, and written by nobody. */
extern dacc_error_slot dacc_no_memory_slot __attribute__((visibility("hidden")));

/* A dead record's host value and its drop function (fn 0: none), which
** the Go side hands back instead of calling into C itself: capi.c runs it
** once the call into Go has returned (dacc_call_host_drop, below). */
typedef struct dacc_pending_drop {
	uintptr_t fn;
	uint64_t value;
} dacc_pending_drop;

/* Which of a context's two function maps a dacgo_context_*function* call
** means (its kind argument). */
#define DACC_SEND 0
#define DACC_RECV 1

/* The Go side (//export in export.go, export_cleanup.go). cgo declares them
** again in _cgo_export.h, which capi.c includes too, so a declaration here
** that disagrees with the Go signature is a compile error in capi.c; the ABI
** contract test (abi/) checks that this list and cgo's are the same. Each
** writes a failure into *e and returns its status. */
int dacgo_fill_error(int code, dacc_error_slot *e);
int dacgo_check_initialized(dacc_error_slot *e);
int dacgo_init(int64_t worker_id, dacc_error_slot *e);
int dacgo_worker_id(int32_t *out, dacc_error_slot *e);
int dacgo_max_id(int64_t *out, dacc_error_slot *e);
int dacgo_num_contexts(int64_t *out, dacc_error_slot *e);
int dacgo_new_autograd_message_id_block(int64_t n, int64_t *first, int64_t *count, dacc_error_slot *e);
int dacgo_debug_info(char *buf, size_t capacity, size_t *length, dacc_error_slot *e);
int dacgo_set_max_contexts(int64_t n, dacc_error_slot *e);
int dacgo_context_new(int64_t *current, uint64_t *out, dacc_error_slot *e);
int dacgo_context_current(int64_t current, uint64_t *out, dacc_error_slot *e);
int dacgo_context_retrieve(int64_t id, int if_present, uint64_t *out, dacc_error_slot *e);
int dacgo_context_get_or_create(int64_t id, uint64_t *out, dacc_error_slot *e);
int dacgo_context_is_valid(int64_t id, dacc_error_slot *e);
int dacgo_context_release(int64_t *current, int64_t id, int if_present, int32_t *workers, size_t nworkers,
                          int *released, dacc_pending_drop *drop, dacc_error_slot *e);
int dacgo_release_contexts_of_worker(int32_t worker, int64_t *released, dacc_error_slot *e);
int dacgo_reap_idle_contexts(int64_t idle_ms, int64_t *released, dacc_error_slot *e);
int dacgo_context_list(uint64_t *out, size_t capacity, size_t *count, dacc_error_slot *e);
int dacgo_context_times(uint64_t h, int64_t *age_ms, int64_t *idle_ms, dacc_error_slot *e);
int dacgo_context_ref(uint64_t h, int delta, dacc_pending_drop *drop, dacc_error_slot *e);
int dacgo_context_id(uint64_t h, int64_t *out, dacc_error_slot *e);
int dacgo_context_add_known_worker_id(uint64_t h, int32_t worker, dacc_error_slot *e);
int dacgo_context_known_worker_ids(uint64_t h, int32_t *ids, size_t capacity, size_t *count, dacc_error_slot *e);
int dacgo_context_add_function(uint64_t h, int kind, int64_t msg_id, uint64_t fn, dacc_error_slot *e);
int dacgo_context_function(uint64_t h, int kind, int64_t msg_id, uint64_t *out, dacc_error_slot *e);
int dacgo_context_functions(uint64_t h, int kind, int64_t *msg_ids, uint64_t *fns, size_t capacity, size_t *count,
                            dacc_error_slot *e);
int dacgo_set_cleanup_sender(void *fn, void *user_data, int64_t wait_ms, dacc_error_slot *e);
int dacgo_set_cleanup_nonblocking(int nonblocking, dacc_error_slot *e);
int dacgo_set_log_hook(void *fn, void *user_data, dacc_error_slot *e);
int dacgo_set_cleanup_options(char *fn, dac_cleanup_options *options, dacc_error_slot *e);
int dacgo_cleanup_stats(dac_cleanup_counters *out, dacc_error_slot *e);
int dacgo_cleanup_flush(int64_t timeout_ms, int in_callback, int64_t *pending, dacc_error_slot *e);
int dacgo_view(void **out, dacc_error_slot *e);
int dacgo_context_host_value(uint64_t h, uint64_t *out, dacc_error_slot *e);
#ifdef DACC_TESTING
int dacgo_testing_set_counter_offsets(int64_t ctx_offset, int64_t msg_offset, dacc_error_slot *e);
void dacgo_testing_go_calls(int64_t *out);
int dacgo_testing_age_record(uint64_t h, uint32_t generation, dacc_error_slot *e);
#endif

/* The contexts, as Go's container publishes them for C (container/
** records.go says why and how; capi_layout.h, generated from Go's types,
** declares them). Go writes, C reads: C looks contexts up in the index,
** reads their ids and known workers, and takes and drops references with
** the protocol of the state word (docs/state-word.md); everything else,
** the last reference of a released context included, goes to Go.
** dacgo_view gives the view once the container exists; it, the records and
** every bucket array stay mapped for the life of the process. */
#include "capi_layout.h"
/* What dacgo_context_ref returns when the state word moved under it and
** the caller should try its fast path again (never a status). */
#define DACC_RETRY (-1)

/* Slab 0's address, from the view (capi.c): 0 until the view is known, and
** again in a forked child. Most handles' records are there, found without
** a load from the table of slabs. */
extern uintptr_t dacc_records __attribute__((visibility("hidden")));
/* The view's table of slabs: set before dacc_records, and read only by a
** reader that found dacc_records set, so a plain read sees it. */
extern const uintptr_t *dacc_slabs __attribute__((visibility("hidden")));

/* Publishes a view's records to the readers above (capi.c, once). */
static inline void dacc_publish_records(const dacc_view *v) {
	__atomic_store_n(&dacc_slabs, v->slabs, __ATOMIC_RELAXED);
	__atomic_store_n(&dacc_records, v->records, __ATOMIC_RELEASE);
}

/* The record at index, base being slab 0 (nonzero), or NULL if index is in
** a slab not made yet. */
static inline __attribute__((always_inline)) dacc_record *dacc_record_at(uintptr_t base, uint32_t index) {
	uintptr_t offset = (uintptr_t)index * sizeof(dacc_record); /* in slab 0: no mask to apply */
	if (__builtin_expect(index > DACC_SLAB_MASK, 0)) {
		base = __atomic_load_n(&dacc_slabs[index >> DACC_SLAB_BITS], __ATOMIC_ACQUIRE);
		if (base == 0)
			return NULL;
		offset = (uintptr_t)(index & DACC_SLAB_MASK) * sizeof(dacc_record);
	}
	dacc_record *r = (dacc_record *)(base + offset);
	if (r == NULL) /* never: base is a mapping's address, and the offset is within it */
		__builtin_unreachable(); /* so callers' NULL tests fold away */
	return r;
}

/* The record a handle names, base being slab 0, and its generation; NULL
** if base is 0 or the index is in no slab. A leaf: no call, so
** dac_context_id's fast path stays one too. */
static inline __attribute__((always_inline)) dacc_record *dacc_record_of(uintptr_t base, uint64_t h, uint32_t *gen) {
	if (__builtin_expect(base == 0, 0))
		return NULL;
	*gen = (uint32_t)(h >> 32);
	return dacc_record_at(base, (uint32_t)h);
}

/* ---- Uncounted references (uncounted.c says why and how) ----
** A thread's slot holds 0 or one handle whose reference the thread holds
** without the record's state counting it. */
typedef struct {
	uint64_t h;
	uint64_t last; /* the thread's last counted lookup: its owner's alone */
} __attribute__((aligned(64))) dacc_uncounted_slot;
/* This thread's slot: dacc_uncounted_unassigned until it asks for one,
** dacc_no_uncounted if it cannot have one (the h of both stays 0). */
extern __thread dacc_uncounted_slot *dacc_tls_uncounted
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
extern dacc_uncounted_slot dacc_uncounted_unassigned __attribute__((visibility("hidden")));
extern dacc_uncounted_slot dacc_no_uncounted __attribute__((visibility("hidden")));
/* What drops a reference a settle counted when its slot changed under it:
** an unref (capi.c), which may be the record's death; NULL: a plain
** decrement, for a caller that decides the death itself. */
typedef void (*dacc_undo_fn)(uint64_t h);
/* Once, before any slot is given: what a thread that exits runs. */
void dacc_uncounted_setup(dacc_undo_fn undo);
/* The calling thread's slot, given now (dacc_no_uncounted if none is left). */
dacc_uncounted_slot *dacc_uncounted_assign(void);
/* Counts the reference s holds to h in h's record and empties s: 1 if it
** did, 0 if s no longer held it by then. */
int dacc_uncounted_count_one(dacc_uncounted_slot *s, uint64_t h, dacc_undo_fn undo);
/* Counts every reference held uncounted to h; returns how many. */
int dacc_uncounted_settle(uint64_t h, dacc_undo_fn undo);
/* For Go (handles.go: UncountedRefs): dacc_uncounted_settle_raw is dacc_uncounted_settle
** with plain decrements (Go calls it under the record's shard lock and
** decides the death after; it never calls into Go); dacc_uncounted_count says
** how many references are held uncounted now. */
void dacc_uncounted_settle_raw(uint64_t h);
int64_t dacc_uncounted_count(void);

/* Whether this thread holds a reference to h uncounted: then h's life
** cannot end before the thread drops it. */
static inline __attribute__((always_inline)) int dacc_owns(uint64_t h) {
	return h != 0 && __atomic_load_n(&dacc_tls_uncounted->h, __ATOMIC_RELAXED) == h;
}

/* The coarse clock (clock.c): dacc_clock_start starts the thread that
** advances *word every tick_ms from start, 0 if it started; a reader that
** finds the word DACC_CLOCK_ASLEEP calls dacc_clock_wake, which returns the
** current time and has the thread tick again (DACC_CLOCK_ASLEEP is
** capi_layout.h's). Times are never negative. */
int dacc_clock_start(int64_t *word, int64_t start, int64_t tick_ms);
int64_t dacc_clock_wake(void);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t dacc_monotonic_ms(void);

/* Set on a thread while it runs the host's cleanup sender (capi.c), so that
** dac_set_cleanup_sender called from inside a sender does not wait for itself. */
extern __thread int dacc_tls_in_sender;

/* Around every call into the host from a library thread, so that fork()
** can hold such calls back and wait for those in progress (capi.c, which
** defines these: calls in progress, the number of holders of the gate (a
** fork being prepared), and this thread's depth of calls into the host: a
** host callback that calls back into the library and so into the host
** again is one call, and never waits at the gate it is already past). */
typedef struct {
	int n;
} __attribute__((aligned(64))) dacc_line_int; /* an int alone on its cache line */
extern dacc_line_int dacc_cb_in_flight;
extern int dacc_cb_fork_gate;
extern __thread int dacc_tls_in_callback;

static inline void dacc_callback_enter(void) {
	if (dacc_tls_in_callback++ > 0)
		return;
	for (;;) {
		while (__atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST)) {
			struct timespec ts = {0, 50 * 1000};
			nanosleep(&ts, NULL);
		}
		__atomic_add_fetch(&dacc_cb_in_flight.n, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST))
			break;
		__atomic_sub_fetch(&dacc_cb_in_flight.n, 1, __ATOMIC_SEQ_CST);
	}
}

static inline void dacc_callback_leave(void) {
	if (--dacc_tls_in_callback > 0)
		return;
	__atomic_sub_fetch(&dacc_cb_in_flight.n, 1, __ATOMIC_SEQ_CST);
}

/* ---- Trampolines: Go's calls into the host ----
** Go cannot call a C function pointer itself; it holds them as void* (the
** casts are POSIX-sanctioned, as for dlsym) and calls these, which pass the
** fork gate above. */

/* The cleanup sender (the release fan-out's delivery); marks the thread as
** inside a sender for dac_set_cleanup_sender. */
static inline int dacc_call_cleanup_sender(void *fn, void *user_data, int32_t worker_id, int64_t context_id) {
	dacc_callback_enter();
	dacc_tls_in_sender++;
	int rc = ((dac_cleanup_sender)fn)(user_data, worker_id, context_id);
	dacc_tls_in_sender--;
	dacc_callback_leave();
	return rc;
}

/* The log hook. */
static inline void dacc_call_log(void *fn, void *user_data, int level, const char *message) {
	dacc_callback_enter();
	((dac_log_hook)fn)(user_data, level, message);
	dacc_callback_leave();
}

/* A host value's drop function, run where the context's last reference
** went: on the thread that dropped it, outside every lock of the container.
** capi.c calls it after a release or an unref (Go hands the drop back, see
** dacc_pending_drop); Go calls it for a reap or a bulk release. */
static inline void dacc_call_host_drop(uintptr_t fn, uint64_t value) {
	dacc_callback_enter();
	((dac_host_value_drop)fn)(value);
	dacc_callback_leave();
}

#endif
