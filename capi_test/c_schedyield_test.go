package capi_test

import "testing"

// Calls into Go yield once per 8 ms on a scheduler slot busy with them, so
// that Go's monitor does not take the slot back from the calling thread at
// every call, and never on a quiet one (internal/ptick); the yields are
// counted and bounded.
func TestSchedYields(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		quiet calls: 0 yields
		busy calls: yielded: 1, within the bound: 1
		every call worked: 1
		contexts left: 0
	`, run(t, buildC(t, "c/schedyield.c")))
}
