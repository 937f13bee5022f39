// Package ptick keeps Go's system monitor (sysmon) from taking back, again
// and again, the P of a C thread that calls into Go often.
//
// Why: a C thread that calls into Go (a cgo callback) keeps the P it ran on
// after it returns, as if in a system call. No goroutine is ever scheduled
// on that P, so its scheduler tick never moves, and sysmon (Go 1.26's
// retake) takes a P whose tick has not moved for 10 ms out of its system
// call at every look from then on. Each take hands the P off (a thread
// woken), the caller's next call takes an idle P (sysmon woken if it
// slept), and sysmon's back-off restarts at 20 µs: one to three thread
// wake-ups per call into Go. In torch, on 2 cores, that was about 20 µs of
// CPU per RPC pass. Yielding once per Interval on a P (runtime.Gosched: the
// calling goroutine is scheduled again, and the tick moves) keeps the P
// the caller's own, and sysmon backs off to its 10 ms looks.
package ptick

import (
	"sync/atomic"
	"time"

	"distautograd/internal/layout"
)

// Interval is the most time a busy P may go without a yield: below
// sysmon's 10 ms, with room for its look's lag.
const Interval = int64(8 * time.Millisecond)

// MinCalls is how many calls make a P busy over an Interval. A yield puts
// two thread switches on the calling thread (its P goes to another thread
// and comes back), which on a saturated machine can cost it milliseconds;
// a take by sysmon costs about that in wake-ups too, off the calling
// thread, but once per call. So a P yields only where the takes it saves
// outnumber it: a torch RPC pass calls about 35 times in 8 ms, a
// three-process training step 2 to 6 times (measured: yielding there made
// the step slower).
const MinCalls = 16

// A P's clock is read only now and then (a read costs about 25 ns here, a
// quarter of a call into Go): on every CheckEvery-th call, or on a P that
// called faster in its last interval, about ReadsPerInterval times an
// interval at that rate, with at most MaxEvery calls between reads. An
// interval's end is seen at the first read past it, so its calls are
// counted up to then: a busy P's reads come well within an Interval, and a
// P with half MinCalls an interval or fewer never yields. A P whose rate
// falls sharply may see one interval's end late, by at most MaxEvery calls.
const (
	CheckEvery       = 4
	ReadsPerInterval = 16
	MaxEvery         = 256
)

// slots is the number of Ps tracked; a P with a higher id never yields.
const slots = 1024

// Keeper says when a P is due to yield. Its zero value is ready to use.
//
// Every call reads k's first bytes (Go's nil check of k), so they are a
// line no call writes: when slot 0 shared it, the threads on other Ps
// took that line from P 0's on every call, which cost each call into Go
// about a fifth more at 2 threads. Slots are two lines long, so that
// two Ps' slots never share one wherever the Keeper lies (Go aligns it
// to 8 bytes only).
type Keeper struct {
	_      [cacheLine]byte
	last   [slots]slot
	yields atomic.Int64
}

const cacheLine = layout.CacheLine

type slot struct {
	at    int64 // the start of the P's interval
	calls int64 // calls on the P since
	left  int64 // calls until the next clock read
	every int64 // calls between reads in this interval (0: CheckEvery)
	_     [2*cacheLine - 32]byte
}

// Due counts a call running on P p and reports whether it should yield:
// when p's interval is over and p was busy in it. clock gives the time
// (ns, monotonic) and is called now and then only (see CheckEvery). An
// interval that ends starts the next, with or without a yield.
//
// The caller holds p and cannot lose it during the call (it is pinned to
// p: runtime.procPin), so p's slot is the caller's alone and needs no
// atomics: a locked instruction, or Go's atomic store (an exchange), on
// every call into Go would cost as much as the clock reads it spares.
func (k *Keeper) Due(p int, clock func() int64) bool {
	if p < 0 || p >= slots {
		return false
	}
	s := &k.last[p]
	s.calls++
	if s.left--; s.left > 0 {
		return false
	}
	now := clock()
	elapsed := now - s.at
	if elapsed < Interval {
		s.left = max(s.every, CheckEvery)
		return false
	}
	calls := s.calls
	s.every = readGap(calls, elapsed)
	s.left = s.every
	s.at = now
	s.calls = 0
	if calls < MinCalls {
		return false
	}
	k.yields.Add(1)
	return true
}

// readGap is how many calls to make between clock reads for a P that made
// calls in the elapsed ns (at least an Interval) of its last interval:
// ReadsPerInterval reads an interval at that rate, within [CheckEvery,
// MaxEvery].
func readGap(calls, elapsed int64) int64 {
	gap := calls * (Interval / ReadsPerInterval) / elapsed // no overflow below 10^13 calls
	return min(max(gap, CheckEvery), MaxEvery)
}

// Yields is the number of yields Due has asked for.
func (k *Keeper) Yields() int64 { return k.yields.Load() }
