/* capi.c: the public dac_* functions. They hold what Go cannot: the calling
** thread's current context id and last error (C thread-local storage), and
** the fork guard. Everything else they pass to the dacgo_* functions of
** export.go, one Go call per operation; the functions that only read or
** write the current id never enter Go at all. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi_internal.h"
#include "capi_status.h"
#include "_cgo_export.h"

/* Thread-local storage in the initial-exec model: an access is one load at
** a fixed offset from the thread pointer instead of a __tls_get_addr call.
** It costs nothing extra: the Go runtime's own TLS already makes the library
** STATIC_TLS, so the loader gives its whole TLS block static space anyway. */
#define DACC_TLS __thread __attribute__((tls_model("initial-exec")))

/* The calling thread's current context id: the native thread_local. */
static DACC_TLS int64_t tls_current = DAC_INVALID_ID;
/* Declared in capi_internal.h: nonzero while this thread runs the cleanup sender. */
__thread int dacc_tls_in_sender;
/* The calling thread's last error, allocated on its first use (see
** capi_internal.h: static TLS must stay small); freed at thread exit by
** error_key's destructor. */
static DACC_TLS dacc_error_slot *tls_error;
static pthread_key_t error_key;
/* For a thread whose slot cannot be allocated: its status and message are
** then this one, shared, and say so. */
static dacc_error_slot no_memory_slot = {DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"};

/* Set in a child process after fork(): the Go runtime did not come along. */
static volatile int c_forked;

/* fork() while a library thread is inside the host's sender or log hook
** gives the child a copy of whatever that thread held at that instant. For
** a Python host that can be CPython's own lock on its thread states, which
** a ctypes callback takes (without the GIL) to make the calling thread's
** state, and which CPython before 3.13 re-initializes in the child only
** after using it: the child hangs in os.fork(). So fork() closes a gate on
** new calls into the host and waits for those in progress, up to
** DACC_FORK_WAIT_MS. A call that cannot finish because the forking thread
** holds what it needs (the GIL, when CPython forks) would make that the
** whole wait: the Python package therefore calls dac_fork_prepare from an
** os.register_at_fork hook, where ctypes releases the GIL, and the wait
** here then finds nothing in flight. */
/* The count is written by every call into the host, so it has a cache line
** of its own: beside dacc_records, which every operation reads, each host
** callback (a drop, a cleanup send) took that line from the other threads. */
dacc_line_int dacc_cb_in_flight;
int dacc_cb_fork_gate;
__thread int dacc_tls_in_callback;

#define DACC_FORK_WAIT_MS 2000
/* Holders of the gate through dac_fork_prepare: the host waited already,
** with its own bound, and the atfork handler does not wait again. */
static int host_prepared;

/* Closes the gate and waits up to timeout_ms for the calls in progress on
** other threads; returns whether none is left. */
static int fork_gate_close(int64_t timeout_ms) {
	__atomic_add_fetch(&dacc_cb_fork_gate, 1, __ATOMIC_SEQ_CST);
	int own = dacc_tls_in_callback > 0;
	int64_t start = dacc_monotonic_ms();
	while (__atomic_load_n(&dacc_cb_in_flight.n, __ATOMIC_SEQ_CST) > own) {
		if (dacc_monotonic_ms() - start >= timeout_ms)
			return 0;
		struct timespec ts = {0, 100 * 1000};
		nanosleep(&ts, NULL);
	}
	return 1;
}

static void fork_gate_open(void) {
	int v = __atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST);
	while (v > 0 && !__atomic_compare_exchange_n(&dacc_cb_fork_gate, &v, v - 1, 0, __ATOMIC_SEQ_CST,
	                                             __ATOMIC_SEQ_CST))
		;
}

static void on_fork_prepare(void) {
	if (__atomic_load_n(&host_prepared, __ATOMIC_SEQ_CST) > 0)
		__atomic_add_fetch(&dacc_cb_fork_gate, 1, __ATOMIC_SEQ_CST);
	else
		fork_gate_close(DACC_FORK_WAIT_MS);
}

static void on_fork_parent(void) { fork_gate_open(); }

static void clear_for_child(void);

/* In the child, the fast paths that come before the fork guard must find
** nothing to serve (the view gone, the forking thread's message-id block
** empty: the child's only thread is the one that forked), so that every
** call reaches its slow path, which fails with DAC_ERR_FORKED first. */
static void on_fork_child(void) {
	c_forked = 1;
	clear_for_child();
}

static void unref_counted_void(uint64_t h);

static void free_error_slot(void *p) {
	tls_error = NULL; /* a later destructor's call allocates it anew */
	if (p != &no_memory_slot)
		free(p);
}

__attribute__((constructor)) static void dacc_setup(void) {
	pthread_key_create(&error_key, free_error_slot);
	dacc_uncounted_setup(unref_counted_void);
	pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
}

/* The calling thread's error slot, allocated on first use. */
static __attribute__((noinline)) dacc_error_slot *new_error_slot(void) {
	dacc_error_slot *e = calloc(1, sizeof *e);
	if (e == NULL || pthread_setspecific(error_key, e) != 0) {
		free(e);
		e = &no_memory_slot;
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
	if (e == &no_memory_slot)
		return code;
	e->code = code;
	snprintf(e->msg, sizeof e->msg, "distautograd: %s: %s", fn, what);
	return code;
}

static int forked(const char *fn) {
	return reject(DAC_ERR_FORKED, fn,
	              "the library was loaded before fork() and cannot be used in the child process "
	              "(the Go runtime does not survive fork); load it after fork, or use the 'spawn' "
	              "start method");
}

#define GUARD_FORK()                              \
	do {                                          \
		if (__builtin_expect(c_forked, 0))        \
			return forked(__func__);              \
	} while (0)

#define CHECK_OUT(p)                                          \
	do {                                                      \
		if ((p) == NULL)                                      \
			return reject(DAC_ERR_INVALID_ARGUMENT, __func__, \
			              #p " must not be NULL");            \
	} while (0)

/* For the functions that never enter Go: C's cache of Go's answer to "has
** dac_init succeeded?". Go is the one source of truth (it may say yes
** before the dac_init that made it so has returned to C); once it has said
** yes, that never changes, so the cache need not ask again. */
static int c_initialized;

static __attribute__((noinline)) int check_initialized_slow(void) {
	int rc = dacgo_check_initialized(err());
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

static dac_context *to_ptr(uint64_t h) { return (dac_context *)(uintptr_t)h; }
static uint64_t to_handle(dac_context *p) { return (uint64_t)(uintptr_t)p; }

/* ---- Library ---- */

const char *dac_version(void) { return DAC_VERSION_STRING; }

int dac_version_number(void) { return DAC_VERSION_NUMBER; }

const char *dac_status_string(int status) {
	if (status < 0 || (size_t)status >= sizeof dacc_status_names / sizeof dacc_status_names[0])
		return "DAC_UNKNOWN";
	return dacc_status_names[status];
}

const char *dac_last_error(void) { return tls_error ? tls_error->msg : ""; }

int dac_last_status(void) { return tls_error ? tls_error->code : DAC_OK; }

/* ---- Container ---- */

int dac_init(int64_t worker_id) {
	GUARD_FORK();
	int rc = dacgo_init(worker_id, err());
	if (rc == DAC_OK)
		__atomic_store_n(&c_initialized, 1, __ATOMIC_RELEASE);
	return rc;
}

int dac_worker_id(int32_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	return dacgo_worker_id(out, err());
}

int dac_max_id(int64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	return dacgo_max_id(out, err());
}

int dac_num_contexts(int64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	return dacgo_num_contexts(out, err());
}

/* Message ids come to each thread in blocks of DACC_MESSAGE_ID_BLOCK that Go
** reserves from the one counter, so most calls never leave C. Ids stay unique
** and keep the layout; a thread's ids are consecutive, but ids of different
** threads interleave by block rather than one by one. Ids a thread reserved
** and did not use before it exited are never issued (ids are never reused).
** Why 4096: a block costs one call into Go (about 100 ns), so at 256 ids a
** block that call alone was 0.4 ns of every id, an eighth of native's whole
** atomic increment; at 4096 it is 0.03 ns. A thread that takes one id and
** exits leaves the rest of its block unused, 2^36 such threads per worker
** before the 2^48 ids run out. */
#define DACC_MESSAGE_ID_BLOCK 4096
/* This thread's block, [next, end); one struct, so one offset to load. */
static DACC_TLS struct {
	int64_t next, end;
} tls_msg;

/* The slow path, out of line so that the fast one saves no registers. */
static __attribute__((noinline)) int new_message_id_block(int64_t *out) {
	if (c_forked)
		return forked("dac_new_autograd_message_id");
	int64_t first = 0, count = 0;
	int rc = dacgo_new_autograd_message_id_block(DACC_MESSAGE_ID_BLOCK, &first, &count, err());
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
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "buf must not be NULL when capacity is not 0");
	return dacgo_debug_info(buf, capacity, length, err());
}

int dac_set_max_contexts(int64_t max_contexts) {
	GUARD_FORK();
	return dacgo_set_max_contexts(max_contexts, err());
}

/* ---- Contexts ---- */

int dac_context_new(dac_context **out) {
	GUARD_FORK();
	CHECK_OUT(out);
	uint64_t h = 0;
	int rc = dacgo_context_new(&tls_current, &h, err());
	if (rc == DAC_OK)
		*out = to_ptr(h);
	return rc;
}

int dac_context_new_id(dac_context **out, int64_t *context_id) {
	GUARD_FORK();
	CHECK_OUT(out);
	CHECK_OUT(context_id);
	uint64_t h = 0;
	int rc = dacgo_context_new(&tls_current, &h, err());
	if (rc == DAC_OK) {
		*out = to_ptr(h);
		*context_id = tls_current; /* what dac_context_new just made current */
	}
	return rc;
}

/* Runs the host drop Go handed back for a context that died in the call
** just returned (a call from Go into C would cost a crossing more): still
** on the thread that dropped the last reference, outside every lock. */
static inline void run_pending_drop(const dacc_pending_drop *d) {
	if (d->fn != 0)
		dacc_call_host_drop(d->fn, d->value);
}

/* A release, in Go; the host drop of a context that died there, here. */
static int release(int64_t context_id, int if_present, const int32_t *worker_ids, size_t count, int *released) {
	dacc_pending_drop d = {0, 0};
	int rc = dacgo_context_release(&tls_current, context_id, if_present, (int32_t *)worker_ids, count, released, &d,
	                               err());
	run_pending_drop(&d);
	return rc;
}

int dac_context_release(int64_t context_id) {
	GUARD_FORK();
	return release(context_id, 0, NULL, 0, NULL);
}

int dac_release_contexts_of_worker(int32_t worker_id, int64_t *released) {
	GUARD_FORK();
	return dacgo_release_contexts_of_worker(worker_id, released, err());
}

int dac_reap_idle_contexts(int64_t max_idle_ms, int64_t *released) {
	GUARD_FORK();
	return dacgo_reap_idle_contexts(max_idle_ms, released, err());
}

/* ---- The calling thread's current context id: no Go call on success ---- */

int dac_current_context_id(int64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	GUARD_INIT();
	*out = tls_current;
	return DAC_OK;
}

int dac_has_valid_context(int *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	GUARD_INIT();
	*out = tls_current != DAC_INVALID_ID;
	return DAC_OK;
}

int dac_set_current_context_id(int64_t context_id) {
	GUARD_FORK();
	GUARD_INIT();
	if (tls_current != DAC_INVALID_ID)
		return dacgo_fill_error(DAC_ERR_ALREADY_HAS_CONTEXT, err());
	tls_current = context_id;
	return DAC_OK;
}

int dac_force_current_context_id(int64_t context_id) {
	GUARD_FORK();
	GUARD_INIT();
	tls_current = context_id;
	return DAC_OK;
}

int dac_clear_current_context(void) {
	GUARD_FORK();
	GUARD_INIT();
	tls_current = DAC_INVALID_ID;
	return DAC_OK;
}

/* ---- A context, through its handle ---- */

/* The view of the container that Go publishes (capi_internal.h), fetched
** from Go on first use; NULL until dac_init, and every fast path below then
** goes to Go, which says DAC_ERR_NOT_INITIALIZED. */
static dacc_view *g_view;
/* The records' address, from the view: the one load a handle's fast path
** starts from (0 until the view is fetched, and again in a forked child). */
uintptr_t dacc_records;

static __attribute__((noinline)) dacc_view *fetch_view(void) {
	if (c_forked)
		return NULL; /* never into Go in a child: the callers' slow paths say why */
	void *p = NULL;
	dacc_error_slot ignored;
	if (dacgo_view(&p, &ignored) != DAC_OK)
		return NULL;
	__atomic_store_n(&dacc_records, ((dacc_view *)p)->records, __ATOMIC_RELEASE);
	__atomic_store_n(&g_view, (dacc_view *)p, __ATOMIC_RELEASE);
	return p;
}

static inline __attribute__((always_inline)) dacc_view *view(void) {
	dacc_view *v = __atomic_load_n(&g_view, __ATOMIC_ACQUIRE);
	if (__builtin_expect(v == NULL, 0))
		return fetch_view();
	return v;
}

static void clear_for_child(void) {
	__atomic_store_n(&g_view, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&dacc_records, 0, __ATOMIC_RELAXED);
	tls_msg.next = tls_msg.end = 0;
	/* The reference the forking thread held uncounted is the parent's: the
	** child's unref of it must not drop it in C, but say DAC_ERR_FORKED. */
	dacc_tls_uncounted = &dacc_no_uncounted;
}

static inline dacc_record *record_at(const dacc_view *v, uint32_t index) {
	return (dacc_record *)(v->records + (uintptr_t)index * sizeof(dacc_record));
}

/* The record a handle names, or NULL before the view is known (before
** dac_init, or in a forked child) or for an index past every record. */
static inline __attribute__((always_inline)) dacc_record *handle_record(uint64_t h, uint32_t *gen) {
	uintptr_t base = __atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE);
	if (__builtin_expect(base == 0, 0)) {
		if (view() == NULL)
			return NULL;
		base = __atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE);
	}
	return dacc_record_of(base, h, gen);
}

/* Whether a state word is the referenced life gen of its record. */
static inline int referenced(uint64_t st, uint32_t gen) {
	return (uint32_t)(st >> 32) == gen && (st & DACC_STATE_REFS) != 0;
}

/* Whether handle h (of life gen, its record's state st) holds a reference:
** one counted in the record, or the one this thread holds uncounted (whose
** life cannot end while the thread's slot holds it). */
static inline int holds(uint64_t st, uint32_t gen, uint64_t h) {
	return referenced(st, gen) || dacc_owns(h);
}

/* How many links a lookup follows before it leaves the answer to Go: a
** chain is that long only while Go rewrites it under a reader. */
#define DACC_MAX_HOPS 64

/* Finds a record that says it is id's (listed or not: the caller checks),
** following the chain of id's bucket. NULL is a miss, and *settled says
** whether the miss is the answer: it is when the shard's change count was
** even and the same before and after the walk (no link a reader follows
** was rewritten meanwhile: records.go, Buckets), else only Go can say,
** under its lock. */
static inline __attribute__((always_inline)) dacc_record *lookup(const dacc_view *v, int64_t id, uint32_t *index,
                                                                int *settled) {
	uint64_t u = (uint64_t)id;
	const dacc_buckets *b =
	    (const dacc_buckets *)__atomic_load_n(&v->buckets[u & v->shard_mask], __ATOMIC_ACQUIRE);
	uint64_t changes = __atomic_load_n(&b->changes, __ATOMIC_ACQUIRE);
	uint64_t k = ((u >> v->shard_bits) ^ (u >> 48)) & b->mask;
	uint32_t i = __atomic_load_n(&b->heads[k], __ATOMIC_ACQUIRE);
	for (int hops = 0; i != 0; hops++) {
		if (i > DACC_MAX_RECORDS || hops == DACC_MAX_HOPS) {
			*settled = 0;
			return NULL;
		}
		dacc_record *r = record_at(v, i - 1);
		if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) == id) {
			*index = i - 1;
			return r;
		}
		i = __atomic_load_n(&r->next, __ATOMIC_ACQUIRE);
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	*settled = !(changes & 1) && __atomic_load_n(&b->changes, __ATOMIC_RELAXED) == changes;
	return NULL;
}

/* Records a use for the reaper (a store only when the clock moved on; a
** clock asleep is woken, so the time recorded is always current). */
static inline void touch(const dacc_view *v, dacc_record *r) {
	int64_t now = __atomic_load_n((int64_t *)v->clock, __ATOMIC_RELAXED);
	if (__builtin_expect(now == DACC_CLOCK_ASLEEP, 0))
		now = dacc_clock_wake();
	if (__atomic_load_n(&r->last_used, __ATOMIC_RELAXED) != now)
		__atomic_store_n(&r->last_used, now, __ATOMIC_RELAXED);
}

static int unref_counted(uint64_t h);
static void unref_counted_void(uint64_t h) { (void)unref_counted(h); }

/* Before a handle goes to Go, which knows only the count: this thread's
** uncounted reference to it is counted, and, if its record counts none,
** every other thread's (the caller may hold one of theirs: a handle is the
** same value on every thread). */
static __attribute__((noinline)) void for_go(uint64_t h) {
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (h != 0 && __atomic_load_n(&s->h, __ATOMIC_RELAXED) == h)
		dacc_uncounted_count_one(s, h, unref_counted_void);
	uint32_t gen;
	dacc_record *r = dacc_record_of(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, &gen);
	if (r == NULL)
		return;
	uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	if ((uint32_t)(st >> 32) == gen && (st & DACC_STATE_UNCOUNTED) && (st & DACC_STATE_REFS) == 0)
		dacc_uncounted_settle(h, unref_counted_void);
}

/* What acquire found. */
enum { DACC_UNDECIDED = 0, DACC_ACQUIRED = 1, DACC_ABSENT = 2 };

/* Takes a reference to the context listed under id, without entering Go:
** DACC_ACQUIRED and its handle, DACC_ABSENT (no context is stored under id:
** a settled miss), or DACC_UNDECIDED (Go decides). The reference is taken
** by one compare-and-swap of the state word that requires it to be
** unchanged since its id was checked, and listed: a release (which unlists
** first) that has returned can never be overtaken. */
static inline __attribute__((always_inline)) int acquire(int64_t id, uint64_t *h) {
	dacc_view *v = view();
	if (__builtin_expect(v == NULL, 0))
		return DACC_UNDECIDED;
	uint32_t index;
	int settled = 0;
	dacc_record *r = lookup(v, id, &index, &settled);
	if (r == NULL)
		return settled ? DACC_ABSENT : DACC_UNDECIDED;
	uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (__builtin_expect(s == &dacc_uncounted_unassigned, 0))
		s = dacc_uncounted_assign();
	const int can_hold = s != &dacc_no_uncounted;
	if (__builtin_expect(can_hold && (st & (DACC_STATE_UNCOUNTED | DACC_STATE_LISTED)) ==
	                                      (DACC_STATE_UNCOUNTED | DACC_STATE_LISTED) &&
	                         __atomic_load_n(&s->h, __ATOMIC_RELAXED) == 0 &&
	                         __atomic_load_n(&r->id, __ATOMIC_RELAXED) == id,
	                     1)) {
		/* Uncounted: see uncounted.c. */
		uint64_t held = (st >> 32) << 32 | index;
		__atomic_exchange_n(&s->h, held, __ATOMIC_SEQ_CST);
		uint64_t now = __atomic_load_n(&r->state, __ATOMIC_SEQ_CST);
		if (__builtin_expect(((now ^ st) >> 32) == 0 && (now & DACC_STATE_LISTED), 1)) {
			touch(v, r);
			*h = held;
			return DACC_ACQUIRED;
		}
		/* Released meanwhile: not found, Go says. A settle that counted
		** the reference left it to this thread to drop. */
		if (__atomic_exchange_n(&s->h, 0, __ATOMIC_SEQ_CST) != held)
			unref_counted(held);
		return DACC_UNDECIDED;
	}
	/* Counted. A thread's second lookup of one life in a row marks the
	** record, so that its next lookups are uncounted; a record looked up
	** once per thread (a release's own lookup) is never marked, and its
	** release does not settle. */
	uint64_t mark = 0;
	if (can_hold) {
		uint64_t looked = (st >> 32) << 32 | index;
		mark = s->last == looked ? DACC_STATE_UNCOUNTED : 0;
		s->last = looked;
	}
	do {
		if (!(st & DACC_STATE_LISTED) || (st & DACC_STATE_REFS) == DACC_STATE_REFS ||
		    __atomic_load_n(&r->id, __ATOMIC_RELAXED) != id)
			return DACC_UNDECIDED;
	} while (!__atomic_compare_exchange_n(&r->state, &st, (st + 1) | mark, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	touch(v, r);
	*h = (st >> 32) << 32 | index;
	return DACC_ACQUIRED;
}

/* The fast paths below come before the fork guard: in a child they find
** no view (clear_for_child) and fall through to it. */

static inline __attribute__((always_inline)) int current(const char *fn, dac_context **out) {
	uint64_t h = 0;
	if (__builtin_expect(tls_current != DAC_INVALID_ID && acquire(tls_current, &h) == DACC_ACQUIRED, 1)) {
		*out = to_ptr(h);
		return DAC_OK;
	}
	if (c_forked)
		return forked(fn);
	int rc = dacgo_context_current(tls_current, &h, err());
	if (rc == DAC_OK)
		*out = to_ptr(h);
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
		*context_id = tls_current; /* the id it was found under */
	return rc;
}

static inline __attribute__((always_inline)) int retrieve(const char *fn, int64_t context_id, int if_present,
                                                         dac_context **out) {
	uint64_t h = 0;
	int found = acquire(context_id, &h);
	if (__builtin_expect(found == DACC_ACQUIRED, 1)) {
		*out = to_ptr(h);
		return DAC_OK;
	}
	if (found == DACC_ABSENT && if_present) {
		*out = NULL;
		return DAC_OK;
	}
	if (c_forked)
		return forked(fn);
	int rc = dacgo_context_retrieve(context_id, if_present, &h, err());
	if (rc == DAC_OK)
		*out = to_ptr(h);
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
	if (__builtin_expect(acquire(context_id, &h) == DACC_ACQUIRED, 1)) {
		*out = to_ptr(h);
		return DAC_OK;
	}
	GUARD_FORK();
	int rc = dacgo_context_get_or_create(context_id, &h, err());
	if (rc == DAC_OK)
		*out = to_ptr(h);
	return rc;
}

/* Nothing stored under the id (a cleanup message for a context gone
** already: the usual case, as every worker of a pass tells every other) is
** settled here: nothing to release, no need to enter Go. Unless it is the
** thread's current id: Go resets that if the container's clean-up reaped
** it (container/reaped.go). */
static inline __attribute__((always_inline)) int absent(int64_t context_id) {
	dacc_view *v = view();
	uint32_t index;
	int settled = 0;
	return v != NULL && context_id != tls_current && lookup(v, context_id, &index, &settled) == NULL && settled;
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
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "worker_ids must not be NULL when count is not 0");
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
	dacc_view *v = view();
	uint32_t index;
	int settled = 0;
	dacc_record *r = v ? lookup(v, context_id, &index, &settled) : NULL;
	if (r != NULL) {
		/* Listed with that id between two reads of one life of the record
		** (a reference taken or dropped meanwhile changes nothing). */
		uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
		if ((st & DACC_STATE_LISTED) && __atomic_load_n(&r->id, __ATOMIC_ACQUIRE) == context_id &&
		    ((__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) ^ st) & ~DACC_STATE_REFS) == 0)
			return DAC_OK;
	}
	GUARD_FORK();
	return dacgo_context_is_valid(context_id, err());
}

/* A live handle needs no check that dac_init succeeded (it could not
** exist otherwise, and a thread racing dac_init may hold one before C's
** cache knows); everything else goes to Go, which says
** DAC_ERR_NOT_INITIALIZED before dac_init, else why the handle is bad. */

int dac_context_ref(dac_context *ctx) {
	uint64_t h = to_handle(ctx);
	for (;;) {
		uint32_t gen;
		dacc_record *r = handle_record(h, &gen);
		if (__builtin_expect(r != NULL, 1)) {
			uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
			/* Referenced: counted, or held uncounted by this thread. */
			while (holds(st, gen, h) &&
			       (st & DACC_STATE_REFS) != DACC_STATE_REFS) {
				if (__atomic_compare_exchange_n(&r->state, &st, st + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
					return DAC_OK;
			}
		}
		/* Go says why not; DACC_RETRY: the state moved meanwhile. */
		GUARD_FORK();
		for_go(h);
		dacc_pending_drop none = {0, 0}; /* a ref never kills */
		int rc = dacgo_context_ref(h, 1, &none, err());
		if (rc != DACC_RETRY)
			return rc;
	}
}

/* Drops a reference counted in h's record (the caller's, or one a settle
** counted for it). */
static int unref_counted(uint64_t h) {
	for (;;) {
		uint32_t gen;
		dacc_record *r = handle_record(h, &gen);
		if (__builtin_expect(r != NULL, 1)) {
			uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
			/* Not the last reference of a released context: that one is
			** Go's (the record dies: its host value dropped, recycled). */
			while (referenced(st, gen) && ((st & DACC_STATE_REFS) > 1 || (st & DACC_STATE_LISTED))) {
				if (__atomic_compare_exchange_n(&r->state, &st, st - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
					return DAC_OK;
			}
			/* The last counted reference of a released context, or none
			** counted (the caller's may be another thread's uncounted one):
			** what is held uncounted is counted first. */
			if ((uint32_t)(st >> 32) == gen && (st & DACC_STATE_UNCOUNTED) && dacc_uncounted_settle(h, unref_counted_void) > 0)
				continue;
		}
		/* Go drops the last reference, or says why the handle is bad;
		** DACC_RETRY: the state moved meanwhile. */
		if (c_forked)
			return forked("dac_context_unref");
		dacc_pending_drop d = {0, 0};
		int rc = dacgo_context_ref(h, -1, &d, err());
		run_pending_drop(&d); /* if the record died */
		if (rc != DACC_RETRY)
			return rc;
	}
}

int dac_context_unref(dac_context *ctx) {
	uint64_t h = to_handle(ctx);
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (h != 0 && __atomic_load_n(&s->h, __ATOMIC_RELAXED) == h) {
		/* Only this thread puts a handle in its slot, so the exchange
		** finds h, dropped now, or 0: a settle counted it meanwhile. */
		if (__builtin_expect(__atomic_exchange_n(&s->h, 0, __ATOMIC_SEQ_CST) == h, 1))
			return DAC_OK;
	}
	return unref_counted(h);
}

/* A handle's id, read without entering Go: 1 if h is a referenced handle
** of a record C can read (base: the records, 0 before the view is known).
** The state word is read after the id: if it still shows the handle's
** generation, referenced, the id was that life's. A death moves the
** generation on before the record takes another id (records.go: die, then
** create), so an id read from a later life is always followed by another
** generation; and the handle's holder got it after its life's id was
** written, so no earlier life's id is read either. */
static inline __attribute__((always_inline)) int read_id(uintptr_t base, uint64_t h, int64_t *out) {
	uint32_t gen;
	const dacc_record *r = dacc_record_of(base, h, &gen);
	if (__builtin_expect(r == NULL, 0))
		return 0;
	int64_t id = __atomic_load_n(&r->id, __ATOMIC_ACQUIRE);
	if (!referenced(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen))
		return 0;
	*out = id;
	return 1;
}

static __attribute__((noinline)) int context_id_slow(dac_context *ctx, int64_t *out) {
	if (c_forked)
		return forked("dac_context_id");
	if (out == NULL)
		return reject(DAC_ERR_INVALID_ARGUMENT, "dac_context_id", "out must not be NULL");
	uint64_t h = to_handle(ctx);
	if (view() != NULL && read_id(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, out))
		return DAC_OK;
	if (dacc_owns(h)) { /* held uncounted by this thread: its life cannot end meanwhile */
		uint32_t gen;
		const dacc_record *r = dacc_record_of(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, &gen);
		if (r != NULL) {
			*out = __atomic_load_n(&r->id, __ATOMIC_ACQUIRE);
			return DAC_OK;
		}
	}
	for_go(h);
	return dacgo_context_id(h, out, err());
}

int dac_context_unref_many(dac_context *const *ctxs, size_t count) {
	GUARD_FORK();
	if (ctxs == NULL && count != 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "ctxs must not be NULL when count is not 0");
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
	if (__builtin_expect(out != NULL && read_id(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), to_handle(ctx), out), 1))
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
	uint64_t h = to_handle(ctx);
	uint32_t gen;
	dacc_record *r = handle_record(h, &gen);
	if (__builtin_expect(r != NULL, 1) && holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
		uint64_t v = __atomic_load_n(&r->host_value, __ATOMIC_ACQUIRE);
		if (holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
			*out = v;
			return DAC_OK;
		}
	}
	for_go(h);
	return dacgo_context_host_value(h, out, err());
}

int dac_context_add_known_worker_id(dac_context *ctx, int32_t worker_id) {
	/* Already known (among the ids C sees) through a referenced handle:
	** nothing to add, nothing to enter Go for. */
	uint64_t h = to_handle(ctx);
	uint32_t gen;
	dacc_record *r = handle_record(h, &gen);
	if (__builtin_expect(r != NULL, 1) && holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h)) {
		uint32_t n = __atomic_load_n(&r->nworkers, __ATOMIC_ACQUIRE);
		if (n > DACC_INLINE_WORKERS)
			n = DACC_INLINE_WORKERS;
		for (uint32_t i = 0; i < n; i++)
			if ((int32_t)r->workers[i] == worker_id)
				return DAC_OK;
	}
	GUARD_FORK();
	for_go(h);
	return dacgo_context_add_known_worker_id(h, worker_id, err());
}

int dac_context_known_worker_ids(dac_context *ctx, int32_t *ids, size_t capacity, size_t *count) {
	GUARD_FORK();
	CHECK_OUT(count);
	if (ids == NULL && capacity != 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "ids must not be NULL when capacity is not 0");
	for_go(to_handle(ctx));
	return dacgo_context_known_worker_ids(to_handle(ctx), ids, capacity, count, err());
}

int dac_context_add_send_function(dac_context *ctx, int64_t message_id, uint64_t fn) {
	GUARD_FORK();
	for_go(to_handle(ctx));
	return dacgo_context_add_function(to_handle(ctx), DACC_SEND, message_id, fn, err());
}

int dac_context_add_recv_function(dac_context *ctx, int64_t message_id, uint64_t fn) {
	GUARD_FORK();
	for_go(to_handle(ctx));
	return dacgo_context_add_function(to_handle(ctx), DACC_RECV, message_id, fn, err());
}

int dac_context_send_function(dac_context *ctx, int64_t message_id, uint64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	for_go(to_handle(ctx));
	return dacgo_context_function(to_handle(ctx), DACC_SEND, message_id, out, err());
}

int dac_context_recv_function(dac_context *ctx, int64_t message_id, uint64_t *out) {
	GUARD_FORK();
	CHECK_OUT(out);
	for_go(to_handle(ctx));
	return dacgo_context_function(to_handle(ctx), DACC_RECV, message_id, out, err());
}

static int list_functions(const char *fn, dac_context *ctx, int kind, int64_t *message_ids, uint64_t *fns,
                          size_t capacity, size_t *count) {
	if (count == NULL)
		return reject(DAC_ERR_INVALID_ARGUMENT, fn, "count must not be NULL");
	if ((message_ids == NULL || fns == NULL) && capacity != 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, fn, "message_ids and fns must not be NULL when capacity is not 0");
	for_go(to_handle(ctx));
	return dacgo_context_functions(to_handle(ctx), kind, message_ids, fns, capacity, count, err());
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

/* ---- Release fan-out ---- */

int dac_set_cleanup_sender(dac_cleanup_sender sender, void *user_data) {
	GUARD_FORK();
	/* From inside a sender it would wait for itself: it does not wait. */
	return dacgo_set_cleanup_sender((void *)sender, user_data, dacc_tls_in_sender ? 0 : -1, err());
}

int dac_set_cleanup_sender_timeout(dac_cleanup_sender sender, void *user_data, int64_t timeout_ms) {
	GUARD_FORK();
	if (timeout_ms < 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "timeout_ms must be >= 0");
	return dacgo_set_cleanup_sender((void *)sender, user_data, dacc_tls_in_sender ? 0 : timeout_ms, err());
}

int dac_set_cleanup_sender_nonblocking(int nonblocking) {
	GUARD_FORK();
	if (nonblocking != 0 && nonblocking != 1)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "nonblocking must be 0 or 1");
	return dacgo_set_cleanup_nonblocking(nonblocking, err());
}

int dac_set_cleanup_options(int32_t max_attempts, int64_t initial_backoff_us, int64_t max_backoff_us,
                            int64_t max_pending) {
	GUARD_FORK();
	return dacgo_set_cleanup_options(max_attempts, initial_backoff_us, max_backoff_us, max_pending, err());
}

/* The size of dac_cleanup_counters' first version: size and six counters.
** A caller's struct may be larger (a newer header) or as large as this
** library's, never smaller. */
#define DACC_CLEANUP_COUNTERS_V1 (sizeof(size_t) + 6 * sizeof(int64_t))
_Static_assert(sizeof(dac_cleanup_counters) >= DACC_CLEANUP_COUNTERS_V1, "fields are only added");

int dac_cleanup_stats(dac_cleanup_counters *counters) {
	GUARD_FORK();
	CHECK_OUT(counters);
	size_t size = counters->size;
	if (size < DACC_CLEANUP_COUNTERS_V1)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__,
		              "counters->size must be set to sizeof(dac_cleanup_counters) (at least 56)");
	dac_cleanup_counters c = {0};
	int rc = dacgo_cleanup_stats(&c, err());
	if (rc != DAC_OK)
		return rc;
	c.size = size;
	/* What this library knows, then 0 for the fields of a newer header. */
	size_t known = size < sizeof c ? size : sizeof c;
	memcpy(counters, &c, known);
	if (size > known)
		memset((char *)counters + known, 0, size - known);
	return DAC_OK;
}

int dac_cleanup_flush(int64_t timeout_ms, int64_t *pending) {
	GUARD_FORK();
	return dacgo_cleanup_flush(timeout_ms, dacc_tls_in_callback > 0, pending, err());
}

int dac_set_log_hook(dac_log_hook hook, void *user_data) {
	GUARD_FORK();
	return dacgo_set_log_hook((void *)hook, user_data, err());
}

/* ---- Fork ---- */

int dac_fork_prepare(int64_t timeout_ms) {
	GUARD_FORK();
	if (timeout_ms < 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "timeout_ms must be >= 0");
	__atomic_add_fetch(&host_prepared, 1, __ATOMIC_SEQ_CST);
	if (!fork_gate_close(timeout_ms))
		return reject(DAC_ERR_TIMEOUT, __func__,
		              "calls into the cleanup sender or log hook were still in progress when the wait ran out");
	return DAC_OK;
}

int dac_fork_parent(void) {
	GUARD_FORK();
	int v = __atomic_load_n(&host_prepared, __ATOMIC_SEQ_CST);
	while (v > 0 && !__atomic_compare_exchange_n(&host_prepared, &v, v - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (v > 0)
		fork_gate_open();
	return DAC_OK;
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
	uint64_t h = to_handle(ctx);
	uint32_t gen;
	dacc_record *r;
	/* Go says why the handle is not usable (not initialized, or which
	** handle is bad); if Go finds it live (a lookup took a reference to its
	** context meanwhile, the same life), it is tried again. */
	while (__builtin_expect((r = handle_record(h, &gen)) == NULL || !holds(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen, h),
	                        0)) {
		uint64_t ignored;
		for_go(h);
		int rc = dacgo_context_host_value(h, &ignored, err());
		if (rc != DAC_OK)
			return rc;
	}
	if (value == 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "the host value must not be 0 (0 means none)");
	uint64_t expect = 0;
	if (__atomic_compare_exchange_n(&r->host_value, &expect, value, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&r->host_drop, (uintptr_t)drop, __ATOMIC_RELEASE);
		*current = value;
	} else {
		*current = expect;
	}
	return DAC_OK;
}

#ifdef DACC_TESTING
/* ---- The testing build only (make testing-lib): not the public ABI ---- */

/* Starts the context and message id counters at these offsets into the
** worker's range, so that tests reach max_id; call it before dac_init. */
int dactest_set_counter_offsets(int64_t ctx_offset, int64_t msg_offset);

int dactest_set_counter_offsets(int64_t ctx_offset, int64_t msg_offset) {
	GUARD_FORK();
	return dacgo_testing_set_counter_offsets(ctx_offset, msg_offset, err());
}

/* How many calls into Go the library has made so far (this one aside): a
** test brackets a call with two and learns whether capi.c served it alone. */
int64_t dactest_go_calls(void);

int64_t dactest_go_calls(void) {
	int64_t n = 0;
	dacgo_testing_go_calls(&n);
	return n;
}
#endif
