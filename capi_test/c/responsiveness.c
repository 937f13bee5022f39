/* responsiveness: how long a host waits for what the library does on Go's
** timers and goroutines, and for Go's collector, while THREADS C threads
** (argv[2]) call into the library in one pattern (argv[1]) for SECONDS
** (argv[3]); GOMAXPROCS comes from the environment. The Go test
** (TestResponsiveness) runs it against the library as built and as built
** with Go's runtime as shipped, alternating, and compares what each waited.
**
** The patterns (what the THREADS threads do until the deadline):
**
**   loop:  call dac_num_contexts and dac_max_id in a tight loop;
**   burst: bursts of 64 passes (create a context that knows worker 1, look
**          it up, release it, drop the references), then a pause of
**          0-20 ms, as a pool's RPC threads serve requests.
**
** Meanwhile one more thread, the prober, measures one thing after another
** until the deadline, each time in microseconds:
**
**   retry:    a cleanup message whose first attempt fails (the sender
**             returns 1) is due again 1 ms later (initial_backoff_us): how
**             late its second attempt comes (a Go timer, then a goroutine);
**   flush:    dac_cleanup_flush(FLUSH_MS) beside a sender that blocks: how
**             long past FLUSH_MS it returns (a Go timer of the flushing
**             call's goroutine);
**   reap:     a reaper's tick, a host thread that sleeps until its tick is
**             due and calls dac_reap_idle_contexts (as the torch backend's
**             reaper does): how long after the tick was due the call
**             returns (a sleeping thread's call into Go, which needs a P);
**   delivery: from the start of a release of a context that knows a worker
**             to the cleanup sender's call for it, on the library's own
**             goroutines (the default fan-out): for every release the
**             prober makes, and in the burst pattern every release of the
**             busy threads too;
**
** and makes a few calls that allocate (dac_debug_info), so that Go's
** collector runs now and then while the threads call: the Go test runs the
** program with GODEBUG=gctrace=1 and a low GOGC and reads off stderr the
** wall-clock time of each cycle that ended between the lines
** THREADS_START and THREADS_STOPPED (the collector's progress).
**
** Output on stdout: a line per measure, "NAME COUNT: V V V ..." with up to
** RESERVOIR of its COUNT samples, picked at random, in microseconds; then
** the fan-out's counters and whether every flush timed out as it must. A
** measure whose event never came (a bug, not a delay) ends the program by
** its alarm, with a report of what it was waiting for. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#define MAX_THREADS 256
#define RESERVOIR 4096
#define FLUSH_MS 2
#define BACKOFF_US 1000
#define REAP_TICK_US 2000
#define BURST_PASSES 64
#define MAX_PAUSE_US 20000
#define ALLOC_CALLS 8
#define THREADS_START "responsiveness: the threads start"
#define THREADS_STOPPED "responsiveness: the threads stopped"

/* ---- samples ---- */

struct measure {
	const char *name;
	pthread_mutex_t mu;
	int64_t count;
	unsigned seed;
	int64_t us[RESERVOIR];
};

static struct measure m_retry = {"retry", PTHREAD_MUTEX_INITIALIZER, 0, 1, {0}};
static struct measure m_flush = {"flush", PTHREAD_MUTEX_INITIALIZER, 0, 2, {0}};
static struct measure m_reap = {"reap", PTHREAD_MUTEX_INITIALIZER, 0, 3, {0}};
static struct measure m_delivery = {"delivery", PTHREAD_MUTEX_INITIALIZER, 0, 4, {0}};

/* Keeps a uniform sample of at most RESERVOIR of the values (Algorithm R):
** the burst pattern makes hundreds of thousands of deliveries. */
static void sample(struct measure *m, int64_t ns) {
	int64_t us = ns > 0 ? ns / 1000 : 0;
	pthread_mutex_lock(&m->mu);
	int64_t i = m->count++;
	if (i >= RESERVOIR)
		i = (int64_t)(((uint64_t)rand_r(&m->seed) << 31 | (uint64_t)rand_r(&m->seed)) % (uint64_t)(i + 1));
	if (i < RESERVOIR)
		m->us[i] = us;
	pthread_mutex_unlock(&m->mu);
}

static void print_measure(struct measure *m) {
	printf("%s %" PRId64 ":", m->name, m->count);
	for (int64_t i = 0; i < m->count && i < RESERVOIR; i++)
		printf(" %" PRId64, m->us[i]);
	printf("\n");
}

/* ---- releases and their deliveries ---- */

/* When each release began, by context id (ids are consecutive: a slot is
** reused only a million releases later), taken by the sender's call. */
#define SLOTS (1 << 20)
static int64_t released_at[SLOTS];

static void release(int64_t id) {
	__atomic_store_n(&released_at[id & (SLOTS - 1)], now_ns(), __ATOMIC_RELAXED);
	MUST(dac_context_release(id));
}

/* Creates a context that knows worker 1 (so that its release sends a
** cleanup message) and returns its id; the thread's references dropped. */
static int64_t context_with_peer(void) {
	dac_context *ctx, *found;
	int64_t id;
	MUST(dac_context_new_id(&ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 1));
	MUST(dac_context_retrieve(id, &found));
	MUST(dac_context_unref(found));
	MUST(dac_context_unref(ctx));
	MUST(dac_clear_current_context());
	return id;
}

/* ---- the prober's events, signalled by the sender ---- */

enum probe_kind { PROBE_NONE, PROBE_DELIVERY, PROBE_RETRY, PROBE_BLOCK };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct {
	int64_t id;
	enum probe_kind kind;
	int attempts;     /* the sender's calls for it */
	int64_t failed_at; /* when its failed first attempt returned */
	int open;         /* PROBE_BLOCK: the sender may return */
	int done;         /* delivered */
} probe;
static const char *volatile waiting_for = "nothing";

static int sender(void *ud, int32_t worker_id, int64_t context_id) {
	(void)ud, (void)worker_id;
	int64_t t = now_ns();
	int64_t at = __atomic_exchange_n(&released_at[context_id & (SLOTS - 1)], 0, __ATOMIC_RELAXED);
	if (at != 0)
		sample(&m_delivery, t - at);
	pthread_mutex_lock(&mu);
	int rc = 0;
	if (context_id == probe.id) {
		probe.attempts++;
		if (probe.kind == PROBE_RETRY && probe.attempts == 1) {
			rc = 1;
			probe.failed_at = now_ns();
		} else {
			if (probe.kind == PROBE_RETRY)
				sample(&m_retry, t - probe.failed_at - BACKOFF_US * 1000LL);
			pthread_cond_broadcast(&cv);
			while (probe.kind == PROBE_BLOCK && !probe.open)
				pthread_cond_wait(&cv, &mu);
			probe.done = 1;
		}
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

/* Releases a new context of the prober's as a probe of kind. */
static void start_probe(enum probe_kind kind) {
	int64_t id = context_with_peer();
	pthread_mutex_lock(&mu);
	probe.id = id;
	probe.kind = kind;
	probe.attempts = probe.open = probe.done = 0;
	pthread_mutex_unlock(&mu);
	release(id);
}

/* Waits until the probe's message is delivered. No bound but the alarm's:
** a delivery that waits for the busy threads to stop is measured, and they
** stop at the deadline by themselves. */
static void wait_delivered(const char *what) {
	waiting_for = what;
	pthread_mutex_lock(&mu);
	while (!probe.done)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	waiting_for = "nothing";
}

static int flushes, flush_timeouts;

static void probe_flush(void) {
	start_probe(PROBE_BLOCK);
	waiting_for = "the blocking sender's call";
	pthread_mutex_lock(&mu);
	while (probe.attempts == 0)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	int64_t pending = -1, t0 = now_ns();
	waiting_for = "dac_cleanup_flush";
	int rc = dac_cleanup_flush(FLUSH_MS, &pending);
	sample(&m_flush, now_ns() - t0 - FLUSH_MS * 1000000LL);
	flushes++;
	flush_timeouts += rc == DAC_ERR_TIMEOUT && pending >= 1;
	pthread_mutex_lock(&mu);
	probe.open = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	wait_delivered("the blocked message's return");
}

static void probe_reap(void) {
	struct timespec due;
	clock_gettime(CLOCK_MONOTONIC, &due);
	due.tv_nsec += REAP_TICK_US * 1000L;
	if (due.tv_nsec >= 1000000000L)
		due.tv_sec++, due.tv_nsec -= 1000000000L;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) != 0) {
	}
	int64_t n = -1;
	waiting_for = "dac_reap_idle_contexts";
	MUST(dac_reap_idle_contexts(3600 * 1000, &n));
	sample(&m_reap, now_ns() - ((int64_t)due.tv_sec * 1000000000 + due.tv_nsec));
	waiting_for = "nothing";
}

static void allocate(void) {
	char buf[4096];
	size_t len;
	for (int i = 0; i < ALLOC_CALLS; i++)
		MUST(dac_debug_info(buf, sizeof buf, &len));
}

/* ---- the busy threads ---- */

static int64_t deadline_ns;
static int64_t thread_calls[MAX_THREADS];
static int calls_failed;

static void *looping(void *arg) {
	int i = (int)(intptr_t)arg;
	int64_t v, calls = 0;
	while (now_ns() < deadline_ns) {
		for (int k = 0; k < 256; k++)
			if ((k & 1 ? dac_max_id(&v) : dac_num_contexts(&v)) != DAC_OK)
				__atomic_store_n(&calls_failed, 1, __ATOMIC_RELAXED);
		calls += 256;
	}
	thread_calls[i] = calls;
	return NULL;
}

static void *bursting(void *arg) {
	int i = (int)(intptr_t)arg;
	unsigned seed = (unsigned)i * 2654435761u + 1;
	int64_t passes = 0;
	while (now_ns() < deadline_ns) {
		for (int k = 0; k < BURST_PASSES; k++)
			release(context_with_peer());
		passes += BURST_PASSES;
		struct timespec pause = {0, (long)(rand_r(&seed) % (MAX_PAUSE_US + 1)) * 1000};
		nanosleep(&pause, NULL);
	}
	thread_calls[i] = passes;
	return NULL;
}

/* ---- the alarm's report ---- */

static void say(const char *s) { (void)!write(2, s, strlen(s)); }

static void on_alarm(int sig) {
	say("responsiveness: still running at the alarm; the prober waits for ");
	say(waiting_for);
	say("\n");
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv) {
	if (argc != 4 || (strcmp(argv[1], "loop") != 0 && strcmp(argv[1], "burst") != 0)) {
		fprintf(stderr, "usage: responsiveness loop|burst THREADS SECONDS\n");
		return 2;
	}
	int burst = strcmp(argv[1], "burst") == 0, threads = atoi(argv[2]);
	double seconds = atof(argv[3]);
	REQUIRE(threads >= 1 && threads <= MAX_THREADS && seconds > 0);
	struct sigaction al;
	memset(&al, 0, sizeof al);
	al.sa_handler = on_alarm;
	al.sa_flags = SA_ONSTACK; /* as Go requires of a host's handlers */
	sigemptyset(&al.sa_mask);
	REQUIRE(sigaction(SIGALRM, &al, NULL) == 0);
	alarm((unsigned)seconds + 60);

	MUST(dac_init(0));
	MUST(dac_set_cleanup_sender(sender, NULL));
	dac_cleanup_options o = {.size = sizeof o, .max_attempts = 3, .initial_backoff_us = BACKOFF_US,
	                         .max_backoff_us = BACKOFF_US, .max_pending = 1 << 20};
	MUST(dac_cleanup_configure(&o));
	/* The fan-out's goroutines start with the first message. */
	start_probe(PROBE_DELIVERY);
	wait_delivered("the first delivery");

	deadline_ns = now_ns() + (int64_t)(seconds * 1e9);
	/* The collections between these two lines are the pattern's (Go writes
	** its trace to the same stderr, unbuffered, as this program does). */
	fprintf(stderr, "%s\n", THREADS_START);
	pthread_t t[MAX_THREADS];
	for (int i = 0; i < threads; i++)
		REQUIRE(pthread_create(&t[i], NULL, burst ? bursting : looping, (void *)(intptr_t)i) == 0);
	while (now_ns() < deadline_ns) {
		start_probe(PROBE_DELIVERY);
		wait_delivered("a delivery");
		start_probe(PROBE_RETRY);
		wait_delivered("a retry");
		probe_flush();
		probe_reap();
		allocate();
	}
	for (int i = 0; i < threads; i++)
		REQUIRE(pthread_join(t[i], NULL) == 0);
	fprintf(stderr, "%s\n", THREADS_STOPPED);
	int64_t pending = -1;
	MUST(dac_cleanup_flush(60000, &pending));

	print_measure(&m_retry);
	print_measure(&m_flush);
	print_measure(&m_reap);
	print_measure(&m_delivery);
	dac_cleanup_counters c = {.size = sizeof c};
	MUST(dac_cleanup_stats(&c));
	int64_t calls = 0;
	for (int i = 0; i < threads; i++)
		calls += thread_calls[i];
	printf("cleanup: failed %" PRId64 ", dropped %" PRId64 ", pending %" PRId64 "\n", c.failed, c.dropped, c.pending);
	printf("every flush timed out with the blocked message pending: %s\n",
	       flushes > 0 && flush_timeouts == flushes ? "yes" : "no");
	printf("every busy thread's call worked: %s\n", calls_failed ? "no" : "yes");
	fprintf(stderr, "busy threads' %s: %" PRId64 "\n", burst ? "passes" : "calls", calls);
	return 0;
}
