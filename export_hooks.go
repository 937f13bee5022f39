package main

/*
#include "csrc/clock.h"
#include "csrc/host.h"
#include "csrc/uncounted.h"
*/
import "C"

import (
	"math"

	"distautograd/container"
)

// What the process-wide container calls in C, set once at load: the coarse
// clock's origin, the host's drop functions, and the references C threads
// hold uncounted.
func init() {
	C.dacc_clock_start(C.int64_t(clockOrigin()))
	// Drop functions are C function pointers; Go calls them through the
	// trampoline, which holds fork() back as the other calls into the host do.
	proc.SetHostDrop(func(drop uintptr, value uint64) {
		C.dacc_call_host_drop(C.uintptr_t(drop), C.uint64_t(value))
	})
	proc.SetUncountedRefs(uncountedRefs{})
}

// clockOrigin returns where Go's coarse clock reads 0, in CLOCK_MONOTONIC's
// nanoseconds as C reads them: C's lookups date their uses by the coarse
// clock they read themselves (csrc/clock.c). Go's elapsed time read between
// two reads of C's clock puts the origin within their gap; the later bound
// is taken, so that C's times are never ahead of Go's, and the narrowest of
// a few gaps, so that a stall between two reads (a loaded machine at load)
// does not lag C's clock for good.
func clockOrigin() int64 {
	gap, origin := int64(math.MaxInt64), int64(0)
	for range 8 {
		before := int64(C.dacc_monotonic_ns())
		elapsed := container.ClockElapsed().Nanoseconds()
		after := int64(C.dacc_monotonic_ns())
		if after-before < gap {
			gap, origin = after-before, after-elapsed
		}
	}
	return origin
}

// The references C threads hold uncounted (csrc/uncounted.c): a release
// settles them before it decides a record's death, and the leak count
// includes them.
type uncountedRefs struct{}

func (uncountedRefs) Settle(h uint64) { C.dacc_uncounted_settle_raw(C.uint64_t(h)) }

func (uncountedRefs) Count() int64 { return int64(C.dacc_uncounted_count()) }

var _ container.UncountedRefs = uncountedRefs{}
