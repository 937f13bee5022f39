package container

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The reaper needs to know when a context was last used, but reading the
// clock on every retrieve would cost more than the retrieve. Contexts record
// a coarse clock instead: milliseconds since process start, advanced by one
// goroutine every clockTick once the first context exists.
const clockTick = 10 * time.Millisecond

var (
	clockStart = time.Now()
	clockMs    *atomic.Int64 // outside the Go heap: C's lookups read it too
	clockOnce  sync.Once
)

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
	p, err := offHeap(8, syscall.PROT_READ|syscall.PROT_WRITE)
	if err != nil {
		panic(err) // no room for 8 bytes: nothing else will work either
	}
	clockMs = (*atomic.Int64)(p)
	clockMs.Store(time.Since(clockStart).Milliseconds())
	go func() {
		for range time.Tick(clockTick) {
			clockMs.Store(time.Since(clockStart).Milliseconds())
		}
	}()
}
