package capi_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// More C threads than Ps (GOMAXPROCS=1), each calling into Go without
// pause: every one makes progress (c/fairness.c). Go's monitor takes a P
// back from a thread in C only if its system-call tick stood still between
// two looks, which these calls move, or its scheduler tick did for 10 ms,
// which they do not: a runtime change that moved the scheduler tick on
// every call would let the first thread keep the P for good.
func TestCallsFromCThreadsShareThePs(t *testing.T) {
	t.Parallel()
	r := runEnv(t, []string{"GOMAXPROCS=1"}, buildC(t, "c/fairness.c", "-lpthread"))
	assert.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	assertTranscript(t, `
		4 threads, each made 10000 calls: 1
		every call worked: 1
	`, r.Stdout)
}
