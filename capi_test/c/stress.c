/* stress: THREADS pthreads do mixed operations for SECONDS seconds on worker
** 3: new contexts (with known workers and functions) that they release
** themselves or hand, with their handle, to another thread that releases them
** (release_if_present twice: 1, then 0) and drops the handle; retrieves of
** ids others made; message ids; get-or-create of other workers' ids that all
** threads share; the current context, stale or not; extra references; debug
** information. A cleanup sender counts what it is given, failing now and
** then, so retries run too. Each call must give one of the statuses its
** operation allows. At the end: every context id and message id unique and
** of worker 3, nothing left (num_contexts 0, live_handles 0), every cleanup
** message delivered.
**
** The Go tests run it as built and, built with -fsanitize=address,undefined,
** against the library built with go build -asan (see the test for what that
** covers). Usage:
**   stress THREADS SECONDS
**   stress canary    lies to the library about a buffer's size, so that the
**                    library writes past it: a sanitized build must notice */
#include "check.h"

#include <pthread.h>
#include <time.h>

/* ---- what the threads share ---- */

/* The mailbox: contexts one thread made and another releases. */
struct mail {
	int64_t id;
	dac_context *ctx;
	size_t workers; /* known workers it was given */
};
#define MAILBOX 4096
static struct mail mailbox[MAILBOX];
static size_t mail_head, mail_len;
static pthread_mutex_t mail_mu = PTHREAD_MUTEX_INITIALIZER;

static int post(struct mail m) {
	int ok = 0;
	pthread_mutex_lock(&mail_mu);
	if (mail_len < MAILBOX) {
		mailbox[(mail_head + mail_len++) % MAILBOX] = m;
		ok = 1;
	}
	pthread_mutex_unlock(&mail_mu);
	return ok;
}

static int take(struct mail *m) {
	int ok = 0;
	pthread_mutex_lock(&mail_mu);
	if (mail_len > 0) {
		*m = mailbox[mail_head];
		mail_head = (mail_head + 1) % MAILBOX, mail_len--;
		ok = 1;
	}
	pthread_mutex_unlock(&mail_mu);
	return ok;
}

/* Ids recently made by any thread, for retrieves (relaxed atomics: any
** value is a fine id to look up). */
#define RECENT 256
static int64_t recent[RECENT];

static int stop;
static long delivered, attempts;

static int flaky_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	if (__atomic_add_fetch(&attempts, 1, __ATOMIC_RELAXED) % 16 == 0)
		return 1; /* not delivered: retried */
	__atomic_add_fetch(&delivered, 1, __ATOMIC_RELAXED);
	return 0;
}

static void quiet_log(void *user_data, int level, const char *message) {
	(void)user_data;
	if (level >= DAC_LOG_WARNING)
		fprintf(stderr, "log: %s\n", message);
}

/* ---- one thread ---- */

struct ids {
	int64_t *v;
	size_t n, cap;
};

static void push(struct ids *s, int64_t id) {
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 4096;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
		REQUIRE(s->v != NULL);
	}
	s->v[s->n++] = id;
}

struct worker {
	pthread_t thread;
	unsigned index;
	uint64_t rng;
	struct ids ctx_ids, msg_ids;
	long ops, errors, own_messages;
	long counts[10];
};

static uint64_t next_rand(struct worker *w) {
	w->rng ^= w->rng << 13, w->rng ^= w->rng >> 7, w->rng ^= w->rng << 17;
	return w->rng;
}

/* Records a status that its operation does not allow. */
static void unexpected(struct worker *w, const char *what, int rc) {
	if (w->errors++ < 5)
		fprintf(stderr, "thread %u: %s -> %s: %s\n", w->index, what, dac_status_string(rc), dac_last_error());
}

#define EXPECT(w, call, ok)                     \
	do {                                        \
		int rc_ = (call);                       \
		if (!(ok))                              \
			unexpected((w), #call, rc_);        \
		(void)rc_;                              \
	} while (0)
#define RC rc_

static void op_new(struct worker *w) {
	int64_t cur = 0;
	EXPECT(w, dac_current_context_id(&cur), RC == DAC_OK);
	dac_context *ctx = NULL;
	if (cur != DAC_INVALID_ID) {
		/* This thread's context went to the mailbox: its current id may be
		** stale by now. Either way a new one cannot be made until cleared. */
		EXPECT(w, dac_context_new(&ctx), RC == DAC_ERR_ALREADY_HAS_CONTEXT);
		EXPECT(w, dac_clear_current_context(), RC == DAC_OK);
		return;
	}
	int64_t id = -1;
	EXPECT(w, dac_context_new(&ctx), RC == DAC_OK);
	if (ctx == NULL)
		return;
	EXPECT(w, dac_context_id(ctx, &id), RC == DAC_OK);
	push(&w->ctx_ids, id);
	__atomic_store_n(&recent[next_rand(w) % RECENT], id, __ATOMIC_RELAXED);
	size_t workers = next_rand(w) % 3;
	for (size_t k = 0; k < workers; k++)
		EXPECT(w, dac_context_add_known_worker_id(ctx, (int32_t)(4 + k)), RC == DAC_OK);
	int64_t msg = 0;
	EXPECT(w, dac_new_autograd_message_id(&msg), RC == DAC_OK);
	push(&w->msg_ids, msg);
	EXPECT(w, dac_context_add_send_function(ctx, msg, (uint64_t)msg), RC == DAC_OK);
	EXPECT(w, dac_context_add_recv_function(ctx, msg, (uint64_t)~msg), RC == DAC_OK);
	if (next_rand(w) % 2 && post((struct mail){id, ctx, workers})) {
		w->counts[0]++; /* another thread will release it; this thread keeps the id as current */
		return;
	}
	EXPECT(w, dac_context_release(id), RC == DAC_OK);
	EXPECT(w, dac_current_context_id(&cur), RC == DAC_OK && cur == DAC_INVALID_ID);
	__atomic_add_fetch(&w->own_messages, (long)workers, __ATOMIC_RELAXED);
	EXPECT(w, dac_context_unref(ctx), RC == DAC_OK);
}

static void op_take_mail(struct worker *w) {
	struct mail m;
	if (!take(&m))
		return;
	int released = -1;
	EXPECT(w, dac_context_release_if_present(m.id, &released), RC == DAC_OK && released == 1);
	EXPECT(w, dac_context_release_if_present(m.id, &released), RC == DAC_OK && released == 0);
	EXPECT(w, dac_context_release(m.id), RC == DAC_ERR_NOT_FOUND);
	__atomic_add_fetch(&w->own_messages, (long)m.workers, __ATOMIC_RELAXED);
	/* The handle still reads, on this thread as on the one that made it. */
	int64_t id = 0, msg_ids[2];
	uint64_t fns[2];
	size_t count = 0;
	int32_t known[4];
	EXPECT(w, dac_context_id(m.ctx, &id), RC == DAC_OK && id == m.id);
	EXPECT(w, dac_context_known_worker_ids(m.ctx, known, 4, &count), RC == DAC_OK && count == m.workers);
	EXPECT(w, dac_context_send_functions(m.ctx, msg_ids, fns, 2, &count),
	       RC == DAC_OK && count == 1 && fns[0] == (uint64_t)msg_ids[0]);
	EXPECT(w, dac_context_unref(m.ctx), RC == DAC_OK);
	/* Dead, unless another thread's retrieve still holds a reference to the
	** context (a handle names its context, not a reference): never another. */
	id = 0;
	EXPECT(w, dac_context_id(m.ctx, &id), RC == DAC_ERR_BAD_HANDLE || (RC == DAC_OK && id == m.id));
	w->counts[1]++;
}

static void op_retrieve(struct worker *w) {
	int64_t id = __atomic_load_n(&recent[next_rand(w) % RECENT], __ATOMIC_RELAXED), got = 0;
	dac_context *ctx = NULL;
	EXPECT(w, dac_context_retrieve_if_present(id, &ctx), RC == DAC_OK);
	if (ctx != NULL) {
		EXPECT(w, dac_context_id(ctx, &got), RC == DAC_OK && got == id);
		EXPECT(w, dac_context_unref(ctx), RC == DAC_OK);
		w->counts[2]++;
	}
	ctx = NULL;
	EXPECT(w, dac_context_retrieve(id, &ctx), RC == DAC_OK || RC == DAC_ERR_NOT_FOUND);
	if (ctx != NULL)
		EXPECT(w, dac_context_unref(ctx), RC == DAC_OK);
	EXPECT(w, dac_context_is_valid(id), RC == DAC_OK || RC == DAC_ERR_NOT_FOUND);
}

static void op_message_ids(struct worker *w) {
	long n = 1 + (long)(next_rand(w) % 40);
	for (long i = 0; i < n; i++) {
		int64_t msg = 0;
		EXPECT(w, dac_new_autograd_message_id(&msg), RC == DAC_OK);
		push(&w->msg_ids, msg);
	}
	w->counts[3] += n;
}

/* Other workers' passes, 64 ids shared by all threads: they race to create,
** mark and release the same contexts. */
static void op_foreign(struct worker *w) {
	uint64_t r = next_rand(w);
	int64_t id = ((int64_t)(7 + r % 3) << 48) | (int64_t)(r >> 8) % 64;
	dac_context *ctx = NULL;
	int64_t got = 0;
	EXPECT(w, dac_context_get_or_create(id, &ctx), RC == DAC_OK);
	if (ctx == NULL)
		return;
	EXPECT(w, dac_context_id(ctx, &got), RC == DAC_OK && got == id);
	EXPECT(w, dac_context_add_known_worker_id(ctx, (int32_t)((r >> 20) % 3) + 1), RC == DAC_OK);
	EXPECT(w, dac_context_unref(ctx), RC == DAC_OK);
	if ((r >> 30) % 2) {
		int a = -1, b = -1;
		EXPECT(w, dac_context_release_if_present(id, &a), RC == DAC_OK && (a == 0 || a == 1));
		EXPECT(w, dac_context_release_if_present(id, &b), RC == DAC_OK && (b == 0 || b == 1));
	}
	w->counts[4]++;
}

static void op_current(struct worker *w) {
	dac_context *ctx = NULL;
	int64_t cur = 0, got = 0;
	int has = -1;
	EXPECT(w, dac_current_context_id(&cur), RC == DAC_OK);
	EXPECT(w, dac_has_valid_context(&has), RC == DAC_OK && has == (cur != DAC_INVALID_ID));
	EXPECT(w, dac_context_current(&ctx), cur == DAC_INVALID_ID ? RC == DAC_ERR_NO_CURRENT_CONTEXT
	                                                            : RC == DAC_OK || RC == DAC_ERR_NOT_FOUND);
	if (ctx != NULL) {
		EXPECT(w, dac_context_id(ctx, &got), RC == DAC_OK && got == cur);
		/* a second reference, dropped from here too */
		EXPECT(w, dac_context_ref(ctx), RC == DAC_OK);
		EXPECT(w, dac_context_unref(ctx), RC == DAC_OK);
		EXPECT(w, dac_context_unref(ctx), RC == DAC_OK);
		w->counts[5]++;
	}
}

static void op_debug(struct worker *w) {
	char buf[1024];
	size_t len = 0;
	int64_t n = -1;
	EXPECT(w, dac_debug_info(buf, sizeof buf, &len), RC == DAC_OK && len < sizeof buf && buf[0] == '{');
	EXPECT(w, dac_num_contexts(&n), RC == DAC_OK && n >= 0);
	w->counts[6]++;
}

static void *worker_main(void *arg) {
	struct worker *w = arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		switch (next_rand(w) % 8) {
		case 0:
		case 1:
			op_new(w);
			break;
		case 2:
			op_take_mail(w);
			break;
		case 3:
			op_retrieve(w);
			break;
		case 4:
			op_message_ids(w);
			break;
		case 5:
			op_foreign(w);
			break;
		case 6:
			op_current(w);
			break;
		default:
			op_debug(w);
		}
		w->ops++;
	}
	EXPECT(w, dac_clear_current_context(), RC == DAC_OK);
	return NULL;
}

/* ---- the checks at the end ---- */

static int cmp_i64(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Merges the threads' ids, sorts them, and says whether all are distinct
** and of worker 3. */
static const char *check_ids(struct worker *ws, int n, int msg, size_t *total) {
	size_t count = 0;
	for (int i = 0; i < n; i++)
		count += msg ? ws[i].msg_ids.n : ws[i].ctx_ids.n;
	int64_t *all = malloc((count ? count : 1) * sizeof *all);
	REQUIRE(all != NULL);
	size_t k = 0;
	for (int i = 0; i < n; i++) {
		struct ids *s = msg ? &ws[i].msg_ids : &ws[i].ctx_ids;
		memcpy(all + k, s->v, s->n * sizeof *all);
		k += s->n;
	}
	qsort(all, count, sizeof *all, cmp_i64);
	const char *verdict = "yes";
	for (size_t i = 0; i < count; i++)
		if ((uint64_t)all[i] >> 48 != 3 || (i > 0 && all[i] == all[i - 1]))
			verdict = "NO";
	free(all);
	*total = count;
	return verdict;
}

/* The caller says the buffer holds 4 worker ids; it holds 1. Go code of the
** library writes the other 3 past its end: only a library built with
** go build -asan can see that. */
static int canary(void) {
	dac_context *ctx = NULL;
	size_t count = 0;
	MUST(dac_init(3));
	MUST(dac_context_new(&ctx));
	for (int32_t w = 1; w <= 4; w++)
		MUST(dac_context_add_known_worker_id(ctx, w));
	int32_t *ids = malloc(sizeof *ids);
	REQUIRE(ids != NULL);
	MUST(dac_context_known_worker_ids(ctx, ids, 4, &count));
	free(ids);
	printf("canary: no sanitizer noticed the overflow\n");
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 2 && strcmp(argv[1], "canary") == 0)
		return canary();
	REQUIRE(argc == 3);
	int threads = atoi(argv[1]);
	double seconds = atof(argv[2]);
	REQUIRE(threads > 0 && seconds > 0);
	MUST(dac_set_cleanup_sender(flaky_sender, NULL));
	dac_cleanup_options options = DAC_CLEANUP_OPTIONS_INIT;
	options.max_attempts = 100;
	options.initial_backoff_us = 50;
	options.max_backoff_us = 1000;
	MUST(dac_cleanup_configure(&options));
	MUST(dac_set_log_hook(quiet_log, NULL));
	MUST(dac_init(3));

	struct worker *ws = calloc((size_t)threads, sizeof *ws);
	REQUIRE(ws != NULL);
	for (int i = 0; i < threads; i++) {
		ws[i].index = (unsigned)i;
		ws[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		REQUIRE(pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]) == 0);
	}
	struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
	nanosleep(&ts, NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	long ops = 0, errors = 0, own_messages = 0, counts[10] = {0};
	for (int i = 0; i < threads; i++) {
		REQUIRE(pthread_join(ws[i].thread, NULL) == 0);
		ops += ws[i].ops, errors += ws[i].errors, own_messages += ws[i].own_messages;
		for (int k = 0; k < 10; k++)
			counts[k] += ws[i].counts[k];
	}
	/* What is left: mail nobody took, the other workers' passes. */
	struct mail m;
	long left_in_mailbox = 0;
	while (take(&m)) {
		MUST(dac_context_release(m.id));
		MUST(dac_context_unref(m.ctx));
		own_messages += (long)m.workers, left_in_mailbox++;
	}
	int64_t foreign_left = 0, n = 0;
	for (int32_t wk = 7; wk <= 9; wk++) {
		MUST(dac_release_contexts_of_worker(wk, &n));
		foreign_left += n;
	}
	int64_t pending = -1;
	SHOW(dac_cleanup_flush(60000, &pending));
	dac_cleanup_counters counters = {.size = sizeof counters};
	MUST(dac_cleanup_stats(&counters));
	int64_t sent = counters.sent, retried = counters.retried, failed = counters.failed, dropped = counters.dropped;
	pending = counters.pending;

	/* Figures that vary from run to run go to stderr; stdout is the verdict. */
	fprintf(stderr,
	        "stress: %d threads, %.1f s: %ld operations (%ld handed over, %ld taken, %ld retrieved, %ld message ids, "
	        "%ld get-or-create, %ld current, %ld debug), %ld left in the mailbox, %" PRId64
	        " foreign contexts left; cleanup sent %" PRId64 ", retried %" PRId64 "\n",
	        threads, seconds, ops, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6],
	        left_in_mailbox, foreign_left, sent, retried);
	size_t nctx = 0, nmsg = 0;
	const char *ctx_ok = check_ids(ws, threads, 0, &nctx);
	const char *msg_ok = check_ids(ws, threads, 1, &nmsg);
	printf("unexpected statuses = %ld\n", errors);
	printf("every operation ran: %s\n",
	       counts[0] && counts[1] && counts[2] && counts[3] && counts[4] && counts[5] && counts[6] ? "yes" : "NO");
	printf("context ids unique and of worker 3: %s (%s)\n", ctx_ok, nctx > 0 ? "some" : "NONE");
	printf("message ids unique and of worker 3: %s (%s)\n", msg_ok, nmsg > 0 ? "some" : "NONE");
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	printf("live_handles = %" PRId64 "\n", debug_value("live_handles"));
	printf("cleanup: delivered = sent: %s, own contexts' messages among them: %s, failed %" PRId64 ", dropped %" PRId64
	       ", pending %" PRId64 "\n",
	       sent == __atomic_load_n(&delivered, __ATOMIC_RELAXED) ? "yes" : "NO", sent >= own_messages ? "yes" : "NO",
	       failed, dropped, pending);
	for (int i = 0; i < threads; i++)
		free(ws[i].ctx_ids.v), free(ws[i].msg_ids.v);
	free(ws);
	return 0;
}
