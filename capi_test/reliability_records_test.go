package capi_test

import (
	"regexp"
	"strconv"
	"testing"
)

// maxBytesPerContext bounds the memory a live context takes: its record
// (64 bytes), the index's chain heads (4 to 8 bytes, as the index doubles,
// and as much again in the arrays it outgrew, which C may still read) and
// Go's slot for a *Context (8 bytes): at most 88 (what make bench measures
// at a million live contexts is docs/benchmarks.md's Memory figure).
const maxBytesPerContext = 96

// With no cap, as many contexts live at once as memory allows: 5 million,
// past the 2^22 records the library once reserved and refused beyond, all
// made, found again from C by id and through their handles, released, and
// each taking no more memory than maxBytesPerContext.
func TestManyLiveContexts(t *testing.T) {
	bin := buildC(t, "c/manylive.c")
	const n = 5_000_000
	r := runEnv(t, nil, bin, strconv.Itoa(n))
	if r.Code != 0 {
		t.Fatalf("exit status %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	assertTranscript(t, `
		max_contexts = 0
		made: all
		num_contexts = N: yes
		dac_context_id(last_h, &got_id) -> DAC_OK
		its id is the last made: yes
		dac_context_retrieve(last, &got) -> DAC_OK
		the same record: yes
		dac_context_unref(got) -> DAC_OK
		dac_context_is_valid(first) -> DAC_OK
		dac_context_is_valid(last) -> DAC_OK
		dac_release_contexts_of_worker(3, &released) -> DAC_OK
		released = N: yes
		num_contexts() = 0
		dac_context_id(first_h, &got_id) -> DAC_OK
		first id: yes
		dac_context_id(last_h, &got_id) -> DAC_OK
		last id: yes
		dac_context_unref(first_h) -> DAC_OK
		dac_context_unref(last_h) -> DAC_OK
		handle last_h = {last_h}
		dac_context_id(last_h, &got_id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {last_h} is not a live handle (never issued, or its last reference was dropped)
		debug_value("live_handles") = 0
	`, r.Stdout)
	m := regexp.MustCompile(`bytes per context: ([0-9.]+)`).FindStringSubmatch(r.Stderr)
	if m == nil {
		t.Fatalf("no memory figure in its output:\n%s", r.Stderr)
	}
	per, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", r.Stderr)
	if per > maxBytesPerContext {
		t.Errorf("%.1f bytes per live context, more than %d", per, maxBytesPerContext)
	}
}

// A dead handle is dead for good, also once its record has lived 2^32-1
// lives: a record whose generation would wrap is retired, never reused.
// One id is made and released again and again, so one record serves it;
// the testing build's dactest_age_record moves that record on to the last
// generation (2^32-3 lives would take 15-45 minutes here). Before records
// were retired, the generation after the last was 1 and the first life's
// handle named the next context (DAC_OK and its id).
func TestDeadHandleStaysDeadPastGenerationWrap(t *testing.T) {
	env := testingEnv(t)
	bin := buildC(t, "c/wrap.c", "-ldl")
	r := runEnv(t, env, bin)
	if r.Code != 0 {
		t.Fatalf("exit status %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	dead := func(h string) string {
		return "DAC_ERR_BAD_HANDLE: distautograd: context handle {" + h + "} is not a live handle (never issued, or its last reference was dropped)"
	}
	assertTranscript(t, `
		dac_context_get_or_create(id, &first) -> DAC_OK
		handle first = {first}
		dac_context_release(id) -> DAC_OK
		dac_context_unref(first) -> DAC_OK
		dac_context_id(first, &got) -> `+dead("first")+`
		age(first, UINT32_MAX) -> DAC_OK
		dac_context_get_or_create(id + 256, &last) -> DAC_OK
		handle last = {last}
		the same record, its last generation: yes
		dac_context_release(id + 256) -> DAC_OK
		dac_context_unref(last) -> DAC_OK
		dac_context_get_or_create(id + 512, &next) -> DAC_OK
		handle next = {next}
		another record: yes
		dac_context_id(first, &got) -> `+dead("first")+`
		got = -1
		dac_context_ref(first) -> `+dead("first")+`
		dac_context_id(last, &got) -> `+dead("last")+`
		dac_context_id(next, &got) -> DAC_OK
		next's id: yes
		dac_context_release(id + 512) -> DAC_OK
		dac_context_unref(next) -> DAC_OK
		age(last, UINT32_MAX) -> DAC_ERR_INVALID_ARGUMENT: distautograd: record 0 (state 0x0) is not dead, or is retired, or is past generation 4294967295
		num_contexts() = 0
	`, r.Stdout)
}
