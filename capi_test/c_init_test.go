package capi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const notInit = "DAC_ERR_NOT_INITIALIZED: Need to initialize distributed autograd using torch.distributed.autograd.init()"

// Every function before dac_init, with valid arguments, fails with the
// native message and writes nothing; a new thread sees the same.
func TestBeforeInit(t *testing.T) {
	bin := buildC(t, "c/before_init.c")
	calls := `
		dac_worker_id(&w)
		dac_max_id(&v)
		dac_num_contexts(&v)
		dac_new_autograd_message_id(&v)
		dac_debug_info(buf, sizeof buf, &len)
		dac_set_max_contexts(10)
		dac_context_new(&ctx)
		dac_context_current(&ctx)
		dac_context_retrieve(0, &ctx)
		dac_context_retrieve_if_present(0, &ctx)
		dac_context_get_or_create(0, &ctx)
		dac_context_is_valid(0)
		dac_context_release(0)
		dac_context_release_if_present(0, &flag)
		dac_release_contexts_of_worker(0, &v)
		dac_reap_idle_contexts(0, &v)
		dac_current_context_id(&v)
		dac_has_valid_context(&flag)
		dac_set_current_context_id(5)
		dac_force_current_context_id(5)
		dac_clear_current_context()
		dac_context_ref(ctx)
		dac_context_unref(ctx)
		dac_context_id(ctx, &v)
		dac_context_add_known_worker_id(ctx, 1)
		dac_context_known_worker_ids(ctx, ids, 2, &len)
		dac_context_add_send_function(ctx, 1, 2)
		dac_context_add_recv_function(ctx, 1, 2)
		dac_context_send_function(ctx, 1, &fn)
		dac_context_recv_function(ctx, 1, &fn)
		dac_context_send_functions(ctx, msgs, fns, 2, &len)
		dac_context_recv_functions(ctx, msgs, fns, 2, &len)`
	var failing strings.Builder
	for _, call := range strings.Split(strings.TrimSpace(calls), "\n") {
		fmt.Fprintf(&failing, "%s -> %s\n", strings.TrimSpace(call), notInit)
	}
	tail := `
		outputs untouched: yes
		dac_set_cleanup_sender(NULL, NULL) -> DAC_OK
		dac_cleanup_stats(&counters) -> DAC_OK
		counters before init: sent 0, skipped 0, pending 0
		dac_version() = ` + headerVersion(t).String() + `
		dac_status_string(DAC_ERR_NOT_INITIALIZED) = DAC_ERR_NOT_INITIALIZED
		-- another thread
		dac_last_status() = 0, dac_last_error() = ""
		dac_num_contexts(&(int64_t){0}) -> ` + notInit

	t.Run("fresh", func(t *testing.T) {
		assertTranscript(t, `dac_last_status() = 0, dac_last_error() = ""`+"\n"+failing.String()+tail, run(t, bin))
	})
	t.Run("after failed inits", func(t *testing.T) {
		const rangeErr = "DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]"
		assertTranscript(t, `
			dac_last_status() = 0, dac_last_error() = ""
			dac_init(-1) -> `+rangeErr+`
			dac_init(65536) -> `+rangeErr+`
			dac_init(INT64_MIN) -> `+rangeErr+`
			dac_init(INT64_MAX) -> `+rangeErr+"\n"+failing.String()+tail, run(t, bin, "bad-init"))
	})
}

// idLine is how the C programs print an id (PRINT_ID): the value, then the
// worker and counter it splits into.
func idLine(name string, id int64) string {
	return fmt.Sprintf("%s = %d (worker %d, counter %d)", name, id, uint64(id)>>48, uint64(id)&(1<<48-1))
}

// layoutLines is what init.c's layout() prints on a worker whose context and
// message counters are at n.
func layoutLines(w int64, n int64) string {
	first := w << 48 // int64 arithmetic, as the native code: negative from 32768 up
	maxID := first | (1<<48 - 1)
	return strings.Join([]string{
		fmt.Sprintf("worker_id = %d", w),
		idLine("max", maxID),
		idLine("id", first+n), idLine("id", first+n+1),
		idLine("msg", first+n), idLine("msg", first+n+1),
	}, "\n")
}

// The init rules in a fresh process per worker id: the layout that init
// gives, a second init with the same id (a no-op, but for the int16_t quirk of
// the native component from 32768 up), with another id, out of range.
func TestInit(t *testing.T) {
	bin := buildC(t, "c/init.c")
	const rangeErr = "DAC_ERR_INVALID_ARGUMENT: worker_id needs to be in the range [0, 65535]"
	for _, w := range []int64{0, 3, 7, 32767, 32768, 40000, 65535} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			t.Parallel()
			stored := int16(w) // the native container's int16_t worker_id_
			already := func(other int64) string {
				return fmt.Sprintf("DAC_ERR_ALREADY_INITIALIZED: Container is already initialized with worker_id: %d, cannot initialize with different worker_id: %d", stored, other)
			}
			same := "DAC_OK"
			if w >= 32768 {
				same = already(w)
			}
			want := fmt.Sprintf("dac_init(%d) -> DAC_OK\n", w) + layoutLines(w, 0) + `
				-- again
				` + fmt.Sprintf("dac_init(%d) -> %s", w, same) + `
				` + fmt.Sprintf("dac_init(%d) -> %s", w^1, already(w^1)) + `
				dac_init(-1) -> ` + rangeErr + `
				dac_init(65536) -> ` + rangeErr + "\n" + layoutLines(w, 2)
			assertTranscript(t, want, run(t, bin, "init", fmt.Sprint(w)))
		})
	}
	// The values of the spec, written out.
	assert.Equal(t, "max = 1125899906842623 (worker 3, counter 281474976710655)", strings.Split(layoutLines(3, 0), "\n")[1])
	assert.Equal(t, "max = 2251799813685247 (worker 7, counter 281474976710655)", strings.Split(layoutLines(7, 0), "\n")[1])
	assert.Equal(t, "id = -7187745005283311616 (worker 40000, counter 0)", strings.Split(layoutLines(40000, 0), "\n")[2])
	assert.Equal(t, "max = -1 (worker 65535, counter 281474976710655)", strings.Split(layoutLines(65535, 0), "\n")[1])
}

// The container is process-wide: another thread's init sees it.
func TestInitFromAnotherThread(t *testing.T) {
	bin := buildC(t, "c/init.c")
	assertTranscript(t, `
		dac_init(3) -> DAC_OK
		-- another thread
		dac_init(3) -> DAC_OK
		dac_init(4) -> DAC_ERR_ALREADY_INITIALIZED: Container is already initialized with worker_id: 3, cannot initialize with different worker_id: 4
		`+layoutLines(3, 0), run(t, bin, "init-thread"))
}
