package capi_test

import "testing"

// 8 pthreads x 100,000 new/release cycles with a message id each, started
// together: no call fails, every thread's current id is its own context's,
// every context id and message id is unique, and nothing is left behind.
func TestThreadsStress(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		errors = 0
		context ids: 800000, all unique: yes, all of worker 3: yes
		context ids from the first, each thread's by the run, at most a run a thread unused: yes
		message ids: 800000, all unique: yes, all of worker 3: yes
		num_contexts = 0
		live_handles = 0
	`, run(t, buildC(t, "c/threads.c"), "stress", "8", "100000"))
}

// 8 pthreads get-or-create the same 20,000 ids at once (messages naming
// passes this worker has not seen, arriving on every thread): one context per
// id, which every thread's handle reaches.
func TestThreadsGetOrCreate(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		errors = 0
		num_contexts = 20000
		every context has the marks of all 8 threads: yes
		released = 20000
		num_contexts = 0
		live_handles = 0
	`, run(t, buildC(t, "c/threads.c"), "get-or-create", "8"))
}

// A new thread has no current context, and each thread's is its own.
func TestThreadsIsolation(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_context_new(&ctx) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		main: current_context_id = 844424930131968, has_valid_context = 1
		-- a new thread
		thread: current_context_id = -1, has_valid_context = 0
		dac_context_current(&ctx) -> `+noCurrent+`
		dac_context_new(&ctx) -> DAC_OK
		id = 844424930132032 (worker 3, counter 64)
		thread: current_context_id = 844424930132032, has_valid_context = 1
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		-- main again
		main: current_context_id = 844424930131968, has_valid_context = 1
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		-- a thread's current id set by hand is its own too
		dac_force_current_context_id(12345) -> DAC_OK
		-- a new thread
		thread: current_context_id = -1, has_valid_context = 0
		dac_context_current(&ctx) -> `+noCurrent+`
		dac_context_new(&ctx) -> DAC_OK
		id = 844424930132096 (worker 3, counter 128)
		thread: current_context_id = 844424930132096, has_valid_context = 1
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		main: current_context_id = 12345, has_valid_context = 1
	`, run(t, buildC(t, "c/threads.c"), "isolation"))
}

// Thread B releases thread A's current context: A keeps a stale id, which
// still counts for has_valid_context, and current_context fails with the
// native message.
func TestThreadsStaleCurrent(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_context_new(&ctx) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		-- thread B releases main's context
		dac_context_release(id) -> DAC_OK
		B: current_context_id = -1, has_valid_context = 0
		-- main keeps a stale current id
		main: current_context_id = 844424930131968, has_valid_context = 1
		dac_context_current(&got) -> DAC_ERR_NOT_FOUND: Couldn't find autograd context data for current autograd context id
		dac_context_new(&got) -> DAC_ERR_ALREADY_HAS_CONTEXT: Already have an autograd context id for this thread.
		dac_context_release(id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968
		dac_context_is_valid(id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968
		-- the handle still reads
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		dac_context_unref(ctx) -> DAC_OK
		-- clearing it is the way out
		dac_clear_current_context() -> DAC_OK
		dac_context_new(&ctx) -> DAC_OK
		id = 844424930131969 (worker 3, counter 1)
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
	`, run(t, buildC(t, "c/threads.c"), "stale"))
}

// Threads that exit with a current id: nothing crashes, their contexts stay
// until released, other threads are unaffected.
func TestThreadsExitWithCurrent(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- a thread made a context and exited with it current
		id = 844424930131968 (worker 3, counter 0)
		num_contexts = 1
		main: current_context_id = -1, has_valid_context = 0
		dac_context_retrieve(id, &ctx) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		-- the next thread starts with none
		-- a new thread
		thread: current_context_id = -1, has_valid_context = 0
		dac_context_current(&ctx) -> `+noCurrent+`
		dac_context_new(&ctx) -> DAC_OK
		id = 844424930132032 (worker 3, counter 64)
		thread: current_context_id = 844424930132032, has_valid_context = 1
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		-- message ids go on after the exited thread's
		dac_new_autograd_message_id(&msg) -> DAC_OK
		after the exited thread's: yes
		-- a hundred threads exit with their current contexts
		num_contexts = 101
		dac_release_contexts_of_worker(3, &released) -> DAC_OK
		released = 101
		num_contexts = 0
		main: current_context_id = -1, has_valid_context = 0
	`, run(t, buildC(t, "c/threads.c"), "exit"))
}
