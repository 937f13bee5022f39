package ptick

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"distautograd/internal/layout"
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
	// 100 calls an interval: a read every 100/ReadsPerInterval = 6 calls
	// from the second interval on.
	require.LessOrEqual(t, reads, 100/CheckEvery+4900/6+1, "the clock read about ReadsPerInterval times an interval")
	require.GreaterOrEqual(t, reads, 50*ReadsPerInterval)
}

func TestSlowPReadsTheClockEveryCheckEvery(t *testing.T) {
	var k Keeper
	// 20 calls an interval: fewer than ReadsPerInterval*CheckEvery.
	due, reads := run(&k, 2, 20*50, 0, 50*Interval)
	require.Equal(t, 49, due)
	require.Equal(t, 20*50/CheckEvery, reads)
}

// A P that calls very fast reads the clock a few times an interval, not on
// every CheckEvery-th call, and still yields once an interval.
func TestFastPReadsTheClockRarely(t *testing.T) {
	var k Keeper
	const perInterval, intervals = 100_000, 20
	due, reads := run(&k, 4, perInterval*intervals, 0, intervals*Interval)
	require.Equal(t, intervals-1, due)
	require.LessOrEqual(t, reads, perInterval/CheckEvery+(intervals-1)*perInterval/MaxEvery+intervals)
}

// A fast P whose rate falls sharply sees at most one interval's end late
// (by at most MaxEvery calls), then yields once an interval again.
func TestRateDropRecovers(t *testing.T) {
	var k Keeper
	const fast, slow = 100_000, 64 // calls an interval
	run(&k, 6, fast*5, 0, 5*Interval)
	due, _ := run(&k, 6, slow*40, 5*Interval, 45*Interval)
	late := MaxEvery/slow + 1 // intervals that can end before the first read
	require.GreaterOrEqual(t, due, 40-late)
	require.LessOrEqual(t, due, 40)
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

// A P id beyond the table is not tracked: it never yields.
func TestPsBeyondTheTableNeverYield(t *testing.T) {
	var k Keeper
	for _, p := range []int{slots, slots + 5, -1} {
		due, reads := run(&k, p, 100*10, 0, 10*Interval)
		require.Equal(t, 0, due)
		require.Equal(t, 0, reads)
	}
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
	// 100 intervals; each is seen to end at the first read past it (within
	// 100/ReadsPerInterval calls), and the next starts there: a few are lost
	// to that drift, and none is yielded twice.
	intervals := int64(steps * step / Interval)
	require.LessOrEqual(t, k.Yields(), ps*intervals)
	require.GreaterOrEqual(t, k.Yields(), ps*intervals*9/10)
}

// The layout that keeps Ps' calls from sharing cache lines: no slot in
// the line that Due's nil check reads on every call, and no two slots'
// counters in one line whatever the Keeper's alignment (8 bytes).
func TestSlotsShareNoLine(t *testing.T) {
	var k Keeper
	first := uintptr(unsafe.Pointer(&k.last[0])) - uintptr(unsafe.Pointer(&k))
	hot := unsafe.Offsetof(slot{}.every) + unsafe.Sizeof(slot{}.every)
	require.True(t, layout.Apart(1, first), "slot 0 in the nil check's line")
	require.True(t, layout.Apart(first+hot, first+unsafe.Sizeof(slot{})), "slots 0 and 1 share a line")
}
