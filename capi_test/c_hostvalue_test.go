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
	assertHostValueRace(t, run(t, buildC(t, "c/hostvalue.c", "-lpthread")))
}

// The same race under AddressSanitizer and LeakSanitizer, the program and
// the library (go build -asan) both instrumented: no bad access while the
// threads race on records and host values, no losing candidate leaked.
func TestHostValueRaceSanitized(t *testing.T) {
	t.Parallel()
	assertHostValueRace(t, runSanitized(t, "c/hostvalue.c").Stdout)
}

func assertHostValueRace(t *testing.T, out string) {
	t.Helper()
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

// A host value's drop, for every way a context dies (a release, the last
// unref after one, a reap, a release by worker, a release on another
// thread): it runs exactly once, on the thread that dropped the last
// reference, once the context is gone, and may call the library, a
// release whose own drop runs inside it included.
func TestHostValueDropsC(t *testing.T) {
	t.Parallel()
	assertTranscript(t, dropsVerdict, run(t, buildC(t, "c/drops.c", "-lpthread")))
}

// The same under AddressSanitizer, the program and the library.
func TestHostValueDropsSanitized(t *testing.T) {
	t.Parallel()
	assertTranscript(t, dropsVerdict, runSanitized(t, "c/drops.c").Stdout)
}

const dropsVerdict = `
		release, no handle left: each dropped once: yes, on the dropping thread: yes, after it was gone: yes, chain nested: yes, contexts left: 0
		last unref after the release: each dropped once: yes, on the dropping thread: yes, after it was gone: yes, chain nested: yes, contexts left: 0
		reap: each dropped once: yes, on the dropping thread: yes, after it was gone: yes, none nested: yes, contexts left: 0
		release by worker: each dropped once: yes, on the dropping thread: yes, after it was gone: yes, none nested: yes, contexts left: 0
		release from another thread: each dropped once: yes, on the dropping thread: yes, after it was gone: yes, chain nested: yes, contexts left: 0
`
