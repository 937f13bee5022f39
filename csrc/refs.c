/* csrc/refs.c: the references C drops and hands to Go (csrc/refs.h), and
** the slots of the threads that hold one uncounted (csrc/uncounted.h). */
#include <pthread.h>
#include <stdint.h>

#include "error.h"
#include "fork.h"
#include "refs.h"

/* What a thread that exits runs, for its slot. */
static pthread_key_t slot_key;

/* Counts every reference held uncounted to h and drops the counts the
** settle had to give back; returns how many it counted. */
static int settle(uint64_t h) {
	int undo = 0;
	int moved = dacc_uncounted_settle(h, &undo);
	while (undo-- > 0)
		dacc_unref_counted(h);
	return moved;
}

/* Counts the reference s holds to h, dropping the count again if s's
** holder dropped it meanwhile. */
static void count_one(dacc_uncounted_slot *s, uint64_t h) {
	if (dacc_uncounted_count_one(s, h) == DACC_UNCOUNTED_UNDO)
		dacc_unref_counted(h);
}

int dacc_unref_counted(uint64_t h) {
	for (;;) {
		uint32_t gen;
		dacc_record *r = dacc_handle_record(h, &gen);
		if (__builtin_expect(r != NULL, 1)) {
			uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
			/* Not the last reference of a released context: that one is
			** Go's (the record dies: its host value dropped, recycled). */
			while (dacc_referenced(st, gen) && ((st & DACC_STATE_REFS) > 1 || (st & DACC_STATE_LISTED))) {
				if (__atomic_compare_exchange_n(&r->state, &st, st - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
					return DAC_OK;
			}
			/* The last counted reference of a released context, or none
			** counted (the caller's may be another thread's uncounted one):
			** what is held uncounted is counted first. */
			if (dacc_gen(st) == gen && (st & DACC_STATE_UNCOUNTED) && settle(h) > 0)
				continue;
		}
		/* Go drops the last reference, or says why the handle is bad;
		** DACC_RETRY: the state moved meanwhile. */
		if (dacc_forked)
			return dacc_forked_error("dac_context_unref");
		dacc_pending_drop d = {0, 0};
		int rc = dacgo_context_ref(h, -1, &d, dacc_err());
		dacc_run_pending_drop(&d); /* if the record died */
		if (rc != DACC_RETRY)
			return rc;
	}
}

__attribute__((noinline)) void dacc_for_go(uint64_t h) {
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (h != 0 && __atomic_load_n(&s->h, __ATOMIC_RELAXED) == h)
		count_one(s, h);
	uint32_t gen;
	dacc_record *r = dacc_record_of(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, &gen);
	if (r == NULL)
		return;
	uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	if (dacc_gen(st) == gen && (st & DACC_STATE_UNCOUNTED) && (st & DACC_STATE_REFS) == 0)
		settle(h);
}

/* A thread that exits leaves its reference counted (whoever it handed the
** handle to still holds it), and its slot to the next thread. */
static void on_thread_exit(void *p) {
	dacc_uncounted_slot *s = p;
	uint64_t h = __atomic_load_n(&s->h, __ATOMIC_ACQUIRE);
	if (h != 0)
		count_one(s, h);
	dacc_tls_uncounted = &dacc_no_uncounted; /* a later destructor's lookups are counted */
	dacc_uncounted_put_back(s);
}

void dacc_refs_setup(void) { pthread_key_create(&slot_key, on_thread_exit); }

dacc_uncounted_slot *dacc_assign_slot(void) {
	dacc_uncounted_slot *s = dacc_uncounted_take();
	if (s != &dacc_no_uncounted && pthread_setspecific(slot_key, s) != 0) {
		dacc_uncounted_put_back(s);
		s = &dacc_no_uncounted;
	}
	dacc_tls_uncounted = s;
	return s;
}
