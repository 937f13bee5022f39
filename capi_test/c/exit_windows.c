/* exit_windows: a C host ends while its cleanup sender misbehaves: blocked
** for good (a peer that never answers), failing (retries pending with
** backoff), slow (half a second per message, a queue behind it). Usage:
**   exit_windows SENDER MODE
** SENDER: blocked | failing | slow. MODE:
**   return       main returns while the sender is in a call;
**   exit-thread  another thread calls exit(0) while main waits in
**                dac_cleanup_flush with no bound;
**   timeout      dac_set_cleanup_sender_timeout(NULL, NULL, 200) first: it
**                returns within the hang bound, DAC_ERR_TIMEOUT if the
**                sender was still in a call (a blocked one always is), and
**                the replaced sender is never called again; then main
**                returns.
** The Go test runs each under a deadline: the process must end, status 0. */
#include "check.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define BOUND_MS 10000

static int entries;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static int blocked(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	__atomic_add_fetch(&entries, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&mu);
	for (;;)
		pthread_cond_wait(&never, &mu);
	return 0;
}

static int failing(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	__atomic_add_fetch(&entries, 1, __ATOMIC_SEQ_CST);
	return 1;
}

static int slow(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	__atomic_add_fetch(&entries, 1, __ATOMIC_SEQ_CST);
	struct timespec ts = {0, 500 * 1000 * 1000};
	nanosleep(&ts, NULL);
	return 0;
}

static void quiet_log(void *user_data, int level, const char *message) {
	(void)user_data, (void)level, (void)message;
}

static void release_with_workers(int64_t first, int n) {
	for (int i = 0; i < n; i++) {
		dac_context *ctx = NULL;
		MUST(dac_context_get_or_create(first + i, &ctx));
		MUST(dac_context_add_known_worker_id(ctx, 1 + i % 4));
		MUST(dac_context_release(first + i));
		MUST(dac_context_unref(ctx));
	}
}

static void *exit_from_thread(void *arg) {
	(void)arg;
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL);
	printf("exit(0) from another thread\n");
	fflush(stdout);
	exit(0);
}

int main(int argc, char **argv) {
	REQUIRE(argc == 3);
	const char *kind = argv[1], *mode = argv[2];
	dac_cleanup_sender sender = strcmp(kind, "blocked") == 0   ? blocked
	                            : strcmp(kind, "failing") == 0 ? failing
	                            : strcmp(kind, "slow") == 0    ? slow
	                                                           : NULL;
	REQUIRE(sender != NULL);
	MUST(dac_init(3));
	MUST(dac_set_log_hook(quiet_log, NULL));
	MUST(dac_set_cleanup_sender(sender, NULL));
	release_with_workers((int64_t)5 << 48, 8);
	int64_t deadline = now_ms() + BOUND_MS;
	while (__atomic_load_n(&entries, __ATOMIC_SEQ_CST) == 0 && now_ms() < deadline) {
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("the sender was called: %s\n", __atomic_load_n(&entries, __ATOMIC_SEQ_CST) > 0 ? "yes" : "NO");

	if (strcmp(mode, "timeout") == 0) {
		int64_t t0 = now_ms();
		int rc = dac_set_cleanup_sender_timeout(NULL, NULL, 200);
		int64_t took = now_ms() - t0;
		int called = __atomic_load_n(&entries, __ATOMIC_SEQ_CST);
		if (strcmp(kind, "blocked") == 0)
			printf("dac_set_cleanup_sender_timeout(NULL, NULL, 200) -> %s\n", dac_status_string(rc));
		else /* a call may or may not be in progress: either answer is right */
			printf("dac_set_cleanup_sender_timeout(NULL, NULL, 200) -> %s\n",
			       rc == DAC_OK || rc == DAC_ERR_TIMEOUT ? "DAC_OK or DAC_ERR_TIMEOUT" : dac_status_string(rc));
		printf("returned within the bound: %s\n", took < BOUND_MS ? "yes" : "NO");
		/* Replaced: new releases are skipped, pending retries find no sender. */
		release_with_workers((int64_t)6 << 48, 8);
		int64_t skipped = debug_value("cleanup_skipped");
		printf("releases after it told nobody: %s\n", skipped == 8 ? "yes" : "NO");
		/* Retries of the messages pending come due meanwhile (10 ms, 20 ms,
		** ...): none may reach the replaced sender. Not a synchronization:
		** a shorter wait only gives a broken promise less chance to show. */
		struct timespec ts = {0, 300 * 1000 * 1000};
		nanosleep(&ts, NULL);
		printf("the replaced sender was called again: %s\n",
		       __atomic_load_n(&entries, __ATOMIC_SEQ_CST) == called ? "no" : "YES");
	} else if (strcmp(mode, "exit-thread") == 0) {
		pthread_t t;
		REQUIRE(pthread_create(&t, NULL, exit_from_thread, NULL) == 0);
		int64_t pending = 0;
		dac_cleanup_flush(INT64_MAX, &pending);
		/* Reached only if everything was delivered before exit(0) came. */
		pthread_join(t, NULL);
	} else {
		REQUIRE(strcmp(mode, "return") == 0);
	}
	printf("main returns\n");
	fflush(stdout);
	return 0;
}
