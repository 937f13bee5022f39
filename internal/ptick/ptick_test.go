package ptick

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// calls makes n calls on p spread over [from, to), returning how many were
// due.
func calls(k *Keeper, p int, n int, from, to int64) int {
	due := 0
	for i := 0; i < n; i++ {
		if k.Due(p, from+(to-from)*int64(i)/int64(n)) {
			due++
		}
	}
	return due
}

func TestBusyPYieldsOncePerInterval(t *testing.T) {
	var k Keeper
	const start = Interval // the zero value's interval starts at 0
	require.Equal(t, 0, calls(&k, 3, MinCalls, 0, start), "none inside the first interval")
	require.True(t, k.Due(3, start), "busy in the interval that ends here")
	require.Equal(t, 0, calls(&k, 3, 10*MinCalls, start+1, start+Interval), "inside the next one")
	require.True(t, k.Due(3, start+Interval), "at its end")
	require.Equal(t, int64(2), k.Yields())
}

func TestQuietPNeverYields(t *testing.T) {
	var k Keeper
	for i := int64(1); i <= 100; i++ {
		require.Equal(t, 0, calls(&k, 0, MinCalls-2, i*Interval, (i+1)*Interval), "interval %d", i)
	}
	require.Equal(t, int64(0), k.Yields())
}

// A P that was busy, then waited long, yields once when it comes back: the
// calls before the wait made the interval busy.
func TestBusyThenIdle(t *testing.T) {
	var k Keeper
	calls(&k, 1, MinCalls, 1, Interval/2)
	require.True(t, k.Due(1, 50*Interval))
	require.False(t, k.Due(1, 100*Interval), "the interval before was quiet")
}

func TestPsAreIndependent(t *testing.T) {
	var k Keeper
	calls(&k, 0, MinCalls, 1, Interval)
	calls(&k, 1, 1, 1, Interval)
	require.True(t, k.Due(0, Interval))
	require.False(t, k.Due(1, Interval), "p1 was quiet")
}

// A P id beyond the table shares a slot (Ps sharing a slot count their
// calls together: they may yield more, never less).
func TestPsBeyondTheTableShareSlots(t *testing.T) {
	var k Keeper
	calls(&k, slots+5, MinCalls/2, 1, Interval/2)
	calls(&k, 5, MinCalls/2, Interval/2, Interval)
	require.True(t, k.Due(-5, Interval))
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
				k.Due(p, i*step)
			}
		}()
	}
	wg.Wait()
	// Intervals end at Interval, 2*Interval, ... 100*Interval; the first
	// (0 to Interval) was busy too.
	require.Equal(t, int64(ps*(steps*step/Interval)), k.Yields())
}
