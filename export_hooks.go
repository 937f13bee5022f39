package main

/*
#include "csrc/clock.h"
#include "csrc/host.h"
#include "csrc/uncounted.h"
*/
import "C"

import (
	"sync/atomic"
	"time"
	"unsafe"

	"distautograd/container"
)

// What the process-wide container calls in C, set once at load: the coarse
// clock's driver, the host's drop functions, and the references C threads
// hold uncounted.
func init() {
	container.SetClockDriver(clockDriver)
	// Drop functions are C function pointers; Go calls them through the
	// trampoline, which holds fork() back as the other calls into the host do.
	proc.SetHostDrop(func(drop uintptr, value uint64) {
		C.dacc_call_host_drop(C.uintptr_t(drop), C.uint64_t(value))
	})
	proc.SetUncountedRefs(uncountedRefs{})
}

// The coarse clock is advanced by a C thread (csrc/clock.c), not a goroutine: Go
// then has nothing to run between the host's calls, and its scheduler stays
// asleep instead of waking a hundred times a second beside them. The
// thread itself sleeps when nobody needs the time; a reader that finds it
// asleep wakes it.
func clockDriver(word *atomic.Int64, start int64, tick time.Duration) func() int64 {
	if C.dacc_clock_start((*C.int64_t)(unsafe.Pointer(word)), C.int64_t(start), C.int64_t(tick/time.Millisecond)) != 0 {
		return nil
	}
	return func() int64 { return int64(C.dacc_clock_wake()) }
}

// The references C threads hold uncounted (csrc/uncounted.c): a release
// settles them before it decides a record's death, and the leak count
// includes them.
type uncountedRefs struct{}

func (uncountedRefs) Settle(h uint64) { C.dacc_uncounted_settle_raw(C.uint64_t(h)) }

func (uncountedRefs) Count() int64 { return int64(C.dacc_uncounted_count()) }

var _ container.UncountedRefs = uncountedRefs{}
