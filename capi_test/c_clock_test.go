package capi_test

import "testing"

// The coarse clock behind the reaper ticks on one plain thread of the
// library's (dac-clock, every signal blocked), not a goroutine, so that
// Go's scheduler is not woken between the host's calls; and it ticks.
func TestClockThread(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac-clock threads: 1, with every signal blocked: 1
		dac_reap_idle_contexts(1000, &n) -> DAC_OK
		reaped: 1, the old one: reaped, the fresh one: kept
	`, run(t, buildC(t, "c/clockthread.c")))
}
