/* wrap.c: a dead handle stays dead when its record's generation runs out.
** One id is made and released over and over, so one record is reused; the
** testing build's dactest_age_record moves its generation on to the last
** (as 2^32-3 more lives would), and the death in that generation must not
** bring back the first life's handle. Before records were retired, the
** generation after 2^32-1 was 1, and the first handle named the next
** context. Run against build/testing (dactest_* hooks). */
#include "check.h"

#include <dlfcn.h>

int main(void) {
	int (*age)(dac_context *, uint32_t);
	void *self = dlopen(NULL, RTLD_NOW);
	*(void **)&age = dlsym(self, "dactest_age_record");
	if (age == NULL) {
		fprintf(stderr, "dactest_age_record not found: run against build/testing\n");
		return 1;
	}
	MUST(dac_init(3));
	const int64_t id = ((int64_t)5 << 48) | 1000000;
	dac_context *first, *last, *next;
	int64_t got = -1;
	SHOW(dac_context_get_or_create(id, &first));
	NAME(first);
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(first));
	SHOW(dac_context_id(first, &got));
	SHOW(age(first, UINT32_MAX));
	SHOW(dac_context_get_or_create(id + 256, &last));
	NAME(last);
	printf("the same record, its last generation: %s\n",
	       ((uintptr_t)last & UINT32_MAX) == ((uintptr_t)first & UINT32_MAX) && (uint64_t)(uintptr_t)last >> 32 == UINT32_MAX
	           ? "yes"
	           : "no");
	SHOW(dac_context_release(id + 256));
	SHOW(dac_context_unref(last));
	SHOW(dac_context_get_or_create(id + 512, &next));
	NAME(next);
	printf("another record: %s\n", ((uintptr_t)next & UINT32_MAX) != ((uintptr_t)first & UINT32_MAX) ? "yes" : "no");
	/* Both dead handles stay dead, the first life's above all. */
	got = -1;
	SHOW(dac_context_id(first, &got));
	PRINT_I64(got);
	SHOW(dac_context_ref(first));
	SHOW(dac_context_id(last, &got));
	SHOW(dac_context_id(next, &got));
	printf("next's id: %s\n", got == id + 512 ? "yes" : "no");
	SHOW(dac_context_release(id + 512));
	SHOW(dac_context_unref(next));
	/* The retired record is not aged again. */
	SHOW(age(last, UINT32_MAX));
	PRINT_I64(num_contexts());
	return 0;
}
