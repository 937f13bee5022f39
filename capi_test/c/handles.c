/* handles: the reference counts and context ids that capi.c serves without
** entering Go, from the records Go's container publishes. Usage:
**   handles shared THREADS CYCLES  THREADS pthreads ref, read and unref one
**                                  handle, look its context up again (the
**                                  same handle) and churn contexts of their
**                                  own, whose records die and are reused,
**                                  at once; the last unref leaves it dead
**   handles stale CYCLES           one thread reuses records of a shard
**                                  while another uses a dead handle whose
**                                  record is among them
**   handles forged                 handles that were never issued
** Each prints a transcript for c_handles_test.go. */
#include "check.h"

#include <pthread.h>

static pthread_barrier_t start;

/* The counter part of the id: contexts 64 apart share a handle shard. */
static int64_t ctx_id(int k) { return ((int64_t)3 << 48) + k; }

static void live_handles(void) {
	char buf[1024];
	size_t len;
	MUST(dac_debug_info(buf, sizeof buf, &len));
	const char *at = strstr(buf, "\"live_handles\":");
	REQUIRE(at != NULL);
	printf("live_handles = %ld\n", strtol(at + 15, NULL, 10));
}

/* ---- shared ---- */

struct shared {
	dac_context *h; /* the shared handle; this thread holds one reference */
	int64_t want;   /* its context id */
	long cycles;
	long errors;
};

static struct shared shared_args[64];

static void *shared_main(void *arg) {
	struct shared *s = arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < s->cycles; i++) {
		int64_t id = -1;
		dac_context *own = NULL;
		if (dac_context_ref(s->h) != DAC_OK)
			s->errors++;
		if (dac_context_id(s->h, &id) != DAC_OK || id != s->want)
			s->errors++;
		if (dac_context_unref(s->h) != DAC_OK)
			s->errors++;
		/* Looked up again: the same handle, one more reference. */
		if (dac_context_retrieve(s->want, &own) != DAC_OK || own != s->h)
			s->errors++;
		else if (dac_context_id(own, &id) != DAC_OK || id != s->want || dac_context_unref(own) != DAC_OK)
			s->errors++;
		/* A context of its own in the same shard, made, released and
		** dropped: records die and are reused beside the shared one. */
		dac_context *mine = NULL;
		int64_t mine_id = ctx_id(7 + 256 * (int)(s - shared_args + 1));
		if (dac_context_get_or_create(mine_id, &mine) != DAC_OK || dac_context_release(mine_id) != DAC_OK ||
		    dac_context_id(mine, &id) != DAC_OK || id != mine_id || dac_context_unref(mine) != DAC_OK)
			s->errors++;
	}
	/* Its own reference: the last thread to get here kills the handle. */
	if (dac_context_unref(s->h) != DAC_OK)
		s->errors++;
	return NULL;
}

static void shared(int threads, long cycles) {
	struct shared *s = shared_args;
	pthread_t t[64];
	REQUIRE(threads >= 1 && threads <= 64);
	dac_context *h = NULL;
	MUST(dac_context_get_or_create(ctx_id(7), &h));
	NAME(h);
	for (int i = 1; i < threads; i++)
		MUST(dac_context_ref(h)); /* one reference per thread */
	REQUIRE(pthread_barrier_init(&start, NULL, (unsigned)threads) == 0);
	for (int i = 0; i < threads; i++) {
		s[i] = (struct shared){h, ctx_id(7), cycles, 0};
		REQUIRE(pthread_create(&t[i], NULL, shared_main, &s[i]) == 0);
	}
	long errors = 0;
	for (int i = 0; i < threads; i++) {
		REQUIRE(pthread_join(t[i], NULL) == 0);
		errors += s[i].errors;
	}
	printf("errors = %ld\n", errors);
	int64_t id;
	printf("-- every reference dropped: the handle is dead\n");
	SHOW(dac_context_id(h, &id));
	SHOW(dac_context_ref(h));
	SHOW(dac_context_unref(h));
	live_handles();
	printf("-- the context is still stored\n");
	SHOW(dac_context_is_valid(ctx_id(7)));
}

/* ---- stale ---- */

struct churn {
	long cycles;
	long errors;
	volatile int done;
};

static void *churn_main(void *arg) {
	struct churn *c = arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < c->cycles; i++) {
		dac_context *a = NULL, *b = NULL;
		int64_t id = -1;
		/* Two at once in the dead one's shard, made, released and dropped,
		** so that its record turns over again and again. */
		if (dac_context_get_or_create(ctx_id(1 + 256), &a) != DAC_OK ||
		    dac_context_get_or_create(ctx_id(1 + 512), &b) != DAC_OK) {
			c->errors++;
			continue;
		}
		if (dac_context_id(a, &id) != DAC_OK || id != ctx_id(1 + 256))
			c->errors++;
		if (dac_context_id(b, &id) != DAC_OK || id != ctx_id(1 + 512))
			c->errors++;
		if (dac_context_release(ctx_id(1 + 256)) != DAC_OK || dac_context_release(ctx_id(1 + 512)) != DAC_OK)
			c->errors++;
		if (dac_context_unref(a) != DAC_OK || dac_context_unref(b) != DAC_OK)
			c->errors++;
	}
	c->done = 1;
	return NULL;
}

static void stale(long cycles) {
	dac_context *ctx = NULL, *dead = NULL;
	MUST(dac_context_get_or_create(ctx_id(1), &ctx));
	MUST(dac_context_get_or_create(ctx_id(1 + 768), &dead));
	MUST(dac_context_release(ctx_id(1 + 768)));
	MUST(dac_context_unref(dead)); /* its record is free: the churn reuses it */
	struct churn c = {cycles, 0, 0};
	pthread_t t;
	REQUIRE(pthread_barrier_init(&start, NULL, 2) == 0);
	REQUIRE(pthread_create(&t, NULL, churn_main, &c) == 0);
	pthread_barrier_wait(&start);
	long uses = 0, wrong = 0;
	while (!c.done) {
		int64_t id = -1;
		/* Every use of the dead handle fails, whoever holds its slot now. */
		wrong += dac_context_id(dead, &id) != DAC_ERR_BAD_HANDLE;
		wrong += dac_context_ref(dead) != DAC_ERR_BAD_HANDLE;
		wrong += dac_context_unref(dead) != DAC_ERR_BAD_HANDLE;
		uses++;
	}
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("churn errors = %ld\n", c.errors);
	printf("dead handle used while its record was reused: %s, wrong results = %ld\n", uses > 0 ? "yes" : "no", wrong);
	MUST(dac_context_unref(ctx));
	live_handles();
}

/* ---- forged ---- */

static void forged(void) {
	dac_context *ctx = NULL, *first = NULL;
	MUST(dac_context_get_or_create(ctx_id(4), &first)); /* record 0, listed */
	MUST(dac_context_unref(first));                      /* and unreferenced */
	MUST(dac_context_get_or_create(ctx_id(5), &ctx));   /* record 1 */
	uint64_t h = (uint64_t)(uintptr_t)ctx;
	int64_t id;
	printf("-- NULL\n");
	SHOW(dac_context_id(NULL, &id));
	SHOW(dac_context_ref(NULL));
	SHOW(dac_context_unref(NULL));
	const struct {
		const char *what;
		uint64_t h;
	} cases[] = {
	    {"a live handle's record, another generation", h + ((uint64_t)1 << 32)},
	    {"generation 0", h & 0xffffffffu},
	    {"a record never mapped (the last index)", (h & ~(uint64_t)0xffffffffu) | 0xffffffffu},
	    {"a record mapped but never used", (h & ~(uint64_t)0xffffffffu) | 40},
	    {"another record, its context listed but unreferenced", h ^ 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dac_context *bad = (dac_context *)(uintptr_t)cases[i].h;
		printf("-- %s\n", cases[i].what);
		NAME(bad);
		SHOW(dac_context_id(bad, &id));
		SHOW(dac_context_ref(bad));
		SHOW(dac_context_unref(bad));
	}
	printf("-- the live handle is untouched\n");
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_unref(ctx));
	live_handles();
}

int main(int argc, char **argv) {
	MUST(dac_init(3));
	if (argc == 4 && strcmp(argv[1], "shared") == 0)
		shared(atoi(argv[2]), atol(argv[3]));
	else if (argc == 3 && strcmp(argv[1], "stale") == 0)
		stale(atol(argv[2]));
	else if (argc == 2 && strcmp(argv[1], "forged") == 0)
		forged();
	else {
		fprintf(stderr, "usage: handles shared THREADS CYCLES | stale CYCLES | forged\n");
		return 2;
	}
	return 0;
}
