/* gocalls: which calls capi.c serves without entering Go, counted by the
** testing build (build/testing, make testing-lib), whose dactest_go_calls
** says how many calls into Go the library has made. Each line is a call,
** its status and how many calls into Go it made; the Go test holds the
** transcript, so a fast path that starts entering Go fails it. */
#include "check.h"

#include <dlfcn.h>

static int64_t (*go_calls)(void);

static int64_t before;

/* Runs call, prints its status and the calls into Go it made. */
#define COUNT(call)                                                                        \
	do {                                                                                   \
		before = go_calls();                                                               \
		int rc_ = (call);                                                                  \
		int64_t n_ = go_calls() - before;                                                  \
		printf("%s -> %s, calls into Go: %" PRId64 "\n", #call, dac_status_string(rc_), n_); \
	} while (0)

static void drop(uint64_t value) { (void)value; }

int main(void) {
	void *self = dlopen(NULL, RTLD_NOW);
	REQUIRE(self != NULL);
	*(void **)&go_calls = dlsym(self, "dactest_go_calls");
	if (go_calls == NULL) {
		fprintf(stderr, "dactest_go_calls not found: run against build/testing\n");
		return 1;
	}
	MUST(dac_init(3));
	dac_context *ctx = NULL, *other = NULL, *got = NULL;
	int64_t id = 0, cur = 0, absent = 0;
	uint64_t hv = 0;
	int released = -1, valid = 0;
	int32_t workers[2] = {4, 5};

	printf("-- need Go: creation, release, a first known worker\n");
	COUNT(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	absent = id + 1000; /* never issued here */
	COUNT(dac_context_add_known_worker_id(ctx, 9));
	COUNT(dac_context_get_or_create(absent, &other));
	COUNT(dac_context_release(absent));
	COUNT(dac_context_unref(other)); /* the last reference of a released context */

	printf("-- served in C: lookups that find the context\n");
	COUNT(dac_context_retrieve(id, &got));
	COUNT(dac_context_unref(got));
	COUNT(dac_context_retrieve_if_present(id, &got));
	COUNT(dac_context_unref(got));
	COUNT(dac_context_get_or_create(id, &got));
	COUNT(dac_context_unref(got));
	COUNT(dac_context_current(&got));
	COUNT(dac_context_unref(got));
	int64_t got_id = -1;
	COUNT(dac_context_current_id(&got, &got_id));
	printf("its id is the current one: %s\n", got_id == id ? "yes" : "no");
	COUNT(dac_context_unref(got));
	COUNT(dac_context_is_valid(id));
	COUNT(dac_current_context_id(&cur));
	COUNT(dac_has_valid_context(&valid));

	printf("-- served in C: a miss that is the answer\n");
	got = (dac_context *)(uintptr_t)0x77;
	COUNT(dac_context_retrieve_if_present(absent, &got));
	printf("out: %s\n", got == NULL ? "NULL" : "not NULL");
	COUNT(dac_context_release_if_present(absent, &released));
	printf("released: %d\n", released);
	released = -1;
	COUNT(dac_context_release_with_workers(absent, workers, 2, &released));
	printf("released: %d\n", released);

	printf("-- served in C: a handle's reads, references, host value, a known worker again\n");
	COUNT(dac_context_id(ctx, &id));
	COUNT(dac_context_ref(ctx));
	COUNT(dac_context_unref(ctx));
	COUNT(dac_context_host_value(ctx, &hv));
	COUNT(dac_context_set_host_value(ctx, 42, drop, &hv));
	printf("host value: %" PRIu64 "\n", hv);
	COUNT(dac_context_set_host_value(ctx, 43, drop, &hv));
	printf("host value: %" PRIu64 " (the first stays)\n", hv);
	COUNT(dac_context_add_known_worker_id(ctx, 9));

	printf("-- served in C: the current id\n");
	COUNT(dac_clear_current_context());
	COUNT(dac_set_current_context_id(id));
	COUNT(dac_force_current_context_id(id));

	printf("-- need Go: the release that finds it (one call, workers added)\n");
	released = -1;
	COUNT(dac_context_release_with_workers(id, workers, 2, &released));
	printf("released: %d\n", released);
	int32_t known[8];
	size_t n = 0;
	MUST(dac_context_known_worker_ids(ctx, known, 8, &n));
	printf("known workers:");
	for (size_t i = 0; i < n; i++)
		printf(" %d", known[i]);
	printf("\n");
	COUNT(dac_context_retrieve_if_present(id, &got));
	printf("out: %s\n", got == NULL ? "NULL" : "not NULL");
	COUNT(dac_context_unref(ctx)); /* the last reference: the drop runs */
	return 0;
}
