/* linearize: THREADS pthreads race every container operation over a few
** ids and record what each call did, for the Go test to check against the
** header (every status one its function allows) and against a sequential
** model of the container (porcupine: the history must be linearizable).
**
** The ids in play: a pool of 4, two of another worker (5) that only
** get-or-create makes, two that start so and are replaced by the ids of
** contexts the threads make with dac_context_new. Every thread picks its
** operation and id at random: new, current, retrieve, retrieve_if_present,
** get_or_create, is_valid, release, release_if_present (or
** release_with_workers, the same step for the container), clear and read its
** current id, and dac_context_id, ref and unref on the handles it holds
** (some of them references it took from another thread, so several threads
** ref and unref one handle at once). Each call is stamped with
** CLOCK_MONOTONIC before and after.
**
** The history goes to HISTORY as fixed records (struct rec, little-endian);
** a failure other than the expected "not there" kinds is printed to stdout
** with its message ("UNEXPECTED ..."). At the end every handle is dropped
** and every context released: it prints num_contexts and live_handles.
**
** Usage: linearize THREADS OPS_PER_THREAD SEED HISTORY */
#include "check.h"

#include <pthread.h>
#include <time.h>

/* Operation codes: the Go test's op* constants. */
enum {
	OP_NEW,
	OP_CURRENT,
	OP_RETRIEVE,
	OP_RETRIEVE_IF_PRESENT,
	OP_GET_OR_CREATE,
	OP_IS_VALID,
	OP_RELEASE,
	OP_RELEASE_IF_PRESENT,
	OP_HANDLE_ID,
	OP_HANDLE_REF,
	OP_HANDLE_UNREF,
	OP_CLEAR_CURRENT,
	OP_CURRENT_ID,
};

static const char *const op_names[] = {
    "dac_context_new",         "dac_context_current",        "dac_context_retrieve",
    "dac_context_retrieve_if_present", "dac_context_get_or_create", "dac_context_is_valid",
    "dac_context_release",     "dac_context_release_if_present", "dac_context_id",
    "dac_context_ref",         "dac_context_unref",          "dac_clear_current_context",
    "dac_current_context_id",
};

/* One call. id: the id it names (for new and current, the one it got or the
** thread's current one; for the handle functions, the handle's context);
** cur: the thread's current id before the call; result: what it wrote (an id,
** or 0/1 for "found" and "released"); handle: the handle it returned (0 if
** none), whose generation and index say which life of which record it saw.
** 56 bytes. */
struct rec {
	int64_t call, ret;
	int64_t id, cur, result;
	int32_t status;
	uint8_t op, thread;
	uint16_t epoch;
	uint64_t handle;
};

#define EPOCH 1000
static uint16_t epoch;

#define POOL 4
static int64_t pool[POOL];

/* References handed from one thread to another. */
#define SLOTS 4
static struct {
	dac_context *h;
	int64_t id;
} slots[SLOTS];
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;

static pthread_barrier_t start;

static void reset_pool(void) {
	for (int i = 0; i < POOL; i++)
		pool[i] = ((int64_t)5 << 48) | i;
}

/* Between epochs: nobody calls while one thread empties the container. */
static void next_epoch(void) {
	if (pthread_barrier_wait(&start) == PTHREAD_BARRIER_SERIAL_THREAD) {
		MUST(dac_release_contexts_of_worker(3, NULL));
		MUST(dac_release_contexts_of_worker(5, NULL));
		REQUIRE(num_contexts() == 0);
		reset_pool();
		epoch++;
	}
	pthread_barrier_wait(&start);
}

#define HELD 8
struct held {
	dac_context *h;
	int64_t id;
	int refs;
};

struct worker {
	pthread_t thread;
	unsigned index;
	uint64_t rng;
	long ops;
	struct rec *recs;
	size_t n, cap;
	int64_t cur; /* this thread's current id, as its own calls set it */
	struct held held[HELD];
	int nheld;
	int unexpected;
};

static uint64_t next_rand(struct worker *w) {
	w->rng ^= w->rng << 13, w->rng ^= w->rng >> 7, w->rng ^= w->rng << 17;
	return w->rng;
}

static struct rec *begin(struct worker *w, int op, int64_t id) {
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 1 << 16;
		w->recs = realloc(w->recs, w->cap * sizeof *w->recs);
		REQUIRE(w->recs != NULL);
	}
	struct rec *r = &w->recs[w->n++];
	memset(r, 0, sizeof *r);
	r->op = (uint8_t)op;
	r->thread = (uint8_t)w->index;
	r->epoch = epoch;
	r->id = id;
	r->cur = w->cur;
	r->call = now_ns();
	return r;
}

/* Stamps the return; a failure that is not one of the "not there" kinds is
** printed with its message, for the Go test to show. */
static void end(struct worker *w, struct rec *r, int rc) {
	r->ret = now_ns();
	r->status = rc;
	if (rc != DAC_OK && rc != DAC_ERR_NOT_FOUND && rc != DAC_ERR_NO_CURRENT_CONTEXT &&
	    rc != DAC_ERR_ALREADY_HAS_CONTEXT && w->unexpected++ < 20)
		printf("UNEXPECTED thread %u record %zu: %s(%" PRId64 ") -> %s: %s\n", w->index, w->n - 1,
		       op_names[r->op], r->id, dac_status_string(rc), dac_last_error());
}

/* ---- handles the thread holds ---- */

static void handle_id(struct worker *w, struct held *h) {
	struct rec *r = begin(w, OP_HANDLE_ID, h->id);
	int64_t got = -1;
	int rc = dac_context_id(h->h, &got);
	end(w, r, rc);
	r->result = got;
}

static void drop_ref(struct worker *w, int i) {
	struct held *h = &w->held[i];
	struct rec *r = begin(w, OP_HANDLE_UNREF, h->id);
	end(w, r, dac_context_unref(h->h));
	if (--h->refs == 0)
		w->held[i] = w->held[--w->nheld];
}

static void drop_all(struct worker *w, int i) {
	while (w->held[i].refs > 1)
		drop_ref(w, i);
	drop_ref(w, i);
}

/* The most references held uncounted (the library's csrc/uncounted.c) seen at
** once: the history covers them only if some lookups held theirs so. */
static int64_t uncounted_seen;

/* Keeps a new reference: every handle is read at once (its id must be the
** one asked for), then held for later operations. */
static void keep(struct worker *w, dac_context *h, int64_t id) {
	if (w->nheld == HELD)
		drop_all(w, (int)(next_rand(w) % HELD));
	if (next_rand(w) % 64 == 0) { /* a sample, outside the recorded calls */
		int64_t n = debug_value("uncounted_handles");
		if (n > __atomic_load_n(&uncounted_seen, __ATOMIC_RELAXED))
			__atomic_store_n(&uncounted_seen, n, __ATOMIC_RELAXED);
	}
	w->held[w->nheld] = (struct held){h, id, 1};
	handle_id(w, &w->held[w->nheld]);
	w->nheld++;
}

static void op_handle(struct worker *w) {
	if (w->nheld == 0)
		return;
	int i = (int)(next_rand(w) % (uint64_t)w->nheld);
	struct held *h = &w->held[i];
	switch (next_rand(w) % 5) {
	case 0:
	case 1:
		handle_id(w, h);
		break;
	case 2: {
		struct rec *r = begin(w, OP_HANDLE_REF, h->id);
		int rc = dac_context_ref(h->h);
		end(w, r, rc);
		if (rc == DAC_OK)
			h->refs++;
		break;
	}
	case 3:
		drop_ref(w, i);
		break;
	case 4: {
		/* Hand one reference to whichever thread takes it. */
		int s = (int)(next_rand(w) % SLOTS);
		pthread_mutex_lock(&slots_mu);
		if (slots[s].h == NULL) {
			slots[s].h = h->h, slots[s].id = h->id;
			h->refs--;
		}
		pthread_mutex_unlock(&slots_mu);
		if (h->refs == 0)
			w->held[i] = w->held[--w->nheld];
		break;
	}
	}
}

static void op_take(struct worker *w) {
	int s = (int)(next_rand(w) % SLOTS);
	dac_context *h = NULL;
	int64_t id = 0;
	pthread_mutex_lock(&slots_mu);
	if (slots[s].h != NULL && w->nheld < HELD) {
		h = slots[s].h, id = slots[s].id;
		slots[s].h = NULL;
	}
	pthread_mutex_unlock(&slots_mu);
	if (h != NULL)
		keep(w, h, id);
}

/* ---- the container ---- */

static int64_t pick(struct worker *w) { return __atomic_load_n(&pool[next_rand(w) % POOL], __ATOMIC_RELAXED); }

static void op_new(struct worker *w) {
	dac_context *h = NULL;
	struct rec *r = begin(w, OP_NEW, DAC_INVALID_ID);
	int rc = dac_context_new(&h);
	end(w, r, rc);
	if (rc != DAC_OK)
		return;
	int64_t id = -1;
	REQUIRE(dac_context_id(h, &id) == DAC_OK);
	r->id = r->result = id;
	r->handle = (uint64_t)(uintptr_t)h;
	w->cur = id;
	/* Half of them join the pool, where every thread races on them. */
	if (next_rand(w) % 2)
		__atomic_store_n(&pool[2 + next_rand(w) % 2], id, __ATOMIC_RELAXED);
	keep(w, h, id);
}

static void op_current(struct worker *w) {
	dac_context *h = NULL;
	struct rec *r = begin(w, OP_CURRENT, w->cur);
	int rc = dac_context_current(&h);
	end(w, r, rc);
	if (rc == DAC_OK) {
		r->handle = (uint64_t)(uintptr_t)h;
		keep(w, h, w->cur);
	}
}

static void op_lookup(struct worker *w, int op) {
	int64_t id = pick(w);
	dac_context *h = NULL;
	struct rec *r = begin(w, op, id);
	int rc;
	switch (op) {
	case OP_RETRIEVE:
		rc = dac_context_retrieve(id, &h);
		break;
	case OP_RETRIEVE_IF_PRESENT:
		h = (dac_context *)(uintptr_t)0x77; /* must be overwritten */
		rc = dac_context_retrieve_if_present(id, &h);
		r->result = h != NULL;
		if (rc != DAC_OK)
			h = NULL;
		break;
	default:
		rc = dac_context_get_or_create(id, &h);
		break;
	}
	end(w, r, rc);
	if (rc == DAC_OK && h != NULL) {
		r->handle = (uint64_t)(uintptr_t)h;
		keep(w, h, id);
	}
}

static void op_is_valid(struct worker *w) {
	int64_t id = pick(w);
	struct rec *r = begin(w, OP_IS_VALID, id);
	end(w, r, dac_context_is_valid(id));
}

static void op_release(struct worker *w, int if_present) {
	/* Now and then the thread's own current context, so that a release
	** resets the current id. */
	int64_t id = w->cur != DAC_INVALID_ID && next_rand(w) % 4 == 0 ? w->cur : pick(w);
	struct rec *r = begin(w, if_present ? OP_RELEASE_IF_PRESENT : OP_RELEASE, id);
	int released = 7, rc;
	if (if_present) {
		/* release_with_workers is the same step for the container (the
		** workers only go to the fan-out): half the time, that one. */
		static const int32_t workers[2] = {1, 65535};
		if (next_rand(w) % 2 == 0)
			rc = dac_context_release_if_present(id, &released);
		else
			rc = dac_context_release_with_workers(id, workers, 2, &released);
		r->result = released;
	} else {
		rc = dac_context_release(id);
		released = rc == DAC_OK;
	}
	end(w, r, rc);
	if (rc == DAC_OK && released == 1 && id == w->cur)
		w->cur = DAC_INVALID_ID;
}

static void op_current_id(struct worker *w) {
	struct rec *r = begin(w, OP_CURRENT_ID, w->cur);
	int64_t got = -2;
	int rc = dac_current_context_id(&got);
	end(w, r, rc);
	r->result = got;
}

static void op_clear(struct worker *w) {
	struct rec *r = begin(w, OP_CLEAR_CURRENT, w->cur);
	int rc = dac_clear_current_context();
	end(w, r, rc);
	if (rc == DAC_OK)
		w->cur = DAC_INVALID_ID;
}

static void *thread_main(void *arg) {
	struct worker *w = arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < w->ops; i++) {
		if (i > 0 && i % EPOCH == 0) {
			/* The epoch ends with releases by worker, which count as
			** reaped: a thread whose current id is one may start a new
			** pass, which the model does not know. Each thread clears
			** its current id first (a recorded call). */
			op_clear(w);
			next_epoch();
		}
		switch (next_rand(w) % 16) {
		case 0:
			op_new(w);
			break;
		case 1:
			op_current(w);
			break;
		case 2:
		case 3:
			op_lookup(w, OP_RETRIEVE);
			break;
		case 4:
			op_lookup(w, OP_RETRIEVE_IF_PRESENT);
			break;
		case 5:
		case 6:
			op_lookup(w, OP_GET_OR_CREATE);
			break;
		case 7:
			op_is_valid(w);
			break;
		case 8:
			op_release(w, 0);
			break;
		case 9:
		case 10:
			op_release(w, 1);
			break;
		case 11:
		case 12:
			op_handle(w);
			break;
		case 13:
			op_take(w);
			break;
		case 14:
			op_current_id(w);
			break;
		case 15:
			if (next_rand(w) % 2)
				op_clear(w);
			else
				op_current_id(w);
			break;
		}
	}
	while (w->nheld > 0)
		drop_all(w, 0);
	return NULL;
}

int main(int argc, char **argv) {
	REQUIRE(argc == 5);
	int nthreads = atoi(argv[1]);
	long ops = atol(argv[2]);
	uint64_t seed = strtoull(argv[3], NULL, 10);
	REQUIRE(nthreads > 0 && nthreads <= 64 && ops > 0 && ops / EPOCH < 65535);
	MUST(dac_init(3));
	reset_pool();

	struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
	REQUIRE(ws != NULL);
	REQUIRE(pthread_barrier_init(&start, NULL, (unsigned)nthreads) == 0);
	for (int i = 0; i < nthreads; i++) {
		ws[i].index = (unsigned)i;
		ws[i].rng = (seed + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i + 1) * 0xBF58476D1CE4E5B9ull;
		ws[i].ops = ops;
		ws[i].cur = DAC_INVALID_ID;
		REQUIRE(pthread_create(&ws[i].thread, NULL, thread_main, &ws[i]) == 0);
	}
	for (int i = 0; i < nthreads; i++)
		REQUIRE(pthread_join(ws[i].thread, NULL) == 0);

	FILE *f = fopen(argv[4], "wb");
	REQUIRE(f != NULL);
	size_t total = 0;
	for (int i = 0; i < nthreads; i++) {
		REQUIRE(fwrite(ws[i].recs, sizeof(struct rec), ws[i].n, f) == ws[i].n);
		total += ws[i].n;
		free(ws[i].recs);
	}
	REQUIRE(fclose(f) == 0);
	printf("records = %zu\n", total);

	/* Nothing is left: the references handed over and never taken, then
	** every context. */
	for (int s = 0; s < SLOTS; s++)
		if (slots[s].h != NULL)
			MUST(dac_context_unref(slots[s].h));
	MUST(dac_release_contexts_of_worker(3, NULL));
	MUST(dac_release_contexts_of_worker(5, NULL));
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	printf("live_handles = %" PRId64 "\n", debug_value("live_handles"));
	printf("references held uncounted at once, at most: %s\n", uncounted_seen > 0 ? "some" : "none");
	free(ws);
	return 0;
}
