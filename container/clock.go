package container

import (
	"sync"
	"sync/atomic"
	"time"
)

// The reaper needs to know when a context was last used, but reading the
// clock on every retrieve would cost more than the retrieve. Contexts record
// a coarse clock instead: milliseconds since process start, advanced by one
// goroutine every clockTick once the first context exists.
const clockTick = 10 * time.Millisecond

var (
	clockStart = time.Now()
	clockMs    atomic.Int64
	clockOnce  sync.Once
)

func coarseNow() int64 {
	clockOnce.Do(startClock)
	return clockMs.Load()
}

func startClock() {
	clockMs.Store(time.Since(clockStart).Milliseconds())
	go func() {
		for range time.Tick(clockTick) {
			clockMs.Store(time.Since(clockStart).Milliseconds())
		}
	}()
}
