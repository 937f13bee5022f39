/* csrc/clock.c: the coarse clock behind the reaper, as C's lookups read it
** (container/clock.go says why coarse, and why nothing ticks): the
** milliseconds of CLOCK_MONOTONIC_COARSE, which the kernel's vDSO serves
** without a system call (a few ns, against some 25 for CLOCK_MONOTONIC on
** a KVM guest), since the origin of Go's coarse clock, which Go gives at
** load. The coarse clock is the kernel's time at its last tick, so C's
** times lag Go's for the same moment by up to a tick and are never ahead;
** where that tick is longer than DACC_CLOCK_RESOLUTION_MS (a kernel of HZ
** below 100), the fine clock is read instead. */
#include <stdint.h>
#include <time.h>

#include "../capi_layout.h"
#include "clock.h"

/* Set once by dacc_clock_start, before any container exists, so before any
** lookup reads them. */
static clockid_t clock_id = CLOCK_MONOTONIC_COARSE;
static int64_t clock_origin_ns; /* CLOCK_MONOTONIC's ns when Go's clock read 0 */

static int64_t clock_ns(clockid_t id) {
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dacc_monotonic_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

int64_t dacc_monotonic_ms(void) { return dacc_monotonic_ns() / 1000000; }

void dacc_clock_start(int64_t origin_ns) {
	struct timespec res;
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0 ||
	    (int64_t)res.tv_sec * 1000 + res.tv_nsec / 1000000 > DACC_CLOCK_RESOLUTION_MS)
		clock_id = CLOCK_MONOTONIC;
	clock_origin_ns = origin_ns;
}

int64_t dacc_clock_now(void) {
	int64_t ns = clock_ns(clock_id) - clock_origin_ns;
	return ns > 0 ? ns / 1000000 : 0; /* a coarse read just after the origin may fall before it */
}
