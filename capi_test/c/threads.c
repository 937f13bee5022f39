/* threads: the current context is per OS thread, and everything is safe from
** many threads at once. Usage:
**   threads stress THREADS CYCLES  THREADS pthreads x CYCLES new/release cycles
**                                  with a message id each: ids unique, count 0
**   threads get-or-create THREADS  THREADS pthreads get-or-create the same ids
**   threads isolation              a new thread has no current context; each
**                                  thread's current is its own
**   threads stale                  a thread's current context released by another
**   threads exit                   threads that exit with a current id */
#include "check.h"

#include <pthread.h>

/* Threads wait here to start together, so that they really run at once. */
static pthread_barrier_t start;

/* ---- stress ---- */

struct stress {
	long cycles;
	int64_t *ctx_ids, *msg_ids;
	long errors; /* calls that failed, current ids that were wrong */
};

static void *stress_main(void *arg) {
	struct stress *s = arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < s->cycles; i++) {
		dac_context *ctx = NULL;
		int64_t id = -1, cur = -1, msg = -1;
		if (dac_context_new(&ctx) != DAC_OK || dac_context_id(ctx, &id) != DAC_OK) {
			s->errors++;
			continue;
		}
		if (dac_current_context_id(&cur) != DAC_OK || cur != id)
			s->errors++;
		if (dac_new_autograd_message_id(&msg) != DAC_OK)
			s->errors++;
		if (dac_context_release(id) != DAC_OK)
			s->errors++;
		if (dac_current_context_id(&cur) != DAC_OK || cur != DAC_INVALID_ID)
			s->errors++;
		if (dac_context_unref(ctx) != DAC_OK)
			s->errors++;
		s->ctx_ids[i] = id;
		s->msg_ids[i] = msg;
	}
	return NULL;
}

static int cmp_i64(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Sorts ids and reports whether they are all distinct. */
static int all_unique(int64_t *ids, size_t n) {
	qsort(ids, n, sizeof ids[0], cmp_i64);
	for (size_t i = 1; i < n; i++)
		if (ids[i] == ids[i - 1])
			return 0;
	return 1;
}

/* Whether ids, one thread's in order, go one by one but where a run of
** DAC_CONTEXT_ID_RUN starts. */
static int in_runs(const int64_t *ids, size_t n) {
	for (size_t i = 1; i < n; i++)
		if (ids[i] != ids[i - 1] + 1 && ids[i] % DAC_CONTEXT_ID_RUN != 0)
			return 0;
	return 1;
}

static int all_of_worker(const int64_t *ids, size_t n, uint64_t worker) {
	for (size_t i = 0; i < n; i++)
		if ((uint64_t)ids[i] >> 48 != worker)
			return 0;
	return 1;
}

static void debug_live_handles(void) {
	char buf[1024];
	size_t len;
	MUST(dac_debug_info(buf, sizeof buf, &len));
	const char *at = strstr(buf, "\"live_handles\":");
	printf("live_handles = %s\n", at ? (at[15] == '0' && (at[16] == ',' || at[16] == '}') ? "0" : "not 0") : "missing");
}

static void stress(int threads, long cycles) {
	size_t total = (size_t)threads * (size_t)cycles;
	int64_t *ctx_ids = malloc(total * sizeof *ctx_ids), *msg_ids = malloc(total * sizeof *msg_ids);
	struct stress *s = calloc((size_t)threads, sizeof *s);
	pthread_t *t = malloc((size_t)threads * sizeof *t);
	REQUIRE(ctx_ids && msg_ids && s && t);
	REQUIRE(pthread_barrier_init(&start, NULL, (unsigned)threads) == 0);
	for (int i = 0; i < threads; i++) {
		s[i].cycles = cycles;
		s[i].ctx_ids = ctx_ids + (size_t)i * (size_t)cycles;
		s[i].msg_ids = msg_ids + (size_t)i * (size_t)cycles;
		REQUIRE(pthread_create(&t[i], NULL, stress_main, &s[i]) == 0);
	}
	long errors = 0;
	for (int i = 0; i < threads; i++) {
		REQUIRE(pthread_join(t[i], NULL) == 0);
		errors += s[i].errors;
	}
	printf("errors = %ld\n", errors);
	int runs = 1;
	for (int i = 0; i < threads; i++)
		runs = runs && in_runs(s[i].ctx_ids, (size_t)cycles);
	int uc = all_unique(ctx_ids, total), um = all_unique(msg_ids, total);
	printf("context ids: %zu, all unique: %s, all of worker 3: %s\n", total, uc ? "yes" : "NO",
	       all_of_worker(ctx_ids, total, 3) ? "yes" : "NO");
	/* Each thread takes its context ids from runs of its own: from the
	** first, a thread's are consecutive but where a run starts, and they
	** leave at most a run per thread unused. */
	printf("context ids from the first, each thread's by the run, at most a run a thread unused: %s\n",
	       runs && ctx_ids[0] == (int64_t)3 << 48 &&
	               ctx_ids[total - 1] < ((int64_t)3 << 48) + (int64_t)total + (int64_t)threads * DAC_CONTEXT_ID_RUN
	           ? "yes"
	           : "NO");
	printf("message ids: %zu, all unique: %s, all of worker 3: %s\n", total, um ? "yes" : "NO",
	       all_of_worker(msg_ids, total, 3) ? "yes" : "NO");
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	debug_live_handles();
	free(ctx_ids), free(msg_ids), free(s), free(t);
}

/* ---- get-or-create ---- */

#define SHARED_IDS 20000

struct goc {
	int index;
	long errors;
};

/* A message from worker 5 names pass k, on every thread at once. */
static int64_t shared_id(int k) { return ((int64_t)5 << 48) + k; }

static void *goc_main(void *arg) {
	struct goc *g = arg;
	pthread_barrier_wait(&start);
	for (int k = 0; k < SHARED_IDS; k++) {
		dac_context *ctx = NULL;
		if (dac_context_get_or_create(shared_id(k), &ctx) != DAC_OK) {
			g->errors++;
			continue;
		}
		/* Each thread leaves its mark: worker id 100 + its index. */
		if (dac_context_add_known_worker_id(ctx, 100 + g->index) != DAC_OK)
			g->errors++;
		if (dac_context_unref(ctx) != DAC_OK)
			g->errors++;
	}
	return NULL;
}

static void get_or_create(int threads) {
	struct goc g[64];
	pthread_t t[64];
	REQUIRE(threads <= 64);
	REQUIRE(pthread_barrier_init(&start, NULL, (unsigned)threads) == 0);
	for (int i = 0; i < threads; i++) {
		g[i].index = i, g[i].errors = 0;
		REQUIRE(pthread_create(&t[i], NULL, goc_main, &g[i]) == 0);
	}
	long errors = 0;
	for (int i = 0; i < threads; i++) {
		REQUIRE(pthread_join(t[i], NULL) == 0);
		errors += g[i].errors;
	}
	printf("errors = %ld\n", errors);
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	/* One context per id: every thread's mark is on it. */
	int one_each = 1;
	for (int k = 0; k < SHARED_IDS; k++) {
		dac_context *ctx = NULL;
		size_t count = 0;
		MUST(dac_context_retrieve(shared_id(k), &ctx));
		MUST(dac_context_known_worker_ids(ctx, NULL, 0, &count));
		if (count != (size_t)threads)
			one_each = 0;
		MUST(dac_context_unref(ctx));
	}
	printf("every context has the marks of all %d threads: %s\n", threads, one_each ? "yes" : "NO");
	int64_t released = 0;
	MUST(dac_release_contexts_of_worker(5, &released));
	PRINT_I64(released);
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	debug_live_handles();
}

/* ---- isolation, stale, exit ---- */

static void print_current(const char *who) {
	int64_t cur = 0;
	int has = -1;
	MUST(dac_current_context_id(&cur));
	MUST(dac_has_valid_context(&has));
	printf("%s: current_context_id = %" PRId64 ", has_valid_context = %d\n", who, cur, has);
}

static void *fresh_thread(void *arg) {
	(void)arg;
	dac_context *ctx = NULL;
	int64_t id = 0;
	printf("-- a new thread\n");
	print_current("thread");
	SHOW(dac_context_current(&ctx));
	SHOW(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	print_current("thread");
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(ctx));
	return NULL;
}

static void isolation(void) {
	dac_context *ctx = NULL;
	int64_t id = 0;
	pthread_t t;
	SHOW(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	print_current("main");
	REQUIRE(pthread_create(&t, NULL, fresh_thread, NULL) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("-- main again\n");
	print_current("main");
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(ctx));
	printf("-- a thread's current id set by hand is its own too\n");
	SHOW(dac_force_current_context_id(12345));
	REQUIRE(pthread_create(&t, NULL, fresh_thread, NULL) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	print_current("main");
}

static void *release_thread(void *arg) {
	int64_t id = *(int64_t *)arg;
	printf("-- thread B releases main's context\n");
	SHOW(dac_context_release(id));
	print_current("B");
	return NULL;
}

static void stale(void) {
	dac_context *ctx = NULL, *got = NULL;
	int64_t id = 0;
	pthread_t t;
	SHOW(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	REQUIRE(pthread_create(&t, NULL, release_thread, &id) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("-- main keeps a stale current id\n");
	print_current("main");
	SHOW(dac_context_current(&got));
	SHOW(dac_context_new(&got));
	SHOW(dac_context_release(id));
	SHOW(dac_context_is_valid(id));
	printf("-- the handle still reads\n");
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_unref(ctx));
	printf("-- clearing it is the way out\n");
	SHOW(dac_clear_current_context());
	SHOW(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(ctx));
}

static int64_t exited_msg; /* the message id the exiting thread took */

static void *exiting_thread(void *arg) {
	int64_t *id = arg;
	dac_context *ctx = NULL;
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, id));
	MUST(dac_new_autograd_message_id(&exited_msg));
	MUST(dac_context_unref(ctx));
	return NULL; /* exits with a current id, and message ids reserved */
}

static void thread_exit(void) {
	int64_t id = 0, msg = 0, released = 0;
	dac_context *ctx = NULL;
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, exiting_thread, &id) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("-- a thread made a context and exited with it current\n");
	PRINT_ID(id);
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	print_current("main");
	SHOW(dac_context_retrieve(id, &ctx));
	SHOW(dac_context_unref(ctx));
	printf("-- the next thread starts with none\n");
	REQUIRE(pthread_create(&t, NULL, fresh_thread, NULL) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("-- message ids go on after the exited thread's\n");
	SHOW(dac_new_autograd_message_id(&msg));
	printf("after the exited thread's: %s\n", msg > exited_msg ? "yes" : "NO");
	printf("-- a hundred threads exit with their current contexts\n");
	for (int i = 0; i < 100; i++) {
		int64_t ignored;
		REQUIRE(pthread_create(&t, NULL, exiting_thread, &ignored) == 0);
		REQUIRE(pthread_join(t, NULL) == 0);
	}
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	SHOW(dac_release_contexts_of_worker(3, &released));
	PRINT_I64(released);
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	print_current("main");
}

int main(int argc, char **argv) {
	REQUIRE(argc >= 2);
	MUST(dac_init(3));
	if (strcmp(argv[1], "stress") == 0 && argc == 4)
		stress(atoi(argv[2]), atol(argv[3]));
	else if (strcmp(argv[1], "get-or-create") == 0 && argc == 3)
		get_or_create(atoi(argv[2]));
	else if (strcmp(argv[1], "isolation") == 0)
		isolation();
	else if (strcmp(argv[1], "stale") == 0)
		stale();
	else if (strcmp(argv[1], "exit") == 0)
		thread_exit();
	else {
		fprintf(stderr, "usage: see the comment at the top of threads.c\n");
		return 2;
	}
	return 0;
}
