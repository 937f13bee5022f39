package capi_test

import "testing"

// The handle functions that capi.c serves without entering Go
// (dac_context_id, ref, unref), from the slots it shares with Go's
// container.Handles: see capi_test/c/handles.c.

// 8 pthreads share one handle (a reference each) and ref, read and unref it
// while churning handles of their own in its shard: no call fails or reads a
// wrong id, and the last unref, whichever thread makes it, kills the handle.
func TestHandlesShared(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		handle h = {h}
		errors = 0
		-- every reference dropped: the handle is dead
		dac_context_id(h, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {h} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(h) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {h} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(h) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {h} is not a live handle (never issued, or its last reference was dropped)
		live_handles = 0
		-- the context is still stored
		dac_context_is_valid(ctx_id(7)) -> DAC_OK
	`, run(t, buildC(t, "c/handles.c"), "shared", "8", "20000"))
}

// A dead handle used, over and over, while another thread reissues the
// slots of its shard (the dead one's among them): every use fails with
// DAC_ERR_BAD_HANDLE, and the live handles keep their own ids.
func TestHandlesStale(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		churn errors = 0
		dead handle used while its record was reused: yes, wrong results = 0
		live_handles = 0
	`, run(t, buildC(t, "c/handles.c"), "stale", "200000"))
}

// Handles that were never issued: NULL, another generation of a live slot,
// generation 0, slots never allocated or never issued, another shard.
func TestHandlesForged(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- NULL
		dac_context_id(NULL, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle is NULL
		dac_context_ref(NULL) -> DAC_ERR_BAD_HANDLE: distautograd: context handle is NULL
		dac_context_unref(NULL) -> DAC_ERR_BAD_HANDLE: distautograd: context handle is NULL
		-- a live handle's record, another generation
		handle bad = {bad}
		dac_context_id(bad, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		-- generation 0
		handle bad = {bad}
		dac_context_id(bad, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		-- a record never mapped (the last index)
		handle bad = {bad}
		dac_context_id(bad, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		-- a record mapped but never used
		handle bad = {bad}
		dac_context_id(bad, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		-- another record, its context listed but unreferenced
		handle bad = {bad}
		dac_context_id(bad, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(bad) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bad} is not a live handle (never issued, or its last reference was dropped)
		-- the live handle is untouched
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131973 (worker 3, counter 5)
		dac_context_unref(ctx) -> DAC_OK
		live_handles = 0
	`, run(t, buildC(t, "c/handles.c"), "forged"))
}
