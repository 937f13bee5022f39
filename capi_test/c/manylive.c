/* manylive.c: more live contexts than a 32-bit record region of 2^22 held,
** with no cap set: every creation succeeds, each context is found again
** from C and through its handle, and the memory they take per context is
** printed for the Go test (capi_test: TestManyLiveContexts) to bound. The
** memory is measured as make bench measures it (bench/cxx/harness_memory.inc:
** memLive): resident set before and after, over the contexts made.
** Usage: manylive N */
#include "check.h"

#include <unistd.h>

static long rss_bytes(void) {
	FILE *f = fopen("/proc/self/statm", "r");
	REQUIRE(f != NULL);
	long size = 0, resident = 0;
	REQUIRE(fscanf(f, "%ld %ld", &size, &resident) == 2);
	fclose(f);
	return resident * sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
	REQUIRE(argc == 2);
	long n = atol(argv[1]);
	REQUIRE(n > 1);
	MUST(dac_init(3));
	printf("max_contexts = %" PRId64 "\n", debug_value("max_contexts"));
	dac_context *first_h = NULL, *last_h = NULL;
	int64_t first = -1, last = -1;
	long before = rss_bytes();
	long made = 0;
	for (; made < n; made++) {
		dac_context *h;
		int64_t id;
		int rc = dac_context_new_id(&h, &id);
		if (rc != DAC_OK) {
			printf("context %ld: %s: %s\n", made + 1, dac_status_string(rc), dac_last_error());
			break;
		}
		MUST(dac_clear_current_context());
		if (made == 0) {
			first_h = h, first = id;
		} else {
			if (last_h != NULL)
				MUST(dac_context_unref(last_h));
			last_h = h, last = id;
		}
	}
	long after = rss_bytes();
	printf("made: %s\n", made == n ? "all" : "not all");
	printf("num_contexts = N: %s\n", num_contexts() == n ? "yes" : "no");
	/* For the Go test's bound; not part of the transcript it compares. */
	fprintf(stderr, "bytes per context: %.1f (RSS %ld -> %ld bytes)\n", (double)(after - before) / (double)n, before, after);
	REQUIRE(made == n);

	/* The last context's record lies past the first 2^22: its id through
	** its handle, and a lookup by id, are the C fast paths'. */
	int64_t got_id = -1;
	SHOW(dac_context_id(last_h, &got_id));
	printf("its id is the last made: %s\n", got_id == last ? "yes" : "no");
	dac_context *got = NULL;
	SHOW(dac_context_retrieve(last, &got));
	printf("the same record: %s\n", got == last_h ? "yes" : "no");
	SHOW(dac_context_unref(got));
	SHOW(dac_context_is_valid(first));
	SHOW(dac_context_is_valid(last));
	int64_t released = 0;
	SHOW(dac_release_contexts_of_worker(3, &released));
	printf("released = N: %s\n", released == n ? "yes" : "no");
	PRINT_I64(num_contexts());
	/* Released, still readable through the handles held. */
	SHOW(dac_context_id(first_h, &got_id));
	printf("first id: %s\n", got_id == first ? "yes" : "no");
	SHOW(dac_context_id(last_h, &got_id));
	printf("last id: %s\n", got_id == last ? "yes" : "no");
	SHOW(dac_context_unref(first_h));
	SHOW(dac_context_unref(last_h));
	NAME(last_h);
	SHOW(dac_context_id(last_h, &got_id));
	PRINT_I64(debug_value("live_handles"));
	return 0;
}
