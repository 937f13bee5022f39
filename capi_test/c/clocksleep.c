/* clocksleep: the reaper's coarse clock sleeps while nobody needs the time,
** and what is recorded meanwhile is still current. Once unused for its
** awake spell (a second of ticks), dac-clock waits in futex and is not
** woken again while the library is not called; a lookup of a context then
** wakes it and records the current time, so a reap right after keeps the
** context just used and takes the one left alone. Which system call the
** thread waits in is read from /proc (futex: asleep; clock_nanosleep:
** ticking). */
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
	dac_context *c = NULL;
	int64_t touched = ((int64_t)5 << 48) | 1, untouched = ((int64_t)5 << 48) | 2, n = -1;
	MUST(dac_context_get_or_create(touched, &c));
	MUST(dac_context_unref(c));
	MUST(dac_context_get_or_create(untouched, &c));
	MUST(dac_context_unref(c));
	int64_t made = now_ms();
	REQUIRE(find_clock());
	printf("asleep once unused: %s\n", wait_asleep(1) ? "yes" : "no");
	long before = clock_switches();
	sleep_ms(300);
	printf("stays asleep while the library is not called: %s\n",
	       clock_switches() == before && clock_syscall() == SYS_futex ? "yes" : "no");
	/* Both contexts idle for longer than the bound below (by the monotonic
	** clock, whatever the coarse one did meanwhile), then one is used while
	** the clock sleeps: a time recorded from the sleeping word would make
	** it look as old as the other. */
	while (now_ms() - made < 1300)
		sleep_ms(50);
	MUST(dac_context_retrieve(touched, &c));
	MUST(dac_context_unref(c));
	SHOW(dac_reap_idle_contexts(1000, &n));
	printf("reaped: %" PRId64 ", the touched one: %s, the untouched one: %s\n", n,
	       dac_context_is_valid(touched) == DAC_OK ? "kept" : "reaped",
	       dac_context_is_valid(untouched) == DAC_OK ? "kept" : "reaped");
	printf("ticking again: %s\n", wait_asleep(0) ? "yes" : "no");
	return 0;
}
