/* timed_promises: each promise of the header that runs on a clock holds
** while LOOPERS C threads call into the library in tight loops (argv[1]; the
** Go test runs it with GOMAXPROCS 1, 2 and 8):
**
**   1. dac_cleanup_flush(50 ms) beside a blocked sender returns
**      DAC_ERR_TIMEOUT, ROUNDS times (argv[2]);
**   2. dac_set_cleanup_sender_timeout(50 ms) past a blocked sender (the
**      wait a host makes on its way out) returns DAC_ERR_TIMEOUT;
**   3. a message whose first attempt failed is retried after its 1 ms
**      back-off and delivered, ROUNDS times;
**   4. a context idle 150 ms is reaped at max_idle_ms 30 and its cleanup
**      message delivered, ROUNDS times.
**
** Each runs in a phase of its own: the loopers start, the promise is
** tried, the loopers stop. The loopers give up by themselves after
** WATCHDOG_MS (argv[3], default 5000): a promise kept only once they had
** stopped was not kept while they looped, and the transcript says "no".
** How long each phase took goes to stderr.
**
** Go's timers and goroutines queued on a P run only when some thread
** schedules on that P. A C thread that calls in a loop keeps its P out in C
** between its calls; if Go's monitor never takes it back (each call moves
** the P's ticks), the timers on that P wait until the loop ends. */
#include "check.h"

#include <pthread.h>

#define MAX_LOOPERS 64

static int64_t watchdog_ms = 5000;

/* ---- the loopers ---- */

static volatile int stop;
static volatile int watchdog_fired;
static int64_t looper_deadline;
static int64_t looper_calls[MAX_LOOPERS];
static int looper_failed;

static void *looper(void *arg) {
	int i = (int)(intptr_t)arg;
	int64_t v, calls = 0;
	for (;;) {
		for (int k = 0; k < 256; k++) {
			if ((k & 1 ? dac_max_id(&v) : dac_num_contexts(&v)) != DAC_OK)
				__atomic_store_n(&looper_failed, 1, __ATOMIC_RELAXED);
		}
		calls += 256;
		if (__atomic_load_n(&stop, __ATOMIC_RELAXED))
			break;
		if (now_ms() >= looper_deadline) {
			__atomic_store_n(&watchdog_fired, 1, __ATOMIC_RELAXED);
			break;
		}
	}
	looper_calls[i] = calls;
	return NULL;
}

static pthread_t threads[MAX_LOOPERS];
static int loopers;

static void start_loopers(void) {
	stop = 0;
	watchdog_fired = 0;
	looper_deadline = now_ms() + watchdog_ms;
	for (int i = 0; i < loopers; i++)
		REQUIRE(pthread_create(&threads[i], NULL, looper, (void *)(intptr_t)i) == 0);
	/* Let them take their Ps and loop. */
	sleep_ms(20);
}

/* Stops the loopers and says whether they were still looping (the watchdog
** had not stopped them) when the promise was kept. */
static const char *stop_loopers(void) {
	int fired = __atomic_load_n(&watchdog_fired, __ATOMIC_RELAXED);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < loopers; i++)
		REQUIRE(pthread_join(threads[i], NULL) == 0);
	for (int i = 0; i < loopers; i++)
		REQUIRE(looper_calls[i] > 0);
	return fired ? "no" : "yes";
}

/* ---- the senders ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int blocked_entered, blocked_open;

/* Blocks until blocked_open, as a sender whose peer does not answer. */
static int blocked_sender(void *ud, int32_t worker_id, int64_t context_id) {
	(void)ud, (void)worker_id, (void)context_id;
	pthread_mutex_lock(&mu);
	blocked_entered++;
	pthread_cond_broadcast(&cv);
	while (!blocked_open)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return 0;
}

/* Fails each message's first attempt, delivers the next. */
static int64_t flaky_seen = -1;
static int flaky_sender(void *ud, int32_t worker_id, int64_t context_id) {
	(void)ud, (void)worker_id;
	pthread_mutex_lock(&mu);
	int first = flaky_seen != context_id;
	flaky_seen = context_id;
	pthread_mutex_unlock(&mu);
	return first ? 1 : 0;
}

static int ok_sender(void *ud, int32_t worker_id, int64_t context_id) {
	(void)ud, (void)worker_id, (void)context_id;
	return 0;
}

/* Creates a context that knows worker 1 (so its release sends a message)
** and returns its id. */
static int64_t context_with_peer(void) {
	dac_context *ctx;
	int64_t id;
	MUST(dac_context_new_id(&ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 1));
	MUST(dac_context_unref(ctx));
	MUST(dac_clear_current_context());
	return id;
}

static int64_t sent(void) {
	dac_cleanup_counters c = {.size = sizeof c};
	MUST(dac_cleanup_stats(&c));
	return c.sent;
}

int main(int argc, char **argv) {
	REQUIRE(argc >= 2);
	loopers = atoi(argv[1]);
	REQUIRE(loopers >= 1 && loopers <= MAX_LOOPERS);
	int rounds = argc >= 3 ? atoi(argv[2]) : 10;
	REQUIRE(rounds >= 1);
	if (argc >= 4)
		watchdog_ms = atoll(argv[3]);
	MUST(dac_init(0));
	int64_t pending, t0, sent0;

	/* 1. A flush beside a blocked sender. */
	MUST(dac_set_cleanup_sender(blocked_sender, NULL));
	MUST(dac_context_release(context_with_peer()));
	pthread_mutex_lock(&mu);
	while (blocked_entered == 0)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	start_loopers();
	t0 = now_ms();
	int timeouts = 0, rc;
	for (int r = 0; r < rounds; r++)
		timeouts += dac_cleanup_flush(50, &pending) == DAC_ERR_TIMEOUT && pending == 1;
	fprintf(stderr, "%d flush(50 ms): %" PRId64 " ms\n", rounds, now_ms() - t0);
	printf("flush(50 ms) beside a blocked sender: DAC_ERR_TIMEOUT, pending 1: %s, while the callers looped: %s\n",
	       timeouts == rounds ? "every time" : "not every time", stop_loopers());

	/* 2. The wait for the blocked sender's call, bounded. */
	start_loopers();
	t0 = now_ms();
	rc = dac_set_cleanup_sender_timeout(ok_sender, NULL, 50);
	fprintf(stderr, "set_cleanup_sender_timeout(50 ms): %" PRId64 " ms\n", now_ms() - t0);
	printf("set_cleanup_sender_timeout(50 ms) past a blocked sender: %s, while the callers looped: %s\n",
	       dac_status_string(rc), stop_loopers());
	pthread_mutex_lock(&mu);
	blocked_open = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	MUST(dac_cleanup_flush(60000, &pending));

	/* 3. A retry after a 1 ms back-off. */
	MUST(dac_set_cleanup_sender(flaky_sender, NULL));
	dac_cleanup_options options = DAC_CLEANUP_OPTIONS_INIT;
	options.max_attempts = 3;
	options.initial_backoff_us = 1000;
	options.max_backoff_us = 1000;
	MUST(dac_cleanup_configure(&options));
	sent0 = sent();
	start_loopers();
	t0 = now_ms();
	int flushed = 0;
	for (int r = 0; r < rounds; r++) {
		MUST(dac_context_release(context_with_peer()));
		flushed += dac_cleanup_flush(60000, &pending) == DAC_OK;
	}
	fprintf(stderr, "%d retried messages delivered: %" PRId64 " ms\n", rounds, now_ms() - t0);
	printf("a message retried after 1 ms, flushed: %s, delivered %" PRId64 " of %d, while the callers looped: %s\n",
	       flushed == rounds ? "every time" : "not every time", sent() - sent0, rounds, stop_loopers());

	/* 4. Reaping an idle context, and its message. */
	MUST(dac_set_cleanup_sender(ok_sender, NULL));
	sent0 = sent();
	start_loopers();
	int64_t reaped = 0, idle_ms = 0;
	flushed = 0;
	for (int r = 0; r < rounds; r++) {
		int64_t id = context_with_peer(), released = 0, made = now_ms();
		sleep_ms(150);
		/* The reaper's clock is a plain thread's (csrc/clock.c), not Go's: on a
		** loaded machine it can lag behind by more than the 120 ms to spare,
		** so a reap that finds the context not yet idle is tried again. */
		for (int tries = 0; released == 0 && tries < 100; tries++) {
			int64_t n = -1;
			if (tries > 0)
				sleep_ms(20);
			MUST(dac_reap_idle_contexts(30, &n));
			released += n;
		}
		reaped += released == 1 && dac_context_is_valid(id) == DAC_ERR_NOT_FOUND;
		flushed += dac_cleanup_flush(60000, &pending) == DAC_OK;
		idle_ms += now_ms() - made;
	}
	fprintf(stderr, "%d contexts reaped and their messages delivered: %" PRId64 " ms\n", rounds, idle_ms);
	printf("a context idle 150 ms reaped at 30 ms: %" PRId64 " of %d, flushed: %s, delivered %" PRId64
	       ", while the callers looped: %s\n",
	       reaped, rounds, flushed == rounds ? "every time" : "not every time", sent() - sent0, stop_loopers());

	printf("every looping call worked: %s\n", looper_failed ? "no" : "yes");
	return 0;
}
