package capi_test

import (
	"strings"
	"testing"
)

// Host values from C (capi_test/c/hostvalue.c): six threads get-or-create,
// set (agreeing on one value per context, the losers freed), read and unref
// 4000 ids while a seventh releases them. Every value is dropped exactly
// once, never while a handle to its context is live, and nothing is left.
func TestHostValueRaceC(t *testing.T) {
	t.Parallel()
	out := run(t, buildC(t, "c/hostvalue.c", "-lpthread"))
	for _, want := range []string{
		"contexts left = 0",
		"values not dropped exactly once = 0",
		"drops while a handle was live or wrong reads = 0",
		"two values for one context = 0",
		`"live_handles":0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
