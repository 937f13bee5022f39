package main

/*
#include "capi_internal.h"
*/
import "C"

import (
	"sync/atomic"
	"time"
	"unsafe"

	"distautograd/container"
)

// The coarse clock is advanced by a C thread (clock.c), not a goroutine: Go
// then has nothing to run between the host's calls, and its scheduler stays
// asleep instead of waking a hundred times a second beside them. The
// thread itself sleeps when nobody needs the time; a reader that finds it
// asleep wakes it.
func init() {
	container.SetClockDriver(func(word *atomic.Int64, start int64, tick time.Duration) func() int64 {
		if C.dacc_clock_start((*C.int64_t)(unsafe.Pointer(word)), C.int64_t(start), C.int64_t(tick/time.Millisecond)) != 0 {
			return nil
		}
		return func() int64 { return int64(C.dacc_clock_wake()) }
	})
}
