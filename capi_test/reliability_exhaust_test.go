package capi_test

import (
	"fmt"
	"testing"

	"distautograd/container"
)

// Id exhaustion from one thread and from many, through the testing build
// (build/testing: dactest_set_counter_offsets starts a counter LEFT ids
// before max_id). Message ids come to each thread in blocks (csrc/library.c), so with
// several threads some hold unused ids of a block while others already get
// DAC_ERR_EXHAUSTED; all of them take ids until they get it too. Then:
// exactly the LEFT ids before max_id were issued, each once, the last below
// max_id. Context ids come by the run (container/ids.go) but for the last
// run before max_id, one at a time: each issued once, every id of that run
// among them. Then every thread, and a thread started afterwards, gets
// DAC_ERR_EXHAUSTED with the same message; everything else still works.
func TestExhaustionFromThreads(t *testing.T) {
	env := testingEnv(t)
	bin := buildC(t, "c/exhaust_limits.c", "-ldl")
	for _, tc := range []struct {
		kind          string
		worker        int64
		threads, left int
	}{
		{"msg", 3, 1, 1000}, {"msg", 3, 8, 20000}, {"msg", 65535, 8, 10000},
		{"ctx", 3, 1, 500}, {"ctx", 40000, 8, 3000},
	} {
		t.Run(fmt.Sprintf("%s/worker%d/threads%d", tc.kind, tc.worker, tc.threads), func(t *testing.T) {
			t.Parallel()
			maxID := tc.worker<<48 | (1<<48 - 1)
			r := runEnv(t, env, bin, tc.kind, fmt.Sprint(tc.worker), fmt.Sprint(tc.threads), fmt.Sprint(tc.left))
			if r.Code != 0 {
				t.Fatalf("exit status %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			what, other := "autograd message", "dac_new_autograd_message_id(&id) -> DAC_OK"
			issued := fmt.Sprintf("message ids issued: %d, unique and exactly the %d before max_id: yes", tc.left, tc.left)
			if tc.kind == "msg" {
				other = `
					dac_context_new(&ctx) -> DAC_OK
					dac_context_release(id) -> DAC_OK
					dac_context_unref(ctx) -> DAC_OK`
			} else {
				what = "context"
				issued = fmt.Sprintf("context ids issued: unique, of the %d before max_id, with all %d of the last run: yes",
					tc.left, min(tc.left, container.ContextIDRun-1))
			}
			exhausted := fmt.Sprintf("distautograd: %s ids are exhausted: the next id would reach max_id %d", what, maxID)
			assertTranscript(t, fmt.Sprintf(`
				%s
				last issued < max_id: yes
				other failures before exhaustion: 0
				every thread then: %s
				the same for all %d threads: yes; and again, 3 calls each: all DAC_ERR_EXHAUSTED
				a thread started after: DAC_ERR_EXHAUSTED: %s
				-- everything else keeps working
				%s
				dac_context_get_or_create(other, &ctx) -> DAC_OK
				dac_context_add_known_worker_id(ctx, 7) -> DAC_OK
				dac_context_retrieve(other, &got) -> DAC_OK
				dac_context_unref(got) -> DAC_OK
				dac_context_release(other) -> DAC_OK
				dac_context_unref(ctx) -> DAC_OK
				num_contexts = 0
			`, issued, exhausted, tc.threads, exhausted, other), r.Stdout)
		})
	}
}

// The cap on live contexts (dac_set_max_contexts) against a flood: 8 threads
// get-or-create 2000 new ids each, as messages naming passes of other workers
// would, past a cap of 1000. Exactly 1000 are created, the rest refused with
// DAC_ERR_LIMIT and a message naming the limit and the fix; dac_debug_info
// shows the cap and the refusals; dac_context_new is refused too; a release
// makes room for one more, and lifting the cap for any number.
func TestCapAgainstAFlood(t *testing.T) {
	t.Parallel()
	limit := "distautograd: the container holds 1000 contexts, its limit (max_contexts); release some or raise the limit"
	assertTranscript(t, `
		dac_set_max_contexts(1000) -> DAC_OK
		8 threads x 2000 get-or-create of new ids: created 1000, refused 15000, other failures 0
		refusal: `+limit+` (every thread's the same: yes)
		debug_info: num_autograd_contexts 1000, max_contexts 1000, refused_contexts 15000
		dac_context_new(&ctx) -> DAC_ERR_LIMIT: `+limit+`
		-- releasing makes room again
		dac_context_release(first) -> DAC_OK
		dac_context_new(&ctx) -> DAC_OK
		dac_context_get_or_create(((int64_t)9 << 48) | 1, &ctx) -> DAC_ERR_LIMIT: `+limit+`
		dac_context_release(id) -> DAC_OK
		dac_context_get_or_create(((int64_t)9 << 48) | 1, &ctx) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		debug_info: num_autograd_contexts 1000, max_contexts 1000, refused_contexts 15002
		dac_set_max_contexts(0) -> DAC_OK
		dac_context_get_or_create(((int64_t)9 << 48) | 2, &ctx) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		released the rest: 1001, num_contexts = 0, live_handles = 0
	`, run(t, buildC(t, "c/exhaust_limits.c", "-ldl"), "cap", "8", "1000"))
}
