/* clocksleep: the reaper's coarse clock sleeps while nobody needs the time,
** and what is recorded meanwhile is still current. Once unused for its
** awake spell (a second of ticks), dac-clock waits in futex and is not
** woken again while the library is not called; a lookup of a context then
** wakes it and records the current time, so the context just used is idle
** for less than the one left alone by the time between their uses (what
** the reaper compares with its bound). Which system call the thread waits
** in is read from /proc (futex: asleep), and its voluntary context switches
** (woken: it ran, and waited again). Nothing here depends on how long
** anything takes: every wait is for a state, bounded by a minute only
** against a hang. */
#include "check.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <time.h>

static char clock_dir[512];

/* The dac-clock thread's /proc directory, into clock_dir; 0 if none. */
static int find_clock(void) {
	DIR *d = opendir("/proc/self/task");
	REQUIRE(d != NULL);
	struct dirent *e;
	int found = 0;
	while (!found && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[512], name[64] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(name, sizeof name, f) != NULL && strcmp(name, "dac-clock\n") == 0) {
			snprintf(clock_dir, sizeof clock_dir, "/proc/self/task/%s", e->d_name);
			found = 1;
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

/* The system call the clock thread is in (-1: running). */
static long clock_syscall(void) {
	char path[600], line[256];
	snprintf(path, sizeof path, "%s/syscall", clock_dir);
	FILE *f = fopen(path, "r");
	REQUIRE(f != NULL);
	REQUIRE(fgets(line, sizeof line, f) != NULL);
	fclose(f);
	return strncmp(line, "running", 7) == 0 ? -1 : strtol(line, NULL, 10);
}

/* The clock thread's voluntary context switches so far. */
static long clock_switches(void) {
	char path[600], line[256];
	long n = -1;
	snprintf(path, sizeof path, "%s/status", clock_dir);
	FILE *f = fopen(path, "r");
	REQUIRE(f != NULL);
	while (fgets(line, sizeof line, f) != NULL)
		sscanf(line, "voluntary_ctxt_switches: %ld", &n);
	fclose(f);
	return n;
}

/* Waits (up to a minute: a loaded machine delays ticks, never adds them)
** until the clock thread waits in futex (want 1) or not (want 0). */
static int wait_asleep(int want) {
	for (int i = 0; i < 6000; i++) {
		if ((clock_syscall() == SYS_futex) == want)
			return 1;
		sleep_ms(10);
	}
	return 0;
}

int main(void) {
	MUST(dac_init(3));
	dac_context *c = NULL, *left = NULL;
	int64_t touched = ((int64_t)5 << 48) | 1, untouched = ((int64_t)5 << 48) | 2;
	MUST(dac_context_get_or_create(touched, &c));
	MUST(dac_context_unref(c));
	MUST(dac_context_get_or_create(untouched, &left)); /* its reference kept: holding is not using */
	int64_t made = now_ms();
	REQUIRE(find_clock());
	printf("asleep once unused: %s\n", wait_asleep(1) ? "yes" : "no");
	long before = clock_switches();
	sleep_ms(300);
	printf("stays asleep while the library is not called: %s\n",
	       clock_switches() == before && clock_syscall() == SYS_futex ? "yes" : "no");
	/* Both contexts unused for WAITED_MS at least (by the monotonic clock),
	** then one is used while the clock sleeps: a time recorded from the
	** sleeping word would make it look older than the other, and one
	** recorded from its last tick (a second after the contexts were made)
	** would make the two differ by about a second. Read the touched one's
	** idle time first: both only grow, so a stall anywhere only makes the
	** untouched one's larger. */
	enum { WAITED_MS = 1600, CURRENT_MS = 1500 };
	while (now_ms() - made < WAITED_MS)
		sleep_ms(50);
	MUST(dac_context_retrieve(touched, &c));
	int64_t idle_touched = -1, idle_untouched = -1;
	MUST(dac_context_times(c, NULL, &idle_touched));
	MUST(dac_context_times(left, NULL, &idle_untouched));
	MUST(dac_context_unref(c));
	MUST(dac_context_unref(left));
	printf("the touched one idle for less than the untouched one, by the time between their uses: %s\n",
	       idle_touched >= 0 && idle_untouched - idle_touched >= CURRENT_MS ? "yes" : "no");
	if (!(idle_touched >= 0 && idle_untouched - idle_touched >= CURRENT_MS))
		fprintf(stderr, "idle: touched %" PRId64 " ms, untouched %" PRId64 " ms\n", idle_touched, idle_untouched);
	/* Woken: it ran, and waited again (a tick's sleep, or futex once more). */
	int woken = 0;
	for (int i = 0; i < 6000 && !woken; i++) {
		woken = clock_switches() > before;
		if (!woken)
			sleep_ms(10);
	}
	printf("woken by the lookup: %s\n", woken ? "yes" : "no");
	return 0;
}
