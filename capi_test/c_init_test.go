package capi_test

import (
	"fmt"
	"strings"
	"testing"
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
		dac_version() = 0.1.0
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
