/* schedtick: a thread that calls into Go again and again, for the Go test
** to read the scheduler ticks of Go's Ps off GODEBUG=schedtrace. Each call
** from C into Go moves the tick of the P it runs on while no goroutine
** waits to run (the library's go-runtime overlay), so Go's monitor keeps
** the P with the thread that uses it instead of taking it back as from a
** goroutine that ran 10 ms.
** It makes CALLS calls over at least 200 ms, then idles 100 ms in C. */
#include "check.h"

#include <time.h>

#define CALLS 200000

int main(void) {
	MUST(dac_init(0));
	int64_t start = now_ms(), calls = 0, max_id = 0, ok = 1;
	while (calls < CALLS || now_ms() - start < 200) {
		ok &= dac_max_id(&max_id) == DAC_OK;
		calls++;
	}
	struct timespec idle = {0, 100 * 1000 * 1000};
	nanosleep(&idle, NULL);
	printf("calls into Go: at least %d: %d, every one worked: %d\n", CALLS, calls >= CALLS, (int)ok);
	return 0;
}
