/* schedyield: calls into Go yield on a busy scheduler slot (P) at most once
** per 8 ms, and never on a quiet one (internal/ptick says why), as
** dac_debug_info's sched_yields counts; every call still does its work.
**
** Quiet: two calls into Go each 2 ms or more for 100 ms (at most 8 in an
** 8 ms interval, 12 by the first clock read past its end, under ptick's
** 16; sleeping longer under load only spreads them out) yields 0 times. Busy: calls back to back yield within 10 s (the
** first busy interval that ends does, however the thread is held off), and
** at most (T / 8 ms + 1) times on each P over T ms (at most one P a core). */
#include "check.h"

#include <time.h>
#include <unistd.h>

static int cycle(void) {
	dac_context *c = NULL;
	int64_t id = -1;
	return dac_context_new_id(&c, &id) == DAC_OK && dac_context_unref(c) == DAC_OK && dac_context_release(id) == DAC_OK;
}

int main(void) {
	MUST(dac_init(4));
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	REQUIRE(cores >= 1);
	int calls_ok = 1;

	int64_t before = debug_value("sched_yields");
	for (int i = 0; i < 50; i++) {
		calls_ok &= cycle();
		struct timespec pause = {0, 2 * 1000000};
		nanosleep(&pause, NULL);
	}
	printf("quiet calls: %" PRId64 " yields\n", debug_value("sched_yields") - before);

	before = debug_value("sched_yields");
	int64_t t0 = now_ns(), yields = 0;
	while (yields == 0 && now_ns() - t0 < 10 * 1000000000LL) {
		for (int i = 0; i < 1000; i++)
			calls_ok &= cycle();
		yields = debug_value("sched_yields") - before; /* a call into Go too */
	}
	int64_t t1 = now_ns();
	int64_t most = cores * ((t1 - t0) / 8000000 + 1);
	printf("busy calls: yielded: %d, within the bound: %d\n", yields >= 1, yields <= most);
	if (yields > most)
		printf("  %" PRId64 " yields over %" PRId64 " ms (at most %" PRId64 ")\n", yields, (t1 - t0) / 1000000, most);
	printf("every call worked: %d\n", calls_ok);
	printf("contexts left: %" PRId64 "\n", num_contexts());
	return 0;
}
