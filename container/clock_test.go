package container

import (
	"sync/atomic"
	"testing"
)

// A reader of the coarse clock gets the word's time, or, from a clock
// asleep, the time its driver's wake returns (and only then calls it).
func TestReadClockWakesASleepingClock(t *testing.T) {
	var word atomic.Int64
	wakes := 0
	wake := func() int64 {
		wakes++
		word.Store(42)
		return 42
	}
	word.Store(7)
	if got := readClock(&word, wake); got != 7 || wakes != 0 {
		t.Fatalf("awake clock: read %d with %d wakes, want 7 with none", got, wakes)
	}
	word.Store(ClockAsleep)
	if got := readClock(&word, wake); got != 42 || wakes != 1 {
		t.Fatalf("sleeping clock: read %d with %d wakes, want 42 with one", got, wakes)
	}
	if got := readClock(&word, wake); got != 42 || wakes != 1 {
		t.Fatalf("woken clock: read %d with %d wakes, want 42 with still one", got, wakes)
	}
}
