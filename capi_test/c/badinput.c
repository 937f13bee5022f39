/* badinput: a table of bad inputs for every function of the header: NULL
** pointers, negative, huge and extreme values, other workers' ids, dead,
** reused and never-issued handles, a second unref. Each row is one call and
** the status it must give; after every row a normal operation (get-or-create,
** read, message id, release, unref) must still work. It prints one line per
** row, "ROW fn | what | call -> STATUS: message" (or "=> value" for the
** functions that cannot fail), a BUG line for any broken
** promise, and the number of rows; the Go test checks that every function of
** the header has a row. Rows that must succeed say why ("not an error: ..."). */
#include "check.h"
/* The deprecated dac_set_cleanup_options is still part of the ABI: this
** program calls it too. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <limits.h>

static int rows, bugs;
static int64_t normal_id = ((int64_t)6 << 48) | 1;
/* The cap on live contexts a row set, which the normal operation lifts. */
static int64_t cap_in_force;

/* A normal operation: the process keeps working after a bad call. */
static void normal_op(const char *after) {
	dac_context *c = NULL;
	int64_t got = -1, msg = -1;
	int released = -1;
	size_t len = 0;
	char buf[1024];
	if (cap_in_force)
		MUST(dac_set_max_contexts(0));
	int ok = dac_context_get_or_create(normal_id, &c) == DAC_OK && dac_context_id(c, &got) == DAC_OK &&
	         got == normal_id && dac_context_add_known_worker_id(c, 1) == DAC_OK &&
	         dac_new_autograd_message_id(&msg) == DAC_OK && (uint64_t)msg >> 48 == 3 &&
	         dac_context_release_if_present(normal_id, &released) == DAC_OK && released == 1 &&
	         dac_context_unref(c) == DAC_OK && dac_debug_info(buf, sizeof buf, &len) == DAC_OK;
	if (!ok) {
		bugs++;
		printf("BUG: after %s, a normal operation failed: %s\n", after, dac_last_error());
	}
	normal_id++;
	if (cap_in_force)
		MUST(dac_set_max_contexts(cap_in_force));
}

/* One row: the call gave rc, it must give want. */
static void row(const char *fn, const char *what, const char *call, int want, int rc) {
	rows++;
	const char *msg = rc == DAC_OK ? "" : dac_last_error();
	printf("ROW %s | %s | %s -> %s%s%s\n", fn, what, call, dac_status_string(rc), rc ? ": " : "", msg);
	if (rc != want) {
		bugs++;
		printf("BUG: %s: want %s\n", call, dac_status_string(want));
	}
	if (rc != DAC_OK && (dac_last_status() != rc || msg[0] == '\0')) {
		bugs++;
		printf("BUG: %s failed without its status and a message\n", call);
	}
	normal_op(call);
}

#define ROW(fn, what, want, call) row(#fn, what, #call, want, (call))

/* A row for the functions that cannot fail: what they return for it. */
static void row_value(const char *fn, const char *what, const char *call, int good, const char *shown) {
	rows++;
	printf("ROW %s | %s | %s => %s\n", fn, what, call, shown);
	if (!good) {
		bugs++;
		printf("BUG: %s returned %s\n", call, shown);
	}
	normal_op(call);
}

#define ROW_STR(fn, what, call, want)                                          \
	do {                                                                       \
		const char *s_ = (call);                                               \
		row_value(#fn, what, #call, s_ != NULL && strcmp(s_, want) == 0, s_ ? s_ : "NULL"); \
	} while (0)

static int counting_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)worker_id, (void)context_id;
	__atomic_add_fetch((long *)user_data, 1, __ATOMIC_RELAXED);
	return 0;
}

static void quiet_log(void *user_data, int level, const char *message) { (void)user_data, (void)level, (void)message; }

int main(void) {
	MUST(dac_init(3));
	long delivered = 0;
	MUST(dac_set_cleanup_sender(counting_sender, &delivered));

	/* The handles the rows use. */
	const int64_t live_id = ((int64_t)5 << 48) | 1, released_id = ((int64_t)5 << 48) | 2;
	dac_context *live = NULL, *released = NULL, *dead = NULL, *reissued = NULL;
	MUST(dac_context_get_or_create(live_id, &live));
	MUST(dac_context_add_known_worker_id(live, 4));
	MUST(dac_context_add_send_function(live, 1, 11));
	MUST(dac_context_add_recv_function(live, 1, 12));
	MUST(dac_context_get_or_create(released_id, &released));
	MUST(dac_context_add_known_worker_id(released, 4));
	MUST(dac_context_release(released_id)); /* queues a cleanup message: the fan-out has started */
	/* A dead handle (its context released, its last reference dropped),
	** and one whose record was given out again since: same shard (the low
	** bits of the id, at most 256 shards), the record the free list gives
	** back. */
	MUST(dac_context_get_or_create(((int64_t)5 << 48) | 256, &dead));
	MUST(dac_context_release(((int64_t)5 << 48) | 256));
	MUST(dac_context_unref(dead));
	MUST(dac_context_get_or_create(((int64_t)5 << 48) | 512, &reissued));
	printf("a dead handle's slot was given out again: %s\n",
	       reissued != dead && ((uintptr_t)reissued & 0xffffffffu) == ((uintptr_t)dead & 0xffffffffu) ? "yes" : "no");
	int on_stack = 0;
	dac_context *never = (dac_context *)(uintptr_t)0x12345;
	dac_context *all_ones = (dac_context *)UINTPTR_MAX;
	dac_context *stack_addr = (dac_context *)(void *)&on_stack;

	int32_t w = 0, ids[4] = {0};
	int64_t v = 0, msgs[4] = {0};
	uint64_t fn = 0, fns[4] = {0};
	int flag = 0;
	size_t count = 0, len = 0;
	char buf[1024];
	dac_context *ctx = NULL;

	/* ---- library ---- */
	ROW_STR(dac_version, "takes nothing: cannot be misused", dac_version(), DAC_VERSION_STRING);
	{
		int n = dac_version_number();
		row_value("dac_version_number", "takes nothing: cannot be misused", "dac_version_number()",
		          n == DAC_VERSION_NUMBER, n == DAC_VERSION_NUMBER ? "DAC_VERSION_NUMBER" : "another number");
	}
	ROW_STR(dac_status_string, "a negative status", dac_status_string(-1), "DAC_UNKNOWN");
	ROW_STR(dac_status_string, "INT_MIN", dac_status_string(INT_MIN), "DAC_UNKNOWN");
	ROW_STR(dac_status_string, "one past the last status", dac_status_string(DAC_ERR_TIMEOUT + 1), "DAC_UNKNOWN");
	ROW_STR(dac_status_string, "INT_MAX", dac_status_string(INT_MAX), "DAC_UNKNOWN");
	{
		int rc = dac_worker_id(NULL);
		const char *m = dac_last_error();
		row_value("dac_last_error", "right after a failure: its message", "dac_last_error()",
		          rc != DAC_OK && strstr(m, "dac_worker_id: out must not be NULL") != NULL, m);
		int st = dac_last_status();
		row_value("dac_last_status", "right after a failure: its status", "dac_last_status()",
		          st == DAC_ERR_INVALID_ARGUMENT, dac_status_string(st));
	}

	/* ---- container ---- */
	ROW(dac_init, "a negative worker id", DAC_ERR_INVALID_ARGUMENT, dac_init(-1));
	ROW(dac_init, "one past the last worker id", DAC_ERR_INVALID_ARGUMENT, dac_init(65536));
	ROW(dac_init, "INT64_MIN", DAC_ERR_INVALID_ARGUMENT, dac_init(INT64_MIN));
	ROW(dac_init, "INT64_MAX", DAC_ERR_INVALID_ARGUMENT, dac_init(INT64_MAX));
	ROW(dac_init, "another worker id than the first call's", DAC_ERR_ALREADY_INITIALIZED, dac_init(4));
	ROW(dac_init, "not an error: the same worker id again", DAC_OK, dac_init(3));
	ROW(dac_worker_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_worker_id(NULL));
	ROW(dac_max_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_max_id(NULL));
	ROW(dac_num_contexts, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_num_contexts(NULL));
	ROW(dac_new_autograd_message_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_new_autograd_message_id(NULL));
	ROW(dac_debug_info, "NULL length", DAC_ERR_INVALID_ARGUMENT, dac_debug_info(buf, sizeof buf, NULL));
	ROW(dac_debug_info, "NULL buf with a capacity", DAC_ERR_INVALID_ARGUMENT, dac_debug_info(NULL, 16, &len));
	ROW(dac_debug_info, "NULL buf and SIZE_MAX", DAC_ERR_INVALID_ARGUMENT, dac_debug_info(NULL, SIZE_MAX, &len));
	ROW(dac_debug_info, "not an error: capacity 1 (truncated to \"\")", DAC_OK, dac_debug_info(buf, 1, &len));
	ROW(dac_debug_info, "not an error: a capacity past the buffer's end, more than is written", DAC_OK,
	    dac_debug_info(buf, SIZE_MAX, &len));
	ROW(dac_set_max_contexts, "a negative cap", DAC_ERR_INVALID_ARGUMENT, dac_set_max_contexts(-1));
	ROW(dac_set_max_contexts, "INT64_MIN", DAC_ERR_INVALID_ARGUMENT, dac_set_max_contexts(INT64_MIN));
	ROW(dac_set_max_contexts, "not an error: INT64_MAX, no real cap", DAC_OK, dac_set_max_contexts(INT64_MAX));
	MUST(dac_set_max_contexts(0));

	/* ---- contexts ---- */
	ROW(dac_context_new, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_new(NULL));
	MUST(dac_force_current_context_id(((int64_t)9 << 48) | 77));
	ROW(dac_context_new, "this thread has a current id (another worker's, never stored)", DAC_ERR_ALREADY_HAS_CONTEXT,
	    dac_context_new(&ctx));
	int64_t new_id = 0;
	ROW(dac_context_new_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_new_id(NULL, &new_id));
	ROW(dac_context_new_id, "NULL context_id", DAC_ERR_INVALID_ARGUMENT, dac_context_new_id(&ctx, NULL));
	ROW(dac_context_new_id, "this thread has a current id", DAC_ERR_ALREADY_HAS_CONTEXT, dac_context_new_id(&ctx, &new_id));
	ROW(dac_context_current, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_current(NULL));
	ROW(dac_context_current, "a current id no context has", DAC_ERR_NOT_FOUND, dac_context_current(&ctx));
	ROW(dac_context_current_id, "a current id no context has", DAC_ERR_NOT_FOUND, dac_context_current_id(&ctx, &new_id));
	MUST(dac_clear_current_context());
	ROW(dac_context_current, "no current id", DAC_ERR_NO_CURRENT_CONTEXT, dac_context_current(&ctx));
	ROW(dac_context_current_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_current_id(NULL, &new_id));
	ROW(dac_context_current_id, "NULL context_id", DAC_ERR_INVALID_ARGUMENT, dac_context_current_id(&ctx, NULL));
	ROW(dac_context_current_id, "no current id", DAC_ERR_NO_CURRENT_CONTEXT, dac_context_current_id(&ctx, &new_id));
	ROW(dac_context_retrieve, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_retrieve(live_id, NULL));
	ROW(dac_context_retrieve, "INT64_MIN", DAC_ERR_NOT_FOUND, dac_context_retrieve(INT64_MIN, &ctx));
	ROW(dac_context_retrieve, "INT64_MAX", DAC_ERR_NOT_FOUND, dac_context_retrieve(INT64_MAX, &ctx));
	ROW(dac_context_retrieve, "DAC_INVALID_ID", DAC_ERR_NOT_FOUND, dac_context_retrieve(DAC_INVALID_ID, &ctx));
	ROW(dac_context_retrieve, "another worker's id, never stored", DAC_ERR_NOT_FOUND,
	    dac_context_retrieve(((int64_t)9 << 48) | 5, &ctx));
	ROW(dac_context_retrieve, "this worker's max_id (never issued)", DAC_ERR_NOT_FOUND,
	    dac_context_retrieve(((int64_t)3 << 48) | (((int64_t)1 << 48) - 1), &ctx));
	ROW(dac_context_retrieve, "a released context's id", DAC_ERR_NOT_FOUND, dac_context_retrieve(released_id, &ctx));
	ROW(dac_context_retrieve_if_present, "NULL out", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_retrieve_if_present(live_id, NULL));
	ctx = (dac_context *)(uintptr_t)0x77;
	ROW(dac_context_retrieve_if_present, "not an error: INT64_MIN, writes NULL", DAC_OK,
	    dac_context_retrieve_if_present(INT64_MIN, &ctx));
	if (ctx != NULL)
		printf("BUG: retrieve_if_present of a missing id wrote %p\n", (void *)ctx), bugs++;
	ROW(dac_context_get_or_create, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_get_or_create(live_id, NULL));
	ROW(dac_context_get_or_create, "not an error: INT64_MIN is worker 32768's first id", DAC_OK,
	    dac_context_get_or_create(INT64_MIN, &ctx));
	MUST(dac_context_unref(ctx));
	MUST(dac_context_release(INT64_MIN));
	ROW(dac_context_get_or_create, "not an error: -1 (DAC_INVALID_ID) is worker 65535's max_id, a valid id", DAC_OK,
	    dac_context_get_or_create(DAC_INVALID_ID, &ctx));
	MUST(dac_context_unref(ctx));
	MUST(dac_context_release(DAC_INVALID_ID));
	MUST(dac_num_contexts(&v));
	MUST(dac_set_max_contexts(cap_in_force = v));
	ROW(dac_context_get_or_create, "past the cap of live contexts", DAC_ERR_LIMIT,
	    dac_context_get_or_create(((int64_t)9 << 48) | 6, &ctx));
	ROW(dac_context_new, "past the cap of live contexts", DAC_ERR_LIMIT, dac_context_new(&ctx));
	MUST(dac_set_max_contexts(cap_in_force = 0));
	ROW(dac_context_is_valid, "INT64_MIN", DAC_ERR_NOT_FOUND, dac_context_is_valid(INT64_MIN));
	ROW(dac_context_is_valid, "DAC_INVALID_ID", DAC_ERR_NOT_FOUND, dac_context_is_valid(DAC_INVALID_ID));
	ROW(dac_context_is_valid, "another worker's id, never stored", DAC_ERR_NOT_FOUND,
	    dac_context_is_valid(((int64_t)9 << 48) | 5));
	ROW(dac_context_release, "INT64_MIN", DAC_ERR_NOT_FOUND, dac_context_release(INT64_MIN));
	ROW(dac_context_release, "INT64_MAX", DAC_ERR_NOT_FOUND, dac_context_release(INT64_MAX));
	ROW(dac_context_release, "another worker's id, never stored", DAC_ERR_NOT_FOUND,
	    dac_context_release(((int64_t)9 << 48) | 5));
	ROW(dac_context_release, "a second release", DAC_ERR_NOT_FOUND, dac_context_release(released_id));
	ROW(dac_context_release_if_present, "not an error: INT64_MIN, NULL released", DAC_OK,
	    dac_context_release_if_present(INT64_MIN, NULL));
	flag = 7;
	ROW(dac_context_release_if_present, "not an error: a second release, released = 0", DAC_OK,
	    dac_context_release_if_present(released_id, &flag));
	if (flag != 0)
		printf("BUG: released = %d\n", flag), bugs++;
	{
		int32_t bad_low[2] = {1, -1}, bad_high[2] = {65536, 2}, edge[2] = {0, 65535};
		ROW(dac_context_release_with_workers, "NULL worker_ids with count 1", DAC_ERR_INVALID_ARGUMENT,
		    dac_context_release_with_workers(live_id, NULL, 1, &flag));
		ROW(dac_context_release_with_workers, "a worker id of -1", DAC_ERR_INVALID_ARGUMENT,
		    dac_context_release_with_workers(live_id, bad_low, 2, &flag));
		ROW(dac_context_release_with_workers, "a worker id of 65536", DAC_ERR_INVALID_ARGUMENT,
		    dac_context_release_with_workers(live_id, bad_high, 2, &flag));
		ROW(dac_context_release_with_workers, "a worker id of -1, the id never stored", DAC_ERR_INVALID_ARGUMENT,
		    dac_context_release_with_workers(((int64_t)9 << 48) | 5, bad_low, 2, &flag));
		if (dac_context_is_valid(live_id) != DAC_OK)
			printf("BUG: a refused release_with_workers released\n"), bugs++;
		ROW(dac_context_release_with_workers, "not an error: INT64_MIN, NULL worker_ids, count 0, NULL released",
		    DAC_OK, dac_context_release_with_workers(INT64_MIN, NULL, 0, NULL));
		flag = 7;
		ROW(dac_context_release_with_workers, "not an error: a second release, workers 0 and 65535, released = 0",
		    DAC_OK, dac_context_release_with_workers(released_id, edge, 2, &flag));
		if (flag != 0)
			printf("BUG: released = %d\n", flag), bugs++;
	}
	ROW(dac_release_contexts_of_worker, "a negative worker id", DAC_ERR_INVALID_ARGUMENT,
	    dac_release_contexts_of_worker(-1, &v));
	ROW(dac_release_contexts_of_worker, "one past the last worker id", DAC_ERR_INVALID_ARGUMENT,
	    dac_release_contexts_of_worker(65536, &v));
	ROW(dac_release_contexts_of_worker, "INT32_MIN", DAC_ERR_INVALID_ARGUMENT,
	    dac_release_contexts_of_worker(INT32_MIN, &v));
	ROW(dac_release_contexts_of_worker, "INT32_MAX", DAC_ERR_INVALID_ARGUMENT,
	    dac_release_contexts_of_worker(INT32_MAX, &v));
	ROW(dac_release_contexts_of_worker, "not an error: a worker with no contexts, NULL released", DAC_OK,
	    dac_release_contexts_of_worker(65535, NULL));
	ROW(dac_reap_idle_contexts, "a negative idle time", DAC_ERR_INVALID_ARGUMENT, dac_reap_idle_contexts(-1, &v));
	ROW(dac_reap_idle_contexts, "INT64_MIN", DAC_ERR_INVALID_ARGUMENT, dac_reap_idle_contexts(INT64_MIN, &v));
	ROW(dac_reap_idle_contexts, "not an error: INT64_MAX ms, nothing is that idle", DAC_OK,
	    dac_reap_idle_contexts(INT64_MAX, &v));
	if (v != 0)
		printf("BUG: reaped %" PRId64 "\n", v), bugs++;

	/* ---- the current context id ---- */
	ROW(dac_current_context_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_current_context_id(NULL));
	ROW(dac_has_valid_context, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_has_valid_context(NULL));
	ROW(dac_set_current_context_id, "not an error: INT64_MIN, never looked up", DAC_OK,
	    dac_set_current_context_id(INT64_MIN));
	ROW(dac_set_current_context_id, "one is set already", DAC_ERR_ALREADY_HAS_CONTEXT,
	    dac_set_current_context_id(live_id));
	ROW(dac_force_current_context_id, "not an error: another worker's id, never looked up", DAC_OK,
	    dac_force_current_context_id(((int64_t)9 << 48) | 5));
	ROW(dac_force_current_context_id, "not an error: DAC_INVALID_ID, which clears it", DAC_OK,
	    dac_force_current_context_id(DAC_INVALID_ID));
	MUST(dac_has_valid_context(&flag));
	if (flag != 0)
		printf("BUG: forcing DAC_INVALID_ID left a current id\n"), bugs++;
	ROW(dac_clear_current_context, "takes nothing; not an error: none is set", DAC_OK, dac_clear_current_context());

	/* ---- handles ---- */
	ROW(dac_context_ref, "NULL", DAC_ERR_BAD_HANDLE, dac_context_ref(NULL));
	ROW(dac_context_ref, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_ref(dead));
	ROW(dac_context_ref, "a never-issued handle", DAC_ERR_BAD_HANDLE, dac_context_ref(never));
	ROW(dac_context_ref, "all bits set", DAC_ERR_BAD_HANDLE, dac_context_ref(all_ones));
	ROW(dac_context_ref, "a stack address", DAC_ERR_BAD_HANDLE, dac_context_ref(stack_addr));
	ROW(dac_context_ref, "not an error: a released context's handle", DAC_OK, dac_context_ref(released));
	MUST(dac_context_unref(released));
	ROW(dac_context_unref, "NULL", DAC_ERR_BAD_HANDLE, dac_context_unref(NULL));
	ROW(dac_context_unref, "a second unref (a dead handle)", DAC_ERR_BAD_HANDLE, dac_context_unref(dead));
	ROW(dac_context_unref, "a never-issued handle", DAC_ERR_BAD_HANDLE, dac_context_unref(never));
	dac_context *bad_batch[3] = {never, NULL, dead};
	ROW(dac_context_unref_many, "NULL ctxs with a count", DAC_ERR_INVALID_ARGUMENT, dac_context_unref_many(NULL, 2));
	ROW(dac_context_unref_many, "dead, NULL and never-issued handles", DAC_ERR_BAD_HANDLE,
	    dac_context_unref_many(bad_batch, 3));
	ROW(dac_context_unref_many, "not an error: NULL ctxs, count 0", DAC_OK, dac_context_unref_many(NULL, 0));
	ROW(dac_context_unref, "all bits set", DAC_ERR_BAD_HANDLE, dac_context_unref(all_ones));
	ROW(dac_context_unref, "a stack address", DAC_ERR_BAD_HANDLE, dac_context_unref(stack_addr));
	ROW(dac_context_id, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_id(NULL, &v));
	ROW(dac_context_id, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_id(live, NULL));
	ROW(dac_context_id, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_id(dead, &v));
	ROW(dac_context_id, "a never-issued handle", DAC_ERR_BAD_HANDLE, dac_context_id(never, &v));
	ROW(dac_context_id, "all bits set", DAC_ERR_BAD_HANDLE, dac_context_id(all_ones, &v));
	ROW(dac_context_id, "not an error: a released context's handle", DAC_OK, dac_context_id(released, &v));
	ROW(dac_context_add_known_worker_id, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_add_known_worker_id(NULL, 4));
	ROW(dac_context_add_known_worker_id, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_add_known_worker_id(dead, 4));
	ROW(dac_context_add_known_worker_id, "a negative worker id", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_add_known_worker_id(live, -1));
	ROW(dac_context_add_known_worker_id, "one past the last worker id", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_add_known_worker_id(live, 65536));
	ROW(dac_context_add_known_worker_id, "INT32_MIN", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_add_known_worker_id(live, INT32_MIN));
	ROW(dac_context_add_known_worker_id, "not an error: the same worker twice", DAC_OK,
	    dac_context_add_known_worker_id(live, 4));
	ROW(dac_context_known_worker_ids, "NULL handle", DAC_ERR_BAD_HANDLE,
	    dac_context_known_worker_ids(NULL, ids, 4, &count));
	ROW(dac_context_known_worker_ids, "a never-issued handle", DAC_ERR_BAD_HANDLE,
	    dac_context_known_worker_ids(never, ids, 4, &count));
	ROW(dac_context_known_worker_ids, "NULL ids with a capacity", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_known_worker_ids(live, NULL, 1, &count));
	ROW(dac_context_known_worker_ids, "NULL count", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_known_worker_ids(live, ids, 4, NULL));
	ROW(dac_context_known_worker_ids, "not an error: SIZE_MAX capacity, fewer ids than the buffer holds", DAC_OK,
	    dac_context_known_worker_ids(live, ids, SIZE_MAX, &count));
	if (count != 1 || ids[0] != 4)
		printf("BUG: known worker ids: %zu, %d\n", count, ids[0]), bugs++;
	dac_context *listed[2] = {NULL, NULL};
	ROW(dac_context_list, "NULL count", DAC_ERR_INVALID_ARGUMENT, dac_context_list(listed, 2, NULL));
	ROW(dac_context_list, "NULL out with a capacity", DAC_ERR_INVALID_ARGUMENT, dac_context_list(NULL, 1, &count));
	ROW(dac_context_list, "not an error: NULL out, capacity 0 (how many, no handle)", DAC_OK,
	    dac_context_list(NULL, 0, &count));
	ROW(dac_context_list, "not an error: SIZE_MAX capacity, fewer contexts than the buffer holds", DAC_OK,
	    dac_context_list(listed, SIZE_MAX, &count));
	if (count < 1 || count > 2 || listed[0] == NULL)
		printf("BUG: listed %zu contexts\n", count), bugs++;
	else
		MUST(dac_context_unref_many(listed, count));
	ROW(dac_context_times, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_times(NULL, &v, &v));
	ROW(dac_context_times, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_times(dead, &v, &v));
	ROW(dac_context_times, "a dead handle, the idle time alone (read in C)", DAC_ERR_BAD_HANDLE,
	    dac_context_times(dead, NULL, &v));
	ROW(dac_context_times, "a never-issued handle", DAC_ERR_BAD_HANDLE, dac_context_times(never, NULL, &v));
	ROW(dac_context_times, "all bits set", DAC_ERR_BAD_HANDLE, dac_context_times(all_ones, NULL, &v));
	ROW(dac_context_times, "a stack address", DAC_ERR_BAD_HANDLE, dac_context_times(stack_addr, &v, NULL));
	ROW(dac_context_times, "not an error: both outs NULL (the handle checked)", DAC_OK,
	    dac_context_times(live, NULL, NULL));
	ROW(dac_context_times, "not an error: a released context's handle", DAC_OK, dac_context_times(released, &v, &v));
	ROW(dac_context_add_send_function, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_add_send_function(NULL, 2, 1));
	ROW(dac_context_add_send_function, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_add_send_function(dead, 2, 1));
	ROW(dac_context_add_send_function, "a message id taken", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_add_send_function(live, 1, 99));
	ROW(dac_context_add_send_function, "not an error: INT64_MIN as a message id (opaque to the container)", DAC_OK,
	    dac_context_add_send_function(live, INT64_MIN, UINT64_MAX));
	ROW(dac_context_add_recv_function, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_add_recv_function(NULL, 2, 1));
	ROW(dac_context_add_recv_function, "all bits set", DAC_ERR_BAD_HANDLE,
	    dac_context_add_recv_function(all_ones, 2, 1));
	ROW(dac_context_add_recv_function, "a message id taken", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_add_recv_function(live, 1, 99));
	ROW(dac_context_send_function, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_send_function(NULL, 1, &fn));
	ROW(dac_context_send_function, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_send_function(live, 1, NULL));
	ROW(dac_context_send_function, "a message id with no function", DAC_ERR_NOT_FOUND,
	    dac_context_send_function(live, 999, &fn));
	ROW(dac_context_send_function, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_send_function(dead, 1, &fn));
	ROW(dac_context_recv_function, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_recv_function(NULL, 1, &fn));
	ROW(dac_context_recv_function, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_recv_function(live, 1, NULL));
	ROW(dac_context_recv_function, "a message id with no function", DAC_ERR_NOT_FOUND,
	    dac_context_recv_function(live, INT64_MAX, &fn));
	ROW(dac_context_send_functions, "NULL handle", DAC_ERR_BAD_HANDLE,
	    dac_context_send_functions(NULL, msgs, fns, 4, &count));
	ROW(dac_context_send_functions, "NULL message_ids with a capacity", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_send_functions(live, NULL, fns, 4, &count));
	ROW(dac_context_send_functions, "NULL fns with a capacity", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_send_functions(live, msgs, NULL, 4, &count));
	ROW(dac_context_send_functions, "NULL count", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_send_functions(live, msgs, fns, 4, NULL));
	ROW(dac_context_recv_functions, "a dead handle", DAC_ERR_BAD_HANDLE,
	    dac_context_recv_functions(dead, msgs, fns, 4, &count));
	ROW(dac_context_recv_functions, "NULL message_ids and fns with a capacity", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_recv_functions(live, NULL, NULL, 4, &count));
	ROW(dac_context_recv_functions, "not an error: NULL buffers with capacity 0 (count only)", DAC_OK,
	    dac_context_recv_functions(live, NULL, NULL, 0, &count));

	/* ---- host values ---- */
	uint64_t hv = 0;
	ROW(dac_context_set_host_value, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_set_host_value(NULL, 1, NULL, &hv));
	ROW(dac_context_set_host_value, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_set_host_value(dead, 1, NULL, &hv));
	ROW(dac_context_set_host_value, "a never-issued handle", DAC_ERR_BAD_HANDLE,
	    dac_context_set_host_value(never, 1, NULL, &hv));
	ROW(dac_context_set_host_value, "NULL current", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_set_host_value(live, 1, NULL, NULL));
	ROW(dac_context_set_host_value, "value 0 (means none)", DAC_ERR_INVALID_ARGUMENT,
	    dac_context_set_host_value(live, 0, NULL, &hv));
	ROW(dac_context_set_host_value, "not an error: UINT64_MAX, no drop", DAC_OK,
	    dac_context_set_host_value(live, UINT64_MAX, NULL, &hv));
	ROW(dac_context_set_host_value, "not an error: a second value (the first stays)", DAC_OK,
	    dac_context_set_host_value(live, 7, NULL, &hv));
	if (hv != UINT64_MAX)
		printf("BUG: host value after a second set: %llu\n", (unsigned long long)hv), bugs++;
	ROW(dac_context_host_value, "NULL handle", DAC_ERR_BAD_HANDLE, dac_context_host_value(NULL, &hv));
	ROW(dac_context_host_value, "a dead handle", DAC_ERR_BAD_HANDLE, dac_context_host_value(dead, &hv));
	ROW(dac_context_host_value, "all bits set", DAC_ERR_BAD_HANDLE, dac_context_host_value(all_ones, &hv));
	ROW(dac_context_host_value, "NULL out", DAC_ERR_INVALID_ARGUMENT, dac_context_host_value(live, NULL));
	ROW(dac_context_host_value, "not an error: a released context's handle, none set", DAC_OK,
	    dac_context_host_value(released, &hv));
	if (hv != 0)
		printf("BUG: host value of a context without one: %llu\n", (unsigned long long)hv), bugs++;

	/* ---- the fan-out ---- */
	ROW(dac_set_cleanup_sender, "not an error: NULL, no sender", DAC_OK, dac_set_cleanup_sender(NULL, NULL));
	MUST(dac_set_cleanup_sender(counting_sender, &delivered));
	ROW(dac_set_cleanup_options, "a negative max_attempts", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(-1, 0, 0, 0));
	ROW(dac_set_cleanup_options, "INT32_MIN max_attempts", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(INT32_MIN, 0, 0, 0));
	ROW(dac_set_cleanup_options, "a negative initial backoff", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(0, -1, 0, 0));
	ROW(dac_set_cleanup_options, "INT64_MIN max backoff", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(0, 0, INT64_MIN, 0));
	ROW(dac_set_cleanup_options, "a negative max_pending", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(0, 0, 0, -1));
	ROW(dac_set_cleanup_options, "INT64_MAX max_pending", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(0, 0, 0, INT64_MAX));
	ROW(dac_set_cleanup_options, "max_pending grown after the first message", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_options(0, 0, 0, 65537));
	ROW(dac_set_cleanup_options, "not an error: INT32_MAX attempts, INT64_MAX backoffs (the longest ones)", DAC_OK,
	    dac_set_cleanup_options(INT32_MAX, INT64_MAX, INT64_MAX, 0));
	ROW(dac_cleanup_configure, "NULL options", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(NULL));
	{
		dac_cleanup_options o = {0};
		ROW(dac_cleanup_configure, "size 0 (not set)", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&o));
		o.size = sizeof o - 1;
		ROW(dac_cleanup_configure, "size one byte short of the first version", DAC_ERR_INVALID_ARGUMENT,
		    dac_cleanup_configure(&o));
		o.size = sizeof o;
		o.max_attempts = INT32_MIN;
		ROW(dac_cleanup_configure, "INT32_MIN max_attempts", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&o));
		o.max_attempts = 0;
		o.initial_backoff_us = -1;
		ROW(dac_cleanup_configure, "a negative initial backoff", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&o));
		o.initial_backoff_us = 0;
		o.max_backoff_us = INT64_MIN;
		ROW(dac_cleanup_configure, "INT64_MIN max backoff", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&o));
		o.max_backoff_us = 0;
		o.max_pending = -1;
		ROW(dac_cleanup_configure, "a negative max_pending", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&o));
		o.max_pending = INT64_MAX;
		ROW(dac_cleanup_configure, "INT64_MAX max_pending", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&o));
		o.max_pending = 65537;
		ROW(dac_cleanup_configure, "max_pending grown after the first message", DAC_ERR_INVALID_ARGUMENT,
		    dac_cleanup_configure(&o));
		o.max_pending = 0;
		/* A newer header's larger struct: its options past this library's
		** must be 0. */
		struct {
			dac_cleanup_options known;
			int64_t later;
		} big;
		memset(&big, 0, sizeof big);
		big.known.size = sizeof big;
		big.later = 1;
		ROW(dac_cleanup_configure, "a larger size with an unknown option set (a newer header)",
		    DAC_ERR_INVALID_ARGUMENT, dac_cleanup_configure(&big.known));
		big.later = 0;
		big.known.max_attempts = INT32_MAX;
		big.known.initial_backoff_us = INT64_MAX;
		big.known.max_backoff_us = INT64_MAX;
		ROW(dac_cleanup_configure, "not an error: a larger size, unknown options 0, the longest backoffs", DAC_OK,
		    dac_cleanup_configure(&big.known));
	}
	MUST(dac_set_cleanup_options(0, 0, 0, 0));
	ROW(dac_cleanup_stats, "NULL counters", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_stats(NULL));
	{
		dac_cleanup_counters small = {0};
		ROW(dac_cleanup_stats, "size 0 (not set)", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_stats(&small));
		small.size = sizeof small - 1;
		ROW(dac_cleanup_stats, "size one byte short of the first version", DAC_ERR_INVALID_ARGUMENT,
		    dac_cleanup_stats(&small));
		/* A newer header's larger struct: what this library knows, then 0. */
		struct {
			dac_cleanup_counters known;
			int64_t later;
		} big;
		memset(&big, 0xff, sizeof big);
		big.known.size = sizeof big;
		ROW(dac_cleanup_stats, "not an error: a larger size (a newer header)", DAC_OK,
		    dac_cleanup_stats(&big.known));
		if (big.later != 0 || big.known.size != sizeof big)
			printf("BUG: dac_cleanup_stats left the unknown tail %" PRId64 " or changed size to %zu\n", big.later,
			       big.known.size);
	}
	ROW(dac_cleanup_flush, "a negative timeout", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_flush(-1, &v));
	ROW(dac_cleanup_flush, "INT64_MIN", DAC_ERR_INVALID_ARGUMENT, dac_cleanup_flush(INT64_MIN, NULL));
	ROW(dac_cleanup_flush, "not an error: INT64_MAX ms, NULL pending (returns once all is delivered)", DAC_OK,
	    dac_cleanup_flush(INT64_MAX, NULL));
	ROW(dac_set_log_hook, "not an error: NULL, back to stderr", DAC_OK, dac_set_log_hook(NULL, NULL));
	MUST(dac_set_log_hook(quiet_log, NULL));
	ROW(dac_set_cleanup_sender_timeout, "a negative timeout", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_sender_timeout(NULL, NULL, -1));
	ROW(dac_set_cleanup_sender_timeout, "INT64_MIN", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_sender_timeout(counting_sender, &delivered, INT64_MIN));
	ROW(dac_set_cleanup_sender_timeout, "not an error: the pair in force, INT64_MAX ms", DAC_OK,
	    dac_set_cleanup_sender_timeout(counting_sender, &delivered, INT64_MAX));
	ROW(dac_set_cleanup_sender_nonblocking, "2 (a flag is 0 or 1)", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_sender_nonblocking(2));
	ROW(dac_set_cleanup_sender_nonblocking, "-1", DAC_ERR_INVALID_ARGUMENT, dac_set_cleanup_sender_nonblocking(-1));
	ROW(dac_set_cleanup_sender_nonblocking, "INT_MIN", DAC_ERR_INVALID_ARGUMENT,
	    dac_set_cleanup_sender_nonblocking(INT_MIN));
	ROW(dac_set_cleanup_sender_nonblocking, "not an error: 1, then a release fans out inline", DAC_OK,
	    dac_set_cleanup_sender_nonblocking(1));
	{
		/* The first attempt is the releasing thread's: delivered before the
		** release returns, no flush needed. (The flush first: messages of
		** the rows above may still be on their way on library threads.) */
		MUST(dac_cleanup_flush(30000, NULL));
		long before = __atomic_load_n(&delivered, __ATOMIC_SEQ_CST);
		dac_context *k = NULL;
		MUST(dac_context_new(&k));
		int64_t kid = -1;
		MUST(dac_context_id(k, &kid));
		MUST(dac_context_add_known_worker_id(k, 9));
		MUST(dac_context_unref(k));
		MUST(dac_context_release(kid));
		if (__atomic_load_n(&delivered, __ATOMIC_SEQ_CST) != before + 1)
			printf("BUG: a non-blocking sender's first attempt was not made by the release\n"), bugs++;
	}
	ROW(dac_set_cleanup_sender_nonblocking, "not an error: 0, back to library threads", DAC_OK,
	    dac_set_cleanup_sender_nonblocking(0));
	ROW(dac_fork_prepare, "a negative timeout", DAC_ERR_INVALID_ARGUMENT, dac_fork_prepare(-1));
	ROW(dac_fork_prepare, "INT64_MIN", DAC_ERR_INVALID_ARGUMENT, dac_fork_prepare(INT64_MIN));
	ROW(dac_fork_prepare, "not an error: INT64_MAX ms, nothing in flight", DAC_OK, dac_fork_prepare(INT64_MAX));
	ROW(dac_fork_parent, "not an error: after dac_fork_prepare", DAC_OK, dac_fork_parent());
	ROW(dac_fork_parent, "not an error: one more than prepared (a no-op)", DAC_OK, dac_fork_parent());

	/* Whatever was thrown at it, nothing is left over. */
	MUST(dac_context_unref(released));
	MUST(dac_context_unref(reissued));
	MUST(dac_context_release(live_id));
	MUST(dac_context_unref(live));
	MUST(dac_release_contexts_of_worker(5, NULL));
	MUST(dac_cleanup_flush(30000, NULL));
	MUST(dac_debug_info(buf, sizeof buf, &len));
	printf("num_contexts = %" PRId64 ", live handles 0: %s\n", num_contexts(),
	       strstr(buf, "\"live_handles\":0,") ? "yes" : "NO");
	printf("rows = %d, bugs = %d\n", rows, bugs);
	(void)w;
	return 0;
}
