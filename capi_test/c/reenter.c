/* reenter: every function of the header called from inside a cleanup
** sender and from inside the log hook, each of which the header says "may
** call any dac_* function". A table, one row per call, like badinput.c's:
** each row must return within BOUND_MS (a hang bound: it catches a call
** that waits for the very callback it runs in, not slowness) with the
** result the header documents for it there. The waits that could only end
** when the caller returns are asked for long (60 s): dac_cleanup_flush
** (the caller's own message is pending), dac_set_cleanup_sender and
** dac_set_cleanup_sender_timeout (the caller is a call of the sender being
** replaced), dac_fork_prepare (the caller is a call in progress).
**
** It prints "ROW WHERE fn | call -> STATUS | MS ms" per row, WHERE being
** sender or hook, a BUG line for a wrong result, and a HANG line (then exits
** with status 3) for a row still running after BOUND_MS; the Go test checks
** that every function of the header has a row in both places. Then the
** same for a sender that replaces itself while another thread waits in
** dac_set_cleanup_sender for that very call to end. */
#include "check.h"
/* The deprecated dac_set_cleanup_options is still part of the ABI: this
** program calls it too. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define BOUND_MS 10000
#define LONG_WAIT_MS 60000

static int bugs, rows;
static const char *where = "main";

/* ---- the watchdog: a row past the bound ends the program ---- */

static char row_label[256];
static int64_t row_started; /* 0: no row running */
static pthread_mutex_t row_mu = PTHREAD_MUTEX_INITIALIZER;

static void *watchdog(void *arg) {
	(void)arg;
	for (;;) {
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&row_mu);
		if (row_started != 0 && now_ms() - row_started > BOUND_MS) {
			printf("HANG %s: %s still running after %d ms\n", where, row_label, BOUND_MS);
			fflush(stdout);
			_exit(3);
		}
		pthread_mutex_unlock(&row_mu);
	}
	return NULL;
}

static void begin_row(const char *call) {
	pthread_mutex_lock(&row_mu);
	snprintf(row_label, sizeof row_label, "%s", call);
	row_started = now_ms();
	pthread_mutex_unlock(&row_mu);
}

/* fn is the function the row is for, call what it ran. */
static void end_row(const char *fn, const char *call, int rc, int good) {
	pthread_mutex_lock(&row_mu);
	int64_t ms = now_ms() - row_started;
	row_started = 0;
	pthread_mutex_unlock(&row_mu);
	rows++;
	printf("ROW %s %s | %s -> %s | %" PRId64 " ms\n", where, fn, call, dac_status_string(rc), ms);
	if (!good) {
		bugs++;
		printf("BUG: from inside the %s: %s -> %s: %s\n", where, call, dac_status_string(rc),
		       rc ? dac_last_error() : "(an unexpected value)");
	}
	fflush(stdout);
}

/* ROW(fn, call, ok): runs call, whose status ok (an expression of RC and of
** what the call wrote) must accept. */
#define ROW(fn, call, ok)                             \
	do {                                              \
		begin_row(#call);                             \
		int RC = (call);                              \
		end_row(#fn, #call, RC, (ok));                \
	} while (0)

/* A row for the functions that return a value, not a status. */
#define ROW_VALUE(fn, expr, ok)                       \
	do {                                              \
		begin_row(#expr);                             \
		int good_ = (ok);                             \
		(void)(expr);                                 \
		end_row(#fn, #expr, DAC_OK, good_);           \
	} while (0)

/* ---- the senders and the hook ---- */

static int other_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	return 0;
}

static void quiet_hook(void *user_data, int level, const char *message) {
	(void)user_data, (void)level, (void)message;
}

static int drops;
static void count_drop(uint64_t value) {
	(void)value;
	__atomic_add_fetch(&drops, 1, __ATOMIC_SEQ_CST);
}

static int table_sender(void *user_data, int32_t worker_id, int64_t context_id);
static void table_hook(void *user_data, int level, const char *message);
static int sender_data, hook_data, other_data;

/* The whole header, from inside a callback. in_sender: the caller is a
** call of the sender in force (table_sender); else of the log hook
** (table_hook), with table_sender in force. */
static void run_table(int in_sender) {
	char buf[1024];
	size_t len = 0, count = 0;
	int32_t w = -1, ids[4];
	int64_t v = -1, id = -1, msgs[4], pending = -1, released = -1;
	uint64_t fn = 0, fns[4];
	int flag = -1;
	dac_context *h = NULL, *h2 = NULL;
	const int64_t foreign = ((int64_t)6 << 48) | (in_sender ? 1 : 2);
	const int64_t of_77 = ((int64_t)77 << 48) | 1;

	/* ---- library ---- */
	ROW_VALUE(dac_version, dac_version(), strcmp(dac_version(), DAC_VERSION_STRING) == 0);
	ROW_VALUE(dac_version_number, dac_version_number(), dac_version_number() == DAC_VERSION_NUMBER);
	ROW_VALUE(dac_status_string, dac_status_string(DAC_ERR_TIMEOUT),
	          strcmp(dac_status_string(DAC_ERR_TIMEOUT), "DAC_ERR_TIMEOUT") == 0);
	ROW(dac_context_is_valid, dac_context_is_valid(foreign), RC == DAC_ERR_NOT_FOUND);
	ROW_VALUE(dac_last_error, dac_last_error(),
	          strncmp(dac_last_error(), "Could not find autograd context with id: ", 41) == 0);
	ROW_VALUE(dac_last_status, dac_last_status(), dac_last_status() == DAC_ERR_NOT_FOUND);

	/* ---- container ---- */
	ROW(dac_init, dac_init(3), RC == DAC_OK);
	ROW(dac_worker_id, dac_worker_id(&w), RC == DAC_OK && w == 3);
	ROW(dac_max_id, dac_max_id(&v), RC == DAC_OK && v == (((int64_t)3 << 48) | (((int64_t)1 << 48) - 1)));
	ROW(dac_num_contexts, dac_num_contexts(&v), RC == DAC_OK && v >= 0);
	ROW(dac_new_autograd_message_id, dac_new_autograd_message_id(&v), RC == DAC_OK && (uint64_t)v >> 48 == 3);
	ROW(dac_debug_info, dac_debug_info(buf, sizeof buf, &len), RC == DAC_OK && len > 0 && len < sizeof buf);
	ROW(dac_set_max_contexts, dac_set_max_contexts(0), RC == DAC_OK);

	/* ---- contexts (a library thread starts with no current id) ---- */
	ROW(dac_clear_current_context, dac_clear_current_context(), RC == DAC_OK);
	ROW(dac_context_new, dac_context_new(&h), RC == DAC_OK);
	REQUIRE(dac_context_id(h, &id) == DAC_OK);
	ROW(dac_context_current, dac_context_current(&h2), RC == DAC_OK);
	MUST(dac_context_unref(h2));
	{
		int64_t cur_id = 0;
		ROW(dac_context_current_id, dac_context_current_id(&h2, &cur_id), RC == DAC_OK && cur_id == id);
		MUST(dac_context_unref(h2));
	}
	{
		/* One more, through dac_context_new_id, released at once. */
		dac_context *h3 = NULL;
		int64_t id3 = 0;
		MUST(dac_clear_current_context());
		ROW(dac_context_new_id, dac_context_new_id(&h3, &id3), RC == DAC_OK && (uint64_t)id3 >> 48 == 3);
		MUST(dac_context_release(id3));
		ROW(dac_context_unref_many, dac_context_unref_many(&h3, 1), RC == DAC_OK);
		MUST(dac_force_current_context_id(id));
	}
	ROW(dac_context_retrieve, dac_context_retrieve(id, &h2), RC == DAC_OK);
	MUST(dac_context_unref(h2));
	h2 = NULL;
	ROW(dac_context_retrieve_if_present, dac_context_retrieve_if_present(id, &h2), RC == DAC_OK && h2 != NULL);
	MUST(dac_context_unref(h2));
	ROW(dac_context_get_or_create, dac_context_get_or_create(foreign, &h2), RC == DAC_OK);
	MUST(dac_context_unref(h2));
	ROW(dac_context_is_valid, dac_context_is_valid(id), RC == DAC_OK);
	ROW(dac_context_release, dac_context_release(id), RC == DAC_OK);
	ROW(dac_context_release_if_present, dac_context_release_if_present(foreign, &flag), RC == DAC_OK && flag == 1);
	{
		int32_t w[1] = {8};
		MUST(dac_context_get_or_create(foreign, &h2));
		MUST(dac_context_unref(h2));
		ROW(dac_context_release_with_workers, dac_context_release_with_workers(foreign, w, 1, &flag),
		    RC == DAC_OK && flag == 1);
	}
	MUST(dac_context_get_or_create(of_77, &h2));
	MUST(dac_context_unref(h2));
	ROW(dac_release_contexts_of_worker, dac_release_contexts_of_worker(77, &released), RC == DAC_OK && released == 1);
	ROW(dac_reap_idle_contexts, dac_reap_idle_contexts(INT64_MAX, &released), RC == DAC_OK && released == 0);

	/* ---- the current id ---- */
	ROW(dac_current_context_id, dac_current_context_id(&v), RC == DAC_OK && v == DAC_INVALID_ID);
	ROW(dac_has_valid_context, dac_has_valid_context(&flag), RC == DAC_OK && flag == 0);
	ROW(dac_set_current_context_id, dac_set_current_context_id(foreign), RC == DAC_OK);
	ROW(dac_force_current_context_id, dac_force_current_context_id(id), RC == DAC_OK);
	ROW(dac_clear_current_context, dac_clear_current_context(), RC == DAC_OK);

	/* ---- the handle, of a released context (so no message goes out) ---- */
	ROW(dac_context_ref, dac_context_ref(h), RC == DAC_OK);
	ROW(dac_context_unref, dac_context_unref(h), RC == DAC_OK);
	ROW(dac_context_id, dac_context_id(h, &v), RC == DAC_OK && v == id);
	ROW(dac_context_add_known_worker_id, dac_context_add_known_worker_id(h, 9), RC == DAC_OK);
	ROW(dac_context_known_worker_ids, dac_context_known_worker_ids(h, ids, 4, &count),
	    RC == DAC_OK && count == 1 && ids[0] == 9);
	ROW(dac_context_list, dac_context_list(NULL, 0, &count), RC == DAC_OK);
	ROW(dac_context_times, dac_context_times(h, &v, &v), RC == DAC_OK && v >= 0);
	ROW(dac_context_add_send_function, dac_context_add_send_function(h, 1, 11), RC == DAC_OK);
	ROW(dac_context_add_recv_function, dac_context_add_recv_function(h, 1, 12), RC == DAC_OK);
	ROW(dac_context_send_function, dac_context_send_function(h, 1, &fn), RC == DAC_OK && fn == 11);
	ROW(dac_context_recv_function, dac_context_recv_function(h, 1, &fn), RC == DAC_OK && fn == 12);
	ROW(dac_context_send_functions, dac_context_send_functions(h, msgs, fns, 4, &count),
	    RC == DAC_OK && count == 1 && msgs[0] == 1 && fns[0] == 11);
	ROW(dac_context_recv_functions, dac_context_recv_functions(h, msgs, fns, 4, &count),
	    RC == DAC_OK && count == 1 && fns[0] == 12);
	ROW(dac_context_set_host_value, dac_context_set_host_value(h, 0x1234, count_drop, &fn),
	    RC == DAC_OK && fn == 0x1234);
	ROW(dac_context_host_value, dac_context_host_value(h, &fn), RC == DAC_OK && fn == 0x1234);
	/* The last reference: the context is out of the container, so its
	** drop runs now, on this thread, inside the callback. */
	int drops_before = __atomic_load_n(&drops, __ATOMIC_SEQ_CST);
	MUST(dac_context_unref(h));
	if (__atomic_load_n(&drops, __ATOMIC_SEQ_CST) != drops_before + 1) {
		bugs++;
		printf("BUG: from inside the %s: the host value's drop did not run at the last unref\n", where);
	}

	/* ---- the fan-out: each setter puts back what was in force ---- */
	ROW(dac_set_cleanup_sender, dac_set_cleanup_sender(table_sender, &sender_data), RC == DAC_OK);
	ROW(dac_set_cleanup_sender, dac_set_cleanup_sender(other_sender, &other_data), RC == DAC_OK);
	ROW(dac_set_cleanup_sender, dac_set_cleanup_sender(table_sender, &sender_data), RC == DAC_OK);
	ROW(dac_set_cleanup_sender_timeout, dac_set_cleanup_sender_timeout(other_sender, &other_data, LONG_WAIT_MS),
	    RC == DAC_OK);
	ROW(dac_set_cleanup_sender_timeout, dac_set_cleanup_sender_timeout(table_sender, &sender_data, LONG_WAIT_MS),
	    RC == DAC_OK);
	ROW(dac_set_cleanup_sender_timeout, dac_set_cleanup_sender_timeout(table_sender, &sender_data, -1),
	    RC == DAC_ERR_INVALID_ARGUMENT);
	ROW(dac_set_cleanup_sender_nonblocking, dac_set_cleanup_sender_nonblocking(0), RC == DAC_OK);
	dac_cleanup_options options = {.size = sizeof options, .max_attempts = 1, .initial_backoff_us = 1000,
	                               .max_backoff_us = 1000};
	ROW(dac_cleanup_configure, dac_cleanup_configure(&options), RC == DAC_OK);
	ROW(dac_set_cleanup_options, dac_set_cleanup_options(1, 1000, 1000, 0), RC == DAC_OK);
	dac_cleanup_counters counters = {.size = sizeof counters, .pending = -1};
	ROW(dac_cleanup_stats, dac_cleanup_stats(&counters), RC == DAC_OK && counters.pending >= 0);
	/* From a sender its own message is pending; from the hook, after the
	** line about a message given up, none needs be. Either way at once. */
	ROW(dac_cleanup_flush, dac_cleanup_flush(LONG_WAIT_MS, &pending),
	    in_sender ? RC == DAC_ERR_TIMEOUT && pending >= 1
	              : (RC == DAC_OK && pending == 0) || (RC == DAC_ERR_TIMEOUT && pending >= 1));
	ROW(dac_cleanup_flush, dac_cleanup_flush(INT64_MAX, NULL), in_sender ? RC == DAC_ERR_TIMEOUT : RC == DAC_OK || RC == DAC_ERR_TIMEOUT);
	ROW(dac_set_log_hook, dac_set_log_hook(quiet_hook, NULL), RC == DAC_OK);
	ROW(dac_set_log_hook, dac_set_log_hook(table_hook, &hook_data), RC == DAC_OK);

	/* ---- fork: this very call is in progress, and not waited for ---- */
	ROW(dac_fork_prepare, dac_fork_prepare(LONG_WAIT_MS), RC == DAC_OK);
	ROW(dac_fork_parent, dac_fork_parent(), RC == DAC_OK);
}

static int64_t sender_marker = -1, hook_marker = -1;
static int sender_done, hook_done;

static int table_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id;
	if (context_id == sender_marker && !__atomic_load_n(&sender_done, __ATOMIC_SEQ_CST)) {
		where = "sender";
		run_table(1);
		where = "main";
		__atomic_store_n(&sender_done, 1, __ATOMIC_SEQ_CST);
		return 0;
	}
	/* Every other message fails: the one of the hook's table is given up at
	** once (max_attempts 1), and the hook gets the line. */
	return context_id == hook_marker ? 1 : 0;
}

static void table_hook(void *user_data, int level, const char *message) {
	(void)user_data;
	char text[64];
	snprintf(text, sizeof text, "(context %" PRId64 ",", hook_marker);
	if (level == DAC_LOG_ERROR && strstr(message, text) != NULL && !__atomic_load_n(&hook_done, __ATOMIC_SEQ_CST)) {
		where = "hook";
		run_table(0);
		where = "main";
		__atomic_store_n(&hook_done, 1, __ATOMIC_SEQ_CST);
	}
}

/* Releases a context with one known worker: one message for the sender. */
static void release_with_worker(int64_t id) {
	dac_context *ctx = NULL;
	MUST(dac_context_get_or_create(id, &ctx));
	MUST(dac_context_add_known_worker_id(ctx, 1));
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
}

static void wait_done(int *done, const char *what) {
	int64_t deadline = now_ms() + 4 * BOUND_MS;
	while (!__atomic_load_n(done, __ATOMIC_SEQ_CST)) {
		if (now_ms() > deadline) {
			printf("HANG: the %s never ran its table\n", what);
			fflush(stdout);
			_exit(3);
		}
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* ---- a sender that replaces itself while a setter waits for it ---- */

static int entered, replaced_rc = -1;
static int64_t replaced_ms = -1;

static int self_replacing_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	if (__atomic_exchange_n(&entered, 1, __ATOMIC_SEQ_CST))
		return 0;
	/* Give the main thread time to be inside dac_set_cleanup_sender, waiting
	** for this call (if it is not there yet, the row still must not hang). */
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	int64_t t0 = now_ms();
	replaced_rc = dac_set_cleanup_sender(other_sender, &other_data);
	replaced_ms = now_ms() - t0;
	return 0;
}

int main(void) {
	pthread_t dog;
	REQUIRE(pthread_create(&dog, NULL, watchdog, NULL) == 0);
	MUST(dac_init(3));
	MUST(dac_set_cleanup_options(1, 1000, 1000, 0));
	MUST(dac_set_log_hook(table_hook, &hook_data));
	MUST(dac_set_cleanup_sender(table_sender, &sender_data));

	/* From inside the sender. */
	sender_marker = ((int64_t)5 << 48) | 1;
	release_with_worker(sender_marker);
	wait_done(&sender_done, "sender");
	/* From inside the hook: a message that fails, given up at once. */
	hook_marker = ((int64_t)5 << 48) | 2;
	release_with_worker(hook_marker);
	wait_done(&hook_done, "hook");
	MUST(dac_cleanup_flush(LONG_WAIT_MS, NULL));

	/* A sender that replaces itself while the main thread waits in
	** dac_set_cleanup_sender for it to return: neither waits for the other. */
	MUST(dac_set_cleanup_sender(self_replacing_sender, NULL));
	release_with_worker(((int64_t)5 << 48) | 3);
	while (!__atomic_load_n(&entered, __ATOMIC_SEQ_CST)) {
		struct timespec ts = {0, 100 * 1000};
		nanosleep(&ts, NULL);
	}
	where = "main, while the sender replaces itself";
	ROW(dac_set_cleanup_sender, dac_set_cleanup_sender(table_sender, &sender_data),
	    RC == DAC_OK && replaced_rc == DAC_OK && replaced_ms < BOUND_MS);
	where = "main";
	MUST(dac_cleanup_flush(LONG_WAIT_MS, NULL));

	MUST(dac_set_cleanup_sender(NULL, NULL));
	MUST(dac_set_log_hook(NULL, NULL));
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	printf("live_handles = %" PRId64 "\n", debug_value("live_handles"));
	printf("rows = %d, bugs = %d\n", rows, bugs);
	return 0;
}
