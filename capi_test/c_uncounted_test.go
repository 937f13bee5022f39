package capi_test

import "testing"

// References held uncounted (the library's csrc/uncounted.c), from C (capi_test/c/uncounted.c):
// a thread's lookup of a context it looked up before is held in the
// thread's slot, not counted in the context's record, and behaves in every
// way as a counted one: on its own thread, handed to another thread, left
// by a thread that exits, held while its context is released (the
// holder's unref is then the death, and runs the host drop), and under a
// race of lookups with releases and re-creations of one id (every host
// value dropped exactly once, never while read, nothing left). The race
// makes the id anew 20,000 times; DAC_LONG=1 (make fuzz) 2,000,000.
func TestUncountedReferencesC(t *testing.T) {
	t.Parallel()
	assertTranscript(t, uncountedTranscript, run(t, buildC(t, "c/uncounted.c", "-lpthread"), uncountedRounds()...))
}

func uncountedRounds() []string {
	if longRun() {
		return []string{"2000000"}
	}
	return nil
}

// The same under AddressSanitizer, LeakSanitizer and UBSan, the program and
// the library (go build -asan) both instrumented.
func TestUncountedReferencesSanitized(t *testing.T) {
	t.Parallel()
	assertTranscript(t, uncountedTranscript, runSanitized(t, "c/uncounted.c", uncountedRounds()...).Stdout)
}

const uncountedTranscript = `
		-- 1: one thread
		handle h = {h}
		live handles: 1, uncounted: 1
		dac_context_id(h, &id) -> DAC_OK
		id 1001
		dac_context_host_value(h, &hv) -> DAC_OK
		its host value: yes
		dac_context_add_known_worker_id(h, 3) -> DAC_OK
		dac_context_known_worker_ids(h, ids, 4, &n) -> DAC_OK
		known workers: 1 (3)
		dac_context_ref(h) -> DAC_OK
		dac_context_unref(h) -> DAC_OK
		dac_context_unref(h) -> DAC_OK
		live handles: 0
		dac_context_id(h, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {h} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(h) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {h} is not a live handle (never issued, or its last reference was dropped)
		dac_context_release(ID_BASE + 1) -> DAC_OK
		dropped: 1, contexts left: 0
		-- 2: handed to another thread, its holder alive
		handle handed = {handed}
		live handles: 1, uncounted: 1
		dac_context_id(x.h, &id) -> DAC_OK
		dac_context_host_value(x.h, &hv) -> DAC_OK
		its host value: yes
		dac_context_unref(x.h) -> DAC_OK
		dac_context_unref(x.h) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {handed} is not a live handle (never issued, or its last reference was dropped)
		live handles: 0
		handle other = {other}
		dac_context_id(x->h, &id) -> DAC_OK
		dac_context_unref(x->h) -> DAC_OK
		dac_context_id(x->h, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {other} is not a live handle (never issued, or its last reference was dropped)
		dac_context_release(ID_BASE + 2) -> DAC_OK
		dropped: 1 and 1, contexts left: 0, live handles: 0
		-- 3: handed on, then its thread exits
		handle exited = {exited}
		uncounted before its thread exits: 1
		live handles: 1, uncounted: 0
		dac_context_id(x.h, &id) -> DAC_OK
		dac_context_release(ID_BASE + 4) -> DAC_OK
		dropped after the release: 0
		dac_context_unref(x.h) -> DAC_OK
		dropped after the unref: 1, on this thread: yes, contexts left: 0, live handles: 0
		dac_context_unref(x.h) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {exited} is not a live handle (never issued, or its last reference was dropped)
		-- 4: released while a thread holds one
		handle held = {held}
		uncounted: 1
		dac_context_release(ID_BASE + 5) -> DAC_OK
		dropped after the release: 0
		dac_context_retrieve(ID_BASE + 5, &h) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 1005
		dac_context_is_valid(ID_BASE + 5) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 1005
		dac_context_id(x->h, &id) -> DAC_OK
		dac_context_unref(x->h) -> DAC_OK
		dac_context_id(x->h, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {held} is not a live handle (never issued, or its last reference was dropped)
		dropped after its unref: 1, on its thread: yes, contexts left: 0, live handles: 0
		-- 5: 4 threads look one id up while it is released and made anew
		values dropped exactly once: all, while read: 0, wrong reads: 0, lookups made: yes
		contexts left: 0, live handles: 0
`
