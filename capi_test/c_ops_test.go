package capi_test

// The transcripts of ops.c, one scenario per process on worker 3 (first id
// 844424930131968 = 3 << 48). Each line is a call and its status and message,
// or a value it wrote; see c/check.h.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const noCurrent = "DAC_ERR_NO_CURRENT_CONTEXT: Current thread doesn't have a valid autograd context. " +
	"Please wrap your code using: `with torch.distributed.autograd.context() as context_id` to generate a valid context"

// Create, find, get-or-create, release: each operation of the container and
// its native messages.
func TestOpsContainer(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_worker_id(&w) -> DAC_OK
		worker_id = 3
		dac_max_id(&v) -> DAC_OK
		v = 1125899906842623 (worker 3, counter 281474976710655)
		num_contexts = 0
		-- new context: it becomes this thread's current context
		dac_context_new(&ctx) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		current_context_id = 844424930131968, has_valid_context = 1
		num_contexts = 1
		dac_context_new(&other) -> DAC_ERR_ALREADY_HAS_CONTEXT: Already have an autograd context id for this thread.
		num_contexts = 1
		dac_context_current(&got) -> DAC_OK
		current: id = 844424930131968 (worker 3, counter 0)
		-- retrieve
		dac_context_retrieve(id, &got) -> DAC_OK
		retrieved: id = 844424930131968 (worker 3, counter 0)
		dac_context_retrieve(12345, &got) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 12345
		out untouched: yes
		dac_context_retrieve_if_present(id, &got) -> DAC_OK
		retrieved if present: id = 844424930131968 (worker 3, counter 0)
		dac_context_retrieve_if_present(12345, &got) -> DAC_OK
		retrieved if present: NULL
		dac_context_is_valid(id) -> DAC_OK
		dac_context_is_valid(12345) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 12345
		dac_context_is_valid(-7187745005283311616) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: -7187745005283311616
		-- get or create: a message of worker 5 names a pass this worker has not seen
		dac_context_get_or_create(remote, &got) -> DAC_OK
		created: id = 1407374883553322 (worker 5, counter 42)
		num_contexts = 2
		dac_context_get_or_create(remote, &got) -> DAC_OK
		got: id = 1407374883553322 (worker 5, counter 42)
		dac_context_get_or_create(id, &got) -> DAC_OK
		got: id = 844424930131968 (worker 3, counter 0)
		num_contexts = 2
		current_context_id = 844424930131968, has_valid_context = 1
		-- message ids
		dac_new_autograd_message_id(&v) -> DAC_OK
		v = 844424930131968 (worker 3, counter 0)
		dac_new_autograd_message_id(&v) -> DAC_OK
		v = 844424930131969 (worker 3, counter 1)
		dac_new_autograd_message_id(&v) -> DAC_OK
		v = 844424930131970 (worker 3, counter 2)
		-- release
		dac_context_release(id) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		num_contexts = 1
		dac_context_release(id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968
		dac_context_is_valid(id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968
		dac_context_current(&got) -> `+noCurrent+`
		dac_context_release_if_present(remote, &released) -> DAC_OK
		released = 1
		dac_context_release_if_present(remote, &released) -> DAC_OK
		released = 0
		dac_context_release_if_present(12345, NULL) -> DAC_OK
		num_contexts = 0
		-- ids are never reused
		dac_context_new(&ctx) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131969 (worker 3, counter 1)
		dac_context_release(id) -> DAC_OK
		num_contexts = 0
	`, run(t, buildC(t, "c/ops.c"), "container"))
}

// The calling thread's current context id: set, force, clear, and what new
// and release do to it.
func TestOpsCurrentID(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		current_context_id = -1, has_valid_context = 0
		dac_context_current(&got) -> `+noCurrent+`
		-- set_current_context_id does not look the id up
		dac_set_current_context_id(12345) -> DAC_OK
		current_context_id = 12345, has_valid_context = 1
		dac_context_current(&got) -> DAC_ERR_NOT_FOUND: Couldn't find autograd context data for current autograd context id
		dac_set_current_context_id(7) -> DAC_ERR_ALREADY_HAS_CONTEXT: Already have an autograd context id for this thread.
		dac_context_new(&ctx) -> DAC_ERR_ALREADY_HAS_CONTEXT: Already have an autograd context id for this thread.
		current_context_id = 12345, has_valid_context = 1
		dac_force_current_context_id(7) -> DAC_OK
		current_context_id = 7, has_valid_context = 1
		dac_clear_current_context() -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		dac_clear_current_context() -> DAC_OK
		-- 0 is a valid id (worker 0's first); forcing -1 clears
		dac_set_current_context_id(0) -> DAC_OK
		current_context_id = 0, has_valid_context = 1
		dac_force_current_context_id(DAC_INVALID_ID) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		-- a current id set by hand names a context made elsewhere
		dac_set_current_context_id(remote) -> DAC_OK
		dac_context_current(&got) -> DAC_OK
		current: id = 1407374883553322 (worker 5, counter 42)
		-- releasing it resets this thread's current id
		dac_context_release(remote) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		-- releasing another context leaves the current id
		dac_context_new(&ctx) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		dac_context_release(remote) -> DAC_OK
		current_context_id = 844424930131968, has_valid_context = 1
		dac_context_release(id) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		num_contexts = 0
	`, run(t, buildC(t, "c/ops.c"), "current"))
}

// dac_release_contexts_of_worker: what a dead worker left here, by the top 16
// bits of the ids.
func TestOpsReleaseContextsOfWorker(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		num_contexts = 6
		-- worker 5 died mid-pass: release what it left here
		dac_release_contexts_of_worker(5, &n) -> DAC_OK
		n = 3
		dac_release_contexts_of_worker(5, &n) -> DAC_OK
		n = 0
		dac_release_contexts_of_worker(40000, &n) -> DAC_OK
		n = 1
		dac_release_contexts_of_worker(6, NULL) -> DAC_OK
		num_contexts = 1
		-- this worker's own contexts: the calling thread's current id is not reset
		dac_release_contexts_of_worker(3, &n) -> DAC_OK
		n = 1
		current_context_id = 844424930131968, has_valid_context = 1
		num_contexts = 0
		-- out of range
		dac_release_contexts_of_worker(-1, &n) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_release_contexts_of_worker(65536, &n) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		n = 77
	`, run(t, buildC(t, "c/ops.c"), "workers"))
}

// dac_reap_idle_contexts, on the testing build's clock that moves only
// when told (runTesting): what is idle is what the scenario says, however
// long the machine stalls it.
func TestOpsReapIdle(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- fresh contexts are not idle for a minute
		dac_reap_idle_contexts(60000, &n) -> DAC_OK
		n = 0
		-- 400 ms later, one used again: the other is idle for 200 ms
		dac_reap_idle_contexts(200, &n) -> DAC_OK
		n = 1
		dac_context_is_valid(idle_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968 (distautograd: it was reaped by dac_reap_idle_contexts, unused for 200 ms or more)
		dac_context_is_valid(used_id) -> DAC_OK
		-- the handle of a reaped context still reads
		dac_context_id(idle, &n) -> DAC_OK
		n = 844424930131968 (worker 3, counter 0)
		-- 0: everything is idle
		dac_reap_idle_contexts(0, NULL) -> DAC_OK
		num_contexts = 0
		dac_reap_idle_contexts(-1, &n) -> DAC_ERR_INVALID_ARGUMENT: distautograd: max_idle_ms must be >= 0, got -1
	`, runTesting(t, buildC(t, "c/ops.c"), "reap"))
}

// A C thread whose current context dac_release_contexts_of_worker or
// dac_reap_idle_contexts released is not stuck: its lookups say why the
// context is gone, it can create a new one, and a thread that releases the
// reaped id (a pass's end) has its current id reset. A release by another
// thread keeps the native stale id. Before the fix: "Already have an
// autograd context id for this thread." for good.
func TestOpsReapedCurrentContext(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- worker 3, this one, presumed dead
		dac_release_contexts_of_worker(3, &n) -> DAC_OK
		n = 1
		current_context_id = 844424930131968, has_valid_context = 1
		dac_context_current(&ctx) -> DAC_ERR_NOT_FOUND: Couldn't find autograd context data for current autograd context id (context 844424930131968: distautograd: it was released by dac_release_contexts_of_worker(3), which clears what a dead worker left)
		dac_context_retrieve(pass_id, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968 (distautograd: it was released by dac_release_contexts_of_worker(3), which clears what a dead worker left)
		dac_context_is_valid(pass_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968 (distautograd: it was released by dac_release_contexts_of_worker(3), which clears what a dead worker left)
		-- a new pass on this thread
		dac_context_new(&ctx) -> DAC_OK
		current_context_id = 844424930131969, has_valid_context = 1
		-- second thread: ending the reaped pass resets its current id
		dac_context_release(pass_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968 (distautograd: it was released by dac_release_contexts_of_worker(3), which clears what a dead worker left)
		current_context_id = -1, has_valid_context = 0
		dac_context_new_id(&ctx, &id) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		dac_context_release(pass_id + 1) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		num_contexts = 0
		-- the reaper
		dac_reap_idle_contexts(0, &n) -> DAC_OK
		n = 1
		current_context_id = 844424930131970, has_valid_context = 1
		dac_context_current(&ctx) -> DAC_ERR_NOT_FOUND: Couldn't find autograd context data for current autograd context id (context 844424930131970: distautograd: it was reaped by dac_reap_idle_contexts, unused for 0 ms or more)
		dac_context_retrieve(pass_id, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131970 (distautograd: it was reaped by dac_reap_idle_contexts, unused for 0 ms or more)
		dac_context_is_valid(pass_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131970 (distautograd: it was reaped by dac_reap_idle_contexts, unused for 0 ms or more)
		-- a new pass on this thread
		dac_context_new(&ctx) -> DAC_OK
		current_context_id = 844424930131971, has_valid_context = 1
		-- second thread: ending the reaped pass resets its current id
		dac_context_release(pass_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131970 (distautograd: it was reaped by dac_reap_idle_contexts, unused for 0 ms or more)
		current_context_id = -1, has_valid_context = 0
		dac_context_new_id(&ctx, &id) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		dac_context_release(pass_id + 1) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		num_contexts = 0
		-- released by another thread: the native stale id
		dac_context_new(&ctx) -> DAC_ERR_ALREADY_HAS_CONTEXT: Already have an autograd context id for this thread.
		dac_context_is_valid(pass_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131972
	`, run(t, buildC(t, "c/ops.c"), "reaped"))
}

// A release runs the host's code on the releasing thread (the log hook
// with no sender set, a non-blocking sender): a context made there takes
// the thread's next id, which the thread's next context does not take
// again, and the released context is no longer current there.
func TestOpsReenteringRelease(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_set_log_hook(nested_hook, NULL) -> DAC_OK
		-- no sender: the release logs on this thread, whose hook makes a context
		  inside the release: current_context_id = -1
		dac_context_release(id) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		made inside: id + 1; the thread's next: id + 2; distinct: yes
		dac_set_log_hook(NULL, NULL) -> DAC_OK
		dac_set_cleanup_sender_nonblocking(1) -> DAC_OK
		dac_set_cleanup_sender(nested_sender, NULL) -> DAC_OK
		-- a non-blocking sender, run on this thread, makes a context
		  inside the release: current_context_id = -1
		dac_context_release(id) -> DAC_OK
		current_context_id = -1, has_valid_context = 0
		made inside: id + 1; the thread's next: id + 2; distinct: yes
		dac_set_cleanup_sender(NULL, NULL) -> DAC_OK
	`, run(t, buildC(t, "c/ops.c"), "reenter_release"))
}

// dac_set_max_contexts: past the cap, new contexts are refused, counted, and take no id.
func TestOpsMaxContexts(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_set_max_contexts(2) -> DAC_OK
		dac_context_new(&a) -> DAC_OK
		dac_context_get_or_create(remote, &b) -> DAC_OK
		dac_context_get_or_create(remote + 1, &c) -> DAC_ERR_LIMIT: distautograd: the container holds 2 contexts, its limit (max_contexts); release some or raise the limit
		dac_context_new(&c) -> DAC_ERR_LIMIT: distautograd: the container holds 2 contexts, its limit (max_contexts); release some or raise the limit
		out untouched: yes
		current_context_id = -1, has_valid_context = 0
		-- at the cap, existing contexts are still found
		dac_context_get_or_create(remote, &c) -> DAC_OK
		got: id = 1407374883553322 (worker 5, counter 42)
		num_contexts = 2
		debug_info: num_autograd_contexts 2, max_contexts 2, refused_contexts 2
		-- a refused context took no id
		dac_context_release(remote) -> DAC_OK
		dac_context_new(&c) -> DAC_OK
		dac_context_id(c, &id) -> DAC_OK
		id = 844424930131969 (worker 3, counter 1)
		-- 0 lifts the cap
		dac_set_max_contexts(0) -> DAC_OK
		dac_context_get_or_create(remote + 1, &b) -> DAC_OK
		num_contexts = 3
		dac_set_max_contexts(-1) -> DAC_ERR_INVALID_ARGUMENT: distautograd: max_contexts must be >= 0, got -1
		debug_info: num_autograd_contexts 3, max_contexts 0, refused_contexts 2
	`, run(t, buildC(t, "c/ops.c"), "limit"))
}

// Known worker ids: range check, dedup (also past 32), the short-buffer
// contract, and reading after release.
func TestOpsKnownWorkers(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_context_known_worker_ids(ctx, NULL, 0, &count) -> DAC_OK
		count = 0
		-- known workers: deduplicated, in the order added
		dac_context_add_known_worker_id(ctx, 4) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 1) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 4) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 0) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 65535) -> DAC_OK
		dac_context_add_known_worker_id(ctx, -1) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_context_add_known_worker_id(ctx, 65536) -> DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]
		dac_context_known_worker_ids(ctx, ids, 8, &count) -> DAC_OK
		count = 4: 4 1 0 65535
		-- a short buffer gets the first ones and the total
		dac_context_known_worker_ids(ctx, ids, 2, &count) -> DAC_OK
		count = 4: 4 1, ids[2] untouched: yes
		dac_context_known_worker_ids(ctx, NULL, 0, &count) -> DAC_OK
		count = 4
		-- more than 32 workers
		dac_context_known_worker_ids(ctx, many, 200, &count) -> DAC_OK
		count = 104, 1000..1099 after the first four in order: yes
		-- the handle outlives the release
		dac_context_release(id) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		dac_context_known_worker_ids(ctx, ids, 3, &count) -> DAC_OK
		count = 104: 4 1 0
		dac_context_add_known_worker_id(ctx, 9) -> DAC_OK
		dac_context_retrieve(id, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968
		dac_context_unref(ctx) -> DAC_OK
	`, run(t, buildC(t, "c/ops.c"), "context"))
}

// The view of what a worker holds: dac_context_list and dac_context_times
// (on the testing build's clock that moves only when told, as
// TestOpsReapIdle).
func TestOpsList(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- nothing stored: nothing listed
		dac_context_list(listed, 4, &count) -> DAC_OK
		count = 0
		-- two stored, both listed (each a new reference), in no particular order
		dac_context_list(listed, 4, &count) -> DAC_OK
		count = 2
		listed: own 1, theirs 1, the same handles as the lookups: yes
		dac_context_unref_many(listed, count) -> DAC_OK
		-- a short buffer: the first ones and the total; no room: the total only
		dac_context_list(listed, 1, &count) -> DAC_OK
		count = 2
		listed[1] untouched: yes
		dac_context_unref(listed[0]) -> DAC_OK
		dac_context_list(NULL, 0, &count) -> DAC_OK
		count = 2
		-- 600 ms later, one used again: its idle time starts over, its age does not
		dac_context_times(theirs, &age, &idle) -> DAC_OK
		theirs: age >= 550 ms: yes, idle < age: yes
		dac_context_times(own, &age, &idle) -> DAC_OK
		own: age >= 550 ms: yes, idle >= 550 ms: yes, idle <= age: yes
		dac_context_times(own, NULL, &idle_c) -> DAC_OK
		own, the idle time alone (read in C): at least the one read before: yes
		-- listing is not a use: the listed one is still idle for the reaper
		dac_context_list(listed, 4, &count) -> DAC_OK
		dac_context_unref_many(listed, count) -> DAC_OK
		dac_reap_idle_contexts(300, &n) -> DAC_OK
		n = 1
		dac_context_is_valid(own_id) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 844424930131968 (distautograd: it was reaped by dac_reap_idle_contexts, unused for 300 ms or more)
		-- a released context's handle still tells its times
		dac_context_times(own, &age, NULL) -> DAC_OK
	`, runTesting(t, buildC(t, "c/ops.c"), "list"))
}

// Send and recv functions, keyed by message id: registration, duplicates,
// lookups, listing.
func TestOpsFunctions(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		(message ids printed as counters: m1 = 0, m2 = 1)
		dac_context_send_functions(ctx, msgs, fns, 8, &count) -> DAC_OK
		count = 0:
		dac_context_recv_functions(ctx, msgs, fns, 8, &count) -> DAC_OK
		count = 0:
		-- register: a send and a recv may share a message id
		dac_context_add_send_function(ctx, m1, 0xa1) -> DAC_OK
		dac_context_add_send_function(ctx, m2, 0xa2) -> DAC_OK
		dac_context_add_recv_function(ctx, m1, 0xb1) -> DAC_OK
		dac_context_add_send_function(ctx, m1, 0xff) -> DAC_ERR_INVALID_ARGUMENT: distautograd: a send function is already registered for autograd message id: 844424930131968
		dac_context_add_recv_function(ctx, m1, 0xff) -> DAC_ERR_INVALID_ARGUMENT: distautograd: a recv function is already registered for autograd message id: 844424930131968
		dac_context_send_function(ctx, m1, &fn) -> DAC_OK
		fn = 0xa1
		dac_context_recv_function(ctx, m1, &fn) -> DAC_OK
		fn = 0xb1
		dac_context_send_function(ctx, 7, &fn) -> DAC_ERR_NOT_FOUND: Could not find send function for autograd message id: 7
		dac_context_recv_function(ctx, m2, &fn) -> DAC_ERR_NOT_FOUND: Could not find recv function for autograd message id: 844424930131969
		fn untouched: yes
		-- list
		dac_context_send_functions(ctx, msgs, fns, 8, &count) -> DAC_OK
		count = 2: 0=0xa1 1=0xa2
		dac_context_recv_functions(ctx, msgs, fns, 8, &count) -> DAC_OK
		count = 1: 0=0xb1
		dac_context_send_functions(ctx, msgs, fns, 1, &count) -> DAC_OK
		count = 2, a registered pair written: yes, msgs[1] and fns[1] untouched: yes
		dac_context_send_functions(ctx, NULL, NULL, 0, &count) -> DAC_OK
		count = 2
		-- the opaque value is any 64-bit value
		dac_context_add_recv_function(ctx, m2, UINT64_MAX) -> DAC_OK
		dac_context_recv_function(ctx, m2, &fn) -> DAC_OK
		fn = 0xffffffffffffffff
		-- after release, through the handle
		dac_context_release(id) -> DAC_OK
		dac_context_send_functions(ctx, msgs, fns, 8, &count) -> DAC_OK
		count = 2: 0=0xa1 1=0xa2
		dac_context_unref(ctx) -> DAC_OK
	`, run(t, buildC(t, "c/ops.c"), "functions"))
}

// Handles: references, dead handles, double unref, NULL, never-issued and
// forged handles, slot reuse.
func TestOpsHandles(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		handle ctx = {ctx}
		-- a handle names its context: each call returns it with a new reference
		dac_context_current(&again) -> DAC_OK
		same handle: yes
		live_handles: 2
		dac_context_unref(again) -> DAC_OK
		-- ref and unref count
		dac_context_ref(ctx) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		dac_context_unref(ctx) -> DAC_OK
		-- no reference left: every use fails, nothing crashes
		dac_context_id(ctx, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(ctx) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(ctx) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_add_known_worker_id(ctx, 4) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_known_worker_ids(ctx, ids, 1, &count) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_add_send_function(ctx, 1, 1) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_add_recv_function(ctx, 1, 1) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_send_function(ctx, 1, &fn) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_recv_function(ctx, 1, &fn) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_send_functions(ctx, msgs, fns, 1, &count) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_recv_functions(ctx, msgs, fns, 1, &count) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		-- the context itself is still stored: the handle was only a reference
		dac_context_is_valid(id) -> DAC_OK
		-- NULL
		dac_context_id(NULL, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle is NULL
		dac_context_unref(NULL) -> DAC_ERR_BAD_HANDLE: distautograd: context handle is NULL
		dac_context_ref(NULL) -> DAC_ERR_BAD_HANDLE: distautograd: context handle is NULL
		-- never issued
		handle bogus = {bogus}
		dac_context_id(bogus, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bogus} is not a live handle (never issued, or its last reference was dropped)
		dac_context_unref(bogus) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {bogus} is not a live handle (never issued, or its last reference was dropped)
		-- looked up again: the same handle, referenced again
		dac_context_retrieve(id, &next) -> DAC_OK
		same handle as ctx: yes
		dac_context_id(next, &id) -> DAC_OK
		id = 844424930131968 (worker 3, counter 0)
		handle forged = {forged}
		dac_context_id(forged, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {forged} is not a live handle (never issued, or its last reference was dropped)
		-- released, it stays readable through its handle until the last reference goes
		dac_context_release(id) -> DAC_OK
		dac_context_id(next, &id) -> DAC_OK
		dac_context_unref(next) -> DAC_OK
		-- then the handle is dead for good, whatever reuses its record
		dac_context_id(next, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_ref(next) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_get_or_create(id, &again) -> DAC_OK
		same handle as before: no
		dac_context_id(next, &id) -> DAC_ERR_BAD_HANDLE: distautograd: context handle {ctx} is not a live handle (never issued, or its last reference was dropped)
		dac_context_release(id) -> DAC_OK
		dac_context_unref(again) -> DAC_OK
		live_handles: 0
	`, run(t, buildC(t, "c/ops.c"), "handles"))
}

// dac_debug_info: the JSON object and its keys, the length, and truncation
// as snprintf does it.
func TestOpsDebugInfo(t *testing.T) {
	t.Parallel()
	out := run(t, buildC(t, "c/ops.c"), "debug")
	var objects []map[string]int64
	var rest []string
	for _, line := range strings.Split(out, "\n") {
		if text, ok := strings.CutPrefix(line, "json: "); ok {
			var m map[string]int64
			require.NoError(t, json.Unmarshal([]byte(text), &m), "an object of integers: %s", text)
			objects = append(objects, m)
			line = "json: {...}"
		}
		rest = append(rest, line)
	}
	require.Len(t, objects, 2)
	text, err := json.Marshal(objects[0]) // sorted keys, no spaces: the library's form
	require.NoError(t, err)
	// The Go heap's size is the runtime's: only its presence is the contract.
	for _, m := range objects {
		require.Contains(t, m, "go_heap_bytes")
		assert.GreaterOrEqual(t, m["go_heap_bytes"], int64(0))
		delete(m, "go_heap_bytes")
	}
	want := map[string]int64{
		"num_autograd_contexts": 0, "num_current_backward_passes": 0, "max_contexts": 0,
		"refused_contexts": 0, "live_handles": 0, "uncounted_handles": 0, "cleanup_sent": 0, "cleanup_retried": 0,
		"cleanup_failed": 0, "cleanup_dropped": 0, "cleanup_skipped": 0, "cleanup_pending": 0,
	}
	// Which changes of Go's runtime the build took, as the overlay's
	// script recorded them (build/go-runtime/STATUS).
	for name, applied := range goRuntimeStatus(t) {
		want["go_runtime_"+strings.ReplaceAll(name, "-", "_")] = map[bool]int64{true: 1, false: 0}[applied]
	}
	assert.Equal(t, want, objects[0])
	want["num_autograd_contexts"], want["live_handles"] = 1, 1
	assert.Equal(t, want, objects[1], "after one dac_context_new")

	assertTranscript(t, `
		dac_debug_info(NULL, 0, &full) -> DAC_OK
		length = `+itoa(len(text))+`
		dac_debug_info(buf, sizeof buf, &len) -> DAC_OK
		json: {...}
		strlen = length: yes
		dac_debug_info(buf, sizeof buf, &len) -> DAC_OK
		json: {...}
		-- truncated, snprintf-like: capacity-1 bytes and a NUL
		dac_debug_info(buf, 1, &len) -> DAC_OK
		strlen = 0, a prefix: yes, length is the full one: yes, byte after the NUL untouched: yes
		dac_debug_info(buf, 2, &len) -> DAC_OK
		strlen = 1, a prefix: yes, length is the full one: yes, byte after the NUL untouched: yes
		dac_debug_info(buf, 10, &len) -> DAC_OK
		strlen = 9, a prefix: yes, length is the full one: yes, byte after the NUL untouched: yes
		dac_debug_info(buf, length, &len) -> DAC_OK
		last byte lost to the NUL: yes
		dac_debug_info(buf, length + 1, &len) -> DAC_OK
		complete: yes
	`, strings.Join(rest, "\n"))
}

// What needs no container: the version and the status names, before init.
func TestOpsLibrary(t *testing.T) {
	t.Parallel()
	v := headerVersion(t)
	assertTranscript(t, `
		dac_version() = `+v.String()+`
		matches DAC_VERSION_STRING: yes
		dac_version_number() = `+itoa(v.Number())+`, DAC_VERSION_NUMBER = `+itoa(v.Number())+`
		0 = DAC_OK
		1 = DAC_ERR_NOT_INITIALIZED
		2 = DAC_ERR_INVALID_ARGUMENT
		3 = DAC_ERR_ALREADY_INITIALIZED
		4 = DAC_ERR_NO_CURRENT_CONTEXT
		5 = DAC_ERR_NOT_FOUND
		6 = DAC_ERR_ALREADY_HAS_CONTEXT
		7 = DAC_ERR_EXHAUSTED
		8 = DAC_ERR_BAD_HANDLE
		9 = DAC_ERR_LIMIT
		10 = DAC_ERR_FORKED
		11 = DAC_ERR_INTERNAL
		12 = DAC_ERR_UNSUPPORTED
		13 = DAC_ERR_TIMEOUT
		-1 = DAC_UNKNOWN
		14 = DAC_UNKNOWN
		1000 = DAC_UNKNOWN
		-2147483648 = DAC_UNKNOWN
		static storage: yes
	`, run(t, buildC(t, "c/ops.c"), "library"))
}

// The release fan-out through the C ABI: without a sender, releases tell
// nobody (and count it); with one, each release tells each known worker once,
// outside the releasing thread, and a second cleanup of the same id tells
// nobody.
func TestOpsFanout(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		-- no sender: releases tell nobody, and count it
		dac_context_release(id) -> DAC_OK
		cleanup_skipped = 1
		dac_set_cleanup_sender(record_cleanup, rpc) -> DAC_OK
		-- a release tells each known worker once
		id = 844424930131969 (worker 3, counter 1)
		dac_context_add_known_worker_id(ctx, 4) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 1) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 4) -> DAC_OK
		dac_context_release(id) -> DAC_OK
		dac_cleanup_flush(10000, &pending) -> DAC_OK
		delivered 2: release 844424930131969 to worker 1; release 844424930131969 to worker 4;
		-- a cleanup arriving twice: the second is a no-op and tells nobody
		dac_context_release_if_present(id, NULL) -> DAC_OK
		dac_cleanup_flush(10000, &pending) -> DAC_OK
		delivered 0:
		-- the other releases tell them too, but not a dead worker itself; a context without known workers tells nobody
		dac_context_add_known_worker_id(ctx, 5) -> DAC_OK
		dac_context_add_known_worker_id(ctx, 6) -> DAC_OK
		dac_release_contexts_of_worker(5, NULL) -> DAC_OK
		dac_cleanup_flush(10000, &pending) -> DAC_OK
		delivered 1: release 1407374883553322 to worker 6;
		dac_cleanup_stats(&st) -> DAC_OK
		sent 3, retried 0, failed 0, dropped 0, skipped 1, pending 0
		dac_cleanup_stats(NULL) -> DAC_ERR_INVALID_ARGUMENT: distautograd: dac_cleanup_stats: counters must not be NULL
		dac_set_cleanup_sender(NULL, NULL) -> DAC_OK
	`, run(t, buildC(t, "c/ops.c"), "fanout"))
}

// runTesting runs bin against the library's testing build (build/testing),
// for ops.c's scenarios of idle time, which date uses by its manual clock
// (dactest_use_manual_clock), and returns its output; it must exit 0.
func runTesting(t *testing.T, bin string, args ...string) string {
	t.Helper()
	return runOK(t, testingEnv(t), bin, args...)
}
