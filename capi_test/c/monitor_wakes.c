/* monitor_wakes: how often Go's own threads wake while one C thread calls
** into Go after pauses, as a host's RPC threads do. Each of N rounds
** sleeps PAUSE_MS, then creates and releases a context (two calls into
** Go). It prints the voluntary context switches of the threads Go's
** runtime started in the process over the rounds (every thread but the
** main one, which calls, and the library's dac-clock): with Go's runtime
** as shipped, each call after a pause wakes Go's monitor (sysmon) from
** its deep sleep, and the monitor then takes the thread's P back and
** hands it off; the library's overlay leaves the monitor asleep while
** another P is idle (docs/go-runtime.md: monitor-sleeps-beside-an-idle-p).
**
** usage: monitor_wakes N PAUSE_MS */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include "check.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The voluntary switches of the threads other than the calling one and
** dac-clock, summed. */
static long go_threads_switches(long self) {
	DIR *d = opendir("/proc/self/task");
	REQUIRE(d != NULL);
	long sum = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long tid = atol(e->d_name);
		if (tid <= 0 || tid == self)
			continue;
		char path[64], line[256], name[64] = "";
		long switches = -1;
		snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue; /* gone */
		while (fgets(line, sizeof line, f) != NULL) {
			if (sscanf(line, "Name:\t%63s", name) == 1)
				continue;
			sscanf(line, "voluntary_ctxt_switches:\t%ld", &switches);
		}
		fclose(f);
		if (strcmp(name, "dac-clock") != 0 && switches > 0)
			sum += switches;
	}
	closedir(d);
	return sum;
}

static void round_trip(void) {
	dac_context *ctx = NULL;
	int64_t id = 0;
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	MUST(dac_context_unref(ctx));
	MUST(dac_context_release(id));
}

int main(int argc, char **argv) {
	REQUIRE(argc == 3);
	int n = atoi(argv[1]);
	long pause_ms = atol(argv[2]);
	REQUIRE(n > 0 && pause_ms > 0);
	long self = (long)syscall(SYS_gettid);
	MUST(dac_init(0));
	for (int i = 0; i < 20; i++) /* Go's runtime settles: its threads started */
		round_trip();
	sleep_ms(50);
	long before = go_threads_switches(self);
	for (int i = 0; i < n; i++) {
		sleep_ms(pause_ms);
		round_trip();
	}
	long after = go_threads_switches(self);
	printf("go threads' voluntary switches: %ld over %d rounds\n", after - before, n);
	return 0;
}
