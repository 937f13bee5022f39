/* uncounted.c: references a thread holds uncounted (the library's
** csrc/uncounted.c). A thread's
** second lookup of a context that threads look up often is held in the
** thread's slot, not in the context's count; every way such a reference
** can go must behave as a counted one does:
**
**   1. one thread: the same handle value as the counted lookup, usable,
**      dropped by its unref; a use after the last unref is
**      DAC_ERR_BAD_HANDLE;
**   2. handed to another thread, which uses and drops it (the holder alive);
**   3. handed on, then its thread exits: the reference stays, and the
**      context dies at the last unref after its release;
**   4. the context released while a thread holds one: it lives until that
**      thread's unref, which is its death and runs its host drop there;
**   5. THREADS threads look one id up, again and again, while the main
**      thread releases it and makes it anew (ROUNDS times, or argv[1]):
**      every host value is dropped exactly once, never while a thread reads
**      it, and nothing is left.
**
** It prints a transcript (check.h); the Go test compares it.
** Usage: uncounted [ROUNDS] */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

#define ID_BASE 1000
#ifndef THREADS /* -DTHREADS=N for a machine with more cores */
#define THREADS 4
#endif
#define ROUNDS 20000

typedef struct value {
	int64_t id;
	int drops;          /* by the drop, under drop_mu */
	int readers;        /* threads reading it now (atomic) */
	int dropped_in_use; /* the drop found a reader */
	pthread_t dropper;
} value;

static pthread_mutex_t drop_mu = PTHREAD_MUTEX_INITIALIZER;

static void drop(uint64_t v) {
	value *x = (value *)(uintptr_t)v;
	pthread_mutex_lock(&drop_mu);
	x->drops++;
	x->dropper = pthread_self();
	if (__atomic_load_n(&x->readers, __ATOMIC_SEQ_CST) != 0)
		x->dropped_in_use = 1;
	pthread_mutex_unlock(&drop_mu);
}

/* A figure of dac_debug_info. */
static int64_t debug_info(const char *key) {
	char buf[2048], k[64];
	size_t len = 0;
	MUST(dac_debug_info(buf, sizeof buf, &len));
	snprintf(k, sizeof k, "\"%s\":", key);
	const char *p = strstr(buf, k);
	return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

static int64_t live_handles(void) { return debug_info("live_handles"); }

static int64_t contexts(void) {
	int64_t n = -1;
	MUST(dac_num_contexts(&n));
	return n;
}

/* Makes context id with host value v, and leaves it with no reference. */
static void make(int64_t id, value *v) {
	dac_context *h;
	MUST(dac_context_get_or_create(id, &h));
	*v = (value){.id = id};
	uint64_t cur;
	MUST(dac_context_set_host_value(h, (uint64_t)(uintptr_t)v, drop, &cur));
	MUST(dac_context_unref(h));
}

/* Three lookups of id: the first two counted (the second marks the
** record: a thread's second lookup of it in a row), each dropped; the
** third uncounted, kept. (Had a counted one been kept, its unref would
** have dropped the uncounted one: a handle is one value, and either of its
** references may go.) */
static dac_context *hold_uncounted(int64_t id) {
	dac_context *counted[2], *held;
	for (int i = 0; i < 2; i++) {
		MUST(dac_context_retrieve(id, &counted[i]));
		MUST(dac_context_unref(counted[i]));
	}
	MUST(dac_context_retrieve(id, &held));
	if (counted[0] != held || counted[1] != held)
		printf("BUG: lookups of context %" PRId64 " gave different handles\n", id);
	return held;
}

/* ---- 1 ---- */

static void one_thread(void) {
	printf("-- 1: one thread\n");
	value v;
	make(ID_BASE + 1, &v);
	dac_context *h = hold_uncounted(ID_BASE + 1);
	NAME(h);
	printf("live handles: %" PRId64 ", uncounted: %" PRId64 "\n", live_handles(), debug_info("uncounted_handles"));
	int64_t id = 0;
	uint64_t hv = 0;
	SHOW(dac_context_id(h, &id));
	printf("id %" PRId64 "\n", id);
	SHOW(dac_context_host_value(h, &hv));
	printf("its host value: %s\n", hv == (uint64_t)(uintptr_t)&v ? "yes" : "no");
	SHOW(dac_context_add_known_worker_id(h, 3));
	int32_t ids[4];
	size_t n = 0;
	SHOW(dac_context_known_worker_ids(h, ids, 4, &n));
	printf("known workers: %zu (%d)\n", n, n > 0 ? ids[0] : -1);
	SHOW(dac_context_ref(h));
	SHOW(dac_context_unref(h));
	SHOW(dac_context_unref(h));
	printf("live handles: %" PRId64 "\n", live_handles());
	SHOW(dac_context_id(h, &id));
	SHOW(dac_context_unref(h));
	SHOW(dac_context_release(ID_BASE + 1));
	printf("dropped: %d, contexts left: %" PRId64 "\n", v.drops, contexts());
}

/* ---- 2, 3, 4: a helper thread that holds one uncounted ---- */

typedef struct {
	int64_t id;
	dac_context *h;
	int exit_early; /* 3: hand the handle over and exit */
	sem_t held, go_on, done;
} helper;

static void *helper_main(void *p) {
	helper *x = p;
	x->h = hold_uncounted(x->id);
	sem_post(&x->held);
	sem_wait(&x->go_on);
	if (x->exit_early)
		return NULL;
	/* 4: the context was released meanwhile; this thread's reference is
	** the last, and its unref the death. */
	int64_t id = 0;
	SHOW(dac_context_id(x->h, &id));
	SHOW(dac_context_unref(x->h));
	SHOW(dac_context_id(x->h, &id));
	sem_post(&x->done);
	return NULL;
}

static void start(helper *x, pthread_t *t, int64_t id, int exit_early, const char *name) {
	x->id = id;
	x->exit_early = exit_early;
	sem_init(&x->held, 0, 0);
	sem_init(&x->go_on, 0, 0);
	sem_init(&x->done, 0, 0);
	pthread_create(t, NULL, helper_main, x);
	sem_wait(&x->held);
	printf("handle %s = %#" PRIx64 "\n", name, (uint64_t)(uintptr_t)x->h);
}

static void handed_on(void) {
	printf("-- 2: handed to another thread, its holder alive\n");
	value v;
	make(ID_BASE + 2, &v);
	helper x;
	pthread_t t;
	start(&x, &t, ID_BASE + 2, 0, "handed");
	printf("live handles: %" PRId64 ", uncounted: %" PRId64 "\n", live_handles(), debug_info("uncounted_handles"));
	int64_t id = 0;
	uint64_t hv = 0;
	SHOW(dac_context_id(x.h, &id));
	SHOW(dac_context_host_value(x.h, &hv));
	printf("its host value: %s\n", hv == (uint64_t)(uintptr_t)&v ? "yes" : "no");
	SHOW(dac_context_unref(x.h));
	SHOW(dac_context_unref(x.h));
	printf("live handles: %" PRId64 "\n", live_handles());
	/* The helper's reference went with that unref: it finishes as in 4,
	** on a context of its own, released already. */
	value w;
	make(ID_BASE + 3, &w);
	dac_context *other;
	MUST(dac_context_retrieve(ID_BASE + 3, &other));
	NAME(other);
	x.h = other;
	MUST(dac_context_release(ID_BASE + 3));
	sem_post(&x.go_on);
	sem_wait(&x.done);
	pthread_join(t, NULL);
	SHOW(dac_context_release(ID_BASE + 2));
	printf("dropped: %d and %d, contexts left: %" PRId64 ", live handles: %" PRId64 "\n", v.drops, w.drops,
	       contexts(), live_handles());
}

static void holder_exits(void) {
	printf("-- 3: handed on, then its thread exits\n");
	value v;
	make(ID_BASE + 4, &v);
	helper x;
	pthread_t t;
	start(&x, &t, ID_BASE + 4, 1, "exited");
	printf("uncounted before its thread exits: %" PRId64 "\n", debug_info("uncounted_handles"));
	sem_post(&x.go_on);
	pthread_join(t, NULL);
	printf("live handles: %" PRId64 ", uncounted: %" PRId64 "\n", live_handles(), debug_info("uncounted_handles"));
	int64_t id = 0;
	SHOW(dac_context_id(x.h, &id));
	SHOW(dac_context_release(ID_BASE + 4));
	printf("dropped after the release: %d\n", v.drops);
	SHOW(dac_context_unref(x.h));
	printf("dropped after the unref: %d, on this thread: %s, contexts left: %" PRId64 ", live handles: %" PRId64
	       "\n",
	       v.drops, v.drops && pthread_equal(v.dropper, pthread_self()) ? "yes" : "no", contexts(),
	       live_handles());
	SHOW(dac_context_unref(x.h));
}

static void released_while_held(void) {
	printf("-- 4: released while a thread holds one\n");
	value v;
	make(ID_BASE + 5, &v);
	helper x;
	pthread_t t;
	start(&x, &t, ID_BASE + 5, 0, "held");
	printf("uncounted: %" PRId64 "\n", debug_info("uncounted_handles"));
	SHOW(dac_context_release(ID_BASE + 5));
	printf("dropped after the release: %d\n", v.drops);
	dac_context *h;
	SHOW(dac_context_retrieve(ID_BASE + 5, &h));
	SHOW(dac_context_is_valid(ID_BASE + 5));
	sem_post(&x.go_on);
	sem_wait(&x.done);
	pthread_join(t, NULL);
	printf("dropped after its unref: %d, on its thread: %s, contexts left: %" PRId64 ", live handles: %" PRId64
	       "\n",
	       v.drops, v.drops && pthread_equal(v.dropper, t) ? "yes" : "no", contexts(), live_handles());
}

/* ---- 5 ---- */

static value *values;
static int rounds = ROUNDS;
static int stop;
static long lookups[THREADS], bad[THREADS];

static void *looker(void *p) {
	long me = (long)p;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		dac_context *h;
		if (dac_context_retrieve(ID_BASE + 100, &h) != DAC_OK)
			continue;
		__atomic_add_fetch(&lookups[me], 1, __ATOMIC_RELAXED);
		uint64_t hv = 0;
		int64_t id = 0;
		if (dac_context_host_value(h, &hv) != DAC_OK || dac_context_id(h, &id) != DAC_OK || id != ID_BASE + 100) {
			bad[me]++;
		} else if (hv != 0) {
			value *x = (value *)(uintptr_t)hv;
			__atomic_add_fetch(&x->readers, 1, __ATOMIC_SEQ_CST);
			if (__atomic_load_n(&x->drops, __ATOMIC_SEQ_CST) != 0 || x->id != ID_BASE + 100)
				bad[me]++;
			__atomic_sub_fetch(&x->readers, 1, __ATOMIC_SEQ_CST);
		}
		if (dac_context_unref(h) != DAC_OK)
			bad[me]++;
	}
	return NULL;
}

static void race(void) {
	printf("-- 5: %d threads look one id up while it is released and made anew\n", THREADS);
	values = calloc((size_t)rounds + 1, sizeof *values);
	if (values == NULL)
		exit(1);
	pthread_t t[THREADS];
	make(ID_BASE + 100, &values[0]);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, looker, (void *)i);
	/* The rounds start once a looker has found the context: on a loaded
	** machine they could otherwise all end before any looker ran. */
	for (;;) {
		long seen = 0;
		for (int i = 0; i < THREADS; i++)
			seen += __atomic_load_n(&lookups[i], __ATOMIC_RELAXED);
		if (seen > 0)
			break;
		sched_yield();
	}
	for (int r = 1; r <= rounds; r++) {
		if (dac_context_release(ID_BASE + 100) != DAC_OK)
			printf("BUG: round %d: release: %s\n", r, dac_last_error());
		make(ID_BASE + 100, &values[r]);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	MUST(dac_context_release(ID_BASE + 100));
	int once = 0, in_use = 0;
	long total = 0, wrong = 0;
	for (int r = 0; r <= rounds; r++) {
		once += values[r].drops == 1;
		in_use += values[r].dropped_in_use;
	}
	for (int i = 0; i < THREADS; i++) {
		total += lookups[i];
		wrong += bad[i];
	}
	printf("values dropped exactly once: %s, while read: %d, wrong reads: %ld, lookups made: %s\n",
	       once == rounds + 1 ? "all" : "NOT ALL", in_use, wrong, total > 0 ? "yes" : "none");
	printf("contexts left: %" PRId64 ", live handles: %" PRId64 "\n", contexts(), live_handles());
	free(values);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1)
		rounds = atoi(argv[1]);
	MUST(dac_init(1));
	one_thread();
	handed_on();
	holder_exits();
	released_while_held();
	race();
	return 0;
}
