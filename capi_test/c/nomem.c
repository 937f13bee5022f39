/* nomem.c: a thread whose error slot cannot be allocated shares the
** library's out-of-memory slot. Each of its failed calls still returns its
** own status, and dac_last_status and dac_last_error say out of memory,
** whether C or Go refused the call: nobody writes the shared slot, so
** another such thread finds it as it was, and threads with a slot of their
** own are not touched. This program's calloc (nomem_calloc.h) interposes the
** library's and fails the slot's allocation on the threads that ask. */
#include "check.h"
/* The deprecated dac_set_cleanup_options is still part of the ABI: this
** program calls it too. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <pthread.h>

#include "nomem_calloc.h"

static void report(const char *call, int rc) {
	printf("  %s -> %s; last: %s, \"%s\"\n", call, dac_status_string(rc), dac_status_string(dac_last_status()),
	       dac_last_error());
}

static void *without_a_slot(void *arg) {
	fail_slot = 1;
	printf("%s:\n", (const char *)arg);
	dac_context *ctx = NULL;
	int64_t id = 0;
	report("dac_context_retrieve(424242, &ctx) [Go refuses]", dac_context_retrieve(424242, &ctx));
	report("dac_context_release(424242) [Go refuses]", dac_context_release(424242));
	report("dac_worker_id(NULL) [C refuses]", dac_worker_id(NULL));
	report("dac_set_cleanup_options(-1, 0, 0, 0) [C refuses]", dac_set_cleanup_options(-1, 0, 0, 0));
	report("dac_set_current_context_id(1) [works]", dac_set_current_context_id(1));
	report("dac_set_current_context_id(2) [C refuses, Go's message]", dac_set_current_context_id(2));
	report("dac_clear_current_context() [works]", dac_clear_current_context());
	report("dac_context_new_id(&ctx, &id) [works]", dac_context_new_id(&ctx, &id));
	report("dac_context_release(id) [works]", dac_context_release(id));
	report("dac_context_unref(ctx) [works]", dac_context_unref(ctx));
	return NULL;
}

int main(void) {
	MUST(dac_init(3));
	dac_context *ctx = NULL;
	SHOW(dac_context_retrieve(1, &ctx));
	const char *names[] = {"a thread without a slot", "another"};
	for (int i = 0; i < 2; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, without_a_slot, (void *)names[i]) != 0 || pthread_join(t, NULL) != 0)
			return 1;
	}
	printf("the main thread's own slot:\n");
	printf("  last: %s, \"%s\"\n", dac_status_string(dac_last_status()), dac_last_error());
	SHOW(dac_context_retrieve(2, &ctx));
	return 0;
}
