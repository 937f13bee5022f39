/* exhaust_limits: id exhaustion from many threads, and the cap on live
** contexts. Needs the testing build (build/testing) for its
** dactest_set_counter_offsets, except "cap". Usage:
**   exhaust_limits msg WORKER THREADS LEFT   message ids, LEFT before max_id
**   exhaust_limits ctx WORKER THREADS LEFT   context ids, likewise
**   exhaust_limits cap THREADS CAP           get-or-create floods past a cap */
#include "check.h"

#include <dlfcn.h>
#include <pthread.h>

typedef int (*set_offsets_fn)(int64_t ctx_offset, int64_t msg_offset);

static const int64_t mask = ((int64_t)1 << 48) - 1;
static pthread_barrier_t start;
static int64_t max_id;

struct taker {
	pthread_t thread;
	int msg; /* message ids, else context ids */
	int64_t *ids;
	size_t n, cap;
	long bad;           /* statuses other than DAC_OK until the first DAC_ERR_EXHAUSTED */
	long exhausted_too; /* calls after the first DAC_ERR_EXHAUSTED that failed so too */
	char first_error[256];
};

static int take_one(struct taker *t, int64_t *id) {
	if (t->msg)
		return dac_new_autograd_message_id(id);
	dac_context *ctx = NULL;
	int rc = dac_context_new(&ctx);
	if (rc != DAC_OK)
		return rc;
	MUST(dac_context_id(ctx, id));
	MUST(dac_context_release(*id));
	MUST(dac_context_unref(ctx));
	return DAC_OK;
}

/* Takes ids until the counter is exhausted, then checks it stays so. */
static void *taker_main(void *arg) {
	struct taker *t = arg;
	pthread_barrier_wait(&start);
	for (;;) {
		int64_t id = 0;
		int rc = take_one(t, &id);
		if (rc == DAC_ERR_EXHAUSTED) {
			snprintf(t->first_error, sizeof t->first_error, "%s", dac_last_error());
			break;
		}
		if (rc != DAC_OK) {
			t->bad++;
			continue;
		}
		if (t->n == t->cap) {
			t->cap = t->cap ? 2 * t->cap : 1024;
			t->ids = realloc(t->ids, t->cap * sizeof *t->ids);
			REQUIRE(t->ids != NULL);
		}
		t->ids[t->n++] = id;
	}
	for (int i = 0; i < 3; i++) {
		int64_t id = 0;
		if (take_one(t, &id) == DAC_ERR_EXHAUSTED)
			t->exhausted_too++;
	}
	return NULL;
}

static int cmp_i64(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void *late_thread(void *arg) {
	struct taker *t = arg;
	int64_t id = 0;
	int rc = take_one(t, &id);
	printf("a thread started after: %s: %s\n", dac_status_string(rc), rc ? dac_last_error() : "");
	return NULL;
}

static void exhaust(int msg, int64_t worker, int threads, int64_t left) {
	set_offsets_fn set_offsets;
	void *self = dlopen(NULL, RTLD_NOW);
	REQUIRE(self != NULL);
	*(void **)&set_offsets = dlsym(self, "dactest_set_counter_offsets");
	if (set_offsets == NULL) {
		fprintf(stderr, "dactest_set_counter_offsets not found: run against build/testing\n");
		exit(1);
	}
	REQUIRE(set_offsets(msg ? 0 : mask - left, msg ? mask - left : 0) == DAC_OK);
	MUST(dac_init(worker));
	MUST(dac_max_id(&max_id));
	struct taker *ts = calloc((size_t)threads, sizeof *ts);
	REQUIRE(ts != NULL);
	REQUIRE(pthread_barrier_init(&start, NULL, (unsigned)threads) == 0);
	for (int i = 0; i < threads; i++) {
		ts[i].msg = msg;
		REQUIRE(pthread_create(&ts[i].thread, NULL, taker_main, &ts[i]) == 0);
	}
	size_t total = 0;
	long bad = 0, exhausted_too = 0;
	for (int i = 0; i < threads; i++) {
		REQUIRE(pthread_join(ts[i].thread, NULL) == 0);
		total += ts[i].n, bad += ts[i].bad, exhausted_too += ts[i].exhausted_too;
	}
	int64_t *all = malloc((total ? total : 1) * sizeof *all);
	REQUIRE(all != NULL);
	size_t k = 0;
	for (int i = 0; i < threads; i++) {
		memcpy(all + k, ts[i].ids, ts[i].n * sizeof *all);
		k += ts[i].n;
	}
	qsort(all, total, sizeof *all, cmp_i64);
	int same_error = 1;
	for (int i = 1; i < threads; i++)
		same_error = same_error && strcmp(ts[i].first_error, ts[0].first_error) == 0;
	if (msg) {
		int exact = total == (size_t)left;
		for (size_t i = 0; exact && i < total; i++)
			exact = all[i] == max_id - left + (int64_t)i;
		printf("message ids issued: %zu, unique and exactly the %" PRId64 " before max_id: %s\n", total, left,
		       exact ? "yes" : "NO");
	} else {
		/* Threads take context ids by the run (container/ids.go): the runs
		** they held when the counter reached its last run go unused, and
		** every id of that last run is issued, one at a time. */
		int64_t from = max_id - left, last_run = max_id - (DAC_CONTEXT_ID_RUN - 1);
		if (last_run < from)
			last_run = from;
		int ok = 1;
		size_t in_last = 0;
		for (size_t i = 0; i < total; i++) {
			ok = ok && all[i] >= from && all[i] < max_id && (i == 0 || all[i] > all[i - 1]);
			in_last += all[i] >= last_run;
		}
		printf("context ids issued: unique, of the %" PRId64 " before max_id, with all %" PRId64
		       " of the last run: %s\n",
		       left, max_id - last_run, ok && in_last == (size_t)(max_id - last_run) ? "yes" : "NO");
	}
	printf("last issued < max_id: %s\n", total == 0 || all[total - 1] < max_id ? "yes" : "NO");
	printf("other failures before exhaustion: %ld\n", bad);
	printf("every thread then: %s\n", ts[0].first_error);
	printf("the same for all %d threads: %s; and again, 3 calls each: %s\n", threads, same_error ? "yes" : "NO",
	       exhausted_too == 3L * threads ? "all DAC_ERR_EXHAUSTED" : "NOT ALL");
	pthread_t late;
	struct taker lt = {.msg = msg};
	REQUIRE(pthread_create(&late, NULL, late_thread, &lt) == 0);
	REQUIRE(pthread_join(late, NULL) == 0);

	printf("-- everything else keeps working\n");
	dac_context *ctx = NULL;
	int64_t id = 0, other = ((int64_t)7 << 48) | 5;
	if (msg) {
		SHOW(dac_context_new(&ctx));
		MUST(dac_context_id(ctx, &id));
		SHOW(dac_context_release(id));
		SHOW(dac_context_unref(ctx));
	} else {
		SHOW(dac_new_autograd_message_id(&id));
	}
	dac_context *got = NULL;
	SHOW(dac_context_get_or_create(other, &ctx));
	SHOW(dac_context_add_known_worker_id(ctx, 7));
	SHOW(dac_context_retrieve(other, &got));
	SHOW(dac_context_unref(got));
	SHOW(dac_context_release(other));
	SHOW(dac_context_unref(ctx));
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	for (int i = 0; i < threads; i++)
		free(ts[i].ids);
	free(ts);
	free(all);
}

/* ---- the cap ---- */

struct flooder {
	pthread_t thread;
	int index, tries;
	long created, refused, other;
	char limit_msg[256];
	dac_context **held;
};

static void *flood_main(void *arg) {
	struct flooder *f = arg;
	pthread_barrier_wait(&start);
	for (int i = 0; i < f->tries; i++) {
		dac_context *ctx = NULL;
		int64_t id = ((int64_t)(10 + f->index) << 48) | i; /* messages naming passes of other workers */
		int rc = dac_context_get_or_create(id, &ctx);
		if (rc == DAC_OK) {
			f->held[f->created++] = ctx;
		} else if (rc == DAC_ERR_LIMIT) {
			f->refused++;
			snprintf(f->limit_msg, sizeof f->limit_msg, "%s", dac_last_error());
		} else {
			f->other++;
		}
	}
	return NULL;
}

static void cap(int threads, int64_t limit) {
	MUST(dac_init(3));
	SHOWF(dac_set_max_contexts(limit), "dac_set_max_contexts(%" PRId64 ")", limit);
	struct flooder *fs = calloc((size_t)threads, sizeof *fs);
	REQUIRE(fs != NULL);
	REQUIRE(pthread_barrier_init(&start, NULL, (unsigned)threads) == 0);
	for (int i = 0; i < threads; i++) {
		fs[i].index = i, fs[i].tries = (int)(2 * limit);
		fs[i].held = calloc((size_t)fs[i].tries, sizeof *fs[i].held);
		REQUIRE(fs[i].held != NULL);
		REQUIRE(pthread_create(&fs[i].thread, NULL, flood_main, &fs[i]) == 0);
	}
	long created = 0, refused = 0, other = 0;
	int same_msg = 1;
	for (int i = 0; i < threads; i++) {
		REQUIRE(pthread_join(fs[i].thread, NULL) == 0);
		created += fs[i].created, refused += fs[i].refused, other += fs[i].other;
		if (fs[i].refused && strcmp(fs[i].limit_msg, fs[0].limit_msg) != 0)
			same_msg = 0;
	}
	printf("%d threads x %" PRId64 " get-or-create of new ids: created %ld, refused %ld, other failures %ld\n", threads,
	       2 * limit, created, refused, other);
	printf("refusal: %s (every thread's the same: %s)\n", fs[0].limit_msg, same_msg ? "yes" : "NO");
	printf("debug_info: num_autograd_contexts %" PRId64 ", max_contexts %" PRId64 ", refused_contexts %" PRId64 "\n",
	       debug_value("num_autograd_contexts"), debug_value("max_contexts"), debug_value("refused_contexts"));
	dac_context *ctx = NULL;
	SHOW(dac_context_new(&ctx));
	printf("-- releasing makes room again\n");
	int64_t first = 0;
	struct flooder *f = &fs[0];
	for (int i = 0; i < threads; i++)
		if (fs[i].created > 0) {
			f = &fs[i];
			break;
		}
	MUST(dac_context_id(f->held[0], &first));
	SHOW(dac_context_release(first));
	SHOW(dac_context_new(&ctx));
	int64_t id = 0;
	MUST(dac_context_id(ctx, &id));
	MUST(dac_context_unref(ctx));
	SHOW(dac_context_get_or_create(((int64_t)9 << 48) | 1, &ctx));
	SHOW(dac_context_release(id));
	SHOW(dac_context_get_or_create(((int64_t)9 << 48) | 1, &ctx));
	SHOW(dac_context_unref(ctx));
	printf("debug_info: num_autograd_contexts %" PRId64 ", max_contexts %" PRId64 ", refused_contexts %" PRId64 "\n",
	       debug_value("num_autograd_contexts"), debug_value("max_contexts"), debug_value("refused_contexts"));
	SHOW(dac_set_max_contexts(0));
	SHOW(dac_context_get_or_create(((int64_t)9 << 48) | 2, &ctx));
	SHOW(dac_context_unref(ctx));
	int64_t released = 0, n = 0;
	for (int32_t w = 9; w < 10 + threads; w++) {
		MUST(dac_release_contexts_of_worker(w, &n));
		released += n;
	}
	for (int i = 0; i < threads; i++) {
		for (long k = 0; k < fs[i].created; k++)
			MUST(dac_context_unref(fs[i].held[k]));
		free(fs[i].held);
	}
	printf("released the rest: %" PRId64 ", num_contexts = %" PRId64 ", live_handles = %" PRId64 "\n", released,
	       num_contexts(), debug_value("live_handles"));
	free(fs);
}

int main(int argc, char **argv) {
	if (argc == 4 && strcmp(argv[1], "cap") == 0) {
		cap(atoi(argv[2]), strtoll(argv[3], NULL, 10));
		return 0;
	}
	REQUIRE(argc == 5 && (strcmp(argv[1], "msg") == 0 || strcmp(argv[1], "ctx") == 0));
	exhaust(strcmp(argv[1], "msg") == 0, strtoll(argv[2], NULL, 10), atoi(argv[3]), strtoll(argv[4], NULL, 10));
	return 0;
}
