/* leak: a long loop of what a worker does for every pass: a new context,
** retrieved and its handle dropped, a message id, a known worker now and
** then, a get-or-create of another worker's pass, releases. It samples the
** resident set (/proc/self/statm) and the Go heap (dac_debug_info's
** go_heap_bytes: live bytes after the last GC) at 10 points and prints them;
** the Go test checks that both stay flat after the first sample (the warm-up).
** Usage: leak ITERATIONS SECONDS (it stops at whichever comes first) */
#include "check.h"

#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_bytes(void) {
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	REQUIRE(f != NULL);
	REQUIRE(fscanf(f, "%ld %ld", &pages, &resident) == 2);
	fclose(f);
	return resident * sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
	REQUIRE(argc == 3);
	long iterations = strtol(argv[1], NULL, 10);
	double seconds = atof(argv[2]);
	REQUIRE(iterations >= 10 && seconds > 0);
	MUST(dac_init(3));
	double start = now(), deadline = start + seconds;
	long step = iterations / 10, done = 0;
	for (int sample = 1; sample <= 10; sample++) {
		for (long i = 0; i < step; i++, done++) {
			dac_context *ctx = NULL, *again = NULL, *other = NULL;
			int64_t id = 0, msg = 0, foreign = ((int64_t)5 << 48) | (done & 0xffffff);
			MUST(dac_context_new(&ctx));
			MUST(dac_context_id(ctx, &id));
			MUST(dac_context_retrieve(id, &again));
			MUST(dac_new_autograd_message_id(&msg));
			if ((done & 15) == 0) {
				/* no cleanup sender: the release counts a skipped message */
				MUST(dac_context_add_known_worker_id(again, 4));
				MUST(dac_context_add_send_function(again, msg, 1));
			}
			MUST(dac_context_get_or_create(foreign, &other));
			MUST(dac_context_release(foreign));
			MUST(dac_context_unref(other));
			MUST(dac_context_release(id));
			MUST(dac_context_unref(again));
			MUST(dac_context_unref(ctx));
		}
		printf("sample %d: iterations %ld, rss %ld, go_heap %" PRId64 "\n", sample, done, rss_bytes(),
		       debug_value("go_heap_bytes"));
		fflush(stdout);
		if (now() > deadline && sample < 10) {
			printf("stopped at the time budget (%.0f s)\n", seconds);
			break;
		}
	}
	printf("done: %ld iterations in %.1f s, num_contexts = %" PRId64 ", live_handles = %" PRId64 "\n", done,
	       now() - start, num_contexts(), debug_value("live_handles"));
	return 0;
}
