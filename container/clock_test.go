package container

import (
	"os"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The tick is clockTick's alone: csrc/clock.c takes it as an argument, and what
// the header and the Python package tell the host of the reaper's
// resolution must be it.
func TestDocumentedResolutionIsTheTick(t *testing.T) {
	for _, path := range []string{"../include/distautograd.h", "../python_bindings/distautograd/_fanout.py"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`resolution[^0-9]{0,20}about (\d+) ms`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s states no resolution of the reaper (\"resolution ... about N ms\")", path)
		}
		if n, _ := strconv.Atoi(string(m[1])); time.Duration(n)*time.Millisecond != clockTick {
			t.Errorf("%s: the reaper's resolution is about %d ms, but the clock ticks every %v", path, n, clockTick)
		}
	}
}

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
