/* clockthread: the reaper's coarse clock ticks on one plain thread of the
** library's, named dac-clock, with every signal blocked (of 1-31 that can be) (a process-directed
** signal is never handled there), started by dac_init; and it ticks: a
** context idle for longer than the reaper's bound is reaped, one just
** used is not. */
#include "check.h"

#include <dirent.h>
#include <signal.h>
#include <time.h>

int main(void) {
	MUST(dac_init(3));
	int named = 0, all_blocked = 0;
	DIR *d = opendir("/proc/self/task");
	REQUIRE(d != NULL);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[512], line[256];
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		int is_clock = 0;
		while (fgets(line, sizeof line, f) != NULL) {
			if (strncmp(line, "Name:\tdac-clock", 15) == 0)
				is_clock = 1, named++;
			/* Signal n is bit n-1; SIGKILL and SIGSTOP cannot be blocked
			** (and glibc keeps two real-time ones of its own). */
			unsigned long long mask = 0;
			if (is_clock && sscanf(line, "SigBlk: %llx", &mask) == 1) {
				int every = 1;
				for (int sig = 1; sig < 32; sig++)
					if (sig != SIGKILL && sig != SIGSTOP && !(mask >> (sig - 1) & 1))
						every = 0;
				all_blocked += every;
			}
		}
		fclose(f);
	}
	closedir(d);
	printf("dac-clock threads: %d, with every signal blocked: %d\n", named, all_blocked);
	/* The fresh context's use and the reap must fall within the bound of
	** each other: a stall of the test between them (a loaded machine) would
	** let the fresh one age past it too. Such a try is told by the
	** monotonic clock and made again on new ids, so the transcript holds
	** only what the library does. */
	dac_context *c = NULL;
	for (int64_t try = 0;; try++) {
		REQUIRE(try < 20);
		int64_t old = ((int64_t)5 << 48) | (2 * try + 1), fresh = ((int64_t)5 << 48) | (2 * try + 2), n = -1;
		MUST(dac_context_get_or_create(old, &c));
		MUST(dac_context_unref(c));
		struct timespec wait = {2, 0}; /* far past the bound */
		nanosleep(&wait, NULL);
		int64_t used = now_ms();
		MUST(dac_context_get_or_create(fresh, &c));
		MUST(dac_context_unref(c));
		int rc = dac_reap_idle_contexts(1000, &n);
		if (now_ms() - used >= 500) { /* stalled: the fresh one may have aged past the bound */
			int released;
			MUST(dac_context_release_if_present(old, &released));
			MUST(dac_context_release_if_present(fresh, &released));
			continue;
		}
		SHOW(rc); /* dac_reap_idle_contexts(1000, &n)'s status */
		printf("reaped: %" PRId64 ", the old one: %s, the fresh one: %s\n", n,
		       dac_context_is_valid(old) == DAC_OK ? "kept" : "reaped",
		       dac_context_is_valid(fresh) == DAC_OK ? "kept" : "reaped");
		break;
	}
	return 0;
}
