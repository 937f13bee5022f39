/* drops.c: a host value's drop, for every way a context dies: a release
** with no handle left, the last unref after a release, a reap, a release by
** worker, and a release from another thread. Each drop must run exactly
** once, on the thread that dropped the last reference, after the context is
** gone from the container, and may call the library: here it releases the
** next context of a chain (whose own drop then runs inside it) and counts
** the contexts left. */
#include "check.h"

#include <pthread.h>

#define CHAIN 3

typedef struct value {
	int64_t id;      /* the context it hangs on */
	int64_t next;    /* a context the drop releases, or -1 */
	pthread_t owner; /* the thread expected to run the drop */
	int drops;
	int wrong_thread;
	int still_valid; /* its context was still in the container */
	int depth;       /* how many drops were running when it ran */
} value;

static __thread int running;

static void drop(uint64_t v) {
	value *x = (value *)(uintptr_t)v;
	running++;
	x->drops++;
	x->depth = running;
	if (!pthread_equal(pthread_self(), x->owner))
		x->wrong_thread = 1;
	if (dac_context_is_valid(x->id) == DAC_OK)
		x->still_valid = 1;
	if (x->next >= 0) {
		int released = 0;
		if (dac_context_release_if_present(x->next, &released) != DAC_OK || !released)
			printf("BUG: a drop could not release context %" PRId64 ": %s\n", x->next, dac_last_error());
	}
	int64_t n;
	if (dac_num_contexts(&n) != DAC_OK)
		printf("BUG: dac_num_contexts failed inside a drop: %s\n", dac_last_error());
	running--;
}

/* Makes CHAIN contexts from id on, each value releasing the next if
** chained; the first's handle is returned, referenced. */
static dac_context *chain(int64_t id, value *v, int chained) {
	dac_context *first = NULL;
	for (int i = 0; i < CHAIN; i++) {
		dac_context *h;
		MUST(dac_context_get_or_create(id + i, &h));
		v[i] = (value){.id = id + i, .next = chained && i + 1 < CHAIN ? id + i + 1 : -1, .owner = pthread_self()};
		uint64_t cur;
		MUST(dac_context_set_host_value(h, (uint64_t)(uintptr_t)&v[i], drop, &cur));
		if (i == 0)
			first = h;
		else
			MUST(dac_context_unref(h));
	}
	return first;
}

static void report(const char *how, const value *v, int chained) {
	int once = 1, thread = 1, gone = 1, nested = 1;
	for (int i = 0; i < CHAIN; i++) {
		once &= v[i].drops == 1;
		thread &= !v[i].wrong_thread;
		gone &= !v[i].still_valid;
		nested &= v[i].depth == (chained ? i + 1 : 1);
	}
	int64_t n = -1;
	dac_num_contexts(&n);
	printf("%s: each dropped once: %s, on the dropping thread: %s, after it was gone: %s, %s: %s, "
	       "contexts left: %" PRId64 "\n",
	       how, once ? "yes" : "no", thread ? "yes" : "no", gone ? "yes" : "no",
	       chained ? "chain nested" : "none nested", nested ? "yes" : "no", n);
}

static value other_v[CHAIN];
static void *release_other(void *arg) {
	(void)arg;
	for (int i = 0; i < CHAIN; i++)
		other_v[i].owner = pthread_self();
	MUST(dac_context_release(other_v[0].id));
	return NULL;
}

int main(void) {
	MUST(dac_init(5));
	const int64_t base = (int64_t)5 << 48;
	value v[CHAIN];

	dac_context *h = chain(base + 100, v, 1);
	MUST(dac_context_unref(h));
	MUST(dac_context_release(base + 100));
	report("release, no handle left", v, 1);

	h = chain(base + 200, v, 1);
	MUST(dac_context_release(base + 200));
	if (v[0].drops != 0)
		printf("BUG: dropped while a handle was live\n");
	MUST(dac_context_unref(h));
	report("last unref after the release", v, 1);

	/* A reap or a release by worker releases every context it matches,
	** so their drops release nothing more (a chain's next would be gone). */
	h = chain(base + 300, v, 0);
	MUST(dac_context_unref(h));
	int64_t n = 0;
	MUST(dac_reap_idle_contexts(0, &n));
	report("reap", v, 0);

	h = chain(base + 400, v, 0);
	MUST(dac_context_unref(h));
	MUST(dac_release_contexts_of_worker(5, &n));
	report("release by worker", v, 0);

	h = chain(base + 500, other_v, 1);
	MUST(dac_context_unref(h));
	pthread_t t;
	pthread_create(&t, NULL, release_other, NULL);
	pthread_join(t, NULL);
	report("release from another thread", other_v, 1);
	return 0;
}
