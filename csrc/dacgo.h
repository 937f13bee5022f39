/* csrc/dacgo.h: the Go side of the library, as C calls it: the dacgo_*
** functions (//export in export.go, export_cleanup.go and, in the testing
** build, export_testing.go). The public functions own the per-thread state
** and pass it in; the dacgo_* symbols are not exported from the .so (see
** libdistautograd.map).
**
** cgo declares them again in _cgo_export.h, which capi.c includes too, so a
** declaration here that disagrees with the Go signature is a compile error
** in capi.c; the ABI contract test (abi: TestInternalHeaderMatchesGoExports)
** checks that this list and cgo's are the same. Each writes a failure into
** *e and returns its status. */
#ifndef DISTAUTOGRAD_CSRC_DACGO_H
#define DISTAUTOGRAD_CSRC_DACGO_H

#include <stddef.h>
#include <stdint.h>

#include "../include/distautograd.h"
#include "error.h"

/* A dead record's host value and its drop function (fn 0: none), which
** the Go side hands back instead of calling into C itself: C runs it once
** the call into Go has returned (csrc/refs.h: dacc_run_pending_drop). */
typedef struct dacc_pending_drop {
	uintptr_t fn;
	uint64_t value;
} dacc_pending_drop;

/* A thread's state in the container, which C keeps in thread-local storage
** (csrc/library.h: dacc_tls_thread) and passes to the calls that may change
** it: the current context id, and the next id of the thread's run of
** context ids, which only Go reads and sets (export.go: HostThread). */
typedef struct dacc_thread {
	int64_t current;
	int64_t run_next;
} dacc_thread;

/* Which of a context's two function maps a dacgo_context_*function* call
** means (its kind argument). */
#define DACC_SEND 0
#define DACC_RECV 1

/* What dacgo_context_ref returns when the state word moved under it and
** the caller should try its fast path again (never a status). */
#define DACC_RETRY (-1)

int dacgo_fill_error(int code, dacc_error_slot *e);
int dacgo_check_initialized(dacc_error_slot *e);
int dacgo_init(int64_t worker_id, dacc_error_slot *e);
int dacgo_worker_id(int32_t *out, dacc_error_slot *e);
int dacgo_max_id(int64_t *out, dacc_error_slot *e);
int dacgo_num_contexts(int64_t *out, dacc_error_slot *e);
int dacgo_new_autograd_message_id_block(int64_t n, int64_t *first, int64_t *count, dacc_error_slot *e);
int dacgo_debug_info(char *buf, size_t capacity, size_t *length, dacc_error_slot *e);
int dacgo_set_max_contexts(int64_t n, dacc_error_slot *e);
int dacgo_context_new(dacc_thread *thread, uint64_t *out, dacc_error_slot *e);
int dacgo_context_current(int64_t current, uint64_t *out, dacc_error_slot *e);
int dacgo_context_retrieve(int64_t id, int if_present, uint64_t *out, dacc_error_slot *e);
int dacgo_context_get_or_create(int64_t id, uint64_t *out, dacc_error_slot *e);
int dacgo_context_is_valid(int64_t id, dacc_error_slot *e);
int dacgo_context_release(dacc_thread *thread, int64_t id, int if_present, int32_t *workers, size_t nworkers,
                          int *released, dacc_pending_drop *drop, dacc_error_slot *e);
int dacgo_release_contexts_of_worker(int32_t worker, int64_t *released, dacc_error_slot *e);
int dacgo_reap_idle_contexts(int64_t idle_ms, int64_t *released, dacc_error_slot *e);
int dacgo_context_list(uint64_t *out, size_t capacity, size_t *count, dacc_error_slot *e);
int dacgo_context_times(uint64_t h, int64_t *age_ms, int64_t *idle_ms, dacc_error_slot *e);
int dacgo_context_ref(uint64_t h, int delta, dacc_pending_drop *drop, dacc_error_slot *e);
int dacgo_context_id(uint64_t h, int64_t *out, dacc_error_slot *e);
int dacgo_context_add_known_worker_id(uint64_t h, int32_t worker, dacc_error_slot *e);
int dacgo_context_known_worker_ids(uint64_t h, int32_t *ids, size_t capacity, size_t *count, dacc_error_slot *e);
int dacgo_context_add_function(uint64_t h, int kind, int64_t msg_id, uint64_t fn, dacc_error_slot *e);
int dacgo_context_function(uint64_t h, int kind, int64_t msg_id, uint64_t *out, dacc_error_slot *e);
int dacgo_context_functions(uint64_t h, int kind, int64_t *msg_ids, uint64_t *fns, size_t capacity, size_t *count,
                            dacc_error_slot *e);
int dacgo_set_cleanup_sender(void *fn, void *user_data, int64_t wait_ms, dacc_error_slot *e);
int dacgo_set_cleanup_nonblocking(int nonblocking, dacc_error_slot *e);
int dacgo_set_log_hook(void *fn, void *user_data, dacc_error_slot *e);
int dacgo_set_cleanup_options(char *fn, dac_cleanup_options *options, dacc_error_slot *e);
int dacgo_cleanup_stats(dac_cleanup_counters *out, dacc_error_slot *e);
int dacgo_cleanup_flush(int64_t timeout_ms, int in_callback, int64_t *pending, dacc_error_slot *e);
int dacgo_view(void **out, dacc_error_slot *e);
int dacgo_context_host_value(uint64_t h, uint64_t *out, dacc_error_slot *e);
#ifdef DACC_TESTING
int dacgo_testing_set_counter_offsets(int64_t ctx_offset, int64_t msg_offset, dacc_error_slot *e);
void dacgo_testing_go_calls(int64_t *out);
void dacgo_testing_go_mallocs(int64_t *out);
int dacgo_testing_age_record(uint64_t h, uint32_t generation, dacc_error_slot *e);
int dacgo_testing_use_manual_clock(dacc_error_slot *e);
int dacgo_testing_advance_clock(int64_t ms, dacc_error_slot *e);
#endif

#endif
