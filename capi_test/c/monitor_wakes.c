/* monitor_wakes: how often the process's other threads wake while one C
** thread calls the library after pauses, as a host's RPC threads do. Each
** of N rounds sleeps PAUSE_MS, then makes its calls:
**
** - new: creates and releases a context, two calls into Go.
**   With Go's runtime as shipped, each call after a pause wakes Go's
**   monitor (sysmon) from its deep sleep, and the monitor then takes the
**   thread's P back and hands it off; the library's overlay leaves the
**   monitor asleep while another P is idle (docs/go-runtime.md:
**   monitor-sleeps-beside-an-idle-p).
** - lookup: retrieves a context made before the rounds and drops the
**   reference, served in C: nothing else has cause to wake.
**
** It prints the voluntary context switches of every thread but the main
** one, which calls (Go's runtime's threads: the library starts none of its
** own), summed over the rounds.
**
** usage: monitor_wakes N PAUSE_MS new|lookup */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include "check.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The voluntary switches of the threads other than the calling one,
** summed. */
static long others_switches(long self) {
	DIR *d = opendir("/proc/self/task");
	REQUIRE(d != NULL);
	long sum = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long tid = atol(e->d_name);
		if (tid <= 0 || tid == self)
			continue;
		char path[64], line[256];
		long switches = -1;
		snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue; /* gone */
		while (fgets(line, sizeof line, f) != NULL)
			sscanf(line, "voluntary_ctxt_switches:\t%ld", &switches);
		fclose(f);
		if (switches > 0)
			sum += switches;
	}
	closedir(d);
	return sum;
}

static int64_t looked_up; /* the context the lookup rounds retrieve */

static void lookup(void) {
	dac_context *ctx = NULL;
	MUST(dac_context_retrieve(looked_up, &ctx));
	MUST(dac_context_unref(ctx));
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
	REQUIRE(argc == 4);
	int n = atoi(argv[1]);
	long pause_ms = atol(argv[2]);
	REQUIRE(n > 0 && pause_ms > 0);
	void (*calls)(void) = strcmp(argv[3], "lookup") == 0 ? lookup : strcmp(argv[3], "new") == 0 ? round_trip : NULL;
	REQUIRE(calls != NULL);
	long self = (long)syscall(SYS_gettid);
	MUST(dac_init(0));
	dac_context *ctx = NULL;
	looked_up = ((int64_t)5 << 48) | 1; /* another worker's, as an RPC thread retrieves */
	MUST(dac_context_get_or_create(looked_up, &ctx));
	MUST(dac_context_unref(ctx));
	for (int i = 0; i < 20; i++) /* Go's runtime settles: its threads started */
		round_trip();
	sleep_ms(50);
	long before = others_switches(self);
	for (int i = 0; i < n; i++) {
		sleep_ms(pause_ms);
		calls();
	}
	long after = others_switches(self);
	printf("other threads' voluntary switches: %ld over %d rounds\n", after - before, n);
	return 0;
}
