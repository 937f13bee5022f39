/* keeps_its_p: one C thread calls into Go (dac_num_contexts) every 100 us,
** until it has made MIN_CALLS calls and MIN_MS have passed, while Go has
** another P idle (the Go test runs it with GOMAXPROCS=2). It prints how
** many times Go's own threads slept in between (their voluntary context
** switches: every thread of the process but this one and dac-clock),
** and whether that stayed within a bound: WAKES_BASE, plus one per
** MS_PER_WAKE milliseconds.
**
** Go's monitor (sysmon) wakes every 20 us after it has taken a P back,
** backing off to 10 ms only after 50 looks without taking one. A thread
** out in C never moves its P's scheduler tick, so after 10 ms Go's runtime
** as shipped takes that P back at every look, though nothing waits for it,
** and hands it to a thread that wakes, finds no work and sleeps: some 10
** wakes a millisecond for as long as the thread calls. With the overlay's
** retake-only-for-work the monitor leaves the P while another is idle and
** nothing waits, and backs off: an initial burst of some 60 looks, then
** one per 10 ms. The bound allows twice that. */
#include "check.h"

#include <dirent.h>

#define MIN_CALLS 1000
#define MIN_MS 300
#define PAUSE_NS 100000
#define WAKES_BASE 120
#define MS_PER_WAKE 5

/* The voluntary context switches of every thread of this process but
** `self` and dac-clock, summed. */
static int64_t go_threads_slept(const char *self) {
	DIR *d = opendir("/proc/self/task");
	REQUIRE(d != NULL);
	int64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0)
			continue;
		char path[300], line[256];
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue; /* the thread has ended */
		int clock = fgets(line, sizeof line, f) != NULL && strncmp(line, "dac-clock", 9) == 0;
		fclose(f);
		if (clock)
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		while (fgets(line, sizeof line, f) != NULL)
			if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
				sum += strtoll(line + 24, NULL, 10);
		fclose(f);
	}
	closedir(d);
	return sum;
}

int main(void) {
	MUST(dac_init(0));
	char self[32];
	FILE *f = fopen("/proc/thread-self/stat", "r");
	REQUIRE(f != NULL && fscanf(f, "%31s", self) == 1);
	fclose(f);
	int64_t n;
	for (int i = 0; i < 100; i++)
		MUST(dac_num_contexts(&n));
	int64_t before = go_threads_slept(self), t0 = now_ms(), calls = 0;
	int ok = 1;
	while (calls < MIN_CALLS || now_ms() - t0 < MIN_MS) {
		ok &= dac_num_contexts(&n) == DAC_OK;
		calls++;
		struct timespec nap = {0, PAUSE_NS};
		nanosleep(&nap, NULL);
	}
	int64_t elapsed = now_ms() - t0, woke = go_threads_slept(self) - before;
	int64_t bound = WAKES_BASE + elapsed / MS_PER_WAKE;
	fprintf(stderr, "%" PRId64 " calls in %" PRId64 " ms: Go's threads slept %" PRId64 " times (bound %" PRId64 ")\n",
		calls, elapsed, woke, bound);
	printf("every call worked: %d\n", ok);
	printf("Go's threads slept within the bound: %d\n", woke <= bound);
	return 0;
}
