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
// from the first container's creation on, while anyone reads it (a driver
// may let it sleep in between: ClockDriver). The tick is this constant's
// alone: a driver is given it, and TestDocumentedResolutionIsTheTick holds
// what the header and the Python package tell of it to it.
const clockTick = 10 * time.Millisecond

// ClockDriver advances the coarse clock: it starts something that stores,
// every tick, the milliseconds elapsed since the word read start plus start
// (CLOCK_MONOTONIC, as Go's own monotonic time), for the life of the
// process, and returns how to wake it, or nil if it could not start. A
// driver may let the clock sleep while nobody needs the time: it then
// stores ClockAsleep in the word, and a reader that finds ClockAsleep calls
// the wake function, which returns the current time (never negative) and
// has the clock tick again.
type ClockDriver func(word *atomic.Int64, start int64, tick time.Duration) (wake func() int64)

// ClockAsleep is what the coarse clock's word holds while its driver
// sleeps (capi_layout.h: DACC_CLOCK_ASLEEP).
const ClockAsleep = -1

var (
	clockStart  = time.Now()
	clockMs     *atomic.Int64
	clockWake   func() int64
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

// coarseClock is the clock a Container dates its contexts' uses by: the
// word of milliseconds it reads (C reads it too, through View.Clock), and
// how to wake the word's driver when it sleeps. The zero coarseClock is
// unset: New gives the container the process's (processClock) unless an
// option gave it another.
type coarseClock struct {
	word *atomic.Int64
	wake func() int64
}

func (k coarseClock) now() int64 { return readClock(k.word, k.wake) }

// processClock returns the process's coarse clock, started.
func processClock() coarseClock {
	clockOnce.Do(startClock)
	return coarseClock{clockMs, clockWake}
}

// readClock returns the time in word, waking its driver if it sleeps.
func readClock(word *atomic.Int64, wake func() int64) int64 {
	if now := word.Load(); now != ClockAsleep {
		return now
	}
	return wake()
}

func startClock() {
	b, err := offHeap(8, syscall.PROT_READ|syscall.PROT_WRITE) // the process's, never unmapped
	if err != nil {
		panic(err) // no room for 8 bytes: nothing else will work either
	}
	clockMs = (*atomic.Int64)(unsafe.Pointer(&b[0]))
	now := time.Since(clockStart).Milliseconds()
	clockMs.Store(now)
	if d := clockDriver.Load(); d != nil && *d != nil {
		if clockWake = (*d)(clockMs, now, clockTick); clockWake != nil {
			return
		}
	}
	// A goroutine's clock never sleeps: its word is never ClockAsleep.
	go func() {
		for range time.Tick(clockTick) {
			clockMs.Store(time.Since(clockStart).Milliseconds())
		}
	}()
}

// A ManualClock is a coarse clock that moves only when told to: a
// Container built WithClock dates its contexts' uses (and ReapIdleContexts
// and HandleTimes read the time) by it instead of by the process's clock,
// so that what depends on idle time is tested without sleeping, and holds
// however long the machine stalls the test. Its word is outside the Go
// heap, as the process clock's, since C reads it too (View.Clock); it is
// never unmapped. For tests: the C ABI exposes it only in builds with the
// dac_testing tag.
type ManualClock struct{ word *atomic.Int64 }

// NewManualClock returns a clock that reads 0 until Advance moves it.
func NewManualClock() (*ManualClock, error) {
	b, err := offHeap(8, syscall.PROT_READ|syscall.PROT_WRITE)
	if err != nil {
		return nil, err
	}
	return &ManualClock{(*atomic.Int64)(unsafe.Pointer(&b[0]))}, nil
}

// Advance moves the clock on by ms milliseconds (ms >= 0).
func (m *ManualClock) Advance(ms int64) error {
	if ms < 0 {
		return Errorf(ErrInvalidArgument, "a clock moves on by ms >= 0, got %d", ms)
	}
	m.word.Add(ms)
	return nil
}

// Now returns the clock's time, in milliseconds.
func (m *ManualClock) Now() int64 { return m.word.Load() }

// WithClock has the container read the time from m instead of the
// process's coarse clock (nil: the process's).
func WithClock(m *ManualClock) Option {
	return func(c *Container) {
		if m != nil {
			c.clock = coarseClock{word: m.word, wake: m.Now} // never ClockAsleep: wake is never called
		}
	}
}
