/* csrc/uncounted.h: the references threads hold uncounted (csrc/uncounted.c
** says why and how). A thread's slot holds 0 or one handle whose reference
** the thread holds without the record's state counting it. Who takes a
** slot, and who drops a count a settle had to give back, is csrc/refs.c:
** this room only moves references between slots and state words. */
#ifndef DISTAUTOGRAD_CSRC_UNCOUNTED_H
#define DISTAUTOGRAD_CSRC_UNCOUNTED_H

#include <stdint.h>

#include "dacc.h"

typedef struct {
	uint64_t h;
	uint64_t last; /* the thread's last counted lookup: its owner's alone */
} __attribute__((aligned(64))) dacc_uncounted_slot;

/* Threads with a slot at once; more get none (their references are counted). */
#define DACC_UNCOUNTED_SLOTS 1024

/* This thread's slot: dacc_uncounted_unassigned until it asks for one,
** dacc_no_uncounted if it cannot have one (the h of both stays 0). */
extern DACC_TLS dacc_uncounted_slot *dacc_tls_uncounted DACC_HIDDEN;
extern DACC_HIDDEN dacc_uncounted_slot dacc_uncounted_unassigned;
extern DACC_HIDDEN dacc_uncounted_slot dacc_no_uncounted;

/* Whether this thread holds a reference to h uncounted: then h's life
** cannot end before the thread drops it. */
static inline __attribute__((always_inline)) int dacc_owns(uint64_t h) {
	return h != 0 && __atomic_load_n(&dacc_tls_uncounted->h, __ATOMIC_RELAXED) == h;
}

/* A free slot, taken for the calling thread (dacc_no_uncounted if none is
** left); dacc_uncounted_put_back gives it back, empty, for the next thread.
** Neither sets dacc_tls_uncounted. */
DACC_HIDDEN dacc_uncounted_slot *dacc_uncounted_take(void);
DACC_HIDDEN void dacc_uncounted_put_back(dacc_uncounted_slot *s);

/* What dacc_uncounted_count_one did. */
enum {
	/* Nothing: s no longer held h, or h's record is in another life (a
	** lookup that failed holds that one, and takes it out itself), or at
	** its most references (it cannot die anyway). */
	DACC_UNCOUNTED_LEFT = 0,
	/* h's reference is counted in its record, and s empty. */
	DACC_UNCOUNTED_MOVED = 1,
	/* A count went into h's record, but s's holder dropped the reference
	** meanwhile: the caller must drop that count again, which may be the
	** record's death. */
	DACC_UNCOUNTED_UNDO = 2,
};

/* Counts the reference s holds to h in h's record, then empties s, each by
** compare-and-swap, so that a reference is never in neither place. */
DACC_HIDDEN int dacc_uncounted_count_one(dacc_uncounted_slot *s, uint64_t h);
/* Counts every reference held uncounted to h; returns how many, and adds
** to *undo the counts the caller must drop again (DACC_UNCOUNTED_UNDO). */
DACC_HIDDEN int dacc_uncounted_settle(uint64_t h, int *undo);
/* For Go (handles.go: UncountedRefs): the slots, and where the count of
** those handed out so far lies, which Go's settle (export_hooks.go) reads
** as dacc_uncounted_settle does, without a call into C from under a shard
** lock; dacc_uncounted_count says how many references are held uncounted
** now. */
DACC_HIDDEN dacc_uncounted_slot *dacc_uncounted_slots(uint32_t **top);
DACC_HIDDEN int64_t dacc_uncounted_count(void);

/* In a forked child: the reference the forking thread held uncounted is
** the parent's, so the child's unref of it must not drop it in C, but say
** DAC_ERR_FORKED. */
DACC_HIDDEN void dacc_uncounted_forget(void);

#endif
