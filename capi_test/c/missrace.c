/* missrace: a miss that C settles without Go must be a true miss. Every id
** here lands in one bucket chain of one shard (ids STRIDE apart), so that
** churning threads keep rewriting the links the readers follow: they
** create and release contexts in that chain (unlinking records, which then
** die and are reused for other ids of the chain, and growing the index
** while the chain is long). Meanwhile readers look up the STABLE contexts,
** which stay stored throughout (a quarter of the way in, SPREAD more
** contexts in other buckets of the shard grow its index), with the calls that settle misses in C
** (retrieve_if_present, release_if_present, release_with_workers of an id
** that is stored must never find it absent: the last two would then release
** it, and the check afterwards says so) and with is_valid. Prints what it
** did and how many lookups went wrong. Usage: missrace ROUNDS */
#include "check.h"

#include <pthread.h>
#include <sched.h>

#define STABLE 8
#define CHURN_IDS 24 /* the chain stays shorter than the lookup's hop limit (csrc/records.h: DACC_MAX_HOPS) */
#define SPREAD 300    /* ids of the same shard in other buckets: the index grows */
#define CHURNERS 2
#define READERS 3
/* Above any bucket mask the test reaches, below the worker id's bits:
** ids STRIDE apart share their shard and their bucket. */
#define STRIDE ((int64_t)1 << 30)

static int64_t rounds;
static int64_t stable_id(int i) { return ((int64_t)7 << 48) | 1 | (int64_t)i * STRIDE; }
static int64_t churn_id(int t, int i) { return ((int64_t)7 << 48) | 1 | (int64_t)(STABLE + t * CHURN_IDS + i) * STRIDE; }
/* Low 8 bits as every id above (one shard, however many there are). */
static int64_t spread_id(int i) { return ((int64_t)7 << 48) | 1 | (int64_t)(i + 1) * 256; }

static int stop;             /* atomic */
static int readers_started;  /* atomic: the churners wait for every reader */
static int64_t wrong, reads; /* atomic */
static int64_t churned;      /* atomic */

static void *churner(void *arg) {
	int t = (int)(intptr_t)arg;
	while (__atomic_load_n(&readers_started, __ATOMIC_SEQ_CST) < READERS)
		sched_yield();
	for (int64_t r = 0; r < rounds; r++) {
		if (t == 0 && r == rounds / 4)
			for (int i = 0; i < SPREAD; i++) {
				dac_context *c = NULL;
				if (dac_context_get_or_create(spread_id(i), &c) != DAC_OK || dac_context_unref(c) != DAC_OK)
					__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
			}
		if (t == 0 && r == 3 * rounds / 4)
			for (int i = 0; i < SPREAD; i++)
				if (dac_context_release(spread_id(i)) != DAC_OK)
					__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
		for (int i = 0; i < CHURN_IDS; i++) {
			dac_context *c = NULL;
			if (dac_context_get_or_create(churn_id(t, i), &c) != DAC_OK || dac_context_unref(c) != DAC_OK)
				__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
		}
		for (int i = 0; i < CHURN_IDS; i++) {
			int released = 0;
			if (dac_context_release_if_present(churn_id(t, i), &released) != DAC_OK || released != 1)
				__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
		}
		__atomic_add_fetch(&churned, 2 * CHURN_IDS, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

static void *reader(void *arg) {
	(void)arg;
	int32_t none[1] = {0};
	int64_t n = 0;
	__atomic_add_fetch(&readers_started, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
		for (int i = 0; i < STABLE; i++, n++) {
			int64_t id = stable_id(i);
			dac_context *c = NULL;
			if (dac_context_retrieve_if_present(id, &c) != DAC_OK || c == NULL) {
				__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
				continue;
			}
			dac_context_unref(c);
			if (dac_context_is_valid(id) != DAC_OK)
				__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
			/* Only an id that is not stored may be released here: these
			** lookups answer "absent" for an id a churner never made. */
			int64_t absent = ((int64_t)8 << 48) | 1 | (int64_t)i * STRIDE;
			int released = -1;
			if (dac_context_release_if_present(absent, &released) != DAC_OK || released != 0)
				__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
			if (dac_context_release_with_workers(absent, none, 1, &released) != DAC_OK || released != 0)
				__atomic_add_fetch(&wrong, 1, __ATOMIC_SEQ_CST);
		}
	}
	__atomic_add_fetch(&reads, n, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv) {
	REQUIRE(argc == 2);
	rounds = strtoll(argv[1], NULL, 10);
	MUST(dac_init(3));
	for (int i = 0; i < STABLE; i++) {
		dac_context *c = NULL;
		MUST(dac_context_get_or_create(stable_id(i), &c));
		MUST(dac_context_unref(c));
	}
	pthread_t ch[CHURNERS], rd[READERS];
	for (int i = 0; i < READERS; i++)
		REQUIRE(pthread_create(&rd[i], NULL, reader, NULL) == 0);
	for (int i = 0; i < CHURNERS; i++)
		REQUIRE(pthread_create(&ch[i], NULL, churner, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < CHURNERS; i++)
		pthread_join(ch[i], NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < READERS; i++)
		pthread_join(rd[i], NULL);
	printf("churned: %s\n", churned == (int64_t)CHURNERS * rounds * 2 * CHURN_IDS ? "every round" : "NOT every round");
	printf("reads: %s\n", reads > 0 ? "some" : "none");
	printf("wrong results: %" PRId64 "\n", wrong);
	int stored = 0;
	for (int i = 0; i < STABLE; i++)
		stored += dac_context_is_valid(stable_id(i)) == DAC_OK;
	printf("stable contexts still stored: %d of %d\n", stored, STABLE);
	int64_t n = 0;
	MUST(dac_num_contexts(&n));
	printf("num_contexts: %" PRId64 "\n", n);
	return 0;
}
