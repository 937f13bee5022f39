/* csrc/refs.h: references taken and dropped on a record's state word
** without entering Go (docs/state-word.md: the transitions of a lookup and
** an unref; container/records.go holds the protocol's other side), counted
** or held uncounted (csrc/uncounted.h), and what hands a handle to Go. */
#ifndef DISTAUTOGRAD_CSRC_REFS_H
#define DISTAUTOGRAD_CSRC_REFS_H

#include <stdint.h>

#include "dacc.h"
#include "dacgo.h"
#include "host.h"
#include "records.h"
#include "uncounted.h"

/* Whether handle h (of life gen, its record's state st) holds a reference:
** one counted in the record, or the one this thread holds uncounted (whose
** life cannot end while the thread's slot holds it). */
static inline int dacc_holds(uint64_t st, uint32_t gen, uint64_t h) {
	return dacc_referenced(st, gen) || dacc_owns(h);
}

/* Runs the host drop Go handed back for a context that died in the call
** just returned (a call from Go into C would cost a crossing more): still
** on the thread that dropped the last reference, outside every lock. */
static inline void dacc_run_pending_drop(const dacc_pending_drop *d) {
	if (d->fn != 0)
		dacc_call_host_drop(d->fn, d->value);
}

/* Drops a reference counted in h's record (the caller's, or one a settle
** counted for it); the last of a released context goes to Go, and so does
** a bad handle. A status. */
DACC_HIDDEN int dacc_unref_counted(uint64_t h);

/* Before a handle goes to Go, which knows only the count: this thread's
** uncounted reference to it is counted, and, if its record counts none,
** every other thread's (the caller may hold one of theirs: a handle is the
** same value on every thread). */
DACC_HIDDEN void dacc_for_go(uint64_t h);

/* The calling thread's slot, given now (dacc_no_uncounted if none is
** left); a thread that exits leaves its reference counted (whoever it
** handed the handle to still holds it), and its slot to the next thread. */
DACC_HIDDEN dacc_uncounted_slot *dacc_assign_slot(void);
/* Once, at load: what a thread that exits runs. */
DACC_HIDDEN void dacc_refs_setup(void);

/* The record of the thread's last counted lookup, if that life is still
** listed under id: a thread looks one id up again and again (a pass's
** every message and gradient), and the record is one load away where the
** index is a chain of them, each a cache miss once the caller's own work
** has run between two calls. The same life, found in the index then and
** listed still, is the context stored under id now (the listed bit is what
** says so: a release clears it, and one life per id is listed). What it
** finds, dacc_acquire checks as it checks a lookup's record; NULL: look it
** up. */
static inline __attribute__((always_inline)) dacc_record *dacc_recall(const dacc_view *v, const dacc_uncounted_slot *s,
                                                                     int64_t id, uint32_t *index, uint64_t *st) {
	uint64_t last = s->last;
	if (last == 0)
		return NULL;
	dacc_record *r = dacc_record_at(v->records, (uint32_t)last);
	if (__builtin_expect(r == NULL, 0))
		return NULL;
	uint64_t now = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	if (!dacc_same_life(now, last) || !(now & DACC_STATE_LISTED) || __atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != id)
		return NULL;
	*index = (uint32_t)last;
	*st = now;
	return r;
}

/* What dacc_acquire found. */
enum { DACC_UNDECIDED = 0, DACC_ACQUIRED = 1, DACC_ABSENT = 2 };

/* Takes a reference to the context listed under id, without entering Go
** (docs/state-word.md: the transitions of a lookup):
** DACC_ACQUIRED and its handle, DACC_ABSENT (no context is stored under id:
** a settled miss), or DACC_UNDECIDED (Go decides). The reference is taken
** by one compare-and-swap of the state word that requires it to be
** unchanged since its id was checked, and listed: a release (which unlists
** first) that has returned can never be overtaken. */
static inline __attribute__((always_inline)) int dacc_acquire(int64_t id, uint64_t *h) {
	dacc_view *v = dacc_get_view();
	if (__builtin_expect(v == NULL, 0))
		return DACC_UNDECIDED;
	dacc_uncounted_slot *s = dacc_tls_uncounted;
	if (__builtin_expect(s == &dacc_uncounted_unassigned, 0))
		s = dacc_assign_slot();
	const int can_hold = s != &dacc_no_uncounted;
	uint32_t index;
	uint64_t st;
	dacc_record *r = dacc_recall(v, s, id, &index, &st);
	if (r == NULL) {
		int settled = 0;
		r = dacc_lookup(v, id, &index, &settled);
		if (r == NULL)
			return settled ? DACC_ABSENT : DACC_UNDECIDED;
		st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	}
	if (__builtin_expect(can_hold && (st & (DACC_STATE_UNCOUNTED | DACC_STATE_LISTED)) ==
	                                      (DACC_STATE_UNCOUNTED | DACC_STATE_LISTED) &&
	                         __atomic_load_n(&s->h, __ATOMIC_RELAXED) == 0 &&
	                         __atomic_load_n(&r->id, __ATOMIC_RELAXED) == id,
	                     1)) {
		/* Uncounted: see csrc/uncounted.c. */
		uint64_t held = dacc_handle(st, index);
		__atomic_exchange_n(&s->h, held, __ATOMIC_SEQ_CST);
		uint64_t now = __atomic_load_n(&r->state, __ATOMIC_SEQ_CST);
		if (__builtin_expect(dacc_same_life(now, st) && (now & DACC_STATE_LISTED), 1)) {
			dacc_touch(v, r);
			*h = held;
			return DACC_ACQUIRED;
		}
		/* Released meanwhile: not found, Go says. A settle that counted
		** the reference left it to this thread to drop. */
		if (__atomic_exchange_n(&s->h, 0, __ATOMIC_SEQ_CST) != held)
			dacc_unref_counted(held);
		return DACC_UNDECIDED;
	}
	/* Counted. A thread's second lookup of one life in a row marks the
	** record, so that its next lookups are uncounted; a record looked up
	** once per thread (a release's own lookup) is never marked, and its
	** release does not settle. */
	uint64_t mark = 0;
	if (can_hold) {
		uint64_t looked = dacc_handle(st, index);
		mark = s->last == looked ? DACC_STATE_UNCOUNTED : 0;
		s->last = looked;
	}
	do {
		if (!(st & DACC_STATE_LISTED) || (st & DACC_STATE_REFS) == DACC_STATE_REFS ||
		    __atomic_load_n(&r->id, __ATOMIC_RELAXED) != id)
			return DACC_UNDECIDED;
	} while (!__atomic_compare_exchange_n(&r->state, &st, (st + 1) | mark, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	dacc_touch(v, r);
	*h = dacc_handle(st, index);
	return DACC_ACQUIRED;
}

/* A handle's id, read without entering Go: 1 if h is a referenced handle
** of a record C can read (base: the records, 0 before the view is known).
** The state word is read after the id: if it still shows the handle's
** generation, referenced, the id was that life's. A death moves the
** generation on before the record takes another id (deaths.go: die, then
** index.go: create), so an id read from a later life is always followed by
** another generation; and the handle's holder got it after its life's id
** was written, so no earlier life's id is read either. */
static inline __attribute__((always_inline)) int dacc_read_id(uintptr_t base, uint64_t h, int64_t *out) {
	uint32_t gen;
	const dacc_record *r = dacc_record_of(base, h, &gen);
	if (__builtin_expect(r == NULL, 0))
		return 0;
	int64_t id = __atomic_load_n(&r->id, __ATOMIC_ACQUIRE);
	if (!dacc_referenced(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), gen))
		return 0;
	*out = id;
	return 1;
}

#endif
