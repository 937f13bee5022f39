package capi_test

import "testing"

// The reaper's coarse clock is read where it is needed (csrc/clock.c), and
// dates every use by the time of that use: the reaper tells a context idle
// past its bound from one just used, and one used after a long pause from
// one left alone; and C's reads of it agree with Go's (c/reaperclock.c,
// which makes again a try that the test itself stalled).
func TestReaperClockIsCurrent(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		rc -> DAC_OK
		reaped: 1, the old one: reaped, the fresh one: kept
		the touched one idle for less than the untouched one, by the time between their uses: yes
		the untouched one idle for no longer than it has existed: yes
		C's idle time and Go's agree: yes
	`, run(t, buildC(t, "c/reaperclock.c")))
}

// Lookups served in C wake no other thread, however long contexts stay in
// use: nothing of the library's ticks (a clock that did woke a thread of
// its own every tick while contexts were in use), and the lookups never
// enter Go (c/monitor_wakes.c's lookup rounds: a pause, then a retrieve
// of one context and its unref).
func TestLookupsWakeNoThread(t *testing.T) {
	t.Parallel()
	const rounds, pauseMs = 100, 5
	bin := buildC(t, "c/monitor_wakes.c")
	// Go's runtime may still be settling (a collection, the scavenger) as
	// the rounds start: one quiet attempt of three shows that nothing wakes
	// with the lookups, which a ticking clock would do in every attempt
	// (some 50 switches).
	quiet := false
	for attempt := 1; attempt <= 3 && !quiet; attempt++ {
		switches := monitorWakes(t, bin, nil, rounds, pauseMs, "lookup")
		t.Logf("attempt %d: the process's other threads switched %d times over %d lookups after a %d ms pause", attempt, switches, rounds, pauseMs)
		quiet = switches <= rounds/10
	}
	if !quiet {
		t.Errorf("the process's other threads woke with the lookups in every attempt")
	}
}
