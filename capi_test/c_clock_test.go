package capi_test

import "testing"

// The coarse clock behind the reaper ticks on one plain thread of the
// library's (dac-clock, every signal blocked), not a goroutine, so that
// Go's scheduler is not woken between the host's calls; and it ticks (a
// try that the test itself stalled past the reaper's bound is made again:
// c/clockthread.c).
func TestClockThread(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac-clock threads: 1, with every signal blocked: 1
		rc -> DAC_OK
		reaped: 1, the old one: reaped, the fresh one: kept
	`, run(t, buildC(t, "c/clockthread.c")))
}

// The clock sleeps while nobody needs the time, so an idle process is not
// woken a hundred times a second; a lookup wakes it and records the
// current time, so the reaper still tells a context just used from one
// left alone: their idle times differ by the time between their uses,
// whatever the machine's load did meanwhile (c/clocksleep.c waits for
// states, never for a time to be enough).
func TestClockSleepsWhenUnused(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		asleep once unused: yes
		stays asleep while the library is not called: yes
		the touched one idle for less than the untouched one, by the time between their uses: yes
		woken by the lookup: yes
	`, run(t, buildC(t, "c/clocksleep.c")))
}
