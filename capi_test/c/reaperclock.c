/* reaperclock: the reaper's coarse clock, read on demand, dates every use
** by the time of that use, and C's reads of it (lookups, the idle time of
** dac_context_times without an age) agree with Go's (creations, the reap,
** dac_context_times with an age).
**
** - The reaper (Go) tells a context used in C long ago from one just
**   created and used in C.
** - A context used in C after a long pause is idle for less than one left
**   alone, by the time between their uses; the one left alone, read in C,
**   is idle for no longer than it has existed.
** - Right after a use in C, C's idle time and Go's differ by no more than
**   the resolution and the time between the two reads.
**
** Nothing here depends on how long anything takes: a try that the test
** itself stalled past the bound is told by the monotonic clock and made
** again on new ids, and every bound takes the test's own delays in. */
#include "check.h"

enum { RESOLUTION_MS = 10 }; /* the header's "resolution about 10 ms" */

/* A context made (in Go) and retrieved (in C). */
static dac_context *used(int64_t id) {
	dac_context *c = NULL;
	MUST(dac_context_get_or_create(id, &c));
	MUST(dac_context_unref(c));
	MUST(dac_context_retrieve(id, &c));
	return c;
}

static void reap_old_keep_fresh(void) {
	for (int64_t try = 0;; try++) {
		REQUIRE(try < 20);
		int64_t old = ((int64_t)5 << 48) | (2 * try + 1), fresh = ((int64_t)5 << 48) | (2 * try + 2), n = -1;
		MUST(dac_context_unref(used(old)));
		sleep_ms(2000); /* far past the bound */
		int64_t start = now_ms();
		MUST(dac_context_unref(used(fresh)));
		int rc = dac_reap_idle_contexts(1000, &n);
		if (now_ms() - start >= 500) { /* stalled: the fresh one may have aged past the bound */
			int released;
			MUST(dac_context_release_if_present(old, &released));
			MUST(dac_context_release_if_present(fresh, &released));
			continue;
		}
		SHOW(rc); /* dac_reap_idle_contexts(1000, &n)'s status */
		printf("reaped: %" PRId64 ", the old one: %s, the fresh one: %s\n", n,
		       dac_context_is_valid(old) == DAC_OK ? "kept" : "reaped",
		       dac_context_is_valid(fresh) == DAC_OK ? "kept" : "reaped");
		return;
	}
}

/* Both contexts unused for WAITED_MS at least (by the monotonic clock),
** then one is used: a time not current at its use would make the two
** differ by less. Reads the touched one's idle time first: both only grow,
** so a stall anywhere only makes the untouched one's larger. */
static void dated_by_the_use(void) {
	enum { WAITED_MS = 400 };
	dac_context *c = NULL, *left = NULL;
	int64_t touched = ((int64_t)6 << 48) | 1, untouched = ((int64_t)6 << 48) | 2;
	int64_t before = now_ms();
	MUST(dac_context_get_or_create(touched, &c));
	MUST(dac_context_unref(c));
	MUST(dac_context_get_or_create(untouched, &left)); /* its reference kept: holding is not using */
	int64_t made = now_ms();
	while (now_ms() - made < WAITED_MS)
		sleep_ms(50);
	MUST(dac_context_retrieve(touched, &c));
	int64_t idle_touched = -1, idle_untouched = -1;
	MUST(dac_context_times(c, NULL, &idle_touched));
	MUST(dac_context_times(left, NULL, &idle_untouched));
	int64_t existed = now_ms() - before;
	MUST(dac_context_unref(c));
	MUST(dac_context_unref(left));
	int ok = idle_touched >= 0 && idle_untouched - idle_touched >= WAITED_MS - 5 * RESOLUTION_MS;
	printf("the touched one idle for less than the untouched one, by the time between their uses: %s\n",
	       ok ? "yes" : "no");
	int bounded = idle_untouched <= existed + RESOLUTION_MS;
	printf("the untouched one idle for no longer than it has existed: %s\n", bounded ? "yes" : "no");
	if (!ok || !bounded)
		fprintf(stderr, "idle: touched %" PRId64 " ms, untouched %" PRId64 " ms, existed %" PRId64 " ms\n",
		        idle_touched, idle_untouched, existed);
}

/* C's idle time, then Go's: Go's clock is the finer, and the later read. */
static void c_and_go_agree(void) {
	int64_t id = ((int64_t)7 << 48) | 1;
	dac_context *c = used(id);
	sleep_ms(100); /* so that neither reads 0 by a clamp */
	int64_t idle_c = -1, idle_go = -1, age = -1;
	int64_t start = now_ms();
	MUST(dac_context_times(c, NULL, &idle_c));
	MUST(dac_context_times(c, &age, &idle_go));
	int64_t between = now_ms() - start;
	MUST(dac_context_unref(c));
	int ok = idle_go >= idle_c - 1 && idle_go - idle_c <= RESOLUTION_MS + 1 + between;
	printf("C's idle time and Go's agree: %s\n", ok ? "yes" : "no");
	if (!ok)
		fprintf(stderr, "idle: C %" PRId64 " ms, Go %" PRId64 " ms, %" PRId64 " ms between\n", idle_c, idle_go, between);
}

int main(void) {
	MUST(dac_init(3));
	reap_old_keep_fresh();
	dated_by_the_use();
	c_and_go_agree();
	return 0;
}
