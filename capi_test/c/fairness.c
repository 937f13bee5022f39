/* fairness: THREADS threads call into Go in tight loops, more threads than
** Go has Ps (the Go test runs it with GOMAXPROCS=1): every one of them
** makes progress. A call from C never moves its P's scheduler tick, so a
** thread that calls without pause cannot keep its P from the others: with
** no P idle, Go's monitor takes it back after 10 ms, as it does from a
** goroutine that runs long.
** The main thread waits until each has made CALLS calls, for 60 s at most. */
#include "check.h"

#include <pthread.h>

#define THREADS 4
#define CALLS 10000

static volatile int stop;
static int64_t made[THREADS];
static int failed[THREADS];

static void *caller(void *arg) {
	int i = (int)(intptr_t)arg;
	int64_t v;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		if (dac_max_id(&v) != DAC_OK)
			failed[i] = 1;
		__atomic_store_n(&made[i], made[i] + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(void) {
	MUST(dac_init(0));
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, caller, (void *)(intptr_t)i) == 0);
	int64_t deadline = now_ms() + 60000;
	int all = 0;
	while (!all && now_ms() < deadline) {
		struct timespec nap = {0, 1000000};
		nanosleep(&nap, NULL);
		all = 1;
		for (int i = 0; i < THREADS; i++)
			all &= __atomic_load_n(&made[i], __ATOMIC_RELAXED) >= CALLS;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_join(t[i], NULL) == 0);
	int ok = 1;
	for (int i = 0; i < THREADS; i++)
		ok &= !failed[i];
	printf("%d threads, each made %d calls: %d\n", THREADS, CALLS, all);
	if (!all) {
		for (int i = 0; i < THREADS; i++)
			printf("  thread %d: %" PRId64 " calls\n", i, made[i]);
	}
	printf("every call worked: %d\n", ok);
	return 0;
}
