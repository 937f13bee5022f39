/* hostvalue.c: host values from C, as the torch backend uses them. Threads
** race get-or-create, set-host-value (each a malloc'd candidate, the loser
** freed), read and unref against a thread releasing the same ids: every
** agreed value is dropped exactly once, never while a handle to its context
** is live (each value counts the handles its readers hold). Prints counts;
** every value is freed at the end, so a leak is the library's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <distautograd.h>

#define IDS 4000
#define READERS 6

typedef struct value {
	int64_t id;
	uint64_t handle; /* the context it was made for: one life of id */
	int holders; /* atomic: readers holding a handle while using it */
	int drops;   /* atomic */
	struct value *next; /* in the list of every value a context agreed on */
} value;

static int bad, mismatched;
static value *agreed[IDS]; /* atomic: the first value agreed on under each id */
static value *all;         /* atomic: every value a context agreed on */

static void drop(uint64_t v) {
	value *p = (value *)(uintptr_t)v;
	if (__atomic_load_n(&p->holders, __ATOMIC_SEQ_CST) != 0)
		__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&p->drops, 1, __ATOMIC_SEQ_CST);
}

static void *reader(void *arg) {
	(void)arg;
	for (int64_t i = 0; i < IDS; i++) {
		dac_context *ctx;
		if (dac_context_get_or_create(i, &ctx) != DAC_OK) {
			__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		value *cand = calloc(1, sizeof *cand);
		cand->id = i;
		cand->handle = (uint64_t)(uintptr_t)ctx;
		uint64_t cur = 0;
		if (dac_context_set_host_value(ctx, (uint64_t)(uintptr_t)cand, drop, &cur) != DAC_OK)
			__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
		value *v = (value *)(uintptr_t)cur;
		if (v != cand) {
			free(cand);
		} else {
			cand->next = __atomic_load_n(&all, __ATOMIC_SEQ_CST);
			while (!__atomic_compare_exchange_n(&all, &cand->next, cand, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			}
		}
		__atomic_add_fetch(&v->holders, 1, __ATOMIC_SEQ_CST);
		value *expect = NULL;
		if (!__atomic_compare_exchange_n(&agreed[i], &expect, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) &&
		    expect != v) {
			/* Another value for the same id: only for another context
			** under it (the first released, a new one made since; the
			** first may still be referenced), never for the same one. */
			if (expect->handle == v->handle)
				__atomic_add_fetch(&mismatched, 1, __ATOMIC_SEQ_CST);
		}
		uint64_t again = 0;
		if (dac_context_host_value(ctx, &again) != DAC_OK || again != cur || v->id != i)
			__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
		__atomic_sub_fetch(&v->holders, 1, __ATOMIC_SEQ_CST);
		dac_context_unref(ctx);
	}
	return NULL;
}

static void *releaser(void *arg) {
	(void)arg;
	for (int64_t i = 0; i < IDS; i++)
		dac_context_release_if_present(i, NULL);
	return NULL;
}

int main(void) {
	if (dac_init(1) != DAC_OK)
		return 1;
	pthread_t t[READERS + 1];
	for (int i = 0; i < READERS; i++)
		pthread_create(&t[i], NULL, reader, NULL);
	pthread_create(&t[READERS], NULL, releaser, NULL);
	for (int i = 0; i <= READERS; i++)
		pthread_join(t[i], NULL);
	/* What the race left stored goes now; then every value is dead. */
	int64_t reaped = 0, n = -1;
	dac_reap_idle_contexts(0, &reaped);
	dac_num_contexts(&n);
	int not_once = 0;
	for (int i = 0; i < IDS; i++)
		if (agreed[i] == NULL)
			not_once++;
	for (value *v = all, *next; v != NULL; v = next) {
		next = v->next;
		if (__atomic_load_n(&v->drops, __ATOMIC_SEQ_CST) != 1)
			not_once++;
		free(v);
	}
	char buf[512];
	size_t len;
	dac_debug_info(buf, sizeof buf, &len);
	printf("contexts left = %lld\n", (long long)n);
	printf("values not dropped exactly once = %d\n", not_once);
	printf("drops while a handle was live or wrong reads = %d\n", bad);
	printf("two values for one context = %d\n", mismatched);
	const char *lh = buf;
	while (*lh && (lh = __builtin_strstr(lh, "\"live_handles\":")) == NULL)
		break;
	printf("%s\n", lh ? lh : "no live_handles");
	return 0;
}
