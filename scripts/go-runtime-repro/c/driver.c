/* The C side of the reproducers of docs/go-runtime.md: threads of a C
** program calling into a Go c-shared library (lib.go), as a C or C++
** program that embeds Go code does. Build:
**
**   go build -buildmode=c-shared -o librepro.so .
**   cc -O2 -pthread -I. c/driver.c -o driver -L. -lrepro -Wl,-rpath,'$ORIGIN'
**
** and run `./driver MODE THREADS MILLISECONDS`:
**
**   loop    each thread calls an empty Go function in a tight loop (a lock
**           every call takes, a P taken back at every look of the monitor);
**   sparse  each thread calls it every 2 ms, asleep in between (how often
**           Go's monitor wakes for calls that come now and then);
**   turns   the threads take turns: one call every 4 ms, each from the
**           next thread, as the threads of a pool serve requests (how
**           often Go's monitor wakes when every call comes from a thread
**           that has not called for a while);
**   mixed   each thread calls a Go function that runs 200 us, then runs C
**           code for 200 us, more threads than Ps (how long a call waits
**           for a P when others hold them out in C);
**   timer   each thread calls the empty Go function in a tight loop, as in
**           loop, while one more thread calls a Go function that waits
**           50 ms on a Go timer, 5 times one after the other (how long a
**           timer waits on a P that a looping C thread holds out in C).
**           The loop stops when the waits are done, or at MILLISECONDS
**           if they are not.
**
** It prints one line: the calls, the wall and the CPU ns per call of the
** calling threads, the CPU time of the process's other threads (Go's
** monitor and the threads it wakes) and the context switches of the
** process, both per 1,000 calls, and the calls that took over 1 ms beyond
** their own work (max: the longest; in a loop, the batches of 1,000
** calls). In timer mode the line goes on with the timed waits: how many
** were made, the longest and the median in ms, and whether the last one
** returned only after the loop had stopped at MILLISECONDS (with a bound
** well past five waits, 1 is a timer that did not run while the loop
** ran; no wait begins after the loop stopped). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "librepro.h"

static const char *mode;
static int64_t duration_ns;

/* turns mode: the calls' spacing, and when the first was due. */
enum { TURN_NS = 4000000 };
static int64_t turns_start;

/* timer mode: the waits the waiting thread makes, of WAIT_MS each. */
enum { WAITS = 5, WAIT_MS = 50 };

/* timer mode: loopers that have made their first calls, loopers still
** looping, and the waiting thread's word that it is done. */
static int started, looping, waits_done;

typedef struct {
	pthread_t thread;
	int index; /* turns mode: the thread's place in the turns */
	int64_t calls, over_1ms, max_ns, cpu_ns, wall_ns;
} worker;

static int nthreads;

typedef struct {
	pthread_t thread;
	int64_t took_ns[WAITS];
	int waits, ended_after_loop;
} waiter;

static int64_t now(clockid_t clock) {
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_c(int64_t ns) {
	int64_t end = now(CLOCK_MONOTONIC) + ns;
	while (now(CLOCK_MONOTONIC) < end) {
	}
}

/* turns mode: sleeps until w's next turn, its calls so far having had
** theirs (every thread's k-th call in order, TURN_NS apart). */
static void wait_turn(const worker *w) {
	int64_t due = turns_start + (w->calls * nthreads + w->index) * (int64_t)TURN_NS;
	struct timespec ts = {due / 1000000000, due % 1000000000};
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static void *run(void *arg) {
	worker *w = arg;
	int64_t start = now(CLOCK_MONOTONIC), cpu0 = now(CLOCK_THREAD_CPUTIME_ID);
	/* In a loop, the clock is read around batches of 1,000 calls: read
	** around each, it would cost more than the call. */
	int timer = strcmp(mode, "timer") == 0;
	int batch = strcmp(mode, "loop") == 0 || timer ? 1000 : 1;
	if (strcmp(mode, "turns") == 0) {
		wait_turn(w);
	}
	while (now(CLOCK_MONOTONIC) - start < duration_ns &&
	       !(timer && __atomic_load_n(&waits_done, __ATOMIC_ACQUIRE))) {
		int64_t t0 = now(CLOCK_MONOTONIC), own = 0;
		if (strcmp(mode, "mixed") == 0) {
			ReproSpin(200);
			own = 200000;
		} else {
			for (int i = 0; i < batch; i++) {
				ReproNoop();
			}
		}
		int64_t took = now(CLOCK_MONOTONIC) - t0 - own;
		w->calls += batch;
		if (took > 1000000) {
			w->over_1ms++;
		}
		if (took > w->max_ns) {
			w->max_ns = took;
		}
		if (timer && w->calls == batch) {
			__atomic_add_fetch(&started, 1, __ATOMIC_RELEASE);
		}
		if (strcmp(mode, "sparse") == 0) {
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		} else if (strcmp(mode, "turns") == 0) {
			wait_turn(w);
		} else if (strcmp(mode, "mixed") == 0) {
			spin_c(200000);
		}
	}
	w->cpu_ns = now(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	w->wall_ns = now(CLOCK_MONOTONIC) - start;
	if (timer) {
		__atomic_sub_fetch(&looping, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void nap_ms(long ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* timer mode's waiting thread: once every looper is calling (and 20 ms
** more, for Go's monitor to settle on them), it waits on a Go timer WAITS
** times, timing each wait in C. A wait that returns after the loop has
** stopped at its bound is the last, and is reported as such. */
static void *wait_timers(void *arg) {
	waiter *w = arg;
	while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) < __atomic_load_n(&looping, __ATOMIC_ACQUIRE)) {
		nap_ms(1);
	}
	nap_ms(20);
	while (w->waits < WAITS && __atomic_load_n(&looping, __ATOMIC_ACQUIRE) > 0) {
		int64_t t0 = now(CLOCK_MONOTONIC);
		ReproSleep(WAIT_MS);
		w->took_ns[w->waits++] = now(CLOCK_MONOTONIC) - t0;
		if (__atomic_load_n(&looping, __ATOMIC_ACQUIRE) == 0) {
			w->ended_after_loop = 1;
		}
	}
	__atomic_store_n(&waits_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int by_value(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t process_cpu(struct rusage *ru) {
	getrusage(RUSAGE_SELF, ru);
	return ((int64_t)ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1000;
}

int main(int argc, char **argv) {
	if (argc != 4 || (strcmp(argv[1], "loop") && strcmp(argv[1], "sparse") && strcmp(argv[1], "mixed") &&
	                  strcmp(argv[1], "timer") && strcmp(argv[1], "turns"))) {
		fprintf(stderr, "usage: %s loop|sparse|turns|mixed|timer THREADS MILLISECONDS\n", argv[0]);
		return 2;
	}
	mode = argv[1];
	int n = atoi(argv[2]);
	duration_ns = (int64_t)atoi(argv[3]) * 1000000;
	if (n < 1 || n > 1024 || duration_ns <= 0) {
		fprintf(stderr, "THREADS in 1..1024, MILLISECONDS > 0\n");
		return 2;
	}
	ReproNoop(); /* the runtime is up, its package initialization done */
	worker *ws = calloc((size_t)n, sizeof *ws);
	struct rusage ru0, ru1;
	int timer = strcmp(mode, "timer") == 0;
	waiter wt = {0};
	looping = n;
	int64_t cpu0 = process_cpu(&ru0);
	nthreads = n;
	turns_start = now(CLOCK_MONOTONIC) + TURN_NS;
	for (int i = 0; i < n; i++) {
		ws[i].index = i;
		if (pthread_create(&ws[i].thread, NULL, run, &ws[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	if (timer && pthread_create(&wt.thread, NULL, wait_timers, &wt) != 0) {
		perror("pthread_create");
		return 1;
	}
	int64_t calls = 0, over = 0, max = 0, callers_cpu = 0, callers_wall = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(ws[i].thread, NULL);
		calls += ws[i].calls;
		over += ws[i].over_1ms;
		callers_cpu += ws[i].cpu_ns;
		callers_wall += ws[i].wall_ns;
		if (ws[i].max_ns > max) {
			max = ws[i].max_ns;
		}
	}
	if (timer) {
		pthread_join(wt.thread, NULL);
	}
	int64_t cpu1 = process_cpu(&ru1);
	long csw = (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw);
	/* ns per call: each thread's wall time over its calls (the lock's
	** waits are in it, asleep or not). */
	printf("mode=%s threads=%d calls=%lld ns_per_call=%.1f cpu_ns_per_call=%.1f other_cpu_us_per_1000_calls=%.1f "
	       "csw_per_1000_calls=%.1f over_1ms=%lld max_us=%lld",
	       mode, n, (long long)calls, (double)callers_wall / (double)calls, (double)callers_cpu / (double)calls,
	       (double)(cpu1 - cpu0 - callers_cpu) / 1000.0 / ((double)calls / 1000.0),
	       (double)csw / ((double)calls / 1000.0), (long long)over, (long long)(max / 1000));
	if (timer) {
		/* The waits' order is no longer needed: sorted for the median. */
		qsort(wt.took_ns, (size_t)wt.waits, sizeof wt.took_ns[0], by_value);
		double median = wt.waits == 0 ? 0
		                : wt.waits % 2 ? (double)wt.took_ns[wt.waits / 2]
		                               : (wt.took_ns[wt.waits / 2 - 1] + wt.took_ns[wt.waits / 2]) / 2.0;
		printf(" waits=%d wait_max_ms=%.1f wait_median_ms=%.1f ended_after_loop=%d", wt.waits,
		       wt.waits ? (double)wt.took_ns[wt.waits - 1] / 1e6 : 0.0, median / 1e6, wt.ended_after_loop);
	}
	printf("\n");
	free(ws);
	return 0;
}
