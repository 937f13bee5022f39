/* csrc/records.c: the view of Go's records (csrc/records.h), fetched from
** Go once. */
#include <stdint.h>

#include "dacgo.h"
#include "fork.h"
#include "records.h"

dacc_view *dacc_the_view;
uintptr_t dacc_records;
const uintptr_t *dacc_slabs;

/* Publishes a view's records to the readers of dacc_records. */
static void publish_records(const dacc_view *v) {
	__atomic_store_n(&dacc_slabs, v->slabs, __ATOMIC_RELAXED);
	__atomic_store_n(&dacc_records, v->records, __ATOMIC_RELEASE);
}

__attribute__((noinline)) dacc_view *dacc_fetch_view(void) {
	if (dacc_forked)
		return NULL; /* never into Go in a child: the callers' slow paths say why */
	void *p = NULL;
	dacc_error_slot ignored;
	if (dacgo_view(&p, &ignored) != DAC_OK)
		return NULL;
	publish_records(p);
	__atomic_store_n(&dacc_the_view, (dacc_view *)p, __ATOMIC_RELEASE);
	return p;
}

void dacc_records_forget(void) {
	__atomic_store_n(&dacc_the_view, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&dacc_records, 0, __ATOMIC_RELAXED);
}
