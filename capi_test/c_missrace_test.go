package capi_test

import (
	"strconv"
	"testing"
)

// The misses capi.c settles without Go are true misses: readers look up
// contexts that stay stored while other threads rewrite the links of their
// bucket chain (unlinks, records reused in the same chain, index growth);
// none is ever found absent, and lookups of ids never stored are answered
// absent (see capi_test/c/missrace.c). 300 rounds; DAC_LONG=1 (make fuzz)
// runs 30,000.
func TestSettledMissesUnderChurn(t *testing.T) {
	t.Parallel()
	rounds := 300
	if longRun() {
		rounds = 30000
	}
	assertTranscript(t, `
		churned: every round
		reads: some
		wrong results: 0
		stable contexts still stored: 8 of 8
		num_contexts: 8
	`, run(t, buildC(t, "c/missrace.c"), strconv.Itoa(rounds)))
}
