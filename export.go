// Command distautograd is built with -buildmode=c-shared into
// libdistautograd.so. This file is the thin Go side of the C ABI: each
// dacgo_* function translates C arguments, calls container/, and turns the
// result into a status code plus the calling thread's last error. The public
// dac_* functions (capi.c's unit, the rooms of csrc/) own the thread-local
// state and call these; see include/distautograd.h for the contract.
package main

/*
#cgo CFLAGS: -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter
#include "csrc/dacgo.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"unsafe"

	"distautograd/container"
)

func main() {}

var proc container.Singleton // the process-wide container

// setError fills the calling thread's error slot and returns the status.
// The slot of the threads that could not allocate their own is shared and
// says so: it is left as it is.
func setError(e *C.dacc_error_slot, code container.Code, msg string) C.int {
	if e == &C.dacc_no_memory_slot {
		return C.int(code)
	}
	e.code = C.int(code)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&e.msg[0])), len(e.msg))
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
	return C.int(code)
}

func fail(e *C.dacc_error_slot, err error) C.int {
	return setError(e, container.CodeOf(err), err.Error())
}

// failIn is fail for a Go function that serves several public ones: a
// message of distautograd's own names fn, the one called, after its prefix
// ("distautograd: dac_cleanup_configure: ..."), as C's refusals (reject,
// csrc/error.c) name theirs.
func failIn(e *C.dacc_error_slot, fn string, err error) C.int {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "distautograd: "); ok {
		msg = "distautograd: " + fn + ": " + rest
	}
	return setError(e, container.CodeOf(err), msg)
}

// goCalls counts the calls from C into Go, in the testing build only
// (countCalls: export_testing.go, export_testing_off.go).
var goCalls atomic.Int64

func countCall() {
	if countCalls {
		goCalls.Add(1)
	}
}

// recoverTo turns a panic into DAC_ERR_INTERNAL: no Go panic may cross into C.
// Every exported function defers it (and so counts as a call into Go).
func recoverTo(e *C.dacc_error_slot, rc *C.int) {
	countCall()
	if r := recover(); r != nil {
		*rc = setError(e, container.ErrInternal, fmt.Sprintf("distautograd: internal error (a bug, please report it): %v", r))
	}
}

//export dacgo_fill_error
func dacgo_fill_error(code C.int, e *C.dacc_error_slot) C.int {
	countCall()
	return setError(e, container.Code(code), container.MessageOf(container.Code(code)))
}

// dacgo_check_initialized is the one answer to "has dac_init succeeded?":
// Go's. C caches a yes (csrc/library.c), and asks again until it has one,
// so a thread racing dac_init sees the container as soon as Go has it,
// whatever C's cache says yet.
//
//export dacgo_check_initialized
func dacgo_check_initialized(e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	if _, err := proc.Get(); err != nil {
		return fail(e, err)
	}
	return 0
}

//export dacgo_init
func dacgo_init(workerID C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	if _, err := proc.Init(int64(workerID)); err != nil {
		return fail(e, err)
	}
	return 0
}

//export dacgo_worker_id
func dacgo_worker_id(out *C.int32_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	*out = C.int32_t(c.WorkerID())
	return 0
}

//export dacgo_max_id
func dacgo_max_id(out *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	*out = C.int64_t(c.MaxID())
	return 0
}

//export dacgo_num_contexts
func dacgo_num_contexts(out *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	*out = C.int64_t(c.NumContexts())
	return 0
}

//export dacgo_new_autograd_message_id_block
func dacgo_new_autograd_message_id_block(n C.int64_t, first, count *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	f, k, err := c.NewAutogradMessageIDBlock(int64(n))
	if err != nil {
		return fail(e, err)
	}
	*first, *count = C.int64_t(f), C.int64_t(k)
	return 0
}

//export dacgo_debug_info
func dacgo_debug_info(buf *C.char, capacity C.size_t, length *C.size_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	text, err := json.Marshal(debugInfo(c))
	if err != nil {
		return fail(e, err)
	}
	*length = C.size_t(len(text))
	if capacity > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), min(uint64(capacity), uint64(len(text))+1))
		n := copy(dst[:len(dst)-1], text)
		dst[n] = 0
	}
	return 0
}

// debugInfo is what dac_debug_info reports; json.Marshal sorts the keys.
func debugInfo(c *container.Container) map[string]int64 {
	m := map[string]int64{
		"num_autograd_contexts":       c.NumContexts(),
		"num_current_backward_passes": 0,
		"max_contexts":                c.MaxContexts(),
		"refused_contexts":            c.RefusedContexts(),
		"live_handles":                c.LiveReferences(),
		"uncounted_handles":           c.UncountedReferences(),
		"go_heap_bytes":               goHeapLiveBytes(),
	}
	cleanupDebugInfo(m)
	goRuntimeDebugInfo(m)
	return m
}

// goHeapLiveBytes reads the Go heap's live bytes as of the last garbage
// collection from runtime/metrics (cheap: no stop-the-world, unlike
// runtime.ReadMemStats), so leak tests can watch the heap through the ABI.
func goHeapLiveBytes() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int64(s[0].Value.Uint64())
}

//export dacgo_set_max_contexts
func dacgo_set_max_contexts(n C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	if err := c.SetMaxContexts(int64(n)); err != nil {
		return fail(e, err)
	}
	return 0
}

// The functions below that hand out a handle are C's slow paths
// (csrc/contexts.c): it looks contexts up and takes references itself, and
// comes here for what it cannot decide (a miss, the exact message, a
// creation).

//export dacgo_context_new
func dacgo_context_new(th *C.dacc_thread, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	t := c.HostThread(int64(th.current), int64(th.run_next))
	// Stored on every return, a recovered panic's too: an id this call
	// took from the run is never handed out again.
	defer setHostThread(th, &t)
	h, err := c.NewContextHandle(&t)
	if err != nil {
		return fail(e, err)
	}
	*out = C.uint64_t(h)
	return 0
}

// setHostThread stores what the calling thread keeps of t in its C
// thread-local state (csrc/library.h: dacc_thread).
func setHostThread(th *C.dacc_thread, t *container.Thread) {
	current, runNext := t.HostState()
	th.current, th.run_next = C.int64_t(current), C.int64_t(runNext)
}

//export dacgo_context_current
func dacgo_context_current(current C.int64_t, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	t := container.NewThread()
	t.ForceCurrentID(int64(current))
	h, err := c.CurrentContextHandle(t)
	if err != nil {
		return fail(e, err)
	}
	*out = C.uint64_t(h)
	return 0
}

//export dacgo_context_retrieve
func dacgo_context_retrieve(id C.int64_t, ifPresent C.int, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	// One lookup decides: a second one could find what the first missed.
	h, err := c.RetrieveContextHandle(int64(id))
	if err != nil {
		return fail(e, err)
	}
	if h == 0 && ifPresent == 0 {
		return fail(e, c.NotFoundError(int64(id)))
	}
	*out = C.uint64_t(h)
	return 0
}

//export dacgo_context_get_or_create
func dacgo_context_get_or_create(id C.int64_t, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	h, err := c.GetOrCreateContextHandle(int64(id))
	if err != nil {
		return fail(e, err)
	}
	*out = C.uint64_t(h)
	return 0
}

//export dacgo_context_is_valid
func dacgo_context_is_valid(id C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	if err := c.IsValidContext(int64(id)); err != nil {
		return fail(e, err)
	}
	return 0
}

// stackWorkers is how many workers a release converts on the stack (a
// pass's are a few); more are allocated.
const stackWorkers = 8

//export dacgo_context_release
func dacgo_context_release(th *C.dacc_thread, id C.int64_t, ifPresent C.int, workers *C.int32_t, nworkers C.size_t, released *C.int, drop *C.dacc_pending_drop, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	var also []uint16
	if nworkers > 0 {
		// Checked at the edge, all before anything changes. A pass's few
		// workers stay on the stack: the release allocates nothing.
		ids := unsafe.Slice((*int32)(unsafe.Pointer(workers)), int(nworkers))
		var few [stackWorkers]uint16
		if len(ids) <= len(few) {
			also = few[:len(ids)]
		} else {
			also = make([]uint16, len(ids))
		}
		for i, w := range ids {
			if err := container.CheckWorkerID(int64(w)); err != nil {
				return fail(e, err)
			}
			also[i] = uint16(w)
		}
	}
	t := c.HostThread(int64(th.current), 0) // a release takes no id
	ok, d, n := c.ReleaseContextWithWorkersDeferred(&t, int64(id), also)
	// The current id is stored before the fan-out is told, which may run
	// the host's code (its log hook, a non-blocking sender) on this thread,
	// and that code's calls see and change this thread's state.
	th.current = C.int64_t(t.CurrentID())
	c.RunNotice(n, also)
	takeDrop(drop, d)
	if !ok && ifPresent == 0 {
		return fail(e, c.NotFoundError(int64(id)))
	}
	if released != nil {
		*released = 0
		if ok {
			*released = 1
		}
	}
	return 0
}

//export dacgo_release_contexts_of_worker
func dacgo_release_contexts_of_worker(worker C.int32_t, released *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	// Checked here, at the edge: the domain takes a worker id as uint16.
	if err := container.CheckWorkerID(int64(worker)); err != nil {
		return fail(e, err)
	}
	n := c.ReleaseContextsOfWorker(uint16(worker))
	if released != nil {
		*released = C.int64_t(n)
	}
	return 0
}

//export dacgo_reap_idle_contexts
func dacgo_reap_idle_contexts(idleMs C.int64_t, released *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	n, err := c.ReapIdleContexts(int64(idleMs))
	if err != nil {
		return fail(e, err)
	}
	if released != nil {
		*released = C.int64_t(n)
	}
	return 0
}

//export dacgo_context_list
func dacgo_context_list(out *C.uint64_t, capacity C.size_t, count *C.size_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	hs, total := c.ListHandles(int(min(uint64(capacity), uint64(container.MaxRecords))))
	if len(hs) > 0 {
		copy(unsafe.Slice((*uint64)(unsafe.Pointer(out)), len(hs)), hs)
	}
	*count = C.size_t(total)
	return 0
}

//export dacgo_context_times
func dacgo_context_times(h C.uint64_t, ageMs, idleMs *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get() // no handle exists before dac_init
	if err != nil {
		return fail(e, err)
	}
	born, last, now, err := c.HandleTimes(uint64(h))
	if err != nil {
		return fail(e, err)
	}
	if ageMs != nil {
		*ageMs = C.int64_t(max(0, now-born))
	}
	if idleMs != nil {
		*idleMs = C.int64_t(max(0, now-last))
	}
	return 0
}

// dacgo_context_ref is where C's dac_context_ref (delta 1) and
// dac_context_unref (-1) (csrc/handles.c, csrc/refs.c) come when their
// fast path cannot act: it drops
// the last reference of a released context (the record dies; C runs
// its host drop, from *drop, once this returns), or says why
// the handle is bad, or returns DACC_RETRY when the state word moved and
// the fast path may act now.
//
//export dacgo_context_ref
func dacgo_context_ref(h C.uint64_t, delta C.int, drop *C.dacc_pending_drop, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get() // no handle exists before dac_init
	if err != nil {
		return fail(e, err)
	}
	if delta > 0 {
		if err := c.CheckRef(uint64(h)); err != nil {
			return fail(e, err)
		}
		return C.DACC_RETRY
	}
	done, d, err := c.UnrefLastDeferred(uint64(h))
	takeDrop(drop, d)
	if err != nil {
		return fail(e, err)
	}
	if !done {
		return C.DACC_RETRY
	}
	return 0
}

// takeDrop hands a dead record's host drop to C (csrc/refs.h: dacc_run_pending_drop), which runs it once
// the call into Go has returned (on the same thread, outside every lock):
// a call from Go into C there would cost a crossing more.
func takeDrop(out *C.dacc_pending_drop, d container.PendingDrop) {
	out.fn = C.uintptr_t(d.Fn)
	out.value = C.uint64_t(d.Value)
}

// handleContext returns the context of a live handle; every handle function
// starts here, so a dead handle is always DAC_ERR_BAD_HANDLE (and any handle
// before dac_init, when none can exist, DAC_ERR_NOT_INITIALIZED).
func handleContext(h C.uint64_t) (*container.Context, error) {
	c, err := proc.Get()
	if err != nil {
		return nil, err
	}
	return c.HandleContext(uint64(h))
}

//export dacgo_context_id
func dacgo_context_id(h C.uint64_t, out *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	ctx, err := handleContext(h)
	if err != nil {
		return fail(e, err)
	}
	*out = C.int64_t(ctx.ID())
	return 0
}

//export dacgo_context_host_value
func dacgo_context_host_value(h C.uint64_t, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	v, err := c.HostValue(uint64(h))
	if err != nil {
		return fail(e, err)
	}
	*out = C.uint64_t(v)
	return 0
}

//export dacgo_context_add_known_worker_id
func dacgo_context_add_known_worker_id(h C.uint64_t, worker C.int32_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	ctx, err := handleContext(h)
	if err != nil {
		return fail(e, err)
	}
	if err := container.CheckWorkerID(int64(worker)); err != nil {
		return fail(e, err)
	}
	ctx.AddKnownWorkerID(uint16(worker))
	return 0
}

//export dacgo_context_known_worker_ids
func dacgo_context_known_worker_ids(h C.uint64_t, ids *C.int32_t, capacity C.size_t, count *C.size_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	ctx, err := handleContext(h)
	if err != nil {
		return fail(e, err)
	}
	workers := ctx.KnownWorkerIDs()
	n := min(uint64(capacity), uint64(len(workers)))
	if n > 0 {
		dst := unsafe.Slice((*C.int32_t)(unsafe.Pointer(ids)), n)
		for i := range dst {
			dst[i] = C.int32_t(workers[i])
		}
	}
	*count = C.size_t(len(workers))
	return 0
}

//export dacgo_context_add_function
func dacgo_context_add_function(h C.uint64_t, kind C.int, msgID C.int64_t, fn C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	ctx, err := handleContext(h)
	if err != nil {
		return fail(e, err)
	}
	if kind == C.DACC_SEND {
		err = ctx.AddSendFunction(int64(msgID), uint64(fn))
	} else {
		err = ctx.AddRecvFunction(int64(msgID), uint64(fn))
	}
	if err != nil {
		return fail(e, err)
	}
	return 0
}

//export dacgo_context_function
func dacgo_context_function(h C.uint64_t, kind C.int, msgID C.int64_t, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	ctx, err := handleContext(h)
	if err != nil {
		return fail(e, err)
	}
	var fn uint64
	if kind == C.DACC_SEND {
		fn, err = ctx.SendFunction(int64(msgID))
	} else {
		fn, err = ctx.RecvFunction(int64(msgID))
	}
	if err != nil {
		return fail(e, err)
	}
	*out = C.uint64_t(fn)
	return 0
}

//export dacgo_context_functions
func dacgo_context_functions(h C.uint64_t, kind C.int, msgIDs *C.int64_t, fns *C.uint64_t, capacity C.size_t, count *C.size_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	ctx, err := handleContext(h)
	if err != nil {
		return fail(e, err)
	}
	var m map[int64]uint64
	if kind == C.DACC_SEND {
		m = ctx.SendFunctions()
	} else {
		m = ctx.RecvFunctions()
	}
	n := min(uint64(capacity), uint64(len(m)))
	if n > 0 {
		ids := unsafe.Slice((*C.int64_t)(unsafe.Pointer(msgIDs)), n)
		vals := unsafe.Slice((*C.uint64_t)(unsafe.Pointer(fns)), n)
		i := uint64(0)
		for k, v := range m {
			if i == n {
				break
			}
			ids[i], vals[i] = C.int64_t(k), C.uint64_t(v)
			i++
		}
	}
	*count = C.size_t(len(m))
	return 0
}

// C reads the records, the index and the view that container/ writes
// (csrc/records.h), as capi_layout.h declares them: cmd/dacgen generates it from
// container's types, and C's compiler checks each offset and size there.

//export dacgo_view
func dacgo_view(out *unsafe.Pointer, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	*out = c.View()
	return 0
}
