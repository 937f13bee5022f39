/* exhaust: id counters that reach max_id fail cleanly (the native component
** fails an internal assertion, a context creation after making max_id the
** thread's current id: torch_backend/tests/test_limits.py). Needs the testing build of the library
** (build/testing, make testing-lib), whose dactest_set_counter_offsets
** starts the counters near the end. Usage:
**   exhaust WORKER     both counters two ids before max_id
**   exhaust probe      whether this library has the testing function */
#include "check.h"

#include <dlfcn.h>
#include <pthread.h>

typedef int (*set_offsets_fn)(int64_t ctx_offset, int64_t msg_offset);

static const int64_t mask = ((int64_t)1 << 48) - 1;

static void *other_thread(void *arg) {
	(void)arg;
	dac_context *ctx = NULL;
	int64_t msg = 0;
	printf("-- another thread\n");
	SHOW(dac_context_new(&ctx));
	SHOW(dac_new_autograd_message_id(&msg));
	return NULL;
}

int main(int argc, char **argv) {
	REQUIRE(argc == 2);
	/* A void* to function pointer cast, as POSIX specifies for dlsym. */
	set_offsets_fn set_offsets;
	void *self = dlopen(NULL, RTLD_NOW);
	REQUIRE(self != NULL);
	*(void **)&set_offsets = dlsym(self, "dactest_set_counter_offsets");
	if (strcmp(argv[1], "probe") == 0) {
		printf("dactest_set_counter_offsets: %s\n", set_offsets ? "present" : "absent");
		return 0;
	}
	if (set_offsets == NULL) {
		fprintf(stderr, "dactest_set_counter_offsets not found: run against build/testing\n");
		return 1;
	}
	int64_t w = strtoll(argv[1], NULL, 10);
	REQUIRE(set_offsets(mask - 2, mask - 2) == DAC_OK);
	MUST(dac_init(w));
	dac_context *ctx = NULL;
	int64_t id = 0, msg = 0, max = 0;
	MUST(dac_max_id(&max));
	PRINT_ID(max);
	printf("-- context ids: the last one issued is max_id - 1\n");
	for (int i = 0; i < 2; i++) {
		SHOW(dac_context_new(&ctx));
		MUST(dac_context_id(ctx, &id));
		PRINT_ID(id);
		MUST(dac_context_unref(ctx));
		MUST(dac_clear_current_context());
	}
	ctx = (dac_context *)(uintptr_t)0x77;
	SHOW(dac_context_new(&ctx));
	printf("out untouched: %s\n", ctx == (dac_context *)(uintptr_t)0x77 ? "yes" : "NO");
	SHOW(dac_context_new(&ctx));
	int64_t cur = 0;
	MUST(dac_current_context_id(&cur));
	printf("a failure changes nothing: current_context_id = %" PRId64 ", num_contexts = %" PRId64 "\n", cur,
	       num_contexts());
	printf("-- message ids, the same\n");
	for (int i = 0; i < 2; i++) {
		SHOW(dac_new_autograd_message_id(&msg));
		PRINT_ID(msg);
	}
	msg = 77;
	SHOW(dac_new_autograd_message_id(&msg));
	SHOW(dac_new_autograd_message_id(&msg));
	PRINT_I64(msg);
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, other_thread, NULL) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("-- everything else still works\n");
	SHOW(dac_context_get_or_create(((int64_t)5 << 48) + 1, &ctx));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_release_contexts_of_worker(5, NULL));
	SHOW(dac_release_contexts_of_worker((int32_t)w, NULL));
	printf("num_contexts = %" PRId64 "\n", num_contexts());
	return 0;
}
