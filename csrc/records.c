/* csrc/records.c: the state-word reader: the view of Go's records
** (capi_internal.h), the lookup of an id in Go's index, and the references
** taken and dropped on a record's state word without entering Go
** (container/records.go holds the protocol's other side).
** Part of capi.c's one translation unit (capi.c says why): never compiled
** alone. */

static dac_context *to_ptr(uint64_t h) { return (dac_context *)(uintptr_t)h; }
static uint64_t to_handle(dac_context *p) { return (uint64_t)(uintptr_t)p; }

/* The view of the container that Go publishes (capi_internal.h), fetched
** from Go on first use; NULL until dac_init, and every fast path below then
** goes to Go, which says DAC_ERR_NOT_INITIALIZED. */
static dacc_view *g_view;
/* The records' address (slab 0's), from the view: the one load a handle's
** fast path starts from (0 until the view is fetched, and again in a forked
** child); and the view's table of slabs, for the records past slab 0
** (capi_internal.h: dacc_record_at). */
uintptr_t dacc_records;
const uintptr_t *dacc_slabs;

static __attribute__((noinline)) dacc_view *fetch_view(void) {
	if (c_forked)
		return NULL; /* never into Go in a child: the callers' slow paths say why */
	void *p = NULL;
	dacc_error_slot ignored;
	if (dacgo_view(&p, &ignored) != DAC_OK)
		return NULL;
	dacc_publish_records(p);
	__atomic_store_n(&g_view, (dacc_view *)p, __ATOMIC_RELEASE);
	return p;
}

static inline __attribute__((always_inline)) dacc_view *view(void) {
	dacc_view *v = __atomic_load_n(&g_view, __ATOMIC_ACQUIRE);
	if (__builtin_expect(v == NULL, 0))
		return fetch_view();
	return v;
}

static inline dacc_record *record_at(const dacc_view *v, uint32_t index) {
	return dacc_record_at(v->records, index);
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
		dacc_record *r = record_at(v, i - 1);
		if (r == NULL || hops == DACC_MAX_HOPS) {
			*settled = 0;
			return NULL;
		}
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

/* Runs the host drop Go handed back for a context that died in the call
** just returned (a call from Go into C would cost a crossing more): still
** on the thread that dropped the last reference, outside every lock. */
static inline void run_pending_drop(const dacc_pending_drop *d) {
	if (d->fn != 0)
		dacc_call_host_drop(d->fn, d->value);
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

/* The record of the thread's last counted lookup, if that life is still
** listed under id: a thread looks one id up again and again (a pass's
** every message and gradient), and the record is one load away where the
** index is a chain of them, each a cache miss once the caller's own work
** has run between two calls. The same life, found in the index then and
** listed still, is listed under id now (a release unlists first). What it
** finds, acquire checks as it checks a lookup's record; NULL: look it up. */
static inline __attribute__((always_inline)) dacc_record *recall(const dacc_view *v, const dacc_uncounted_slot *s,
                                                                int64_t id, uint32_t *index, uint64_t *st) {
	uint64_t last = s->last;
	if (last == 0)
		return NULL;
	dacc_record *r = record_at(v, (uint32_t)last);
	if (__builtin_expect(r == NULL, 0))
		return NULL;
	uint64_t now = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	if ((now >> 32) != (last >> 32) || !(now & DACC_STATE_LISTED) || __atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != id)
		return NULL;
	*index = (uint32_t)last;
	*st = now;
	return r;
}

/* What acquire found. */
enum { DACC_UNDECIDED = 0, DACC_ACQUIRED = 1, DACC_ABSENT = 2 };

/* Takes a reference to the context listed under id, without entering Go
** (docs/state-word.md: the transitions of a lookup):
** DACC_ACQUIRED and its handle, DACC_ABSENT (no context is stored under id:
** a settled miss), or DACC_UNDECIDED (Go decides). The reference is taken
** by one compare-and-swap of the state word that requires it to be
** unchanged since its id was checked, and listed: a release (which unlists
** first) that has returned can never be overtaken. */
static inline __attribute__((always_inline)) int acquire(int64_t id, uint64_t *h) {
	dacc_view *v = view();
	if (__builtin_expect(v == NULL, 0))
		return DACC_UNDECIDED;
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (__builtin_expect(s == &dacc_uncounted_unassigned, 0))
		s = dacc_uncounted_assign();
	const int can_hold = s != &dacc_no_uncounted;
	uint32_t index;
	uint64_t st;
	dacc_record *r = recall(v, s, id, &index, &st);
	if (r == NULL) {
		int settled = 0;
		r = lookup(v, id, &index, &settled);
		if (r == NULL)
			return settled ? DACC_ABSENT : DACC_UNDECIDED;
		st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	}
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

/* A handle's id, read without entering Go: 1 if h is a referenced handle
** of a record C can read (base: the records, 0 before the view is known).
** The state word is read after the id: if it still shows the handle's
** generation, referenced, the id was that life's. A death moves the
** generation on before the record takes another id (deaths.go: die, then index.go:
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
