/* csrc/uncounted.c: the references threads hold uncounted (the state word's
** protocol, whose uncounted bit and settle this file keeps, is
** docs/state-word.md's).
**
** Every thread of a backward pass looks up the pass's one context, again
** and again. Were each lookup to take its reference on the record's state
** word and its unref to drop it there, the cores would trade that line
** (which every lookup also reads) twice per lookup, and a lookup on two
** cores would cost several times one on one. So a thread holds at most one
** reference uncounted, in a slot of its own (handles.go: UncountedRefs): a
** lookup that finds the record listed writes the handle into its slot,
** reads the state again, and is done if the record is still listed in the
** same life (csrc/refs.h: dacc_acquire); the thread's unref of that handle
** empties the slot. Neither writes anything another thread reads.
**
** Who empties a slot: its thread (an unref, or a lookup that lost its race
** with a release), or a settle, which counts the reference in the state
** word first and then empties the slot, each by compare-and-swap, so that
** a reference is never in neither place (a settle whose slot changed under
** its caller takes its count out again: DACC_UNCOUNTED_UNDO).
**
** Why a release misses none: a lookup writes its slot, then reads the
** state; a release unlists, then settles (reads the slots); all four
** sequentially consistent. Either the lookup reads the state after the
** unlist, and fails and empties its slot itself, or the settle sees the
** slot. A record whose life never had one is never settled: a thread that
** has a slot sets the state's uncounted bit with the counted reference of its
** second lookup of that life in a row, and only a marked record is looked
** up uncounted (so a context looked up once per thread, as a release
** looks up the one it releases, costs its release no settle).
**
** Every death is decided after a settle: Go's release settles a record it
** unlisted with no counted reference before it kills it, and C settles
** before it hands a record's last counted reference to Go (csrc/refs.c:
** dacc_unref_counted). And a handle goes to Go counted (csrc/refs.c:
** dacc_for_go), as Go knows only the count.
**
** Slots live in one static array that is never freed: a settle may read a
** slot whose thread has exited (the slot is then empty, or another
** thread's), and what it compares and swaps there is a handle, whichever
** thread holds it. */
#include <pthread.h>
#include <stdint.h>

#include "records.h"
#include "uncounted.h"

static dacc_uncounted_slot slots[DACC_UNCOUNTED_SLOTS];
static uint32_t slots_top; /* slots handed out so far: what a settle reads */
static uint32_t free_slots[DACC_UNCOUNTED_SLOTS]; /* of threads that exited */
static uint32_t nfree;
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;

/* Both never hold a handle. The first is every thread's start, and not
** NULL so that the pointer goes in the TLS image beside the thread's state
** (csrc/library.h), where no padding comes before .tbss: the library's
** static TLS stays within 64 bytes (capi_test: TestStaticTLSIsSmall). */
dacc_uncounted_slot dacc_uncounted_unassigned;
dacc_uncounted_slot dacc_no_uncounted;
DACC_TLS dacc_uncounted_slot *dacc_tls_uncounted = &dacc_uncounted_unassigned;

/* Go's release settles with these same steps over the same slots
** (export_hooks.go: Settle): a change here is made there too. */
int dacc_uncounted_count_one(dacc_uncounted_slot *s, uint64_t h) {
	uint32_t gen;
	dacc_record *r = dacc_record_of(__atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE), h, &gen);
	if (r == NULL)
		return DACC_UNCOUNTED_LEFT;
	uint64_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	do {
		if (dacc_gen(st) != gen || (st & DACC_STATE_REFS) == DACC_STATE_REFS)
			return DACC_UNCOUNTED_LEFT;
	} while (!__atomic_compare_exchange_n(&r->state, &st, st + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE));
	uint64_t expect = h;
	if (__atomic_compare_exchange_n(&s->h, &expect, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return DACC_UNCOUNTED_MOVED;
	return DACC_UNCOUNTED_UNDO; /* its holder dropped it meanwhile */
}

int dacc_uncounted_settle(uint64_t h, int *undo) {
	int moved = 0;
	uint32_t n = __atomic_load_n(&slots_top, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		if (__atomic_load_n(&slots[i].h, __ATOMIC_SEQ_CST) != h)
			continue;
		int did = dacc_uncounted_count_one(&slots[i], h);
		moved += did == DACC_UNCOUNTED_MOVED;
		*undo += did == DACC_UNCOUNTED_UNDO;
	}
	return moved;
}

dacc_uncounted_slot *dacc_uncounted_slots(uint32_t **top) {
	*top = &slots_top;
	return slots;
}

int64_t dacc_uncounted_count(void) {
	int64_t count = 0;
	uintptr_t base = __atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE);
	uint32_t n = __atomic_load_n(&slots_top, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t h = __atomic_load_n(&slots[i].h, __ATOMIC_ACQUIRE);
		uint32_t gen;
		const dacc_record *r = h != 0 ? dacc_record_of(base, h, &gen) : NULL;
		if (r != NULL && dacc_gen(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE)) == gen)
			count++;
	}
	return count;
}

dacc_uncounted_slot *dacc_uncounted_take(void) {
	uint32_t i = DACC_UNCOUNTED_SLOTS;
	pthread_mutex_lock(&slots_mu);
	if (nfree > 0)
		i = free_slots[--nfree];
	else if (slots_top < DACC_UNCOUNTED_SLOTS)
		__atomic_store_n(&slots_top, (i = slots_top) + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&slots_mu);
	return i == DACC_UNCOUNTED_SLOTS ? &dacc_no_uncounted : &slots[i];
}

void dacc_uncounted_put_back(dacc_uncounted_slot *s) {
	pthread_mutex_lock(&slots_mu);
	free_slots[nfree++] = (uint32_t)(s - slots);
	pthread_mutex_unlock(&slots_mu);
}

void dacc_uncounted_forget(void) { dacc_tls_uncounted = &dacc_no_uncounted; }
