/* csrc/fork.c: fork(): the gate that holds calls into the host back while
** a fork is prepared, and the guard that fails every call in the child.
** Part of capi.c's one translation unit (capi.c says why): never compiled
** alone. */

/* Set in a child process after fork(): the Go runtime did not come along. */
static volatile int c_forked;

/* fork() while a library thread is inside the host's sender or log hook
** gives the child a copy of whatever that thread held at that instant. For
** a Python host that can be CPython's own lock on its thread states, which
** a ctypes callback takes (without the GIL) to make the calling thread's
** state, and which CPython before 3.13 re-initializes in the child only
** after using it: the child hangs in os.fork(). So fork() closes a gate on
** new calls into the host and waits for those in progress, up to
** DACC_FORK_WAIT_MS. A call that cannot finish because the forking thread
** holds what it needs (the GIL, when CPython forks) would make that the
** whole wait: the Python package therefore calls dac_fork_prepare from an
** os.register_at_fork hook, where ctypes releases the GIL, and the wait
** here then finds nothing in flight. */
/* The count is written by every call into the host, so it has a cache line
** of its own: beside dacc_records, which every operation reads, each host
** callback (a drop, a cleanup send) took that line from the other threads. */
dacc_line_int dacc_cb_in_flight;
int dacc_cb_fork_gate;
__thread int dacc_tls_in_callback;

#define DACC_FORK_WAIT_MS 2000
/* Holders of the gate through dac_fork_prepare: the host waited already,
** with its own bound, and the atfork handler does not wait again. */
static int host_prepared;

/* Closes the gate and waits up to timeout_ms for the calls in progress on
** other threads; returns whether none is left. */
static int fork_gate_close(int64_t timeout_ms) {
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

static void fork_gate_open(void) {
	int v = __atomic_load_n(&dacc_cb_fork_gate, __ATOMIC_SEQ_CST);
	while (v > 0 && !__atomic_compare_exchange_n(&dacc_cb_fork_gate, &v, v - 1, 0, __ATOMIC_SEQ_CST,
	                                             __ATOMIC_SEQ_CST))
		;
}

static void on_fork_prepare(void) {
	if (__atomic_load_n(&host_prepared, __ATOMIC_SEQ_CST) > 0)
		__atomic_add_fetch(&dacc_cb_fork_gate, 1, __ATOMIC_SEQ_CST);
	else
		fork_gate_close(DACC_FORK_WAIT_MS);
}

static void on_fork_parent(void) { fork_gate_open(); }

static void clear_for_child(void);

/* In the child, the fast paths that come before the fork guard must find
** nothing to serve (the view gone, the forking thread's message-id block
** empty: the child's only thread is the one that forked), so that every
** call reaches its slow path, which fails with DAC_ERR_FORKED first. */
static void on_fork_child(void) {
	c_forked = 1;
	clear_for_child();
}

static int forked(const char *fn) {
	return reject(DAC_ERR_FORKED, fn,
	              "the library was loaded before fork() and cannot be used in the child process "
	              "(the Go runtime does not survive fork); load it after fork, or use the 'spawn' "
	              "start method");
}

#define GUARD_FORK()                              \
	do {                                          \
		if (__builtin_expect(c_forked, 0))        \
			return forked(__func__);              \
	} while (0)

/* ---- Fork ---- */

int dac_fork_prepare(int64_t timeout_ms) {
	GUARD_FORK();
	if (timeout_ms < 0)
		return reject(DAC_ERR_INVALID_ARGUMENT, __func__, "timeout_ms must be >= 0");
	__atomic_add_fetch(&host_prepared, 1, __ATOMIC_SEQ_CST);
	if (!fork_gate_close(timeout_ms))
		return reject(DAC_ERR_TIMEOUT, __func__,
		              "calls into the cleanup sender or log hook were still in progress when the wait ran out");
	return DAC_OK;
}

int dac_fork_parent(void) {
	GUARD_FORK();
	int v = __atomic_load_n(&host_prepared, __ATOMIC_SEQ_CST);
	while (v > 0 && !__atomic_compare_exchange_n(&host_prepared, &v, v - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (v > 0)
		fork_gate_open();
	return DAC_OK;
}
