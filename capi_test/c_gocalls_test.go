package capi_test

import "testing"

// Which calls capi.c serves without entering Go (the point of the records
// Go publishes: container/records.go), counted by the testing build. A
// fast path that starts entering Go, or a settled miss that stops being
// settled, changes a count here.
func TestCallsServedWithoutGo(t *testing.T) {
	t.Parallel()
	env := testingEnv(t)
	bin := buildC(t, "c/gocalls.c", "-ldl")
	assertTranscript(t, `
		-- need Go: creation, release, a first known worker
		dac_context_new(&ctx) -> DAC_OK, calls into Go: 1
		dac_context_add_known_worker_id(ctx, 9) -> DAC_OK, calls into Go: 1
		dac_context_get_or_create(absent, &other) -> DAC_OK, calls into Go: 1
		dac_context_release(absent) -> DAC_OK, calls into Go: 1
		dac_context_unref(other) -> DAC_OK, calls into Go: 1
		-- served in C: lookups that find the context
		dac_context_retrieve(id, &got) -> DAC_OK, calls into Go: 0
		dac_context_unref(got) -> DAC_OK, calls into Go: 0
		dac_context_retrieve_if_present(id, &got) -> DAC_OK, calls into Go: 0
		dac_context_unref(got) -> DAC_OK, calls into Go: 0
		dac_context_get_or_create(id, &got) -> DAC_OK, calls into Go: 0
		dac_context_unref(got) -> DAC_OK, calls into Go: 0
		dac_context_current(&got) -> DAC_OK, calls into Go: 0
		dac_context_unref(got) -> DAC_OK, calls into Go: 0
		dac_context_current_id(&got, &got_id) -> DAC_OK, calls into Go: 0
		its id is the current one: yes
		dac_context_unref(got) -> DAC_OK, calls into Go: 0
		dac_context_is_valid(id) -> DAC_OK, calls into Go: 0
		dac_current_context_id(&cur) -> DAC_OK, calls into Go: 0
		dac_has_valid_context(&valid) -> DAC_OK, calls into Go: 0
		-- served in C: a miss that is the answer
		dac_context_retrieve_if_present(absent, &got) -> DAC_OK, calls into Go: 0
		out: NULL
		dac_context_release_if_present(absent, &released) -> DAC_OK, calls into Go: 0
		released: 0
		dac_context_release_with_workers(absent, workers, 2, &released) -> DAC_OK, calls into Go: 0
		released: 0
		-- served in C: a handle's reads, references, host value, a known worker again
		dac_context_id(ctx, &id) -> DAC_OK, calls into Go: 0
		dac_context_ref(ctx) -> DAC_OK, calls into Go: 0
		dac_context_unref(ctx) -> DAC_OK, calls into Go: 0
		dac_context_host_value(ctx, &hv) -> DAC_OK, calls into Go: 0
		dac_context_set_host_value(ctx, 42, drop, &hv) -> DAC_OK, calls into Go: 0
		host value: 42
		dac_context_set_host_value(ctx, 43, drop, &hv) -> DAC_OK, calls into Go: 0
		host value: 42 (the first stays)
		dac_context_add_known_worker_id(ctx, 9) -> DAC_OK, calls into Go: 0
		-- served in C: the current id
		dac_clear_current_context() -> DAC_OK, calls into Go: 0
		dac_set_current_context_id(id) -> DAC_OK, calls into Go: 0
		dac_force_current_context_id(id) -> DAC_OK, calls into Go: 0
		-- need Go: the release that finds it (one call, workers added)
		dac_context_release_with_workers(id, workers, 2, &released) -> DAC_OK, calls into Go: 1
		released: 1
		known workers: 9 4 5
		dac_context_retrieve_if_present(id, &got) -> DAC_OK, calls into Go: 0
		out: NULL
		dac_context_unref(ctx) -> DAC_OK, calls into Go: 1
	`, runEnv(t, env, bin).Stdout)
}

// A release that brings its workers allocates nothing in Go through the C
// ABI (export.go converts a pass's few workers on the stack; the container
// hands the sender the caller's slice), counted by the testing build; a
// release with more workers than the stack holds still tells them all.
func TestReleaseWithWorkersAllocatesNothingC(t *testing.T) {
	t.Parallel()
	env := testingEnv(t)
	bin := buildC(t, "c/release_allocs.c", "-ldl")
	r := runEnv(t, env, bin)
	t.Log(r.Stderr)
	assertTranscript(t, `
		every context released: yes
		messages sent inline: 416 of 416
		fewer than one allocation in ten releases: yes
		nine workers: released 1, messages sent 425, pending 0
	`, r.Stdout)
}
