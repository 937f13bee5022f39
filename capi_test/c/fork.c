/* fork: a process that loaded the library, used it from several threads and
** keeps it busy (contexts with known workers whose releases feed the cleanup
** sender's goroutines and retry timers, message ids, get-or-create, the
** garbage collector) forks, over and over, from its main thread and from a
** busy thread. Children:
**   - that use the library get DAC_ERR_FORKED at once from every function,
**     with a message naming the cause and the fix, and exit cleanly;
**   - that use nothing exit cleanly (exit() and _exit());
**   - that exec this program again ("fresh") load the library anew and use it.
** Each child runs under alarm() and the parent waits for it with a deadline,
** so a hang is reported, never waited for. The parent keeps working after.
** Usage:
**   fork busy THREADS ROUNDS   ROUNDS rounds of the children above
**   fork fresh                 what an exec'd child runs
**   fork gate FORKS            forks while senders are called all the time:
**                              fork() must hold calls into the host back and
**                              let those in progress end (a Python host's
**                              child could otherwise inherit a lock a sender
**                              held, and hang), so no child may find a
**                              sender mid-call in its copy of the memory
**   fork gate FORKS nonblocking  the same, the sender declared non-blocking:
**                              the releasing threads call it themselves,
**                              and the gate holds them back alike
**   fork gate-blocked          a sender that does not return: fork() waits
**                              for it 2 s (the bound), then goes on */
#include "check.h"
/* The deprecated dac_set_cleanup_options is still part of the ABI: this
** program calls it too. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *prog;

/* ---- the child that uses the library ---- */

static int child_failures;
static int child_verbose;
static int child_calls;

/* Checks one call made in the child: DAC_ERR_FORKED, the status and message
** left for the thread, the message naming the function, the cause and the fix. */
static void child_check(const char *label, int rc) {
	char fn[64];
	size_t n = strcspn(label, "(");
	snprintf(fn, sizeof fn, "%.*s", (int)n, label);
	char prefix[96];
	snprintf(prefix, sizeof prefix, "distautograd: %s: ", fn);
	const char *msg = dac_last_error();
	int good = rc == DAC_ERR_FORKED && dac_last_status() == DAC_ERR_FORKED &&
	           strncmp(msg, prefix, strlen(prefix)) == 0 && strstr(msg, "fork()") && strstr(msg, "'spawn'") &&
	           strstr(msg, "load it after fork");
	child_calls++;
	if (!good) {
		child_failures++;
		printf("BUG: in the child, %s -> %s: %s\n", label, dac_status_string(rc), msg);
	} else if (child_verbose) {
		printf("%s -> %s\n", fn, dac_status_string(rc));
	}
}

#define CHILD(call) child_check(#call, (call))

static int never_sends(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	return 0;
}

static void never_logs(void *user_data, int level, const char *message) { (void)user_data, (void)level, (void)message; }

/* Calls every function of the header that can fail, in the child. */
static void use_everything(dac_context *parents) {
	int32_t w = -7, ids[4] = {-7, -7, -7, -7};
	int64_t v = -7, msgs[2] = {-7, -7};
	uint64_t fn = 7, fns[2] = {7, 7}, hv = 7;
	int flag = -7;
	size_t count = 77, len = 77;
	char buf[64] = "untouched";
	dac_context *ctx = (dac_context *)(uintptr_t)0x77;
	int64_t a = -7;
	dac_cleanup_counters counters = {sizeof counters, -7, -7, -7, -7, -7, -7};
	CHILD(dac_init(3));
	CHILD(dac_worker_id(&w));
	CHILD(dac_max_id(&v));
	CHILD(dac_num_contexts(&v));
	CHILD(dac_new_autograd_message_id(&v));
	CHILD(dac_debug_info(buf, sizeof buf, &len));
	CHILD(dac_set_max_contexts(10));
	CHILD(dac_context_new(&ctx));
	CHILD(dac_context_new_id(&ctx, &v));
	CHILD(dac_context_current(&ctx));
	CHILD(dac_context_current_id(&ctx, &v));
	CHILD(dac_context_retrieve(0, &ctx));
	CHILD(dac_context_retrieve_if_present(0, &ctx));
	CHILD(dac_context_get_or_create(0, &ctx));
	CHILD(dac_context_is_valid(0));
	CHILD(dac_context_release(0));
	CHILD(dac_context_release_if_present(0, &flag));
	CHILD(dac_context_release_with_workers(0, NULL, 0, &flag));
	CHILD(dac_release_contexts_of_worker(3, &v));
	CHILD(dac_reap_idle_contexts(0, &v));
	CHILD(dac_current_context_id(&v));
	CHILD(dac_has_valid_context(&flag));
	CHILD(dac_set_current_context_id(5));
	CHILD(dac_force_current_context_id(5));
	CHILD(dac_clear_current_context());
	CHILD(dac_context_ref(parents));
	CHILD(dac_context_unref(parents));
	CHILD(dac_context_unref_many(&parents, 1));
	CHILD(dac_context_id(parents, &v));
	CHILD(dac_context_add_known_worker_id(parents, 4));
	CHILD(dac_context_known_worker_ids(parents, ids, 4, &count));
	CHILD(dac_context_list(NULL, 0, &count));
	CHILD(dac_context_times(parents, NULL, &v)); /* the idle time alone: read in C, but not in a child */
	CHILD(dac_context_add_send_function(parents, 1, 2));
	CHILD(dac_context_add_recv_function(parents, 1, 2));
	CHILD(dac_context_send_function(parents, 1, &fn));
	CHILD(dac_context_recv_function(parents, 1, &fn));
	CHILD(dac_context_send_functions(parents, msgs, fns, 2, &count));
	CHILD(dac_context_recv_functions(parents, msgs, fns, 2, &count));
	CHILD(dac_context_set_host_value(parents, 1, NULL, &hv));
	CHILD(dac_context_host_value(parents, &hv));
	CHILD(dac_set_cleanup_sender(never_sends, NULL));
	CHILD(dac_set_cleanup_sender_timeout(never_sends, NULL, 10));
	CHILD(dac_set_cleanup_sender_nonblocking(1));
	dac_cleanup_options options = {sizeof options, 1, 1, 1, 1};
	CHILD(dac_cleanup_configure(&options));
	CHILD(dac_set_cleanup_options(1, 1, 1, 1));
	CHILD(dac_cleanup_stats(&counters));
	CHILD(dac_cleanup_flush(10, &a));
	CHILD(dac_set_log_hook(never_logs, NULL));
	CHILD(dac_fork_prepare(10));
	CHILD(dac_fork_parent());
	int untouched = w == -7 && ids[0] == -7 && v == -7 && msgs[0] == -7 && fn == 7 && fns[0] == 7 && flag == -7 &&
	                count == 77 && len == 77 && strcmp(buf, "untouched") == 0 && ctx == (dac_context *)(uintptr_t)0x77 &&
	                a == -7 && counters.sent == -7 && counters.skipped == -7 && counters.pending == -7;
	if (!untouched)
		child_failures++;
	if (child_verbose) {
		printf("message: %s\n", dac_last_error());
		printf("out-pointers untouched: %s\n", untouched ? "yes" : "NO");
		printf("static functions work: dac_version %s, dac_version_number %d, dac_status_string(10) %s\n",
		       dac_version(), dac_version_number(), dac_status_string(DAC_ERR_FORKED));
	}
	printf("child: %d calls failed fast with DAC_ERR_FORKED, %d did not\n", child_calls - child_failures,
	       child_failures);
	fflush(stdout);
}

/* ---- the parent's busy threads ---- */

/* The host's RPC layer, faked: every fourth attempt fails, so retries with
** their timers are in flight whenever the process forks. */
static long attempts, log_lines;

static int flaky_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	return __atomic_add_fetch(&attempts, 1, __ATOMIC_RELAXED) % 4 == 0;
}

/* Counts warnings and errors (a dropped or given-up message); retries are
** logged at DAC_LOG_DEBUG. */
static void count_log(void *user_data, int level, const char *message) {
	(void)user_data, (void)message;
	if (level >= DAC_LOG_WARNING)
		__atomic_add_fetch(&log_lines, 1, __ATOMIC_RELAXED);
}

enum variant { USES_IT, EXITS, EXITS_AT_ONCE, EXECS, VARIANTS };
static const char *const variant_names[] = {"uses the library, then exit()", "uses nothing, exit()",
                                            "uses nothing, _exit()", "exec's this program anew"};

static dac_context *parents_ctx; /* a live context of the parent's, whose handle the child tries */

/* Forks a child that does what v says and never returns. */
static pid_t fork_child(enum variant v) {
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	alarm(20); /* a hang ends the child; the parent's deadline is longer */
	switch (v) {
	case USES_IT:
		use_everything(parents_ctx);
		exit(child_failures ? 1 : 0);
	case EXITS:
		exit(0);
	case EXITS_AT_ONCE:
		_exit(0);
	default:
		execl(prog, prog, "fresh", (char *)NULL);
		perror("execl");
		_exit(127);
	}
}

/* Waits for the child, up to 30 s, and describes how it ended. */
static void wait_child(pid_t pid, char *desc, size_t cap) {
	int status = 0;
	for (int i = 0; i < 3000; i++) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid) {
			if (WIFEXITED(status))
				snprintf(desc, cap, "exit status %d", WEXITSTATUS(status));
			else
				snprintf(desc, cap, "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
			return;
		}
		if (r < 0 && errno != EINTR) {
			snprintf(desc, cap, "waitpid: %s", strerror(errno));
			return;
		}
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	snprintf(desc, cap, "HUNG: killed after 30 s");
}

struct busy {
	pthread_t thread;
	int index;
	long rounds;
};

static int stop;
/* A request to a busy thread to fork: the thread index, the variant, the outcome. */
static pthread_mutex_t req_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t req_cv = PTHREAD_COND_INITIALIZER;
static int req_thread = -1, req_done;
static enum variant req_variant;
static char req_desc[128];

/* One pass's worth of work: a context with known workers and a send
** function, a message id, a get-or-create of another worker's pass that is
** released (each release queues cleanup messages), debug information. */
static void busy_round(struct busy *b) {
	dac_context *ctx = NULL, *foreign = NULL;
	int64_t id = 0, msg = 0;
	char buf[1024];
	size_t len = 0;
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 4));
	MUST(dac_context_add_known_worker_id(ctx, 5));
	MUST(dac_new_autograd_message_id(&msg));
	MUST(dac_context_add_send_function(ctx, msg, (uint64_t)msg));
	int64_t other = ((int64_t)9 << 48) | ((int64_t)b->index << 32) | (b->rounds & 0xffffffff);
	MUST(dac_context_get_or_create(other, &foreign));
	MUST(dac_context_add_known_worker_id(foreign, 9));
	MUST(dac_context_release(other));
	MUST(dac_context_unref(foreign));
	MUST(dac_debug_info(buf, sizeof buf, &len));
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	__atomic_add_fetch(&b->rounds, 1, __ATOMIC_RELAXED);
}

static void *busy_main(void *arg) {
	struct busy *b = arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		busy_round(b);
		if (__atomic_load_n(&req_thread, __ATOMIC_ACQUIRE) == b->index) {
			char desc[128];
			/* This thread has called into Go many times and holds a block
			** of message ids: the child is a copy of it. */
			wait_child(fork_child(req_variant), desc, sizeof desc);
			pthread_mutex_lock(&req_mu);
			snprintf(req_desc, sizeof req_desc, "%s", desc);
			req_done = 1;
			__atomic_store_n(&req_thread, -1, __ATOMIC_RELEASE);
			pthread_cond_signal(&req_cv);
			pthread_mutex_unlock(&req_mu);
		}
	}
	return NULL;
}

static long total_rounds(struct busy *bs, int n) {
	long sum = 0;
	for (int i = 0; i < n; i++)
		sum += __atomic_load_n(&bs[i].rounds, __ATOMIC_RELAXED);
	return sum;
}

static void busy(int threads, int rounds) {
	MUST(dac_set_cleanup_sender(flaky_sender, NULL));
	MUST(dac_set_cleanup_options(50, 100, 1000, 0));
	MUST(dac_set_log_hook(count_log, NULL));
	MUST(dac_init(3));
	int64_t parents_id = 0;
	MUST(dac_context_new(&parents_ctx));
	MUST(dac_context_id(parents_ctx, &parents_id));
	MUST(dac_context_add_known_worker_id(parents_ctx, 6));
	/* The main thread also holds a reference uncounted (csrc/uncounted.c: its
	** third lookup), which a child forked from it must not drop either. */
	dac_context *again;
	for (int i = 0; i < 2; i++) {
		MUST(dac_context_retrieve(parents_id, &again));
		MUST(dac_context_unref(again));
	}
	MUST(dac_context_retrieve(parents_id, &again));

	struct busy *bs = calloc((size_t)threads, sizeof *bs);
	REQUIRE(bs != NULL);
	for (int i = 0; i < threads; i++) {
		bs[i].index = i;
		REQUIRE(pthread_create(&bs[i].thread, NULL, busy_main, &bs[i]) == 0);
	}
	/* Every thread is well into its work before the first fork. */
	for (int i = 0; i < threads; i++)
		while (__atomic_load_n(&bs[i].rounds, __ATOMIC_RELAXED) < 20)
			sched_yield();
	printf("parent: worker 3, %d busy threads, cleanup sender set\n", threads);
	/* go_heap_bytes is 0 until the first garbage collection ends. */
	for (int i = 0; i < 20000 && debug_value("go_heap_bytes") == 0; i++) {
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("the Go garbage collector has run: %s\n", debug_value("go_heap_bytes") > 0 ? "yes" : "NO");
	long before = total_rounds(bs, threads);
	int children = 0;
	for (int r = 0; r < rounds; r++) {
		for (int v = 0; v < VARIANTS; v++) {
			char desc[128];
			child_verbose = r == 0 && v == USES_IT; /* the first such child prints each call */
			printf("-- child %d: forked from the main thread, %s\n", ++children, variant_names[v]);
			wait_child(fork_child((enum variant)v), desc, sizeof desc);
			printf("child %d: %s\n", children, desc);
			child_verbose = 0;

			int t = (r * VARIANTS + v) % threads;
			printf("-- child %d: forked from busy thread %d, %s\n", ++children, t, variant_names[v]);
			fflush(stdout);
			pthread_mutex_lock(&req_mu);
			req_variant = (enum variant)v;
			req_done = 0;
			__atomic_store_n(&req_thread, t, __ATOMIC_RELEASE);
			while (!req_done)
				pthread_cond_wait(&req_cv, &req_mu);
			snprintf(desc, sizeof desc, "%s", req_desc);
			pthread_mutex_unlock(&req_mu);
			printf("child %d: %s\n", children, desc);
		}
	}
	long after = total_rounds(bs, threads);
	printf("-- the parent\n");
	printf("busy threads kept working through the forks: %s\n", after > before ? "yes" : "NO");
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < threads; i++)
		REQUIRE(pthread_join(bs[i].thread, NULL) == 0);

	/* It still works, and nothing was lost: every cleanup message of every
	** release was delivered (retried where the sender failed). */
	dac_context *ctx = NULL;
	int64_t id = 0, msg = 0, pending = -1;
	SHOW(dac_context_release(parents_id));
	MUST(dac_context_unref(again));
	SHOW(dac_context_unref(parents_ctx));
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_id(ctx, &id));
	SHOW(dac_new_autograd_message_id(&msg));
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_cleanup_flush(30000, &pending));
	dac_cleanup_counters counters = {.size = sizeof counters};
	MUST(dac_cleanup_stats(&counters));
	int64_t sent = counters.sent, retried = counters.retried, failed = counters.failed, dropped = counters.dropped;
	pending = counters.pending;
	long rounds_done = total_rounds(bs, threads);
	printf("cleanup: sent = 3 per busy round + 1: %s, retried some: %s, failed %" PRId64 ", dropped %" PRId64
	       ", pending %" PRId64 ", warnings logged %ld\n",
	       sent == 3 * rounds_done + 1 ? "yes" : "NO", retried > 0 ? "yes" : "NO", failed, dropped, pending,
	       __atomic_load_n(&log_lines, __ATOMIC_RELAXED));
	printf("num_contexts = %" PRId64 ", live_handles = %" PRId64 "\n", num_contexts(), debug_value("live_handles"));
	free(bs);
}

static void fresh(void) {
	dac_context *ctx = NULL;
	int64_t id = 0, msg = 0;
	MUST(dac_init(5));
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	MUST(dac_new_autograd_message_id(&msg));
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	printf("fresh: the library loaded anew after exec: dac_init(5), context %" PRId64 ", message id %" PRId64 "\n", id,
	       msg);
}

/* ---- the fork gate ---- */

static int in_sender;   /* senders inside their call now */
static long gate_calls; /* sender calls made */

static int marking_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	__atomic_add_fetch(&in_sender, 1, __ATOMIC_SEQ_CST);
	/* 200 us of work, as a host building an RPC would (busy: a sleep would
	** leave the call's end to the scheduler's mercy under load). */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t1);
	while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 200000);
	__atomic_add_fetch(&gate_calls, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&in_sender, 1, __ATOMIC_SEQ_CST);
	return 0;
}

static void *releasing_main(void *arg) {
	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		dac_context *ctx = NULL;
		int64_t id = 0;
		MUST(dac_context_new(&ctx));
		MUST(dac_context_id(ctx, &id));
		for (int32_t w = 1; w <= 4; w++)
			MUST(dac_context_add_known_worker_id(ctx, w));
		MUST(dac_context_release(id)); /* 4 messages for the senders */
		MUST(dac_context_unref(ctx));
		struct timespec ts = {0, 2000 * 1000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void gate(int forks, int nonblocking) {
	MUST(dac_set_cleanup_sender(marking_sender, NULL));
	MUST(dac_set_cleanup_sender_nonblocking(nonblocking));
	MUST(dac_set_log_hook(count_log, NULL));
	MUST(dac_init(3));
	pthread_t threads[2];
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&threads[i], NULL, releasing_main, NULL) == 0);
	while (__atomic_load_n(&gate_calls, __ATOMIC_RELAXED) < 100)
		sched_yield();
	int mid_call = 0, busy_before = 0, bad_exit = 0;
	for (int i = 0; i < forks; i++) {
		busy_before += __atomic_load_n(&in_sender, __ATOMIC_SEQ_CST) > 0;
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0)
			_exit(__atomic_load_n(&in_sender, __ATOMIC_SEQ_CST) == 0 ? 0 : 3);
		char desc[128];
		wait_child(pid, desc, sizeof desc);
		if (strcmp(desc, "exit status 3") == 0)
			mid_call++;
		else if (strcmp(desc, "exit status 0") != 0)
			bad_exit++;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_join(threads[i], NULL) == 0);
	MUST(dac_cleanup_flush(30000, NULL));
	fprintf(stderr, "gate: a sender was mid-call just before %d of %d forks; %ld sender calls\n", busy_before, forks,
	        gate_calls);
	printf("children that found a sender mid-call: %d of %d\n", mid_call, forks);
	printf("children that did not exit cleanly: %d\n", bad_exit);
	printf("warnings logged: %ld\n", __atomic_load_n(&log_lines, __ATOMIC_RELAXED));
}

/* ---- the fork gate's bound ---- */

static int blocked_release; /* set to let the blocked sender return */

static int blocking_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	__atomic_add_fetch(&in_sender, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&blocked_release, __ATOMIC_ACQUIRE)) {
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	__atomic_sub_fetch(&in_sender, 1, __ATOMIC_SEQ_CST);
	return 0;
}

static double now_s(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void gate_blocked(void) {
	MUST(dac_set_cleanup_sender(blocking_sender, NULL));
	MUST(dac_init(3));
	dac_context *ctx = NULL;
	int64_t id = 0;
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 1));
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	while (__atomic_load_n(&in_sender, __ATOMIC_SEQ_CST) == 0)
		sched_yield();
	double t0 = now_s();
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(__atomic_load_n(&in_sender, __ATOMIC_SEQ_CST) == 1 ? 0 : 3);
	double waited = now_s() - t0;
	char desc[128];
	wait_child(pid, desc, sizeof desc);
	printf("child: %s (it found the blocked sender mid-call)\n", desc);
	printf("fork waited at least 2 s: %s\n", waited >= 1.99 ? "yes" : "NO");
	printf("fork waited less than 60 s: %s\n", waited < 60 ? "yes" : "NO");
	/* The parent goes on: the gate is open again. */
	__atomic_store_n(&blocked_release, 1, __ATOMIC_RELEASE);
	MUST(dac_cleanup_flush(30000, NULL));
	dac_cleanup_counters counters = {.size = sizeof counters};
	MUST(dac_cleanup_stats(&counters));
	printf("sent: %" PRId64 "\n", counters.sent);
}

int main(int argc, char **argv) {
	prog = argv[0];
	if (argc == 2 && strcmp(argv[1], "gate-blocked") == 0) {
		gate_blocked();
		return 0;
	}
	if ((argc == 3 || (argc == 4 && strcmp(argv[3], "nonblocking") == 0)) && strcmp(argv[1], "gate") == 0) {
		gate(atoi(argv[2]), argc == 4);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "fresh") == 0) {
		fresh();
		return 0;
	}
	REQUIRE(argc == 4 && strcmp(argv[1], "busy") == 0);
	busy(atoi(argv[2]), atoi(argv[3]));
	return 0;
}
