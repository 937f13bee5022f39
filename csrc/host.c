/* csrc/host.c: the gate on calls into the host (csrc/host.h). */
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "host.h"

/* The count is written by every call into the host, so it has a cache line
** of its own: beside dacc_records, which every operation reads, each host
** callback (a drop, a cleanup send) took that line from the other threads. */
dacc_line_int dacc_cb_in_flight;
int dacc_cb_fork_gate;
DACC_TLS int dacc_tls_in_callback;
DACC_TLS int dacc_tls_in_sender;

int dacc_host_gate_close(int64_t timeout_ms) {
	__atomic_add_fetch(&dacc_cb_fork_gate, 1, __ATOMIC_SEQ_CST);
	int own = dacc_tls_in_callback > 0;
	int64_t start = dacc_monotonic_ms();
	while (__atomic_load_n(&dacc_cb_in_flight.n, __ATOMIC_SEQ_CST) > own) {
		if (dacc_monotonic_ms() - start >= timeout_ms)
			return 0;
		struct timespec ts = {0, 100 * 1000};
		nanosleep(&ts, NULL);
	}
	return 1;
}

void dacc_host_gate_open(void) {
	int v = __atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST);
	while (v > 0 && !__atomic_compare_exchange_n(&dacc_cb_fork_gate, &v, v - 1, 0, __ATOMIC_SEQ_CST,
	                                             __ATOMIC_SEQ_CST))
		;
}
