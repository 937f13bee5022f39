/* init: the init rules, one process per scenario (the container is set up
** once per process, as the native one). Usage:
**   init WORKER        init WORKER, the layout it gives, then every re-init
**   init-thread        init 3, then again with the same and another id from
**                      another thread */
#include "check.h"

#include <pthread.h>

static void layout(void) {
	int32_t w = -1;
	int64_t max = 0, id = 0, msg = 0;
	dac_context *ctx = NULL;
	MUST(dac_worker_id(&w));
	MUST(dac_max_id(&max));
	printf("worker_id = %" PRId32 "\n", w);
	PRINT_ID(max);
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	MUST(dac_new_autograd_message_id(&msg));
	PRINT_ID(msg);
	MUST(dac_new_autograd_message_id(&msg));
	PRINT_ID(msg);
}

static void *other_thread(void *arg) {
	(void)arg;
	printf("-- another thread\n");
	SHOW(dac_init(3));
	SHOW(dac_init(4));
	return NULL;
}

int main(int argc, char **argv) {
	if (argc == 2 && strcmp(argv[1], "init-thread") == 0) {
		SHOW(dac_init(3));
		pthread_t t;
		REQUIRE(pthread_create(&t, NULL, other_thread, NULL) == 0);
		REQUIRE(pthread_join(t, NULL) == 0);
		layout();
		return 0;
	}
	REQUIRE(argc == 3 && strcmp(argv[1], "init") == 0);
	int64_t w = strtoll(argv[2], NULL, 10);
	SHOWF(dac_init(w), "dac_init(%" PRId64 ")", w);
	layout();
	printf("-- again\n");
	SHOWF(dac_init(w), "dac_init(%" PRId64 ")", w);
	SHOWF(dac_init(w ^ 1), "dac_init(%" PRId64 ")", w ^ 1);
	SHOW(dac_init(-1));
	SHOW(dac_init(65536));
	/* Failed inits changed nothing. */
	layout();
	return 0;
}
