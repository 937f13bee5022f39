/* release_allocs: a release that brings its workers (torch's backend passes
** those its engine recorded) allocates nothing in Go on its way to an
** inline first attempt, through the C ABI: export.go converts the workers
** on the stack, the container hands the sender the caller's slice. The
** testing build (make testing-lib) says how many heap objects Go has
** allocated (dactest_go_mallocs); the Go test holds the transcript. */
#include "check.h"

#include <dlfcn.h>
#include <pthread.h>

enum { RELEASES = 200, WARM = 8 };

static pthread_t releasing;
static int64_t sent, sent_inline; /* all, and those on the releasing thread */

static int sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data;
	(void)worker_id;
	(void)context_id;
	__atomic_fetch_add(&sent, 1, __ATOMIC_RELAXED);
	if (pthread_equal(pthread_self(), releasing))
		__atomic_fetch_add(&sent_inline, 1, __ATOMIC_RELAXED);
	return 0;
}

int main(void) {
	int64_t (*go_mallocs)(void);
	void *self = dlopen(NULL, RTLD_NOW);
	REQUIRE(self != NULL);
	*(void **)&go_mallocs = dlsym(self, "dactest_go_mallocs");
	if (go_mallocs == NULL) {
		fprintf(stderr, "dactest_go_mallocs not found: run against build/testing\n");
		return 1;
	}
	releasing = pthread_self();
	MUST(dac_init(3));
	MUST(dac_set_cleanup_sender(sender, NULL));
	MUST(dac_set_cleanup_sender_nonblocking(1)); /* the first attempt inline */
	/* Contexts of worker 1's passes, as a cleanup message finds them: made
	** by get-or-create, no handle left. */
	int64_t ids[WARM + RELEASES];
	for (int i = 0; i < WARM + RELEASES; i++) {
		dac_context *h = NULL;
		ids[i] = ((int64_t)1 << 48) + i + 1;
		MUST(dac_context_get_or_create(ids[i], &h));
		MUST(dac_context_unref(h));
	}
	int32_t workers[2] = {4, 5};
	int released = 0, all = 1;
	for (int i = 0; i < WARM; i++) { /* whatever a first release sets up */
		MUST(dac_context_release_with_workers(ids[i], workers, 2, &released));
		all &= released;
	}
	int64_t before = go_mallocs();
	for (int i = WARM; i < WARM + RELEASES; i++) {
		MUST(dac_context_release_with_workers(ids[i], workers, 2, &released));
		all &= released;
	}
	int64_t allocs = go_mallocs() - before;
	printf("every context released: %s\n", all ? "yes" : "no");
	printf("messages sent inline: %" PRId64 " of %d\n", __atomic_load_n(&sent_inline, __ATOMIC_RELAXED),
	       2 * (WARM + RELEASES));
	/* One a release would be RELEASES; the rest of the runtime may allocate
	** a few meanwhile. */
	printf("fewer than one allocation in ten releases: %s\n", allocs < RELEASES / 10 ? "yes" : "no");
	fprintf(stderr, "allocations in %d releases: %" PRId64 "\n", RELEASES, allocs);
	/* Past export.go's stack buffer (stackWorkers, 8): all nine told. */
	int32_t more[9] = {4, 5, 6, 7, 8, 9, 10, 11, 12};
	dac_context *h = NULL;
	MUST(dac_context_get_or_create(((int64_t)1 << 48) + 100000, &h));
	MUST(dac_context_unref(h));
	MUST(dac_context_release_with_workers(((int64_t)1 << 48) + 100000, more, 9, &released));
	int64_t pending = -1;
	MUST(dac_cleanup_flush(60000, &pending));
	printf("nine workers: released %d, messages sent %" PRId64 ", pending %" PRId64 "\n", released,
	       __atomic_load_n(&sent, __ATOMIC_RELAXED), pending);
	return 0;
}
