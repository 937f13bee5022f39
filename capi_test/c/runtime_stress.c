/* runtime_stress: an attack on the library's patched Go runtime
** (scripts/go-runtime-overlay), which concerns C threads calling into Go.
** THREADS (argv[1]) C threads for SECONDS (argv[2]), all at once:
**
**   - a quarter call in tight loops (new, lookups, release, id reads);
**   - five eighths call in bursts of 1-260 calls, then sleep 0-5 ms;
**   - an eighth each start short-lived threads, one after another, that
**     make a few calls and exit, so threads come and go mid-flight;
**   - one thread calls dac_cleanup_flush(20 ms) again and again;
**
** while every release of a context that knows another worker sends a
** cleanup message through a sender that blocks 50 ms on one message in 256
** (a peer that hangs) and fails one in 8 (retried after 1-4 ms), SIGPROF fires every
** millisecond of CPU time (setitimer), and the Go test sets GOGC=1 so that
** Go collects all the time.
**
** Every call is timed. A call counts as slow when it took over 100 ms (a
** flush: over 100 ms past its 20 ms). The transcript on stdout says that
** every status was one its call allows and that all was cleaned up at the
** end; stderr has the counts the Go test compares between the library and
** the same library on Go's runtime as shipped. alarm() bounds the run: a
** deadlock ends it with SIGALRM, after stderr has what the program was
** doing then (its phase, and every call in flight with how long it has
** been in it), so that a hang seen once says where it was. */
#define _DEFAULT_SOURCE /* SA_ONSTACK */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_THREADS 512
#define SLOW_NS (100 * 1000000LL)

/* What the program is doing, for the report of a run that does not end:
** main's phase, and each thread's call in flight (a slot a thread: the
** long-lived ones by their index, the short-lived ones share the rest). */
#define SLOTS 1024
static const char *volatile phase = "starting";
static const char *volatile in_call[SLOTS];
static volatile int64_t in_call_since[SLOTS];
static __thread int slot; /* 0: main's and the flusher's */
static int next_long_slot = 1, next_short_slot;

static int64_t deadline_ns;
static volatile int done;

/* What every thread adds up. */
static int64_t calls, slow, worst_ns, unexpected, flushes, flush_slow, spawned;
static volatile sig_atomic_t profs;

static void add(int64_t *v, int64_t n) { __atomic_fetch_add(v, n, __ATOMIC_RELAXED); }

static void note_time(int64_t ns, int64_t allowed_ns) {
	add(&calls, 1);
	if (ns > allowed_ns + SLOW_NS)
		add(&slow, 1);
	int64_t w = __atomic_load_n(&worst_ns, __ATOMIC_RELAXED);
	while (ns - allowed_ns > w &&
	       !__atomic_compare_exchange_n(&worst_ns, &w, ns - allowed_ns, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

/* Times one call and checks that its status is among the allowed ones. */
#define CALL(rc_ok, call)                                       \
	do {                                                        \
		int64_t t0_ = now_ns();                                 \
		in_call_since[slot] = t0_;                              \
		in_call[slot] = #call;                                  \
		int rc_ = (call);                                       \
		in_call[slot] = NULL;                                   \
		note_time(now_ns() - t0_, 0);                           \
		if (!(rc_ok))                                           \
			add(&unexpected, 1);                                \
		(void)rc_;                                              \
	} while (0)

/* One pass of mixed calls: a context (one in 32 knows worker 1, so that
** its release sends a message), a lookup of it, of an id that is gone,
** and reads. */
static void pass(unsigned *seed) {
	dac_context *ctx = NULL, *found = NULL;
	int64_t id = -1, v;
	CALL(rc_ == DAC_OK, dac_context_new_id(&ctx, &id));
	if (ctx == NULL)
		return;
	if (rand_r(seed) % 32 == 0)
		CALL(rc_ == DAC_OK, dac_context_add_known_worker_id(ctx, 1));
	CALL(rc_ == DAC_OK, dac_context_retrieve(id, &found));
	CALL(rc_ == DAC_OK, dac_context_release(id));
	dac_context *gone = NULL;
	CALL(rc_ == DAC_ERR_NOT_FOUND, dac_context_retrieve(id, &gone));
	CALL(rc_ == DAC_OK, dac_context_unref(found));
	CALL(rc_ == DAC_OK, dac_context_unref(ctx));
	CALL(rc_ == DAC_OK, dac_clear_current_context());
	CALL(rc_ == DAC_OK, dac_max_id(&v));
	CALL(rc_ == DAC_OK, dac_num_contexts(&v));
}

static int running(void) { return !__atomic_load_n(&done, __ATOMIC_RELAXED) && now_ns() < deadline_ns; }

static void *tight(void *arg) {
	unsigned seed = (unsigned)(intptr_t)arg;
	slot = __atomic_fetch_add(&next_long_slot, 1, __ATOMIC_RELAXED);
	while (running())
		for (int i = 0; i < 64; i++)
			pass(&seed);
	return NULL;
}

static void *bursty(void *arg) {
	unsigned seed = (unsigned)(intptr_t)arg;
	slot = __atomic_fetch_add(&next_long_slot, 1, __ATOMIC_RELAXED);
	while (running()) {
		int n = 1 + rand_r(&seed) % 26; /* 10 calls a pass: up to 256 calls */
		for (int i = 0; i < n; i++)
			pass(&seed);
		struct timespec nap = {0, (long)(rand_r(&seed) % 5001) * 1000};
		nanosleep(&nap, NULL);
	}
	return NULL;
}

static void *short_lived(void *arg) {
	unsigned seed = (unsigned)(intptr_t)arg;
	slot = MAX_THREADS + __atomic_fetch_add(&next_short_slot, 1, __ATOMIC_RELAXED) % (SLOTS - MAX_THREADS);
	int n = 1 + rand_r(&seed) % 8;
	for (int i = 0; i < n; i++)
		pass(&seed);
	return NULL;
}

static void *spawner(void *arg) {
	unsigned seed = (unsigned)(intptr_t)arg;
	while (running()) {
		pthread_t t;
		if (pthread_create(&t, NULL, short_lived, (void *)(intptr_t)rand_r(&seed)) != 0) {
			add(&unexpected, 1);
			continue;
		}
		add(&spawned, 1);
		/* Join only now and then: several exit while others start. */
		if (rand_r(&seed) % 2)
			pthread_join(t, NULL);
		else
			pthread_detach(t);
	}
	return NULL;
}

static void *flusher(void *arg) {
	(void)arg;
	while (running()) {
		int64_t pending, t0 = now_ns();
		in_call_since[slot] = t0;
		in_call[slot] = "dac_cleanup_flush(20, &pending)";
		int rc = dac_cleanup_flush(20, &pending);
		in_call[slot] = NULL;
		note_time(now_ns() - t0, 20 * 1000000LL);
		add(&flushes, 1);
		if (now_ns() - t0 > 20 * 1000000LL + SLOW_NS)
			add(&flush_slow, 1);
		if (rc != DAC_OK && rc != DAC_ERR_TIMEOUT)
			add(&unexpected, 1);
		sleep_ms(1);
	}
	return NULL;
}

/* Blocks 50 ms on one message in 256, fails one in 8 (then retried). */
static int64_t sends;
static int sender(void *ud, int32_t worker_id, int64_t context_id) {
	(void)ud, (void)worker_id, (void)context_id;
	int64_t n = __atomic_add_fetch(&sends, 1, __ATOMIC_RELAXED);
	if (n % 256 == 0)
		sleep_ms(50);
	return n % 8 == 3;
}

static void on_prof(int sig) {
	(void)sig;
	profs++;
}

/* Async-signal-safe output for the alarm's report. */
static void say(const char *s) { (void)!write(2, s, strlen(s)); }
static void say_i64(int64_t v) {
	char b[24], *p = b + sizeof b;
	*--p = 0;
	int neg = v < 0;
	uint64_t u = neg ? -(uint64_t)v : (uint64_t)v;
	do
		*--p = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (neg)
		*--p = '-';
	say(p);
}

/* The run did not end: say what it was doing, then die of the alarm. */
static void on_alarm(int sig) {
	int64_t now = now_ns();
	say("runtime_stress: still running at the alarm; main: ");
	say(phase);
	say("\n");
	int shown = 0;
	for (int i = 0; i < SLOTS && shown < 64; i++) {
		const char *c = in_call[i];
		if (c == NULL)
			continue;
		shown++;
		say("  slot ");
		say_i64(i);
		say(i == 0 ? " (main or the flusher)" : i < MAX_THREADS ? "" : " (short-lived)");
		say(": in ");
		say(c);
		say(" for ");
		say_i64((now - in_call_since[i]) / 1000000);
		say(" ms\n");
	}
	if (shown == 0)
		say("  no call in flight\n");
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv) {
	REQUIRE(argc == 3);
	int threads = atoi(argv[1]);
	double seconds = atof(argv[2]);
	REQUIRE(threads >= 8 && threads <= MAX_THREADS && seconds > 0);
	struct sigaction al;
	memset(&al, 0, sizeof al);
	al.sa_handler = on_alarm;
	al.sa_flags = SA_ONSTACK;
	sigemptyset(&al.sa_mask);
	REQUIRE(sigaction(SIGALRM, &al, NULL) == 0);
	alarm((unsigned)seconds + 80);
	MUST(dac_init(0));
	MUST(dac_set_cleanup_sender(sender, NULL));
	dac_cleanup_options options = DAC_CLEANUP_OPTIONS_INIT;
	options.initial_backoff_us = 1000;
	options.max_backoff_us = 4000;
	MUST(dac_cleanup_configure(&options));

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_prof;
	/* SA_ONSTACK, as Go requires of a host's handlers: a signal that lands
	** in Go code must not run the handler on a goroutine's small stack. */
	sa.sa_flags = SA_RESTART | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	REQUIRE(sigaction(SIGPROF, &sa, NULL) == 0);
	struct itimerval prof = {{0, 1000}, {0, 1000}};
	REQUIRE(setitimer(ITIMER_PROF, &prof, NULL) == 0);

	deadline_ns = now_ns() + (int64_t)(seconds * 1e9);
	phase = "starting the threads";
	pthread_t t[MAX_THREADS];
	for (int i = 0; i < threads; i++) {
		void *(*fn)(void *) = i == 0 ? flusher : i % 8 == 0 ? spawner : i % 8 <= 2 ? tight : bursty;
		REQUIRE(pthread_create(&t[i], NULL, fn, (void *)(intptr_t)(i * 2654435761u + 1)) == 0);
	}
	phase = "joining the threads";
	for (int i = 0; i < threads; i++)
		REQUIRE(pthread_join(t[i], NULL) == 0);
	phase = "after the threads";
	struct itimerval off = {{0, 0}, {0, 0}};
	REQUIRE(setitimer(ITIMER_PROF, &off, NULL) == 0);
	/* Detached short-lived threads may still be finishing their few calls. */
	sleep_ms(200);

	int64_t pending = -1;
	phase = "dac_cleanup_flush(60000, &pending) at the end";
	SHOW(dac_cleanup_flush(60000, &pending));
	phase = "reporting";
	PRINT_I64(pending);
	PRINT_I64(num_contexts());
	dac_cleanup_counters c = {.size = sizeof c};
	MUST(dac_cleanup_stats(&c));
	printf("cleanup: failed %" PRId64 ", dropped %" PRId64 ", retried some: %s\n", c.failed, c.dropped,
	       c.retried > 0 ? "yes" : "no");
	printf("unexpected statuses = %" PRId64 "\n", unexpected);
	/* How many depends on the machine's load (a loaded 2-core machine runs a
	** tenth as many calls): that each happened is what counts. */
	printf("threads came and went: %s, flushes: %s, SIGPROF fired: %s\n", spawned > 0 ? "yes" : "no",
	       flushes > 0 ? "yes" : "no", profs > 0 ? "yes" : "no");
	fprintf(stderr, "calls %" PRId64 ", slow calls %" PRId64 ", slow flushes %" PRId64 " of %" PRId64
	                ", worst %" PRId64 " ms, threads started and ended %" PRId64 ", SIGPROF %d, sent %" PRId64
	                ", retried %" PRId64 "\n",
	        calls, slow, flush_slow, flushes, worst_ns / 1000000, spawned, (int)profs, c.sent, c.retried);
	return 0;
}
