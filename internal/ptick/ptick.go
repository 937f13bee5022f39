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

// CheckEvery: a P's clock is read on every CheckEvery-th call only (a read
// costs about 25 ns, a quarter of a call into Go). An interval's end is
// then seen at the first read past it, so its calls are counted up to
// then: a busy P's reads come well within an Interval, and a P with half
// MinCalls an interval or fewer never yields.
const CheckEvery = 4

// slots is the number of Ps tracked apart; Ps beyond share slots (a
// shared slot only yields more often, never less).
const slots = 256

// Keeper says when a P is due to yield. Its zero value is ready to use.
type Keeper struct {
	last   [slots]slot
	yields atomic.Int64
}

type slot struct {
	at    atomic.Int64 // the start of the P's interval
	calls atomic.Int64 // calls on the P since
	_     [48]byte     // a cache line each: Ps run on different cores
}

// Due counts a call running on P p and reports whether it should yield:
// when p's interval is over and p was busy in it. clock gives the time
// (ns, monotonic) and is called on every CheckEvery-th call of p only. An
// interval that ends starts the next, with or without a yield. Only the
// thread holding p calls it for p, so its steps need not be one atomic
// step.
func (k *Keeper) Due(p int, clock func() int64) bool {
	if p < 0 {
		p = -p
	}
	s := &k.last[p%slots]
	calls := s.calls.Add(1)
	if calls%CheckEvery != 0 {
		return false
	}
	now := clock()
	if now-s.at.Load() < Interval {
		return false
	}
	s.at.Store(now)
	s.calls.Store(0)
	if calls < MinCalls {
		return false
	}
	k.yields.Add(1)
	return true
}

// Yields is the number of yields Due has asked for.
func (k *Keeper) Yields() int64 { return k.yields.Load() }
