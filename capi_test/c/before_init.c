/* before_init: every function before dac_init succeeded, on the main thread
** and on another one; then the failed inits that leave it so. Usage:
**   before_init            the calls
**   before_init bad-init   failed dac_init calls first, then the calls */
#include "check.h"

#include <pthread.h>

static void everything(void) {
	int32_t w = 7;
	int64_t v = 7;
	int flag = 7;
	size_t len = 7;
	char buf[16] = "untouched";
	dac_context *ctx = (dac_context *)(uintptr_t)0x77;

	SHOW(dac_worker_id(&w));
	SHOW(dac_max_id(&v));
	SHOW(dac_num_contexts(&v));
	SHOW(dac_new_autograd_message_id(&v));
	SHOW(dac_debug_info(buf, sizeof buf, &len));
	SHOW(dac_set_max_contexts(10));
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_current(&ctx));
	SHOW(dac_context_retrieve(0, &ctx));
	SHOW(dac_context_retrieve_if_present(0, &ctx));
	SHOW(dac_context_get_or_create(0, &ctx));
	SHOW(dac_context_is_valid(0));
	SHOW(dac_context_release(0));
	SHOW(dac_context_release_if_present(0, &flag));
	SHOW(dac_release_contexts_of_worker(0, &v));
	SHOW(dac_reap_idle_contexts(0, &v));
	SHOW(dac_current_context_id(&v));
	SHOW(dac_has_valid_context(&flag));
	SHOW(dac_set_current_context_id(5));
	SHOW(dac_force_current_context_id(5));
	SHOW(dac_clear_current_context());
	/* No handle can exist before init: whatever is passed, not initialized. */
	int32_t ids[2];
	int64_t msgs[2];
	uint64_t fns[2], fn = 7;
	SHOW(dac_context_ref(ctx));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_context_id(ctx, &v));
	SHOW(dac_context_add_known_worker_id(ctx, 1));
	SHOW(dac_context_known_worker_ids(ctx, ids, 2, &len));
	SHOW(dac_context_add_send_function(ctx, 1, 2));
	SHOW(dac_context_add_recv_function(ctx, 1, 2));
	SHOW(dac_context_send_function(ctx, 1, &fn));
	SHOW(dac_context_recv_function(ctx, 1, &fn));
	SHOW(dac_context_send_functions(ctx, msgs, fns, 2, &len));
	SHOW(dac_context_recv_functions(ctx, msgs, fns, 2, &len));
	/* Failures wrote nothing. */
	printf("outputs untouched: %s\n",
	       w == 7 && v == 7 && flag == 7 && len == 7 && fn == 7 && strcmp(buf, "untouched") == 0 &&
	               ctx == (dac_context *)(uintptr_t)0x77
	           ? "yes"
	           : "NO");
	/* What needs no container works: the fan-out may be set up before init. */
	SHOW(dac_set_cleanup_sender(NULL, NULL));
	dac_cleanup_counters counters = {sizeof counters, -1, -1, -1, -1, -1, -1};
	SHOW(dac_cleanup_stats(&counters));
	printf("counters before init: sent %" PRId64 ", skipped %" PRId64 ", pending %" PRId64 "\n", counters.sent,
	       counters.skipped, counters.pending);
	printf("dac_version() = %s\n", dac_version());
	printf("dac_status_string(DAC_ERR_NOT_INITIALIZED) = %s\n", dac_status_string(DAC_ERR_NOT_INITIALIZED));
}

static void *thread_main(void *arg) {
	(void)arg;
	printf("-- another thread\n");
	printf("dac_last_status() = %d, dac_last_error() = \"%s\"\n", dac_last_status(), dac_last_error());
	SHOW(dac_num_contexts(&(int64_t){0}));
	return NULL;
}

int main(int argc, char **argv) {
	printf("dac_last_status() = %d, dac_last_error() = \"%s\"\n", dac_last_status(), dac_last_error());
	if (argc > 1 && strcmp(argv[1], "bad-init") == 0) {
		SHOW(dac_init(-1));
		SHOW(dac_init(65536));
		SHOW(dac_init(INT64_MIN));
		SHOW(dac_init(INT64_MAX));
	}
	everything();
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, thread_main, NULL) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	return 0;
}
