package container

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The reaper needs to know when a context was last used, but reading the
// clock on every retrieve would cost more than the retrieve. Contexts record
// a coarse clock instead: milliseconds since process start, in a word
// outside the Go heap (C's lookups store it too), advanced every clockTick
// once the first context exists.
const clockTick = 10 * time.Millisecond

// ClockDriver advances the coarse clock: it starts something that stores,
// every tick, the milliseconds elapsed since the word read start plus start
// (CLOCK_MONOTONIC, as Go's own monotonic time), for the life of the
// process. It reports false if it could not start.
type ClockDriver func(word *atomic.Int64, start int64, tick time.Duration) bool

var (
	clockStart  = time.Now()
	clockMs     *atomic.Int64
	clockOnce   sync.Once
	clockDriver atomic.Pointer[ClockDriver]
)

// SetClockDriver has the coarse clock advanced by d instead of by a
// goroutine, if the clock has not started yet (a driver set later is not
// used). A goroutine's tick wakes the Go scheduler a hundred times a second
// whether or not anything else runs in Go; a host that calls into Go rarely
// and wants it asleep in between (the C ABI: on a loaded machine each wake
// cost the torch backend microseconds per pass, in Go's scheduler
// contending with the calls) drives the clock from a thread of its own.
func SetClockDriver(d ClockDriver) { clockDriver.Store(&d) }

func coarseNow() int64 {
	clockOnce.Do(startClock)
	return clockMs.Load()
}

// clockWord returns the clock's address, for C (View.Clock), started.
func clockWord() *atomic.Int64 {
	clockOnce.Do(startClock)
	return clockMs
}

func startClock() {
	b, err := offHeap(8, syscall.PROT_READ|syscall.PROT_WRITE) // the process's, never unmapped
	if err != nil {
		panic(err) // no room for 8 bytes: nothing else will work either
	}
	clockMs = (*atomic.Int64)(unsafe.Pointer(&b[0]))
	now := time.Since(clockStart).Milliseconds()
	clockMs.Store(now)
	if d := clockDriver.Load(); d != nil && *d != nil && (*d)(clockMs, now, clockTick) {
		return
	}
	go func() {
		for range time.Tick(clockTick) {
			clockMs.Store(time.Since(clockStart).Milliseconds())
		}
	}()
}
