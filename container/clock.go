package container

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The reaper needs to know when a context was last used. Contexts record a
// coarse clock: milliseconds since the process's clock started
// (CLOCK_MONOTONIC, Go's own monotonic time), read where it is needed,
// with nothing ticking in between: Go reads its monotonic time, and C's
// lookups read CLOCK_MONOTONIC_COARSE, which the kernel's vDSO serves
// without a system call (csrc/clock.c). A clock that ticked would wake
// something every tick while contexts are in use: in the torch training
// job, a thread of the library's waking several times a step on cores
// that TensorPipe's reactors keep busy.
//
// clockResolution bounds how far two readers' times for one moment may lie
// apart (C's coarse clock lags by up to a kernel tick, and csrc/clock.c
// falls back to the fine clock where the kernel's tick is longer): it is
// the reaper's resolution, which the header and the Python package state
// (TestDocumentedResolutionIsTheBound) and capi_layout.h gives C
// (DACC_CLOCK_RESOLUTION_MS).
const clockResolution = 10 * time.Millisecond

// ClockResolutionMs is clockResolution in milliseconds, for C.
const ClockResolutionMs = int64(clockResolution / time.Millisecond)

// clockStart is where the process's coarse clock reads 0.
var clockStart = time.Now()

// ClockElapsed returns the time since the process's coarse clock read 0, in
// Go's monotonic time (CLOCK_MONOTONIC): a host that dates uses in C sets
// its own clock's origin from it (export_hooks.go).
func ClockElapsed() time.Duration { return time.Since(clockStart) }

// coarseClock is the clock a Container dates its contexts' uses by. The
// zero coarseClock is the process's, read on demand (ClockElapsed); a clock
// with a word (a ManualClock's) reads the word, which C reads too through
// View.Clock (0 for the process's clock).
type coarseClock struct {
	word *atomic.Int64
}

func (k coarseClock) now() int64 {
	if k.word == nil {
		return ClockElapsed().Milliseconds()
	}
	return k.word.Load()
}

// A ManualClock is a coarse clock that moves only when told to: a
// Container built WithClock dates its contexts' uses (and ReapIdleContexts
// and HandleTimes read the time) by it instead of by the process's clock,
// so that what depends on idle time is tested without sleeping, and holds
// however long the machine stalls the test. Its word is outside the Go
// heap, since C reads it too (View.Clock); it is never unmapped. For
// tests: the C ABI exposes it only in builds with the dac_testing tag.
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
			c.clock = coarseClock{word: m.word}
		}
	}
}
