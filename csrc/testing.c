/* csrc/testing.c: the testing build's dactest_* functions (make
** testing-lib). */
#include <stdint.h>

#include "dacgo.h"
#include "error.h"
#include "fork.h"
#include "records.h"

#ifdef DACC_TESTING
/* ---- The testing build only (make testing-lib): not the public ABI ---- */

/* Starts the context and message id counters at these offsets into the
** worker's range, so that tests reach max_id; call it before dac_init. */
int dactest_set_counter_offsets(int64_t ctx_offset, int64_t msg_offset);

int dactest_set_counter_offsets(int64_t ctx_offset, int64_t msg_offset) {
	GUARD_FORK();
	return dacgo_testing_set_counter_offsets(ctx_offset, msg_offset, dacc_err());
}

/* How many calls into Go the library has made so far (this one aside): a
** test brackets a call with two and learns whether C served it alone. */
int64_t dactest_go_calls(void);

int64_t dactest_go_calls(void) {
	int64_t n = 0;
	dacgo_testing_go_calls(&n);
	return n;
}

/* How many heap objects Go has allocated so far, exactly: it flushes every
** P's cache, stopping the world to do so (tests only). A test brackets
** calls with two and learns whether they allocate in Go. */
int64_t dactest_go_mallocs(void);

int64_t dactest_go_mallocs(void) {
	int64_t n = 0;
	dacgo_testing_go_mallocs(&n);
	return n;
}

/* Moves the record of a dead handle on to generation, as if it had lived
** that many more lives, so that tests reach a generation's wrap without
** 2^32 of them (container: AgeRecord). */
int dactest_age_record(dac_context *dead, uint32_t generation);

int dactest_age_record(dac_context *dead, uint32_t generation) {
	GUARD_FORK();
	return dacgo_testing_age_record(dacc_to_handle(dead), generation, dacc_err());
}

/* Has the container that dac_init makes date its contexts' uses by a clock
** of its own, which reads 0 until dactest_advance_clock moves it, instead
** of the process's coarse clock (container: WithClock), so that tests of
** the reaper need no sleep and hold on a machine however loaded; call it
** before dac_init. */
int dactest_use_manual_clock(void);

int dactest_use_manual_clock(void) {
	GUARD_FORK();
	return dacgo_testing_use_manual_clock(dacc_err());
}

/* Moves dactest_use_manual_clock's clock on by ms (>= 0) milliseconds. */
int dactest_advance_clock(int64_t ms);

int dactest_advance_clock(int64_t ms) {
	GUARD_FORK();
	if (ms < 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "ms must be >= 0");
	return dacgo_testing_advance_clock(ms, dacc_err());
}
#endif
