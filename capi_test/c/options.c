/* options: the fan-out's options through both setters. Every refusal names
** the function called, those Go makes (max_pending past its limit, or grown
** once a message was queued) as those C makes; DAC_CLEANUP_OPTIONS_INIT
** gives the defaults, and putting them back moves a retry waiting out a
** longer backoff earlier. Prints a transcript; prints the limit and the
** defaults first, so that the Go test states them from the header. */
#include "check.h"

/* dac_set_cleanup_options is deprecated: this program tests it all the same. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static int delivered, fail_next;

/* Delivers, or fails once after fail_next is set. */
static int sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	if (__atomic_exchange_n(&fail_next, 0, __ATOMIC_SEQ_CST))
		return 1;
	__atomic_add_fetch(&delivered, 1, __ATOMIC_RELAXED);
	return 0;
}

/* Releases a new context that worker 4 knows: one cleanup message. */
static void release_told_to_worker_4(void) {
	dac_context *ctx = NULL;
	int64_t id = 0;
	MUST(dac_context_new_id(&ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_release(id));
	MUST(dac_context_unref(ctx));
}

static void print_delivered(int64_t pending) {
	printf("delivered %d, pending %lld\n", __atomic_load_n(&delivered, __ATOMIC_RELAXED), (long long)pending);
}

int main(void) {
	printf("limit %lld, default %lld\n", (long long)DAC_CLEANUP_MAX_PENDING_LIMIT,
	       (long long)DAC_CLEANUP_DEFAULT_MAX_PENDING);
	dac_cleanup_options o = DAC_CLEANUP_OPTIONS_INIT;
	printf("DAC_CLEANUP_OPTIONS_INIT: size %s, every option 0: %s\n", o.size == sizeof o ? "sizeof" : "WRONG",
	       o.max_attempts == 0 && o.initial_backoff_us == 0 && o.max_backoff_us == 0 && o.max_pending == 0 ? "yes"
	                                                                                                       : "NO");
	SHOW(dac_cleanup_configure(&o));
	MUST(dac_init(3));

	printf("-- past the limit\n");
	o.max_pending = DAC_CLEANUP_MAX_PENDING_LIMIT + 1;
	SHOW(dac_cleanup_configure(&o));
	SHOW(dac_set_cleanup_options(0, 0, 0, DAC_CLEANUP_MAX_PENDING_LIMIT + 1));
	o.max_pending = 0;

	printf("-- a message queued\n");
	MUST(dac_set_cleanup_sender(sender, NULL));
	int64_t pending = -1;
	release_told_to_worker_4();
	SHOW(dac_cleanup_flush(10000, &pending));
	print_delivered(pending);

	printf("-- grown past the queue made\n");
	o.max_pending = DAC_CLEANUP_DEFAULT_MAX_PENDING + 1;
	SHOW(dac_cleanup_configure(&o));
	SHOW(dac_set_cleanup_options(0, 0, 0, DAC_CLEANUP_DEFAULT_MAX_PENDING + 1));
	printf("-- shrunk, and back: no growth past the queue made\n");
	SHOW(dac_set_cleanup_options(0, 0, 0, 1000));
	o.max_pending = DAC_CLEANUP_DEFAULT_MAX_PENDING;
	SHOW(dac_cleanup_configure(&o));

	printf("-- a retry waiting out the longest backoff, then the defaults put back\n");
	o.initial_backoff_us = INT64_MAX;
	o.max_backoff_us = INT64_MAX;
	SHOW(dac_cleanup_configure(&o));
	__atomic_store_n(&fail_next, 1, __ATOMIC_SEQ_CST);
	release_told_to_worker_4();
	SHOW(dac_cleanup_flush(100, &pending));
	print_delivered(pending);
	dac_cleanup_options defaults = DAC_CLEANUP_OPTIONS_INIT;
	SHOW(dac_cleanup_configure(&defaults));
	SHOW(dac_cleanup_flush(10000, &pending));
	print_delivered(pending);
	return 0;
}
