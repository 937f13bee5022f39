/* busythreads: THREADS C threads (argv[1], default 64) create, look up and
** release contexts for SECONDS (argv[2], default 8), each pausing a random
** 0-20 ms every 256 passes, as a host's RPC threads do between bursts.
** Every call is timed. Prints one JSON object: passes (create + lookup +
** release), calls that took over 100 ms, and the slowest call in ms.
**
** `make bench` runs it against the library and against the same library
** built with Go's runtime as shipped (build/nooverlay), alternating: a C
** host with many busy threads must not be slower or less responsive with
** the overlay than without it. TestRuntimeBusyThreads (capi_test) runs it
** for 3 s the same way and reads the same object: it holds the
** responsiveness side in `make test`. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <distautograd.h>

#define MAX_THREADS 1024

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t deadline;

struct result {
	int64_t passes, slow, worst_ns, errors;
} results[MAX_THREADS];

/* Times one call: counts it as slow past 100 ms. */
#define TIMED(r, call)                                                         \
	do {                                                                       \
		int64_t t0_ = now_ns();                                                \
		if ((call) != DAC_OK)                                                  \
			(r)->errors++;                                                     \
		int64_t d_ = now_ns() - t0_;                                           \
		if (d_ > 100 * 1000000)                                                \
			(r)->slow++;                                                       \
		if (d_ > (r)->worst_ns)                                                \
			(r)->worst_ns = d_;                                                \
	} while (0)

static void *worker(void *arg) {
	struct result *r = arg;
	unsigned seed = (unsigned)(r - results) * 2654435761u + 1;
	int64_t ops = 0;
	while (now_ns() < deadline) {
		dac_context *ctx = NULL, *found = NULL;
		int64_t id = -1;
		TIMED(r, dac_context_new_id(&ctx, &id));
		TIMED(r, dac_context_retrieve(id, &found));
		TIMED(r, dac_context_release(id));
		TIMED(r, dac_context_unref(found));
		TIMED(r, dac_context_unref(ctx));
		TIMED(r, dac_clear_current_context());
		r->passes++;
		if (++ops % 256 == 0) {
			struct timespec pause = {0, (long)(rand_r(&seed) % 20001) * 1000};
			nanosleep(&pause, NULL);
		}
	}
	return NULL;
}

int main(int argc, char **argv) {
	int threads = argc > 1 ? atoi(argv[1]) : 64;
	double seconds = argc > 2 ? atof(argv[2]) : 8;
	if (threads < 1 || threads > MAX_THREADS || seconds <= 0) {
		fprintf(stderr, "usage: busythreads [THREADS [SECONDS]]\n");
		return 2;
	}
	if (dac_init(0) != DAC_OK) {
		fprintf(stderr, "dac_init: %s\n", dac_last_error());
		return 1;
	}
	pthread_t t[MAX_THREADS];
	deadline = now_ns() + (int64_t)(seconds * 1e9);
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&t[i], NULL, worker, &results[i]) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	}
	struct result sum = {0, 0, 0, 0};
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		sum.passes += results[i].passes;
		sum.slow += results[i].slow;
		sum.errors += results[i].errors;
		if (results[i].worst_ns > sum.worst_ns)
			sum.worst_ns = results[i].worst_ns;
	}
	printf("{\"threads\": %d, \"seconds\": %g, \"passes\": %" PRId64 ", \"calls_over_100ms\": %" PRId64
	       ", \"worst_ms\": %.1f, \"errors\": %" PRId64 "}\n",
	       threads, seconds, sum.passes, sum.slow, sum.worst_ns / 1e6, sum.errors);
	return sum.errors != 0;
}
