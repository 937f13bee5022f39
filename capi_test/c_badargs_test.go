package capi_test

import "testing"

// Every function with bad arguments: NULL out-pointers, NULL buffers with a
// capacity, values out of range. Each gets DAC_ERR_INVALID_ARGUMENT and a
// message that names the function and the argument (or the native message for
// a worker id out of range), writes nothing, and the process keeps working.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- NULL out-pointers
		dac_worker_id(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_worker_id: out must not be NULL
		dac_max_id(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_max_id: out must not be NULL
		dac_num_contexts(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_num_contexts: out must not be NULL
		dac_new_autograd_message_id(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_new_autograd_message_id: out must not be NULL
		dac_debug_info(buf, sizeof buf, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_debug_info: length must not be NULL
		dac_context_new(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_new: out must not be NULL
		dac_context_current(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_current: out must not be NULL
		dac_context_retrieve(id, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_retrieve: out must not be NULL
		dac_context_retrieve_if_present(id, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_retrieve_if_present: out must not be NULL
		dac_context_get_or_create(id, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_get_or_create: out must not be NULL
		dac_current_context_id(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_current_context_id: out must not be NULL
		dac_has_valid_context(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_has_valid_context: out must not be NULL
		dac_context_id(ctx, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_id: out must not be NULL
		dac_context_known_worker_ids(ctx, ids, 2, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_known_worker_ids: count must not be NULL
		dac_context_send_function(ctx, 1, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_send_function: out must not be NULL
		dac_context_recv_function(ctx, 1, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_recv_function: out must not be NULL
		dac_context_send_functions(ctx, msgs, fns, 2, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_send_functions: count must not be NULL
		dac_context_recv_functions(ctx, msgs, fns, 2, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_recv_functions: count must not be NULL
		-- NULL buffers with a capacity
		dac_debug_info(NULL, 16, &count) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_debug_info: buf must not be NULL when capacity is not 0
		dac_context_known_worker_ids(ctx, NULL, 2, &count) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_known_worker_ids: ids must not be NULL when capacity is not 0
		dac_context_send_functions(ctx, NULL, fns, 2, &count) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_send_functions: message_ids and fns must not be NULL when capacity is not 0
		dac_context_send_functions(ctx, msgs, NULL, 2, &count) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_send_functions: message_ids and fns must not be NULL when capacity is not 0
		dac_context_recv_functions(ctx, NULL, NULL, 2, &count) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_recv_functions: message_ids and fns must not be NULL when capacity is not 0
		-- NULL where NULL is allowed
		dac_debug_info(NULL, 0, &count) -> DAC_OK
		dac_context_known_worker_ids(ctx, NULL, 0, &count) -> DAC_OK
		dac_context_send_functions(ctx, NULL, NULL, 0, &count) -> DAC_OK
		dac_context_release_if_present(12345, NULL) -> DAC_OK
		dac_release_contexts_of_worker(9, NULL) -> DAC_OK
		dac_reap_idle_contexts(60000, NULL) -> DAC_OK
		-- values out of range
		dac_set_max_contexts(-1) -> DAC_ERR_INVALID_ARGUMENT: distautograd: max_contexts must be >= 0, got -1
		dac_set_max_contexts(INT64_MIN) -> DAC_ERR_INVALID_ARGUMENT: distautograd: max_contexts must be >= 0, got -9223372036854775808
		dac_release_contexts_of_worker(-1, &n) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_release_contexts_of_worker(65536, &n) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_release_contexts_of_worker(INT32_MIN, &n) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_reap_idle_contexts(-1, &n) -> DAC_ERR_INVALID_ARGUMENT: distautograd: max_idle_ms must be >= 0, got -1
		dac_reap_idle_contexts(INT64_MIN, &n) -> DAC_ERR_INVALID_ARGUMENT: distautograd: max_idle_ms must be >= 0, got -9223372036854775808
		dac_context_add_known_worker_id(ctx, -1) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_context_add_known_worker_id(ctx, 65536) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_context_add_known_worker_id(ctx, INT32_MIN) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_context_add_known_worker_id(ctx, INT32_MAX) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_set_cleanup_options(-1, 0, 0, 0) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_set_cleanup_options: values must be >= 0 (0 selects the default)
		dac_set_cleanup_options(0, -1, 0, 0) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_set_cleanup_options: values must be >= 0 (0 selects the default)
		dac_set_cleanup_options(0, 0, -1, 0) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_set_cleanup_options: values must be >= 0 (0 selects the default)
		dac_set_cleanup_options(0, 0, 0, -1) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_set_cleanup_options: values must be >= 0 (0 selects the default)
		dac_cleanup_configure(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_cleanup_configure: options must not be NULL
		dac_cleanup_configure(&options) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_cleanup_configure: options->size must be set to sizeof(dac_cleanup_options) (at least 40)
		dac_cleanup_configure(&options) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_cleanup_configure: values must be >= 0 (0 selects the default)
		dac_cleanup_flush(-1, &n) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_cleanup_flush: timeout_ms must be >= 0, got -1
		-- argument checks come before the handle check
		dac_context_id(NULL, NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_id: out must not be NULL
		dac_context_known_worker_ids(NULL, NULL, 1, &count) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_context_known_worker_ids: ids must not be NULL when capacity is not 0
		-- ids no context has are not bad arguments, just not found
		dac_context_retrieve(INT64_MIN, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: -9223372036854775808
		dac_context_retrieve(DAC_INVALID_ID, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: -1
		dac_context_release(INT64_MAX) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 9223372036854775807
		-- nothing was written
		yes
		-- and the process keeps working
		dac_context_add_known_worker_id(ctx, 4) -> DAC_OK
		dac_context_known_worker_ids(ctx, known, 4, &count) -> DAC_OK
		count = 1: 4
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		dac_context_new(&ctx) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131969 (worker 3, counter 1)
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		dac_num_contexts(&n) -> DAC_OK
		n = 0
	`, run(t, buildC(t, "c/badargs.c")))
}
