/* badargs: every function with bad arguments on worker 3, then proof that the
** process still works. Each call gets its status and a message naming the
** function and the argument, and writes nothing. */
#include "check.h"
/* The deprecated dac_set_cleanup_options is still part of the ABI: this
** program calls it too. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(void) {
	MUST(dac_init(3));
	dac_context *ctx = NULL;
	int64_t id = 0, n = 0, msgs[2] = {0};
	uint64_t fns[2] = {0};
	int32_t ids[2] = {0};
	size_t count = 0;
	char buf[16];
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));

	printf("-- NULL out-pointers\n");
	SHOW(dac_worker_id(NULL));
	SHOW(dac_max_id(NULL));
	SHOW(dac_num_contexts(NULL));
	SHOW(dac_new_autograd_message_id(NULL));
	SHOW(dac_debug_info(buf, sizeof buf, NULL));
	SHOW(dac_context_new(NULL));
	SHOW(dac_context_current(NULL));
	SHOW(dac_context_retrieve(id, NULL));
	SHOW(dac_context_retrieve_if_present(id, NULL));
	SHOW(dac_context_get_or_create(id, NULL));
	SHOW(dac_current_context_id(NULL));
	SHOW(dac_has_valid_context(NULL));
	SHOW(dac_context_id(ctx, NULL));
	SHOW(dac_context_known_worker_ids(ctx, ids, 2, NULL));
	SHOW(dac_context_send_function(ctx, 1, NULL));
	SHOW(dac_context_recv_function(ctx, 1, NULL));
	SHOW(dac_context_send_functions(ctx, msgs, fns, 2, NULL));
	SHOW(dac_context_recv_functions(ctx, msgs, fns, 2, NULL));
	printf("-- NULL buffers with a capacity\n");
	SHOW(dac_debug_info(NULL, 16, &count));
	SHOW(dac_context_known_worker_ids(ctx, NULL, 2, &count));
	SHOW(dac_context_send_functions(ctx, NULL, fns, 2, &count));
	SHOW(dac_context_send_functions(ctx, msgs, NULL, 2, &count));
	SHOW(dac_context_recv_functions(ctx, NULL, NULL, 2, &count));
	printf("-- NULL where NULL is allowed\n");
	SHOW(dac_debug_info(NULL, 0, &count));
	SHOW(dac_context_known_worker_ids(ctx, NULL, 0, &count));
	SHOW(dac_context_send_functions(ctx, NULL, NULL, 0, &count));
	SHOW(dac_context_release_if_present(12345, NULL));
	SHOW(dac_release_contexts_of_worker(9, NULL));
	SHOW(dac_reap_idle_contexts(60000, NULL));
	n = 7, count = 7;
	printf("-- values out of range\n");
	SHOW(dac_set_max_contexts(-1));
	SHOW(dac_set_max_contexts(INT64_MIN));
	SHOW(dac_release_contexts_of_worker(-1, &n));
	SHOW(dac_release_contexts_of_worker(65536, &n));
	SHOW(dac_release_contexts_of_worker(INT32_MIN, &n));
	SHOW(dac_reap_idle_contexts(-1, &n));
	SHOW(dac_reap_idle_contexts(INT64_MIN, &n));
	SHOW(dac_context_add_known_worker_id(ctx, -1));
	SHOW(dac_context_add_known_worker_id(ctx, 65536));
	SHOW(dac_context_add_known_worker_id(ctx, INT32_MIN));
	SHOW(dac_context_add_known_worker_id(ctx, INT32_MAX));
	dac_cleanup_options options = {0};
	SHOW(dac_set_cleanup_options(-1, 0, 0, 0));
	SHOW(dac_set_cleanup_options(0, -1, 0, 0));
	SHOW(dac_set_cleanup_options(0, 0, -1, 0));
	SHOW(dac_set_cleanup_options(0, 0, 0, -1));
	SHOW(dac_cleanup_configure(NULL));
	SHOW(dac_cleanup_configure(&options));
	options.size = sizeof options;
	options.max_pending = -1;
	SHOW(dac_cleanup_configure(&options));
	SHOW(dac_cleanup_flush(-1, &n));
	printf("-- argument checks come before the handle check\n");
	SHOW(dac_context_id(NULL, NULL));
	SHOW(dac_context_known_worker_ids(NULL, NULL, 1, &count));
	printf("-- ids no context has are not bad arguments, just not found\n");
	SHOW(dac_context_retrieve(INT64_MIN, &ctx));
	SHOW(dac_context_retrieve(DAC_INVALID_ID, &ctx));
	SHOW(dac_context_release(INT64_MAX));
	printf("-- nothing was written\n");
	printf("%s\n", n == 7 && count == 7 && ids[0] == 0 && msgs[0] == 0 && fns[0] == 0 ? "yes" : "NO");
	printf("-- and the process keeps working\n");
	int32_t known[4];
	SHOW(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_known_worker_ids(ctx, known, 4, &count));
	printf("count = %zu: %" PRId32 "\n", count, known[0]);
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_num_contexts(&n));
	PRINT_I64(n);
	return 0;
}
