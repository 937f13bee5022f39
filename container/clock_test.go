package container

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// The resolution is clockResolution's alone: csrc/clock.c gets it from
// capi_layout.h, and what the header and the Python package tell the host
// of the reaper's resolution must be it.
func TestDocumentedResolutionIsTheBound(t *testing.T) {
	for _, path := range []string{"../include/distautograd.h", "../python_bindings/distautograd/_fanout.py"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`resolution[^0-9]{0,20}about (\d+) ms`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s states no resolution of the reaper (\"resolution ... about N ms\")", path)
		}
		if n, _ := strconv.Atoi(string(m[1])); time.Duration(n)*time.Millisecond != clockResolution {
			t.Errorf("%s: the reaper's resolution is about %d ms, but the clock's bound is %v", path, n, clockResolution)
		}
	}
}

// The zero coarseClock is the process's, read on demand: Go's monotonic
// time since clockStart at the moment of the read, with nothing ticking in
// between (no goroutine: TestMain's leak check).
func TestProcessClockIsReadOnDemand(t *testing.T) {
	var k coarseClock
	before := time.Since(clockStart).Milliseconds()
	got := k.now()
	after := time.Since(clockStart).Milliseconds()
	if got < before || got > after {
		t.Fatalf("the process's clock read %d, between reads of Go's monotonic time %d and %d", got, before, after)
	}
}
