package ptick

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// run makes n calls on p spread evenly over [from, to) and returns how many
// were due and how often the clock was read.
func run(k *Keeper, p int, n int, from, to int64) (due, reads int) {
	for i := 0; i < n; i++ {
		now := from + (to-from)*int64(i)/int64(n)
		if k.Due(p, func() int64 { reads++; return now }) {
			due++
		}
	}
	return due, reads
}

func TestBusyPYieldsOncePerInterval(t *testing.T) {
	var k Keeper
	// 100 calls an interval over 50 intervals: busy throughout. The first
	// interval starts at 0 (the zero value), so each of the 49 that end
	// inside the run yields once, at its first clock read past its end.
	due, reads := run(&k, 3, 5000, 0, 50*Interval)
	require.Equal(t, 49, due)
	require.Equal(t, int64(49), k.Yields())
	require.Equal(t, 5000/CheckEvery, reads, "the clock read on every CheckEvery-th call only")
}

func TestQuietPNeverYields(t *testing.T) {
	var k Keeper
	// Half MinCalls an interval, for 100 intervals: an interval's count,
	// taken at the first clock read past its end, stays under MinCalls.
	due, _ := run(&k, 0, 100*MinCalls/2, 0, 100*Interval)
	require.Equal(t, 0, due)
	require.Equal(t, int64(0), k.Yields())
}

// A P that was busy, then waited long, yields once when it comes back: the
// calls before the wait made the interval busy.
func TestBusyThenIdle(t *testing.T) {
	var k Keeper
	run(&k, 1, 2*MinCalls, 1, Interval/2)
	due, _ := run(&k, 1, CheckEvery, 50*Interval, 50*Interval+1)
	require.Equal(t, 1, due)
	due, _ = run(&k, 1, CheckEvery, 100*Interval, 100*Interval+1)
	require.Equal(t, 0, due, "the interval before was quiet")
}

func TestPsAreIndependent(t *testing.T) {
	var k Keeper
	busy, _ := run(&k, 0, 10*100, 0, 10*Interval)
	quiet, _ := run(&k, 1, 10*CheckEvery, 0, 10*Interval)
	require.Equal(t, 9, busy)
	require.Equal(t, 0, quiet)
}

// A P id beyond the table shares a slot (Ps sharing a slot count their
// calls together: they may yield more, never less).
func TestPsBeyondTheTableShareSlots(t *testing.T) {
	var k Keeper
	run(&k, slots+5, MinCalls, 1, Interval/2)
	run(&k, 5, MinCalls, Interval/2, Interval)
	due, _ := run(&k, -5, CheckEvery, Interval, Interval+1)
	require.Equal(t, 1, due)
}

// Over any stretch of calls at most one yield per P per Interval: what
// bounds the cost of yielding.
func TestYieldsBoundedUnderConcurrentPs(t *testing.T) {
	var k Keeper
	const ps, steps = 8, 10_000
	const step = Interval / 100 // 100 calls an interval: every interval busy
	var wg sync.WaitGroup
	for p := 0; p < ps; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); i <= steps; i++ {
				k.Due(p, func() int64 { return i * step })
			}
		}()
	}
	wg.Wait()
	// Intervals end at Interval, 2*Interval, ... 100*Interval.
	require.Equal(t, int64(ps*(steps*step/Interval)), k.Yields())
}
