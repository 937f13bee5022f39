/* csrc/records.h: the contexts as Go's container publishes them for C
** (container/records.go says why and how; capi_layout.h, generated from
** Go's types, declares them). Go writes, C reads: C looks contexts up in
** the index, reads their ids and known workers, and takes and drops
** references with the protocol of the state word (docs/state-word.md;
** csrc/refs.h); everything else, the last reference of a released context
** included, goes to Go. dacgo_view gives the view once the container
** exists (csrc/records.c fetches it); it, the records and every bucket
** array stay mapped for the life of the process. */
#ifndef DISTAUTOGRAD_CSRC_RECORDS_H
#define DISTAUTOGRAD_CSRC_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "../capi_layout.h"
#include "../include/distautograd.h"
#include "clock.h"
#include "dacc.h"

/* A handle is the dac_context pointer's value: its record's generation in
** the bits from DACC_GEN_SHIFT up, its record's index below. */
static inline dac_context *dacc_to_ptr(uint64_t h) { return (dac_context *)(uintptr_t)h; }
static inline uint64_t dacc_to_handle(dac_context *p) { return (uint64_t)(uintptr_t)p; }

/* The generation of a state word or a handle. */
static inline uint32_t dacc_gen(uint64_t word) { return (uint32_t)(word >> DACC_GEN_SHIFT); }
/* The handle of the record at index in the life its state word st is of. */
static inline uint64_t dacc_handle(uint64_t st, uint32_t index) {
	return (st >> DACC_GEN_SHIFT) << DACC_GEN_SHIFT | index;
}
/* Whether two state words (or a state word and a handle) are of one life. */
static inline int dacc_same_life(uint64_t a, uint64_t b) { return ((a ^ b) >> DACC_GEN_SHIFT) == 0; }

/* The view, NULL until fetched from Go (after dac_init), and again in a
** forked child; dacc_fetch_view fetches it (NULL: not yet, or forked). */
extern DACC_HIDDEN dacc_view *dacc_the_view;
DACC_HIDDEN dacc_view *dacc_fetch_view(void);
/* Slab 0's address, from the view: 0 until the view is known, and again in
** a forked child. Most handles' records are there, found without a load
** from the table of slabs. */
extern DACC_HIDDEN uintptr_t dacc_records;
/* The view's table of slabs: set before dacc_records, and read only by a
** reader that found dacc_records set, so a plain read sees it. */
extern DACC_HIDDEN const uintptr_t *dacc_slabs;
/* In a forked child: the view and records forgotten, so that every fast
** path falls through to its slow path and its fork guard. */
DACC_HIDDEN void dacc_records_forget(void);

/* The view, fetched from Go on first use; NULL until dac_init, and every
** fast path then goes to Go, which says DAC_ERR_NOT_INITIALIZED. */
static inline __attribute__((always_inline)) dacc_view *dacc_get_view(void) {
	dacc_view *v = __atomic_load_n(&dacc_the_view, __ATOMIC_ACQUIRE);
	if (__builtin_expect(v == NULL, 0))
		return dacc_fetch_view();
	return v;
}

/* The record at index, base being slab 0 (nonzero), or NULL if index is in
** a slab not made yet. */
static inline __attribute__((always_inline)) dacc_record *dacc_record_at(uintptr_t base, uint32_t index) {
	uintptr_t offset = (uintptr_t)index * sizeof(dacc_record); /* in slab 0: no mask to apply */
	if (__builtin_expect(index > DACC_SLAB_MASK, 0)) {
		base = __atomic_load_n(&dacc_slabs[index >> DACC_SLAB_BITS], __ATOMIC_ACQUIRE);
		if (base == 0)
			return NULL;
		offset = (uintptr_t)(index & DACC_SLAB_MASK) * sizeof(dacc_record);
	}
	dacc_record *r = (dacc_record *)(base + offset);
	if (r == NULL) /* never: base is a mapping's address, and the offset is within it */
		__builtin_unreachable(); /* so callers' NULL tests fold away */
	return r;
}

/* The record a handle names, base being slab 0, and its generation; NULL
** if base is 0 or the index is in no slab. A leaf: no call, so
** dac_context_id's fast path stays one too. */
static inline __attribute__((always_inline)) dacc_record *dacc_record_of(uintptr_t base, uint64_t h, uint32_t *gen) {
	if (__builtin_expect(base == 0, 0))
		return NULL;
	*gen = dacc_gen(h);
	return dacc_record_at(base, (uint32_t)h);
}

/* The record a handle names, or NULL before the view is known (before
** dac_init, or in a forked child) or for an index past every record. */
static inline __attribute__((always_inline)) dacc_record *dacc_handle_record(uint64_t h, uint32_t *gen) {
	uintptr_t base = __atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE);
	if (__builtin_expect(base == 0, 0)) {
		if (dacc_get_view() == NULL)
			return NULL;
		base = __atomic_load_n(&dacc_records, __ATOMIC_ACQUIRE);
	}
	return dacc_record_of(base, h, gen);
}

/* Whether a state word is the referenced life gen of its record. */
static inline int dacc_referenced(uint64_t st, uint32_t gen) {
	return dacc_gen(st) == gen && (st & DACC_STATE_REFS) != 0;
}

/* How many links a lookup follows before it leaves the answer to Go: a
** chain is that long only while Go rewrites it under a reader. */
#define DACC_MAX_HOPS 64

/* Finds a record that says it is id's (listed or not: the caller checks),
** following the chain of id's bucket in its run's shard (container.go's
** shard; the hash is records.go's bucketOf: the shard's bits dropped, the
** worker's folded in). NULL is a miss, and *settled says whether the miss
** is the answer: it is when the shard's change count was even and the same
** before and after the walk (no link a reader follows was rewritten
** meanwhile: records.go, Buckets), else only Go can say, under its lock. */
static inline __attribute__((always_inline)) dacc_record *dacc_lookup(const dacc_view *v, int64_t id, uint32_t *index,
                                                                     int *settled) {
	uint64_t u = (uint64_t)id;
	const dacc_buckets *b =
	    (const dacc_buckets *)__atomic_load_n(&v->buckets[(u >> DACC_ID_RUN_BITS) & v->shard_mask], __ATOMIC_ACQUIRE);
	uint64_t changes = __atomic_load_n(&b->changes, __ATOMIC_ACQUIRE);
	uint64_t run = (uint64_t)1 << DACC_ID_RUN_BITS;
	uint64_t k = ((u & (run - 1)) | (u >> (DACC_ID_RUN_BITS + v->shard_bits) << DACC_ID_RUN_BITS)) ^ (u >> DACC_ID_WORKER_SHIFT);
	k &= b->mask;
	uint32_t i = __atomic_load_n(&b->heads[k], __ATOMIC_ACQUIRE);
	for (int hops = 0; i != 0; hops++) {
		dacc_record *r = dacc_record_at(v->records, i - 1);
		if (r == NULL || hops == DACC_MAX_HOPS) {
			*settled = 0;
			return NULL;
		}
		if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) == id) {
			*index = i - 1;
			return r;
		}
		i = __atomic_load_n(&r->next, __ATOMIC_ACQUIRE);
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	*settled = !(changes & 1) && __atomic_load_n(&b->changes, __ATOMIC_RELAXED) == changes;
	return NULL;
}

/* The container's coarse clock now: the process's, read on demand, or
** the word of the clock a test moves (container.WithClock). */
static inline int64_t dacc_now(const dacc_view *v) {
	if (__builtin_expect(v->clock == 0, 1))
		return dacc_clock_now();
	return __atomic_load_n((int64_t *)v->clock, __ATOMIC_RELAXED);
}

/* Records a use for the reaper: a store only when the clock moved on past
** the last use's time (which Go may have dated by its finer clock). */
static inline void dacc_touch(const dacc_view *v, dacc_record *r) {
	int64_t now = dacc_now(v);
	if (now > __atomic_load_n(&r->last_used, __ATOMIC_RELAXED))
		__atomic_store_n(&r->last_used, now, __ATOMIC_RELAXED);
}

#endif
