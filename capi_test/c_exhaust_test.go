package capi_test

import (
	"fmt"
	"path/filepath"
	"testing"
)

// testingEnv requires the testing build (build/testing) and returns the
// environment that runs a program against it: LD_LIBRARY_PATH, which the
// program's RUNPATH lets win.
func testingEnv(t *testing.T) []string {
	t.Helper()
	testingLib := requireLibrary(t, "build/testing/libdistautograd.so", "testing-lib ")
	return []string{"LD_LIBRARY_PATH=" + filepath.Dir(testingLib)}
}

// Id counters that reach max_id fail with DAC_ERR_EXHAUSTED, on every thread,
// and change nothing (the native component fails an internal assertion, a
// context creation after making max_id the thread's current id:
// torch_backend/tests/test_limits.py). The
// counters start two ids before max_id, through the testing build's
// dactest_set_counter_offsets; the program runs against that build by
// LD_LIBRARY_PATH, which its RUNPATH lets win.
func TestExhaustion(t *testing.T) {
	env := testingEnv(t)
	bin := buildC(t, "c/exhaust.c", "-ldl")
	for _, w := range []int64{3, 32768, 65535} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			maxID := w<<48 | (1<<48 - 1)
			ctxErr := fmt.Sprintf("DAC_ERR_EXHAUSTED: distautograd: context ids are exhausted: the next id would reach max_id %d", maxID)
			msgErr := fmt.Sprintf("DAC_ERR_EXHAUSTED: distautograd: autograd message ids are exhausted: the next id would reach max_id %d", maxID)
			r := runEnv(t, env, bin, fmt.Sprint(w))
			if r.Code != 0 {
				t.Fatalf("exit status %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			assertTranscript(t, idLine("max", maxID)+`
				-- context ids: the last one issued is max_id - 1
				dac_context_new(&ctx) -> DAC_OK
				`+idLine("id", maxID-2)+`
				dac_context_new(&ctx) -> DAC_OK
				`+idLine("id", maxID-1)+`
				dac_context_new(&ctx) -> `+ctxErr+`
				out untouched: yes
				dac_context_new(&ctx) -> `+ctxErr+`
				a failure changes nothing: current_context_id = -1, num_contexts = 2
				-- message ids, the same
				dac_new_autograd_message_id(&msg) -> DAC_OK
				`+idLine("msg", maxID-2)+`
				dac_new_autograd_message_id(&msg) -> DAC_OK
				`+idLine("msg", maxID-1)+`
				dac_new_autograd_message_id(&msg) -> `+msgErr+`
				dac_new_autograd_message_id(&msg) -> `+msgErr+`
				msg = 77
				-- another thread
				dac_context_new(&ctx) -> `+ctxErr+`
				dac_new_autograd_message_id(&msg) -> `+msgErr+`
				-- everything else still works
				dac_context_get_or_create(((int64_t)5 << 48) + 1, &ctx) -> DAC_OK
				dac_context_unref(ctx) -> DAC_OK
				dac_release_contexts_of_worker(5, NULL) -> DAC_OK
				dac_release_contexts_of_worker((int32_t)w, NULL) -> DAC_OK
				num_contexts = 0
			`, r.Stdout)
		})
	}
}

// The release library has no testing hooks; the testing build has them.
func TestTestingHooksOnlyInTestingBuild(t *testing.T) {
	env := testingEnv(t)
	bin := buildC(t, "c/exhaust.c", "-ldl")
	assertTranscript(t, "dactest_set_counter_offsets: absent", run(t, bin, "probe"))
	r := runEnv(t, env, bin, "probe")
	assertTranscript(t, "dactest_set_counter_offsets: present", r.Stdout)
}
