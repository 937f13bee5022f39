/* config_race: every setter of the configuration called from several
** threads at once while other threads release contexts with known workers,
** ROUNDS times. Each round:
**
**   1. three setter threads each call dac_set_cleanup_sender (or
**      dac_set_cleanup_sender_timeout),
**      dac_set_log_hook, dac_set_cleanup_options and dac_set_max_contexts
**      (in a random order) with values of their own (the sender and the
**      hook five times, alternating between two values), while two threads
**      release contexts with a known worker; every call is stamped with
**      CLOCK_MONOTONIC before and after;
**   2. what is in force must be the value of a call that no other call of
**      that setter began after it returned (the calls are linearizable): a
**      release with a known worker shows which sender delivers it (or none:
**      counted skipped), a release whose message always fails shows how many
**      attempts are made (max_attempts) and which hook, or stderr, gets the
**      "gave up" line, and dac_debug_info shows max_contexts;
**   3. the main thread then sets one of the values of the race again (for
**      the sender, one that is not in force, if any) and it must be the one
**      in force (re-setting the pair in force is a shortcut that must not
**      trust a record the race left wrong).
**
** Three rounds in four are duels: two setters set one sender each, then the
** main thread sets the one that is not in force (the one a record the race
** left wrong would name), which must then be in force.
**
** Every sender records its calls, and is marked retired once a
** dac_set_cleanup_sender of the main thread (no other setter running) that
** replaced it has returned: a retired sender that is called, or is still
** running, is a broken promise ("after a call returns, the sender it
** replaced is never called again"). The log hook makes no such promise (its
** setter does not wait), so hooks are only checked for which is in force.
**
** stderr goes through a pipe that a thread reads, to see the lines of the
** default log (no hook). It prints a BUG line for each broken promise and
** "rounds = N, bugs = M" at the end.
**
** Usage: config_race ROUNDS SEED */
#include "check.h"
/* The deprecated dac_set_cleanup_options is still part of the ABI: this
** program calls it too. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define SETTERS 3
#define RELEASERS 2
#define REPS 5 /* odd: a setter ends with its first value */
#define BOUND_NS (60 * 1000000000LL) /* generous: it catches hangs, not speed */

static int bugs;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

#define BUG(...)                                    \
	do {                                            \
		pthread_mutex_lock(&out_mu);                \
		printf("BUG: " __VA_ARGS__);                \
		printf("\n");                               \
		fflush(stdout);                             \
		bugs++;                                     \
		pthread_mutex_unlock(&out_mu);              \
	} while (0)

static void pause_us(long us) {
	struct timespec ts = {0, us * 1000};
	nanosleep(&ts, NULL);
}

/* ---- senders and hooks, and what they record ---- */

/* The user data of a sender or a hook: whose value it is. code identifies
** the (function, user data) pair: 1 + 2 * setter + (function B). */
struct recorder {
	int round, code;
	int retired; /* set once a replacement's setter returned */
	long calls;
};

/* The marker: the context id of the probe in progress, and who saw it. */
static int64_t marker = -1;
static int marker_sender = -1, marker_hook = -1;
static long marker_attempts;

static int sender(struct recorder *r, int code, int64_t context_id, int rc) {
	if (__atomic_load_n(&r->retired, __ATOMIC_SEQ_CST))
		BUG("round %d: sender %d called after a dac_set_cleanup_sender that replaced it returned", r->round, code);
	__atomic_add_fetch(&r->calls, 1, __ATOMIC_SEQ_CST);
	if (context_id == __atomic_load_n(&marker, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&marker_sender, code, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&marker_attempts, 1, __ATOMIC_SEQ_CST);
	}
	/* A little longer in the call (5 us, busy: more for a setter to wait
	** for). Not sched_yield: beside busy processes each yield gives a whole
	** time slice away, and the backlog of messages then takes minutes. */
	for (int64_t until = now_ns() + 5000; now_ns() < until;)
		;
	if (__atomic_load_n(&r->retired, __ATOMIC_SEQ_CST))
		BUG("round %d: sender %d still running after a dac_set_cleanup_sender that replaced it returned", r->round,
		    code);
	return rc;
}

static int sender_a(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)worker_id;
	struct recorder *r = user_data;
	return sender(r, r->code, context_id, 0);
}

static int sender_b(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)worker_id;
	struct recorder *r = user_data;
	return sender(r, r->code + 1, context_id, 0);
}

/* The failing sender of the probes: every attempt fails. */
#define FAILING_CODE 100
static int sender_failing(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)worker_id;
	return sender(user_data, FAILING_CODE, context_id, 1);
}

static char marker_text[32];
static pthread_mutex_t marker_mu = PTHREAD_MUTEX_INITIALIZER;

static void saw_line(int code, const char *message) {
	pthread_mutex_lock(&marker_mu);
	if (marker_text[0] != '\0' && strstr(message, marker_text) != NULL) {
		if (getenv("DEBUG_HOOK"))
			fprintf(stdout, "hook %d saw %s: %s", code, marker_text, message);
		__atomic_store_n(&marker_hook, code, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&marker_mu);
}

static void hook_a(void *user_data, int level, const char *message) {
	(void)level;
	struct recorder *r = user_data;
	__atomic_add_fetch(&r->calls, 1, __ATOMIC_SEQ_CST);
	saw_line(r->code, message);
}

static void hook_b(void *user_data, int level, const char *message) {
	(void)level;
	struct recorder *r = user_data;
	__atomic_add_fetch(&r->calls, 1, __ATOMIC_SEQ_CST);
	saw_line(r->code + 1, message);
}

/* stderr, read back: the default log (no hook) is code 0. */
static int real_stderr;
static void *stderr_reader(void *arg) {
	FILE *in = fdopen((int)(intptr_t)arg, "r");
	char line[4096];
	while (in != NULL && fgets(line, sizeof line, in) != NULL) {
		saw_line(0, line);
		if (strstr(line, "Could not release Dist Autograd Context") == NULL)
			(void)!write(real_stderr, line, strlen(line));
	}
	return NULL;
}

/* ---- the values of a round ---- */

enum { SET_SENDER, SET_HOOK, SET_OPTIONS, SET_MAX, NSETTERS };
static const char *const setter_names[] = {"dac_set_cleanup_sender", "dac_set_log_hook", "dac_set_cleanup_options",
                                           "dac_set_max_contexts"};

struct round {
	int index;
	struct recorder senders[SETTERS], hooks[SETTERS], failing;
	/* Each setter sets its sender and its hook REPS times, alternating
	** between two values and ending with the first (0: NULL). */
	int sender_code[SETTERS][2], hook_code[SETTERS][2];
	int attempts[SETTERS];
	int64_t max_contexts[SETTERS];
	int64_t call[SETTERS][NSETTERS][REPS], ret[SETTERS][NSETTERS][REPS];
	int order[SETTERS][NSETTERS];
	/* A duel round: only two setters, each setting its sender once. */
	int duel;
};

static int reps(int what) { return what == SET_SENDER || what == SET_HOOK ? REPS : 1; }
static int value_at(int rep) { return rep % 2; }

static struct round *cur_round;
/* Every recorder made so far, for retiring. */
static struct recorder **all_senders;
static size_t n_senders;

/* with_timeout: through dac_set_cleanup_sender_timeout, whose bound no
** call of these senders comes near. */
static int set_sender_code(struct round *r, int i, int code, int with_timeout) {
	dac_cleanup_sender fn = code == 0 ? NULL : code % 2 ? sender_a : sender_b;
	void *data = code == 0 ? NULL : &r->senders[i];
	if (with_timeout)
		return dac_set_cleanup_sender_timeout(fn, data, BOUND_NS / 1000000);
	return dac_set_cleanup_sender(fn, data);
}

static int set_hook_code(struct round *r, int i, int code) {
	if (code == 0)
		return dac_set_log_hook(NULL, NULL);
	return dac_set_log_hook(code % 2 ? hook_a : hook_b, &r->hooks[i]);
}

static int set_options(int attempts) { return dac_set_cleanup_options(attempts, 50, 200, 0); }

/* The main thread's setter returned: every sender but keep is retired. */
static void retire_all_but(struct recorder *keep) {
	for (size_t i = 0; i < n_senders; i++)
		if (all_senders[i] != keep)
			__atomic_store_n(&all_senders[i]->retired, 1, __ATOMIC_SEQ_CST);
}

/* ---- the threads ---- */

static pthread_barrier_t phase;
static int setters_done, stop, duel_ready;

static void *setter_main(void *arg) {
	int i = (int)(intptr_t)arg;
	for (;;) {
		pthread_barrier_wait(&phase);
		if (__atomic_load_n(&stop, __ATOMIC_SEQ_CST))
			return NULL;
		struct round *r = cur_round;
		if (r->duel && i < 2) {
			/* The two start within a few instructions of each other. */
			__atomic_add_fetch(&duel_ready, 1, __ATOMIC_SEQ_CST);
			for (long spin = 0; __atomic_load_n(&duel_ready, __ATOMIC_SEQ_CST) < 2; spin++)
				if (spin % 256 == 255)
					sched_yield();
		}
		for (int k = 0; k < (r->duel ? (i < 2) : NSETTERS); k++) {
			int what = r->duel ? SET_SENDER : r->order[i][k];
			for (int rep = 0; rep < (r->duel ? 1 : reps(what)); rep++) {
				int rc = -1;
				r->call[i][what][rep] = now_ns();
				switch (what) {
				case SET_SENDER:
					rc = set_sender_code(r, i, r->sender_code[i][value_at(rep)], (i + rep) % 2);
					break;
				case SET_HOOK:
					rc = set_hook_code(r, i, r->hook_code[i][value_at(rep)]);
					break;
				case SET_OPTIONS:
					rc = set_options(r->attempts[i]);
					break;
				case SET_MAX:
					rc = dac_set_max_contexts(r->max_contexts[i]);
					break;
				}
				r->ret[i][what][rep] = now_ns();
				if (rc != DAC_OK)
					BUG("round %d: %s from setter %d -> %s: %s", r->index, setter_names[what], i,
					    dac_status_string(rc), dac_last_error());
			}
		}
		__atomic_add_fetch(&setters_done, 1, __ATOMIC_SEQ_CST);
		pthread_barrier_wait(&phase);
	}
}

static void *releaser_main(void *arg) {
	int64_t next = ((int64_t)(8 + (intptr_t)arg) << 48);
	for (;;) {
		pthread_barrier_wait(&phase);
		if (__atomic_load_n(&stop, __ATOMIC_SEQ_CST))
			return NULL;
		/* At least one release per round, then as long as setters run, up
		** to a bound that keeps the cleanup queue from overflowing. */
		int n = 0;
		do {
			dac_context *ctx = NULL;
			int64_t id = next++;
			MUST(dac_context_get_or_create(id, &ctx));
			MUST(dac_context_add_known_worker_id(ctx, 1));
			MUST(dac_context_release(id));
			MUST(dac_context_unref(ctx));
		} while (__atomic_load_n(&setters_done, __ATOMIC_SEQ_CST) < SETTERS && ++n < 200);
		pthread_barrier_wait(&phase);
	}
}

/* ---- probes: run by the main thread while no other thread calls ---- */

static int64_t next_marker = (int64_t)7 << 48;

/* Releases a context with one known worker under a new marker. */
static void release_marker(void) {
	int64_t id = next_marker++;
	pthread_mutex_lock(&marker_mu);
	snprintf(marker_text, sizeof marker_text, "context %" PRId64 ",", id);
	pthread_mutex_unlock(&marker_mu);
	__atomic_store_n(&marker_sender, -1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&marker_hook, -1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&marker_attempts, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&marker, id, __ATOMIC_SEQ_CST);
	dac_context *ctx = NULL;
	MUST(dac_context_get_or_create(id, &ctx));
	MUST(dac_context_add_known_worker_id(ctx, 2));
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
}

/* Waits, within the bound, until *what is not -1, and returns it. */
static int wait_for(int *what) {
	int64_t deadline = now_ns() + BOUND_NS;
	int v;
	while ((v = __atomic_load_n(what, __ATOMIC_SEQ_CST)) == -1 && now_ns() < deadline)
		pause_us(20);
	return v;
}

/* Which sender delivers a release now: its code, 0 for none (the release
** counts its message skipped before it returns), -1 if none came. */
static int probe_sender(void) {
	int64_t skipped = debug_value("cleanup_skipped");
	release_marker();
	if (debug_value("cleanup_skipped") == skipped + 1)
		return 0;
	return wait_for(&marker_sender);
}

/* With the failing sender in force: which hook (0: the default log,
** stderr) gets the line that gives the message up, and how many attempts
** were made before it. */
static void probe_failing(int *attempts, int *hook) {
	release_marker();
	*hook = wait_for(&marker_hook);
	*attempts = (int)__atomic_load_n(&marker_attempts, __ATOMIC_SEQ_CST);
}

/* The values a linearizable setter can have left in force: those of calls
** that no other call began after the return of (such a call can be the last
** of a linearization, and only such a call). */
static int calls_of(struct round *r, int what, int i) { return r->duel ? (i < 2) : reps(what); }

static int candidate(struct round *r, int what, int i, int rep) {
	for (int j = 0; j < SETTERS; j++)
		for (int q = 0; q < calls_of(r, what, j); q++)
			if ((j != i || q != rep) && r->call[j][what][q] > r->ret[i][what][rep])
				return 0;
	return 1;
}

/* values[i][v]: setter i's value v (v = value_at(rep)). */
static void check_in_force(struct round *r, int what, const int (*values)[2], int got, const char *shown) {
	for (int i = 0; i < SETTERS; i++)
		for (int rep = 0; rep < calls_of(r, what, i); rep++)
			if (candidate(r, what, i, rep) && values[i][value_at(rep)] == got)
				return;
	BUG("round %d: after concurrent %s calls, %s in force, which no linearization of them leaves (last values %d %d "
	    "%d)",
	    r->index, setter_names[what], shown, values[0][0], values[1][0], values[2][0]);
}

static uint64_t rng;
static uint64_t next_rand(void) {
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv) {
	REQUIRE(argc == 3);
	int rounds = atoi(argv[1]);
	rng = strtoull(argv[2], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;

	int fds[2];
	REQUIRE(pipe(fds) == 0);
	real_stderr = dup(2);
	REQUIRE(dup2(fds[1], 2) == 2);
	close(fds[1]);
	pthread_t reader;
	REQUIRE(pthread_create(&reader, NULL, stderr_reader, (void *)(intptr_t)fds[0]) == 0);

	MUST(dac_init(3));
	MUST(set_options(2));
	REQUIRE(pthread_barrier_init(&phase, NULL, SETTERS + RELEASERS + 1) == 0);
	pthread_t threads[SETTERS + RELEASERS];
	for (int i = 0; i < SETTERS; i++)
		REQUIRE(pthread_create(&threads[i], NULL, setter_main, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < RELEASERS; i++)
		REQUIRE(pthread_create(&threads[SETTERS + i], NULL, releaser_main, (void *)(intptr_t)i) == 0);

	all_senders = calloc((size_t)rounds * (SETTERS + 1), sizeof *all_senders);
	REQUIRE(all_senders != NULL);
	long shortcut_rounds = 0;
	for (int n = 0; n < rounds; n++) {
		struct round *r = calloc(1, sizeof *r);
		REQUIRE(r != NULL);
		r->index = n;
		r->duel = n % 4 != 0;
		r->failing = (struct recorder){n, FAILING_CODE, 0, 0};
		for (int i = 0; i < SETTERS; i++) {
			r->senders[i] = (struct recorder){n, 1 + 2 * i, 0, 0};
			r->hooks[i] = (struct recorder){n, 1 + 2 * i, 0, 0};
			all_senders[n_senders++] = &r->senders[i];
			/* NULL now and then; else function A or B with this setter's data. */
			uint64_t x = next_rand();
			int a = (int)((x >> 8) % 2), h = (int)((x >> 24) % 2);
			r->sender_code[i][0] = x % 4 == 0 ? 0 : 1 + 2 * i + a;
			r->sender_code[i][1] = (x >> 4) % 4 == 0 ? 0 : 1 + 2 * i + !a;
			r->hook_code[i][0] = (x >> 16) % 4 == 0 ? 0 : 1 + 2 * i + h;
			r->hook_code[i][1] = (x >> 20) % 4 == 0 ? 0 : 1 + 2 * i + !h;
			r->attempts[i] = 2 + i;
			r->max_contexts[i] = 100000 + 10 * n + i;
			for (int k = 0; k < NSETTERS; k++)
				r->order[i][k] = k;
			for (int k = NSETTERS - 1; k > 0; k--) {
				int j = (int)(next_rand() % (uint64_t)(k + 1)), t = r->order[i][k];
				r->order[i][k] = r->order[i][j], r->order[i][j] = t;
			}
		}
		cur_round = r;
		__atomic_store_n(&setters_done, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&duel_ready, 0, __ATOMIC_SEQ_CST);
		pthread_barrier_wait(&phase); /* the race */
		pthread_barrier_wait(&phase); /* all setters returned; releasers stopped */

		/* The sender: one the race can have left, then the main thread's. */
		int got = probe_sender();
		check_in_force(r, SET_SENDER, r->sender_code, got, fmt("sender %d", got));
		/* Another value than the one in force, if the race set one: if the
		** library's record of the pair in force is wrong, it is the one the
		** record may name, which a "same pair" shortcut would skip. */
		int k = 0, v = 0, want = got;
		for (int tries = 0; tries < 64 && want == got; tries++) {
			k = (int)(next_rand() % (r->duel ? 2 : SETTERS)), v = r->duel ? 0 : (int)(next_rand() % 2);
			want = r->sender_code[k][v];
		}
		if (want == got)
			shortcut_rounds++;
		MUST(set_sender_code(r, k, want, 0));
		retire_all_but(want ? &r->senders[k] : NULL);
		got = probe_sender();
		if (got != want)
			BUG("round %d: the main thread set sender %d (a racing setter's value) and it returned, yet sender %d "
			    "is in force",
			    r->index, want, got);

		if (r->duel)
			continue;

		/* The options and the hook, with the failing sender. */
		MUST(dac_set_cleanup_sender(sender_failing, &r->failing));
		all_senders[n_senders++] = &r->failing;
		retire_all_but(&r->failing);
		int attempts = 0, hook = -1;
		probe_failing(&attempts, &hook);
		int attempt_values[SETTERS][2];
		for (int i = 0; i < SETTERS; i++)
			attempt_values[i][0] = attempt_values[i][1] = r->attempts[i];
		check_in_force(r, SET_OPTIONS, attempt_values, attempts, fmt("max_attempts %d", attempts));
		check_in_force(r, SET_HOOK, r->hook_code, hook, fmt("hook %d", hook));
		int ko = (int)(next_rand() % SETTERS), kh = (int)(next_rand() % SETTERS);
		MUST(set_options(r->attempts[ko]));
		MUST(set_hook_code(r, kh, r->hook_code[kh][0]));
		probe_failing(&attempts, &hook);
		if (attempts != r->attempts[ko])
			BUG("round %d: max_attempts %d set last, %d attempts made", r->index, r->attempts[ko], attempts);
		if (hook != r->hook_code[kh][0])
			BUG("round %d: hook %d set last, hook %d got the line", r->index, r->hook_code[kh][0], hook);

		/* The cap. */
		int64_t cap = debug_value("max_contexts");
		int caps[SETTERS][2];
		for (int i = 0; i < SETTERS; i++)
			caps[i][0] = caps[i][1] = (int)r->max_contexts[i];
		check_in_force(r, SET_MAX, caps, (int)cap, fmt("max_contexts %" PRId64, cap));
		int km = (int)(next_rand() % SETTERS);
		MUST(dac_set_max_contexts(r->max_contexts[km]));
		if (debug_value("max_contexts") != r->max_contexts[km])
			BUG("round %d: max_contexts %" PRId64 " set last, %" PRId64 " in force", r->index, r->max_contexts[km],
			    debug_value("max_contexts"));
	}
	__atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
	pthread_barrier_wait(&phase);
	for (int i = 0; i < SETTERS + RELEASERS; i++)
		REQUIRE(pthread_join(threads[i], NULL) == 0);

	MUST(dac_set_cleanup_sender(NULL, NULL));
	retire_all_but(NULL);
	MUST(dac_set_log_hook(NULL, NULL));
	MUST(dac_cleanup_flush(BOUND_NS / 1000000, NULL));
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	printf("live_handles = %" PRId64 "\n", debug_value("live_handles"));
	printf("rounds where the main thread re-set the pair in force: %s\n", shortcut_rounds > 0 ? "some" : "none");
	printf("rounds = %d, bugs = %d\n", rounds, bugs);
	fflush(stdout);
	/* The round structs are not freed: a sender may in theory still hold one. */
	_exit(0);
}
