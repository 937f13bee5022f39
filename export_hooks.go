package main

/*
#include "csrc/clock.h"
#include "csrc/host.h"
#include "csrc/uncounted.h"
*/
import "C"

import (
	"math"
	"sync/atomic"
	"unsafe"

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

// uncountedSlot is csrc/uncounted.h's dacc_uncounted_slot, as Go reads C's
// array of them.
type uncountedSlot struct {
	h    atomic.Uint64
	last uint64 // the owner thread's alone
	_    [48]byte
}

// The two layouts agree (size, and where the handle lies), or this does
// not compile.
var (
	_ [C.sizeof_dacc_uncounted_slot - unsafe.Sizeof(uncountedSlot{})]byte
	_ [unsafe.Sizeof(uncountedSlot{}) - C.sizeof_dacc_uncounted_slot]byte
	_ [unsafe.Offsetof(C.dacc_uncounted_slot{}.h) - unsafe.Offsetof(uncountedSlot{}.h)]byte
	_ [unsafe.Offsetof(uncountedSlot{}.h) - unsafe.Offsetof(C.dacc_uncounted_slot{}.h)]byte
)

// C's slots and the count of those handed out so far (slots[:*top]).
var uncounted = func() (s struct {
	slots *[C.DACC_UNCOUNTED_SLOTS]uncountedSlot
	top   *atomic.Uint32
}) {
	var top *C.uint32_t
	s.slots = (*[C.DACC_UNCOUNTED_SLOTS]uncountedSlot)(unsafe.Pointer(C.dacc_uncounted_slots(&top)))
	s.top = (*atomic.Uint32)(unsafe.Pointer(top))
	return s
}()

// Settle is csrc/uncounted.c's dacc_uncounted_settle, step for step
// (dacc_uncounted_count_one for each slot that holds h; a change there is
// made here too), in Go over C's slots, with the counts it must give back
// dropped at the end: a release
// of a record some thread looked up uncounted (a torch pass's, every one)
// would otherwise call from Go into C under its shard lock, which cost a
// pass's release 0.5 us and a training step's 3.5 us when cold.
func (uncountedRefs) Settle(h uint64, state *atomic.Uint64) {
	gen := h >> container.GenShift
	undo := uint64(0)
	n := uncounted.top.Load()
	for i := range n {
		s := &uncounted.slots[i]
		if s.h.Load() != h {
			continue
		}
		for {
			st := state.Load()
			if st>>container.GenShift != gen || st&container.MaxRefs == container.MaxRefs {
				break // left: another life, or at its most references (it cannot die)
			}
			if state.CompareAndSwap(st, st+1) {
				if !s.h.CompareAndSwap(h, 0) {
					undo++ // its holder dropped it meanwhile
				}
				break
			}
		}
	}
	if undo > 0 {
		state.Add(-undo)
	}
}

func (uncountedRefs) Count() int64 { return int64(C.dacc_uncounted_count()) }

var _ container.UncountedRefs = uncountedRefs{}
